"""The policy pack's rules on workloads, on hand-built engine arguments: an FP8 checkpoint needs an
FP8 KV cache, --max-num-seqs within its limit, images pinned by digest. The other rules and the pack
over gRPC are tests/test_policies.py."""

from __future__ import annotations


import pytest
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UNKNOWN_STRING_VALUE

from policy import policies as pp
from tests.fixtures.policy_args import FP8_MODEL, NVFP4_MODEL, VLLM_IMAGE, VLLM_TAG, deployment, validate, vllm


# ---------------------------------------------------------------------------------------------
# FP8 checkpoint needs --kv-cache-dtype fp8

@pytest.mark.parametrize("args", [
    [FP8_MODEL, "--kv-cache-dtype", "fp8"],
    [FP8_MODEL, "--kv-cache-dtype=fp8"],
    [FP8_MODEL, "--kv-cache-dtype", "fp8_e4m3"],
    [FP8_MODEL, "--kv_cache_dtype", "fp8"],
    [NVFP4_MODEL],  # not an FP8 checkpoint
])
def test_fp8_kv_cache_passes(args):
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm(args))) == []


def test_fp8_kv_cache_fails_without_flag():
    messages = validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm([FP8_MODEL, "--max-num-seqs", "64"])),
                        name="gemma-fp8")
    assert len(messages) == 1
    assert "gemma-fp8/vllm" in messages[0] and "--kv-cache-dtype fp8" in messages[0]


def test_fp8_kv_cache_fails_with_other_dtype():
    messages = validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT,
                        deployment(vllm([FP8_MODEL, "--kv-cache-dtype", "auto"])))
    assert len(messages) == 1 and "auto" in messages[0]


def test_fp8_kv_cache_last_flag_wins():
    args = [FP8_MODEL, "--kv-cache-dtype", "fp8", "--kv-cache-dtype", "bfloat16"]
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm(args)))) == 1


def test_fp8_kv_cache_model_flag_is_case_insensitive():
    args = ["--model", "org/some-model-fp8", "--enable-auto-tool-choice"]
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm(args)))) == 1


@pytest.mark.parametrize("extra, violations", [([], 1), (["--kv-cache-dtype", "fp8"], 0)])
def test_fp8_kv_cache_exec_command_form(extra, violations):
    container = vllm(command=["vllm", "serve", FP8_MODEL, *extra], image="registry.local/serving:1.2")
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(container))) == violations


def test_fp8_kv_cache_command_plus_args():
    container = vllm(command=["vllm", "serve"], args=[FP8_MODEL, "--kv-cache-dtype", "fp8"])
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(container)) == []


@pytest.mark.parametrize("script, violations", [
    (f"exec vllm serve {FP8_MODEL} --max-num-seqs 64", 1),
    (f"exec vllm serve '{FP8_MODEL}' --kv-cache-dtype=fp8", 0),
    # Multi-line script: the flag is on a continuation line of the same command.
    (f"set -e\nvllm serve {FP8_MODEL} \\\n  --kv-cache-dtype fp8 \\\n  --max-num-seqs 64\n", 0),
    # The flag belongs to the next command, not to vllm serve.
    (f"vllm serve {FP8_MODEL} && echo --kv-cache-dtype fp8", 1),
    (f"vllm serve {FP8_MODEL}; echo done --kv-cache-dtype fp8", 1),
    # Model from the environment.
    ("exec vllm serve \"$MODEL\" --load-format runai_streamer", 1),
    ("exec vllm serve ${MODEL} --kv-cache-dtype fp8", 0),
])
def test_fp8_kv_cache_shell_form(script, violations):
    container = vllm(command=["/bin/sh", "-c", script], env=[{"name": "MODEL", "value": FP8_MODEL}])
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(container))) == violations


def test_fp8_kv_cache_shell_script_in_args():
    container = vllm(command=["bash", "-ec"], args=[f"vllm serve {FP8_MODEL}"])
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(container))) == 1


