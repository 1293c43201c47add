"""Model profiles, traffic classes and the serve spec (stacks/serving/), without vLLM or Pulumi."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from pydantic import ValidationError

from components.vllm_server import ServeSpec
from components.weight_store import model_prefix
from stacks import catalog, serving
from stacks.ops import vllm_flags
from stacks.serving.sizing import HTTP_KEEP_ALIVE_S
from stacks.versions import pins

L40S = catalog.gpu_instance("g6e.2xlarge")
L40S_X4 = catalog.gpu_instance("g6e.12xlarge")
G7E = catalog.gpu_instance("g7e.2xlarge")
BUCKET = "weights-bucket"
JSON_FLAGS = ("--model-loader-extra-config", "--speculative-config", "--limit-mm-per-prompt")


def server(**kw) -> serving.ServerSettings:
    return serving.ServerSettings(**{"name": "gemma", "pool": "l40s", "model": "fp8-dynamic", **kw})


def spec(srv: serving.ServerSettings, instance=L40S, **kw) -> ServeSpec:
    return serving.build_serve_spec(srv, instance, serving.ModelUris.for_bucket(BUCKET, srv),
                                    region="ap-northeast-2", **kw)


def flag(args, name: str) -> str | None:
    args = list(args)
    return args[args.index(name) + 1] if name in args else None


def all_valid_combinations():
    for model, traffic, (instance, tp) in itertools.product(
        serving.MODELS, serving.TRAFFIC_CLASSES,
        [(L40S, 1), (L40S_X4, 1), (L40S_X4, 2), (L40S_X4, 4), (G7E, 1)],
    ):
        srv = server(model=model, traffic_class=traffic, tensor_parallel_size=tp)
        if not serving.check_server(srv, instance, 64):
            yield srv, instance


COMBINATIONS = list(all_valid_combinations())


# -- profiles ---------------------------------------------------------------------------------


@pytest.mark.parametrize("traffic", sorted(serving.TRAFFIC_CLASSES))
@pytest.mark.parametrize("instance", [L40S, L40S_X4, G7E], ids=lambda i: i.name)
def test_fp8_always_gets_fp8_kv_cache(traffic, instance):
    args = spec(server(traffic_class=traffic), instance).args
    assert flag(args, "--kv-cache-dtype") == "fp8"
    assert args.count("--kv-cache-dtype") == 1


@pytest.mark.parametrize("override", ["auto", "bfloat16", "float16", "fp8_e5m2"])
def test_fp8_kv_override_is_refused(override):
    with pytest.raises(ValidationError, match=r"kvCacheDtype[\s\S]*fp8"):
        server(kv_cache_dtype=override)


def test_fp8_without_fp8_kv_is_caught_by_check_server_too():
    # A server built without validation (e.g. model_construct) is still refused by the cross-check.
    unchecked = server().model_copy(update={"kv_cache_dtype": "auto"})
    problems = serving.check_server(unchecked, "g6e.2xlarge", 64, key="vllm-poc:servers[3]")
    assert any(p.startswith("vllm-poc:servers[3].kvCacheDtype:") and "fp8" in p for p in problems)


def test_nvfp4_allows_auto_kv_and_defaults_to_fp8():
    assert flag(spec(server(model="nvfp4")).args, "--kv-cache-dtype") == "fp8"
    assert flag(spec(server(model="nvfp4", kv_cache_dtype="auto"), G7E).args, "--kv-cache-dtype") == "auto"


def test_models_and_served_names():
    for key, hf_id in [("fp8-dynamic", "RedHatAI/gemma-4-31B-it-FP8-dynamic"),
                       ("nvfp4", "nvidia/Gemma-4-31B-IT-NVFP4"), ("bf16", "google/gemma-4-31B-it")]:
        srv = server(model=key, tensor_parallel_size=2)
        s = spec(srv, L40S_X4)
        assert s.args[0] == f"s3://{BUCKET}/models/{hf_id}/"
        assert flag(s.args, "--served-model-name") == hf_id == s.served_model_name


def test_nvfp4_on_l40s_is_a_marlin_fallback_note_not_an_error():
    srv = server(model="nvfp4")
    assert serving.check_server(srv, "g6e.2xlarge", 64) == []
    assert any("Marlin" in n for n in spec(srv, L40S).notes)
    assert not any("Marlin" in n for n in spec(srv, G7E).notes)


def test_gemma4_parsers_on_every_server():
    for srv, instance in COMBINATIONS:
        args = spec(srv, instance).args
        assert flag(args, "--tool-call-parser") == "gemma4"
        assert flag(args, "--reasoning-parser") == "gemma4"
        assert "--enable-auto-tool-choice" in args
        assert "--enable-prefix-caching" in args
        assert flag(args, "--load-format") == "runai_streamer"
        assert flag(args, "--max-model-len") == "8192"


# -- traffic classes (pool roles per traffic kind) -----------------------------------------------


def test_interactive_has_no_speculative_decoding():
    args = spec(server(traffic_class="interactive")).args
    assert "--speculative-config" not in args
    assert "--scheduling-policy" not in args
    assert "--limit-mm-per-prompt" not in args
    assert flag(args, "--gpu-memory-utilization") == "0.90"


def test_batch_has_mtp_4_from_s3_and_priority_scheduling():
    args = spec(server(traffic_class="batch")).args
    assert json.loads(flag(args, "--speculative-config")) == {
        "method": "mtp",
        "model": f"s3://{BUCKET}/models/google/gemma-4-31B-it-assistant/",
        "num_speculative_tokens": 4,
    }
    assert flag(args, "--scheduling-policy") == "priority"


def test_text_only_frees_the_image_encoder_and_widens_kv():
    args = spec(server(traffic_class="text-only")).args
    assert json.loads(flag(args, "--limit-mm-per-prompt")) == {"image": 0}
    assert flag(args, "--gpu-memory-utilization") == "0.95"
    assert "--speculative-config" not in args


def test_speculative_override_both_ways():
    on = spec(server(traffic_class="interactive", speculative=True, num_speculative_tokens=8))
    assert json.loads(flag(on.args, "--speculative-config"))["num_speculative_tokens"] == 8
    assert any("open sweep" in n for n in on.notes)
    off = spec(server(traffic_class="batch", speculative=False))
    assert "--speculative-config" not in off.args
    assert flag(off.args, "--scheduling-policy") == "priority"


def test_draft_uri_only_when_speculating():
    assert serving.ModelUris.for_bucket("b", server(traffic_class="interactive")).draft is None
    assert serving.server_model_ids(server(traffic_class="interactive")) == [
        "RedHatAI/gemma-4-31B-it-FP8-dynamic"]
    assert serving.server_model_prefixes(server(traffic_class="batch")) == [
        "models/RedHatAI/gemma-4-31B-it-FP8-dynamic/", "models/google/gemma-4-31B-it-assistant/"]


def test_every_json_valued_flag_is_a_json_object():
    seen = set()
    for srv, instance in COMBINATIONS + [(server(traffic_class="text-only", sleep_mode=True), L40S)]:
        args = list(spec(srv, instance).args)
        for name in JSON_FLAGS:
            if name in args:
                value = flag(args, name)
                assert isinstance(json.loads(value), dict), (name, value)
                seen.add(name)
    assert seen == set(JSON_FLAGS)


def test_model_prefixes_do_not_nest():
    prefixes = [model_prefix(p.hf_id) for p in serving.MODELS.values()]
    prefixes.append(model_prefix(serving.MTP_DRAFT.hf_id))
    for a, b in itertools.permutations(prefixes, 2):
        assert not b.startswith(a), (a, b)


# -- loader per instance type -----------------------------------------------------------------


@pytest.mark.parametrize("instance,concurrency,memory_gib", [
    (L40S, 64, 24),      # the PoC's measured loader settings
    (L40S_X4, 128, 64),  # the PoC's g6e.12xlarge loader settings
    (G7E, 64, 24),       # chosen: 50 Gbps NIC, 64 GiB host
])
def test_runai_loader_settings_per_instance(instance, concurrency, memory_gib):
    cfg = json.loads(flag(spec(server(), instance).args, "--model-loader-extra-config"))
    assert cfg == {"concurrency": concurrency, "memory_limit": memory_gib * 1024**3}


def test_seed_recommended_loader_config_exactly():
    # the PoC's recommended command, verbatim value.
    assert flag(spec(server()).args, "--model-loader-extra-config") == \
        '{"concurrency":64,"memory_limit":25769803776}'


def test_tp_ranks_share_the_nic_and_keep_their_buffer_within_memory():
    for tp in (1, 2, 4):
        s = spec(server(tensor_parallel_size=tp), L40S_X4)
        cfg = json.loads(flag(s.args, "--model-loader-extra-config"))
        assert cfg["concurrency"] * tp == 128
        pod_memory = int(s.requests["memory"].removesuffix("Gi"))
        assert tp * cfg["memory_limit"] / 1024**3 <= pod_memory


# -- pod shape -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gpu_cpu_memory_and_shm_scale_with_tp(tp):
    s = spec(server(tensor_parallel_size=tp), L40S_X4)
    assert s.requests["nvidia.com/gpu"] == s.limits["nvidia.com/gpu"] == str(tp) and s.gpus == tp
    assert flag(s.args, "--tensor-parallel-size") == str(tp)
    assert s.requests["cpu"] == str(9 * tp)  # 48 vCPU x 0.75 / 4 GPUs
    assert s.requests["memory"] == s.limits["memory"] == f"{76 * tp}Gi"
    assert s.shm_size_gib == 4 * tp
    assert "cpu" not in s.limits


def test_single_gpu_instances_fit_their_allocatable():
    for instance in (L40S, G7E):
        s = spec(server(), instance)
        assert int(s.requests["cpu"]) < instance.vcpus
        assert int(s.requests["memory"].removesuffix("Gi")) <= instance.memory_gib * 0.85


def test_cache_on_raid0_or_root_volume():
    raid = spec(server(name="fp8-a"), L40S, raid0=True)
    assert raid.cache_size_gib == 36
    assert raid.requests["ephemeral-storage"] == "50Gi"
    root = spec(server(name="fp8-a"), L40S, raid0=False)
    assert root.cache_size_gib == 16
    assert root.requests["ephemeral-storage"] == "30Gi"
    for s in (raid, root):
        # the cache volume, HOME and /tmp (4 + 8 GiB) fit the pod's ephemeral-storage request
        assert s.cache_size_gib + 12 <= int(s.requests["ephemeral-storage"].removesuffix("Gi"))
        assert s.env["VLLM_CACHE_ROOT"] == s.cache_mount_path
        assert s.env["VLLM_ASSETS_CACHE"].startswith(s.cache_mount_path + "/")
        assert s.env["TRITON_CACHE_DIR"].startswith(s.cache_mount_path + "/")


def test_env_region_timeouts_and_offline_hub():
    s = spec(server())
    assert s.env["AWS_REGION"] == s.env["AWS_DEFAULT_REGION"] == "ap-northeast-2"
    assert int(s.env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 600  # vLLM's default
    assert s.env["HF_HUB_OFFLINE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in s.env and "--enable-sleep-mode" not in s.args


def test_idle_connections_outlive_the_bench_clients_pool():
    """vLLM closes an idle connection after 5 s unless told otherwise; `vllm bench serve` (the image's own source)
    keeps idle connections for reuse longer than that, so an open-loop run lost a request to a reset on an H100
    (2026-12-07). The server must hold an idle connection longer than the client pools it."""
    folder = vllm_flags.image_dir()
    problem = vllm_flags.check_parser_dir(folder)
    if problem:
        pytest.fail(f"the image's vLLM is not installed: {problem}", pytrace=False)
    envs = (folder / "vllm" / "envs.py").read_text()
    assert '"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5"' in envs  # the variable the server reads, and its default
    pooled = re.findall(r"keepalive_timeout=(\d+)", (folder / "vllm" / "benchmarks" / "serve.py").read_text())
    assert pooled == ["60"]
    s = spec(server())
    assert int(s.env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) == HTTP_KEEP_ALIVE_S > int(pooled[0]) + 10
    with pytest.raises(ValidationError, match="VLLM_HTTP_TIMEOUT_KEEP_ALIVE is set by the server profile"):
        server(env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "5"})


def test_sleep_mode_needs_dev_mode():
    s = spec(server(sleep_mode=True))
    assert "--enable-sleep-mode" in s.args
    assert s.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert any("development endpoints" in n for n in s.notes)


def test_sleep_mode_notes_the_utilization_that_keeps_the_kv_cache_its_size():
    """The paired sleep-mode record (H100): the KV cache 4.6 GiB larger with sleep mode; the note names the
    utilization whose share is that much smaller, per pool, and only where it leaves a usable share."""
    from stacks.serving.sizing import SLEEP_MODE_EXTRA_KV_GIB, sleep_mode_utilization
    assert SLEEP_MODE_EXTRA_KV_GIB == 4.6
    assert sleep_mode_utilization(0.90, 44) == 0.79  # L40S: 0.7954
    assert sleep_mode_utilization(0.95, 44) == 0.84  # text-only
    assert sleep_mode_utilization(0.90, 79.18) == 0.84  # the H100 of the record: 0.8419
    assert sleep_mode_utilization(0.90, 46) == 0.80  # exactly 0.80 stays 0.80
    note = next(n for n in spec(server(sleep_mode=True)).notes if n.startswith("sleep mode: vLLM 0.26"))
    assert "4.6 GiB larger than without sleep mode" in note and "served c=64" in note
    assert "gpuMemoryUtilization 0.79 keeps the KV cache" in note


def test_probe_budgets_cover_a_cold_start():
    s = spec(server())
    assert s.startup_probe.path == "/health"
    # the PoC measured a 537 s cold start; allow ~30 min.
    assert s.startup_probe.budget_s >= 1800
    # The engine times out (with a log line) before the kubelet kills the container.
    assert int(s.env["VLLM_ENGINE_READY_TIMEOUT_S"]) < s.startup_probe.budget_s
    # Pulumi waits longer than scheduling + pull + startup.
    assert s.deploy_timeout_s > s.startup_probe.budget_s + 48 + 82
    assert s.liveness_probe.budget_s >= 60 and s.readiness_probe.path == "/health"


def test_image_defaults_to_pin_and_must_be_pinned():
    assert spec(server()).image == pins().vllm_image
    for bad in ("vllm/vllm-openai", "vllm/vllm-openai:latest", "registry:5000/vllm-openai"):
        with pytest.raises(ValidationError, match="pinned"):
            server(image=bad)
    assert server(image="vllm/vllm-openai@sha256:" + "a" * 64).image.endswith("a" * 64)


def test_args_depend_on_the_bucket_only_through_uris():
    srv = server(traffic_class="batch")
    a = serving.build_serve_spec(srv, L40S, serving.ModelUris.for_bucket("one", srv), region="r")
    b = serving.build_serve_spec(srv, L40S, serving.ModelUris.for_bucket("two", srv), region="r")
    differing = [(x, y) for x, y in zip(a.args, b.args) if x != y]
    assert len(differing) == 2 and all("s3://one/" in x for x, _ in differing)
    assert a.env == b.env and a.requests == b.requests


def test_extra_args_are_appended_after_managed_flags():
    s = spec(server(extra_args=["--enable-log-requests"]))
    assert s.args[-1] == "--enable-log-requests"


# -- settings: config keys, aliases, refusals ------------------------------------------------


def test_camel_case_config_keys():
    srv = serving.ServerSettings.model_validate({
        "name": "gemma-fp8", "pool": "l40s", "model": "fp8-dynamic", "trafficClass": "batch",
        "tensorParallelSize": 1, "maxModelLen": 4096, "maxNumSeqs": 128,
        "gpuMemoryUtilization": 0.92, "numSpeculativeTokens": 6, "sleepMode": True,
        "extraArgs": ["--enable-log-requests"], "env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
    })
    assert (srv.traffic_class, srv.max_model_len, srv.max_num_seqs) == ("batch", 4096, 128)
    with pytest.raises(ValidationError, match="maxNumSeq"):
        serving.ServerSettings.model_validate({"name": "a", "pool": "p", "model": "bf16", "maxNumSeq": 64})


def test_every_field_is_described():
    for name, info in serving.ServerSettings.model_fields.items():
        assert info.description, name


@pytest.mark.parametrize("kw,match", [
    ({"model": "fp9"}, "unknown model 'fp9'; use one of fp8-dynamic, nvfp4, bf16"),
    ({"traffic_class": "realtime"}, "unknown traffic class 'realtime'; use one of interactive"),
    ({"tensor_parallel_size": 3}, "use one of 1, 2, 4, 8"),
    ({"name": "Gemma_FP8"}, "DNS label"),
    ({"extra_args": ["--max-num-seqs", "8"]}, "set by the server profile"),
    ({"extra_args": ["--max_num_seqs=8"]}, "set by the server profile"),
    ({"extra_args": ["--speculative-config.num_speculative_tokens", "8"]}, "set by the server profile"),
    ({"extra_args": ["--kv-cache-dtype=auto"]}, "set by the server profile"),
    ({"extra_args": ["--disable-log-requests"]}, "removed in vLLM 0.12"),
    ({"extra_args": ["8192"]}, "must start with a flag"),
    ({"env": {"AWS_ACCESS_KEY_ID": "AKIA"}}, "Pod Identity"),
    ({"env": {"VLLM_CACHE_ROOT": "/tmp"}}, "set by the server profile"),
    ({"max_num_seqs": 0}, "greater than or equal to 1"),
    ({"gpu_memory_utilization": 0.99}, "less than or equal to 0.98"),
])
def test_settings_refusals(kw, match):
    with pytest.raises(ValidationError, match=match):
        server(**kw)


def test_max_num_seqs_below_bench_peak_is_refused():
    assert serving.check_server(server(max_num_seqs=64), "g6e.2xlarge", 64) == []
    problems = serving.check_server(server(max_num_seqs=32), "g6e.2xlarge", 64,
                                    key="vllm-poc:servers[0]")
    assert problems == [
        "vllm-poc:servers[0].maxNumSeqs: 32 is below the bench's highest concurrency 64; vLLM "
        "would silently cap throughput there; set maxNumSeqs to at least 64"
    ]


def test_tp_larger_than_the_pool_is_refused():
    problems = serving.check_server(server(tensor_parallel_size=2), "g6e.2xlarge", 64,
                                    key="vllm-poc:servers[1]")
    assert len(problems) == 1
    assert problems[0].startswith("vllm-poc:servers[1].tensorParallelSize: 2 GPUs do not fit one g6e.2xlarge")
    assert serving.check_server(server(tensor_parallel_size=8), "g6e.12xlarge", 64)[0].endswith(
        "use 1 or 2 or 4, or a pool of g6e.12xlarge (4 GPUs)")


def test_bf16_needs_tp2_on_l40s():
    bf16 = server(model="bf16")
    [problem] = serving.check_server(bf16, "g6e.12xlarge", 64)
    assert ".tensorParallelSize:" in problem and "set tensorParallelSize to 2" in problem
    [problem] = serving.check_server(bf16, "g6e.2xlarge", 64)
    assert "g7e.2xlarge" in problem
    assert serving.check_server(server(model="bf16", tensor_parallel_size=2), "g6e.12xlarge", 64) == []
    assert serving.check_server(bf16, "g7e.2xlarge", 64) == []


def test_quantized_models_fit_one_l40s_with_the_draft():
    for model in ("fp8-dynamic", "nvfp4"):
        for traffic in serving.TRAFFIC_CLASSES:
            assert serving.check_server(server(model=model, traffic_class=traffic), "g6e.2xlarge", 64) == []


def test_unknown_pool_instance_and_long_bench_requests():
    [problem] = serving.check_server(server(), "g6e.2xlarg", 64, key="vllm-poc:servers[0]")
    assert problem.startswith("vllm-poc:servers[0].pool:") and "g6e.2xlarge" in problem
    [problem] = serving.check_server(server(max_model_len=4096), "g6e.2xlarge", 64,
                                     bench_max_tokens=4352)
    assert ".maxModelLen:" in problem and "4352" in problem


def test_unknown_model_is_reported_by_check_server():
    unchecked = server().model_copy(update={"model": "llama", "traffic_class": "bulk"})
    problems = serving.check_server(unchecked, "g6e.2xlarge", 64)
    assert any(".model: unknown model 'llama'" in p for p in problems)
    assert any(".trafficClass: unknown traffic class 'bulk'" in p for p in problems)


def test_duplicate_extra_args_are_reported_by_check_server():
    unchecked = server().model_copy(update={"extra_args": ["--gpu-memory-utilization", "0.5"]})
    [problem] = serving.check_server(unchecked, "g6e.2xlarge", 64)
    assert problem.startswith("vllm-poc:servers[0].extraArgs: --gpu-memory-utilization")


def test_sleep_mode_needs_host_memory_for_the_weights():
    assert serving.check_server(server(sleep_mode=True), "g6e.2xlarge", 64) == []
    [problem] = serving.check_server(server(sleep_mode=True), "g6e.xlarge", 64)
    assert ".sleepMode:" in problem


def test_every_valid_combination_builds():
    assert len(COMBINATIONS) == 39  # 45 minus BF16 at TP=1 on L40S (2 placements x 3 classes)
    for srv, instance in COMBINATIONS:
        s = spec(srv, instance)
        assert s.command == ("vllm", "serve") and s.port == 8000
