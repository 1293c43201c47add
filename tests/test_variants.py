"""Server variants: the matrix and tp stacks as rendered (names, one server/Job/results prefix
each, flags, labels, policy), and the refusals (one change at a time, changes nothing, GPU budget,
unknown keys, hand-set origin, long names)."""

from __future__ import annotations

import copy
import json

import pytest

from policy import policies
from stacks.ops.render import _plain, render_stack
from stacks.settings import ConfigError, settings_from_config
from tests.fixtures.pulumi_stack import render_with, stack_config

MATRIX = ("gemma-fp8", "gemma-fp8-spec-off", "gemma-fp8-k8", "gemma-fp8-kv-auto")


def flags_of(deployment: dict) -> dict[str, str]:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    out, i = {}, 1
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            out[args[i]] = "on"
            i += 1
    return out


def settings_with(stack: str = "matrix", **overrides):
    config = stack_config(stack)
    if "servers" in overrides and "bench" not in overrides:
        # The stack's comparison names the stack's own variants; these tests declare others.
        config["vllm-poc:bench"] = {k: v for k, v in config["vllm-poc:bench"].items() if k != "compare"}
    for key, value in overrides.items():
        config[f"vllm-poc:{key}"] = value
    return settings_from_config(config, stack=stack)


def problems_of(stack: str = "matrix", **overrides) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        settings_with(stack, **overrides)
    return caught.value.problems


def server(**fields) -> dict:
    base = {"name": "gemma-fp8", "pool": "l40s-x4", "model": "fp8-dynamic", "trafficClass": "batch",
            "maxModelLen": 8192, "maxNumSeqs": 64}
    return {**base, **fields}


@pytest.fixture(scope="module")
def matrix():
    return render_stack("matrix")