def test_fp8_kv_cache_kubernetes_env_expansion():
    env = [{"name": "MODEL", "value": FP8_MODEL}]
    assert len(validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm(["$(MODEL)"], env=env)))) == 1
    env_from = [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}]
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm(["$(MODEL)"], env=env_from))) == []


def test_max_num_seqs_from_value_from_env_is_unknown():
    env = [{"name": "MAX_SEQS", "valueFrom": {"configMapKeyRef": {"name": "serving", "key": "seqs"}}}]
    container = vllm([FP8_MODEL, "--kv-cache-dtype", "fp8", "--max-num-seqs", "$(MAX_SEQS)"], env=env)
    assert validate(pp.MAX_NUM_SEQS, pp.DEPLOYMENT, deployment(container)) == []
    env = [{"name": "MAX_SEQS", "value": "16"}]
    container = vllm([FP8_MODEL, "--max-num-seqs", "$(MAX_SEQS)"], env=env)
    assert len(validate(pp.MAX_NUM_SEQS, pp.DEPLOYMENT, deployment(container))) == 1


def test_fp8_kv_cache_ignores_the_bench_client():
    bench = vllm(command=["vllm", "bench", "serve", "--model", FP8_MODEL, "--max-concurrency", "64"])
    job = {"spec": {"template": {"spec": {"containers": [bench], "restartPolicy": "Never"}}}}
    assert validate(pp.FP8_KV_CACHE, pp.JOB, job) == []


def test_fp8_kv_cache_applies_to_jobs_and_other_images_only_with_serve():
    # An image without a vLLM entrypoint and no command is not a server.
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(vllm([FP8_MODEL], image="nginx:1.27"))) == []
    job = {"spec": {"template": {"spec": {"containers": [vllm([FP8_MODEL])]}}}}
    assert len(validate(pp.FP8_KV_CACHE, pp.JOB, job)) == 1


@pytest.mark.parametrize("container", [
    vllm([UNKNOWN_STRING_VALUE, "--max-num-seqs", "64"]),           # model from a bucket output
    vllm([FP8_MODEL, UNKNOWN_STRING_VALUE]),                       # a word that may be the flag
    vllm(UNKNOWN_ARRAY_VALUE),                                     # whole args list computed
    vllm([FP8_MODEL], image=UNKNOWN_STRING_VALUE),                 # image unknown: maybe not vLLM
    vllm([FP8_MODEL, "--kv-cache-dtype", UNKNOWN_STRING_VALUE]),
    vllm(command=["/bin/sh", "-c", UNKNOWN_STRING_VALUE]),
])
def test_fp8_kv_cache_unknown_values_are_not_violations(container):
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, deployment(container)) == []


def test_fp8_kv_cache_unknown_pod_spec_does_not_crash():
    props = {"spec": {"template": UNKNOWN_STRING_VALUE}}
    assert validate(pp.FP8_KV_CACHE, pp.DEPLOYMENT, props) == []


# ---------------------------------------------------------------------------------------------
# --max-num-seqs against the bench's highest concurrency

@pytest.mark.parametrize("args, config, violations", [
    ([FP8_MODEL, "--max-num-seqs", "64"], None, 0),
    ([FP8_MODEL, "--max-num-seqs=128"], None, 0),
    ([FP8_MODEL, "--max-num-seqs", "32"], None, 1),
    ([FP8_MODEL, "--max_num_seqs", "32"], None, 1),
    ([FP8_MODEL, "--max-num-seqs", "64"], {"benchMaxConcurrency": 128}, 1),
    ([FP8_MODEL, "--max-num-seqs", "64"], {"benchMaxConcurrency": 64.0}, 0),  # Struct numbers
    ([FP8_MODEL], None, 0),                               # vLLM default (>= 256) covers 64
    ([FP8_MODEL], {"benchMaxConcurrency": 512}, 1),       # the default 256 may not
    ([FP8_MODEL, "--max-num-seqs", "many"], None, 1),
    ([FP8_MODEL, "--max-num-seqs", UNKNOWN_STRING_VALUE], None, 0),
])
def test_max_num_seqs(args, config, violations):
    messages = validate(pp.MAX_NUM_SEQS, pp.DEPLOYMENT, deployment(vllm(args)), config)
    assert len(messages) == violations, messages


