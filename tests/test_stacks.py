"""Both stack files, rendered whole: valid objects, no policy violations, the PoC's configurations."""

from __future__ import annotations

import pytest

from policy import policies
from stacks.loader import load_settings
from stacks.ops.render import _plain, render_stack
from tests.fixtures.k8s.schemas import validate_object

STACKS = ("dev", "g7e", "matrix", "tp")


@pytest.fixture(scope="module", params=STACKS)
def rendered(request):
    return render_stack(request.param)


def test_every_kubernetes_object_is_schema_valid(rendered, karpenter_crds):
    version = load_settings(rendered.stack).cluster.kubernetes_version
    objects = rendered.kubernetes_objects()
    assert {"Deployment", "Service", "ServiceAccount", "Job", "ConfigMap", "Namespace", "NodePool",
            "EC2NodeClass"} <= {o["kind"] for o in objects}
    for obj in objects:
        report = validate_object(obj, kubernetes_version=version, crds=karpenter_crds)
        assert report.ok, report.errors
        assert not report.unevaluated_rules, report.unevaluated_rules


def test_policy_pack_finds_nothing(rendered):
    settings = load_settings(rendered.stack)
    resources = [(r.type, r.name, {**_plain(r.outputs), **_plain(r.inputs)}, r.outputs.get("id"))
                 for r in rendered.registrations]
    config = {"vllm-max-num-seqs": {"benchMaxConcurrency": settings.bench.max_concurrency}}
    assert policies.check_resources(resources, config) == []


def test_policy_pack_would_catch_a_broken_render(rendered):
    # The same check, fed the rendered Deployment without its fp8 KV flag, must object.
    resources = []
    for r in rendered.registrations:
        props = {**_plain(r.outputs), **_plain(r.inputs)}
        if r.type == "kubernetes:apps/v1:Deployment":
            container = props["spec"]["template"]["spec"]["containers"][0]
            args = container["args"]
            if "--kv-cache-dtype" in args:
                at = args.index("--kv-cache-dtype")
                container["args"] = args[:at] + args[at + 2:]
            container["args"] = [a if a != "--max-num-seqs" else a for a in container["args"]]
            container["image"] = container["image"].split(":")[0]
        resources.append((r.type, r.name, props, r.outputs.get("id")))
    found = {v.policy for v in policies.check_resources(resources)}
    assert "vllm-container-image-pinned" in found or any("image" in p for p in found)
    if rendered.stack == "dev":  # the dev server serves an FP8 checkpoint
        assert any("fp8" in p for p in found), found


def test_dev_serves_the_recommended_l40s_configuration():
    rendered = render_stack("dev")
    (deployment,) = rendered.k8s("Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0].endswith("/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/")
    flags = dict(zip(args[1::2], args[2::2]))
    assert flags["--kv-cache-dtype"] == "fp8"
    assert flags["--load-format"] == "runai_streamer"
    assert flags["--model-loader-extra-config"] == '{"concurrency":64,"memory_limit":25769803776}'
    assert '"num_speculative_tokens":4' in flags["--speculative-config"]
    assert "gemma-4-31B-it-assistant" in flags["--speculative-config"]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"vllm-poc/pool": "l40s"}


def test_g7e_runs_nvfp4_on_spot_against_the_l40s_baseline():
    rendered = render_stack("g7e")
    deployments = {d["metadata"]["name"]: d for d in rendered.k8s("Deployment")}
    assert set(deployments) == {"nvfp4-g7e", "nvfp4-l40s"}
    for name, pool in (("nvfp4-g7e", "g7e"), ("nvfp4-l40s", "l40s")):
        spec = deployments[name]["spec"]["template"]["spec"]
        args = spec["containers"][0]["args"]
        assert args[0].endswith("/models/nvidia/Gemma-4-31B-IT-NVFP4/")
        assert "--speculative-config" not in args  # the verdict compared without speculation
        assert spec["nodeSelector"] == {"vllm-poc/pool": pool}
    pools = {p["metadata"]["name"]: p for p in rendered.k8s("NodePool")}
    capacity = pools["g7e"]["spec"]["template"]["spec"]["requirements"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]} in capacity
    assert {j["metadata"]["labels"]["app.kubernetes.io/instance"] for j in rendered.k8s("Job")
            if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-bench"} == set(deployments)


def test_g7e_bench_jobs_search_the_slo_capacity_and_dev_does_not():
    def sweeps(stack):
        return [j["spec"]["template"]["spec"]["containers"][0] for j in render_stack(stack).k8s("Job")
                if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-bench"]

    g7e = sweeps("g7e")
    assert g7e and all("--capacity-search" in (c.get("command", []) + c.get("args", [])) for c in g7e)
    dev = sweeps("dev")
    assert dev and all("--capacity-search" not in (c.get("command", []) + c.get("args", [])) for c in dev)