def test_matrix_renders_one_server_per_variant_changing_one_flag_each(matrix):
    deployments = {d["metadata"]["name"]: d for d in matrix.k8s("Deployment")}
    assert set(deployments) == set(MATRIX)
    flags = {name: flags_of(d) for name, d in deployments.items()}
    base = flags["gemma-fp8"]
    assert base["--kv-cache-dtype"] == "fp8" and '"num_speculative_tokens":4' in base["--speculative-config"]
    diff = {name: {k for k in set(f) | set(base) if f.get(k) != base.get(k)} for name, f in flags.items()}
    assert diff == {"gemma-fp8": set(), "gemma-fp8-spec-off": {"--speculative-config"},
                    "gemma-fp8-k8": {"--speculative-config"}, "gemma-fp8-kv-auto": {"--kv-cache-dtype"}}
    assert "--speculative-config" not in flags["gemma-fp8-spec-off"]
    assert '"num_speculative_tokens":8' in flags["gemma-fp8-k8"]["--speculative-config"]
    assert flags["gemma-fp8-kv-auto"]["--kv-cache-dtype"] == "auto"
    for name, d in deployments.items():
        pod = d["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"  # GPU isolation
        assert pod["nodeSelector"] == {"vllm-poc/pool": "l40s-x4"}
        labels = d["metadata"]["labels"]
        if name == "gemma-fp8":
            assert "vllm-poc/variant-of" not in labels
        else:
            assert labels["vllm-poc/variant-of"] == "gemma-fp8"
    assert deployments["gemma-fp8-kv-auto"]["metadata"]["labels"]["vllm-poc/variant"] == "kvCacheDtype"


def test_each_variant_has_its_own_job_and_results_prefix(matrix):
    jobs = {j["metadata"]["labels"]["app.kubernetes.io/instance"]: j for j in matrix.k8s("Job")
            if j["metadata"]["name"].startswith("bench-")}
    assert set(jobs) == set(MATRIX)
    assert len({j["metadata"]["name"] for j in jobs.values()}) == 4
    results = matrix.outputs["benchResults"]
    assert set(results) == set(MATRIX) and len(set(results.values())) == 4
    for name, uri in results.items():
        assert f"/runs/matrix/{name}/" in uri
    for name, job in jobs.items():
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--label") + 1] == f"matrix/{name}"
        assert command[command.index("--concurrencies") + 1] == "1,2,4,8,16,32,64"
        assert command[command.index("--scenario-concurrencies") + 1] == "K_korean=1,8,32,64"
        if name == "gemma-fp8":
            assert "--variant" not in command
    kv = jobs["gemma-fp8-kv-auto"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert json.loads(kv[kv.index("--variant") + 1]) == {"base": "gemma-fp8", "cross": False,
                                                          "settings": {"kvCacheDtype": "auto"}}


def test_the_kv_measurement_variant_passes_the_policy_pack_and_nothing_else_would(matrix):
    resources = [(r.type, r.name, {**_plain(r.outputs), **_plain(r.inputs)}, r.outputs.get("id"))
                 for r in matrix.registrations]
    assert policies.check_resources(resources) == []
    # The same Deployment without its variant label is refused by the fp8 KV rule.
    (kv_auto,) = [p for t, _, p, _ in resources if t == "kubernetes:apps/v1:Deployment"
                  and p["metadata"]["name"] == "gemma-fp8-kv-auto"]
    stripped = copy.deepcopy(kv_auto)
    del stripped["metadata"]["labels"]["vllm-poc/variant"]
    assert policies.check_fp8_kv_cache("kubernetes:apps/v1:Deployment", stripped, "x")
    assert policies.check_fp8_kv_cache("kubernetes:apps/v1:Deployment", kv_auto, "x") == []


def test_fp8_with_bf16_kv_stays_refused_outside_a_kv_variant():
    problems = problems_of(servers=[server(kvCacheDtype="auto")])
    assert any("servers[0].kvCacheDtype" in p and "refused for fp8-dynamic" in p for p in problems)
    problems = problems_of(servers=[server(variants={"numSpeculativeTokens": [8]}, kvCacheDtype="auto")])
    assert any("refused for fp8-dynamic" in p for p in problems)


def test_tp_stack_base_tp2_variant_tp4_with_its_gpus():
    rendered = render_stack("tp")
    deployments = {d["metadata"]["name"]: d for d in rendered.k8s("Deployment")}
    assert set(deployments) == {"gemma-bf16", "gemma-bf16-tp4"}
    for name, tp in (("gemma-bf16", "2"), ("gemma-bf16-tp4", "4")):
        assert flags_of(deployments[name])["--tensor-parallel-size"] == tp
        assert deployments[name]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == tp
    jobs = {j["metadata"]["labels"]["app.kubernetes.io/instance"]: j for j in rendered.k8s("Job")
            if j["metadata"]["name"].startswith("bench-")}
    command = jobs["gemma-bf16-tp4"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--gpus") + 1] == "4"


def test_variants_of_a_target_are_targets_at_the_base_price():
    s = settings_with(bench={"targets": ["gemma-fp8"], "pricePerHour": {"gemma-fp8": 2.5}})
    assert s.bench.targets == list(MATRIX)
    assert s.bench.price_per_hour == {name: 2.5 for name in MATRIX}


def test_a_variant_that_changes_two_served_settings_is_refused_unless_a_cross_product_is_asked():
    # interactive drops MTP AND priority scheduling: two changes through one key.
    problems = problems_of(servers=[server(variants={"trafficClass": ["interactive"]})])
    assert problems == [
        "vllm-poc:servers[1] (gemma-fp8-interactive, variant of gemma-fp8): differs from its base in 2 served "
        "settings (schedulingPolicy, speculative) through trafficClass; a variant changes one setting at a "
        "time: vary a narrower key, or set crossProduct: true to ask for the full cross product"]
    s = settings_with(servers=[server(variants={"trafficClass": ["interactive"]}, crossProduct=True)])
    assert [x.name for x in s.servers] == ["gemma-fp8", "gemma-fp8-interactive"]


def test_cross_product_makes_the_full_grid_and_one_at_a_time_does_not():
    grid = {"numSpeculativeTokens": [4, 8], "kvCacheDtype": ["fp8", "auto"]}
    one = settings_with(servers=[server(variants=grid)])
    assert [x.name for x in one.servers] == ["gemma-fp8", "gemma-fp8-k8", "gemma-fp8-kv-auto"]
    cross = settings_with(servers=[server(variants=grid, crossProduct=True)])
    assert [x.name for x in cross.servers] == ["gemma-fp8", "gemma-fp8-kv-auto", "gemma-fp8-k8",
                                               "gemma-fp8-k8-kv-auto"]
    assert cross.server("gemma-fp8-k8-kv-auto").variant_of.cross is True


def test_a_variant_that_changes_nothing_is_refused():
    problems = problems_of(servers=[server(trafficClass="interactive", variants={"numSpeculativeTokens": [8]})])
    assert len(problems) == 1 and "gemma-fp8-k8, variant of gemma-fp8): changes nothing in the served flags" in problems[0]


def test_gpu_budget_of_the_pool_holds_every_variant_at_once():
    problems = problems_of(servers=[server(variants={"speculative": [False], "numSpeculativeTokens": [8],
                                                     "kvCacheDtype": ["auto"], "maxNumSeqs": [128]})])
    assert problems == [
        "vllm-poc:gpuPools[0].gpuLimit: 'l40s-x4' allows 4 GPUs but its servers and variants need 5 at once "
        "(gemma-fp8 1, gemma-fp8-spec-off 1, gemma-fp8-k8 1, gemma-fp8-kv-auto 1, gemma-fp8-seqs128 1); raise "
        "gpuLimit (then check the quota with `python -m stacks preflight`) or drop variants"]
    problems = problems_of("tp", gpuPools=[{"name": "l40s-x4", "instanceType": "g6e.12xlarge", "gpuLimit": 4}])
    assert any("needs 6 at once" in p or "need 6 at once" in p for p in problems), problems


@pytest.mark.parametrize("variants, message", [
    ({"extraArgs": [["--foo"]]}, "servers[0].variants.extraArgs: cannot vary"),
    ({"numSpeculativeTokens": []}, "servers[0].variants.numSpeculativeTokens: expected a non-empty list"),
    ([8], "servers[0].variants: expected a map of setting -> list of values"),
])
def test_bad_variant_declarations_name_their_key(variants, message):
    problems = problems_of(servers=[server(variants=variants)])
    assert any(message in p for p in problems), problems


def test_origin_cannot_be_set_by_hand_and_names_must_fit():
    problems = problems_of(servers=[server(variantOf={"base": "x", "settings": ["model"]})])
    assert any("servers[0].variantOf: set by the stack" in p for p in problems)
    problems = problems_of(servers=[server(name="a-very-long-server-name-for-the-matrix-x",
                                           variants={"numSpeculativeTokens": [8]})])
    assert any("is longer than 40 characters" in p for p in problems)


def test_a_model_variant_and_a_pool_variant_are_one_change_each():
    pools = [{"name": "l40s-x4", "instanceType": "g6e.12xlarge", "gpuLimit": 4},
             {"name": "g7e", "instanceType": "g7e.2xlarge", "capacityTypes": ["spot"], "gpuLimit": 2}]
    weights = {"source": "hub", "revisions": {m: "main" for m in (
        "RedHatAI/gemma-4-31B-it-FP8-dynamic", "google/gemma-4-31B-it-assistant", "nvidia/Gemma-4-31B-IT-NVFP4")}}
    s = settings_with(gpuPools=pools, weights=weights,
                      servers=[server(variants={"model": ["nvfp4"], "pool": ["g7e"]})])
    assert [x.name for x in s.servers] == ["gemma-fp8", "gemma-fp8-nvfp4", "gemma-fp8-on-g7e"]


def test_render_with_variants_is_deterministic():
    one = render_with("matrix").outputs["benchResults"]
    assert render_with("matrix").outputs["benchResults"] == one and json.dumps(one)