def test_max_num_seqs_message_names_the_fix():
    [message] = validate(pp.MAX_NUM_SEQS, pp.DEPLOYMENT,
                         deployment(vllm([FP8_MODEL, "--max-num-seqs", "16"])), name="gemma-fp8")
    assert "gemma-fp8/vllm" in message and "16" in message and "at least 64" in message


def test_max_num_seqs_config_schema_defaults_to_64():
    schema = pp.MAX_NUM_SEQS.config_schema.properties["benchMaxConcurrency"]
    assert schema["default"] == pp.DEFAULT_BENCH_MAX_CONCURRENCY == 64
    assert schema["type"] == "integer"


# ---------------------------------------------------------------------------------------------
# Pinned images

@pytest.mark.parametrize("image, ok", [
    ("vllm/vllm-openai:v0.26.0", True),
    ("public.ecr.aws/karpenter/controller:1.14.1@sha256:" + "a" * 64, True),
    ("busybox@sha256:" + "b" * 64, True),
    ("localhost:5000/bench:2026-08-05", True),
    ("vllm/vllm-openai:latest", False),
    ("vllm/vllm-openai", False),
    ("localhost:5000/bench", False),  # the colon belongs to the registry port
    ("vllm/vllm-openai:latest@sha256:" + "c" * 64, True),  # the digest decides what runs
    ("busybox@sha256:", False),
])
def test_image_problem(image, ok):
    assert (pp.image_problem(image) is None) == ok


@pytest.mark.parametrize("resource_type, props", [
    (pp.DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:latest"}]}}}}),
    (pp.STATEFUL_SET, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    (pp.DAEMON_SET, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    (pp.JOB, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    (pp.CRON_JOB, {"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "x:latest"}]}}}}}}),
    (pp.POD, {"spec": {"containers": [{"name": "c", "image": "x"}]}}),
    (pp.DEPLOYMENT, {"spec": {"template": {"spec": {
        "initContainers": [{"name": "fetch", "image": "amazon/aws-cli"}],
        "containers": [{"name": "c", "image": VLLM_IMAGE}]}}}}),
])
def test_image_tags_fail_for_every_workload_kind(resource_type, props):
    messages = validate(pp.IMAGE_TAGS, resource_type, props)
    assert len(messages) == 1 and "pin a version tag" in messages[0]


def test_image_tags_pass_and_ignore_unknowns():
    assert validate(pp.IMAGE_TAGS, pp.DEPLOYMENT, deployment(vllm([FP8_MODEL]))) == []
    assert validate(pp.IMAGE_TAGS, pp.DEPLOYMENT, deployment(vllm([], image=UNKNOWN_STRING_VALUE))) == []
    assert validate(pp.IMAGE_TAGS, "kubernetes:core/v1:ConfigMap", {"data": {"image": "x"}}) == []


def test_image_digest_rule_warns_on_tag_only_images_and_is_advisory():
    from pulumi_policy import EnforcementLevel
    assert pp.IMAGE_DIGESTS.enforcement_level == EnforcementLevel.ADVISORY
    tag_only = deployment(vllm([FP8_MODEL], image=VLLM_TAG))
    messages = validate(pp.IMAGE_DIGESTS, pp.DEPLOYMENT, tag_only)
    assert len(messages) == 1 and "pinned by tag only" in messages[0]
    pinned = deployment(vllm([FP8_MODEL], image=VLLM_IMAGE))
    assert validate(pp.IMAGE_DIGESTS, pp.DEPLOYMENT, pinned) == []
    assert validate(pp.IMAGE_DIGESTS, pp.JOB, {"spec": {"template": {"spec": {
        "initContainers": [{"name": "i", "image": "busybox:1.37"}],
        "containers": [{"name": "c", "image": "busybox@sha256:" + "b" * 64}]}}}}) != []
    assert validate(pp.IMAGE_DIGESTS, pp.DEPLOYMENT, deployment(vllm([], image=UNKNOWN_STRING_VALUE))) == []


