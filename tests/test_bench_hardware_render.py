"""The render ties bench results to hardware: Job name and results prefix follow the instance type,
the Job reads its node with least privilege, and the DCGM exporter runs on the GPU pools only."""

from __future__ import annotations

from stacks.versions import pins
from tests.fixtures.pulumi_stack import render_with, stack_config
from tests.test_bench_job import job_of

SERVER = {"name": "gemma-fp8", "pool": "l40s", "model": "fp8-dynamic", "trafficClass": "batch",
          "maxModelLen": 8192, "maxNumSeqs": 64}


def job_and_prefix(rendered) -> tuple[str, str]:
    job = job_of(rendered)
    return job["metadata"]["name"], rendered.outputs["benchResults"]["gemma-fp8"]


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_moving_a_server_to_another_pool_changes_job_name_and_results_prefix():
    on_l40s = render_with(servers=[SERVER])
    on_g7e = render_with(servers=[{**SERVER, "pool": "g7e"}])
    name_a, prefix_a = job_and_prefix(on_l40s)
    name_b, prefix_b = job_and_prefix(on_g7e)
    assert name_a != name_b and prefix_a != prefix_b
    job = job_of(on_g7e)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert flag(command, "--instance-type") == "g7e.2xlarge"
    # the Spot pool falls back to on-demand: both prices go to the Job, the node decides
    assert flag(command, "--capacity-types") == "spot,on-demand"
    assert flag(command, "--prices") == "on-demand=4.13,spot=1.5"
    l40s_job = job_of(on_l40s)
    l40s_command = l40s_job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert flag(l40s_command, "--capacity-types") == "on-demand" and flag(l40s_command, "--prices") == "on-demand=2.76"
    assert flag(l40s_command, "--image") == pins().vllm_image


def test_the_job_knows_its_node_and_reads_the_gpu_exporter_there(dev):
    job = job_of(dev)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert flag(container["command"], "--gpu-metrics-url") == "http://$(HOST_IP):9400/metrics"
    assert pod["automountServiceAccountToken"] is True


def test_the_bench_account_may_only_read_what_the_sweep_and_the_startup_timeline_need(dev):
    job = job_of(dev)
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    subject = {"kind": "ServiceAccount", "namespace": "vllm", "name": account}
    roles = {(r["kind"], r["metadata"]["name"]): r for r in dev.k8s("ClusterRole") + dev.k8s("Role")}
    granted = set()
    for binding in dev.k8s("ClusterRoleBinding") + dev.k8s("RoleBinding"):
        if subject in binding["subjects"]:
            assert binding["subjects"] == [subject]
            role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
            granted |= {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
                        for resource in rule["resources"] for verb in rule["verbs"]}
    # The sweep gets its own node; the start-up Job reads its server's pods, their log and events, and
    # the NodeClaim behind the node. Nothing writes, nothing lists nodes, no secrets.
    assert granted == {("", "nodes", "get"), ("karpenter.sh", "nodeclaims", "get"), ("", "pods", "get"),
                       ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list")}
    (node_reader,) = [r for r in dev.k8s("ClusterRole") if r["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]]
    assert node_reader["metadata"]["name"].endswith("node-reader")


def test_dcgm_exporter_is_pinned_and_runs_on_gpu_pools_only(dev):
    (release,) = [r for r in dev.helm_releases() if r["name"] == "dcgm-exporter"]
    assert release["version"] == pins().dcgm_exporter_chart
    assert release["repository"] == "https://nvidia.github.io/dcgm-exporter/helm-charts"
    values = release["values"]
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert values["hostNetwork"] is True and values["serviceMonitor"] == {"enabled": False}
    # only the GPU NodePools' nodes carry the selector label
    for pool in dev.k8s("NodePool"):
        assert pool["spec"]["template"]["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    node_groups = [r for r in dev.registrations if "nodeGroup" in r.type.lower() or "NodeGroup" in r.type]
    for group in node_groups:
        assert "nvidia.com/gpu.present" not in str(group.inputs.get("labels", {}))


def test_a_single_price_for_a_pool_with_two_capacity_types_is_refused():
    config = stack_config("g7e")
    bench = dict(config["vllm-poc:bench"])
    bench["pricePerHour"] = {"nvfp4-g7e": 1.5, "nvfp4-l40s": 2.76}
    try:
        render_with("g7e", bench=bench)
    except Exception as exc:  # the settings error names the key and the fix
        assert "bench.pricePerHour.nvfp4-g7e" in str(exc) and "{spot: X, on-demand: Y}" in str(exc)
    else:
        raise AssertionError("a single price for a Spot pool with on-demand fallback was accepted")
