"""What the first `pulumi up` on an empty account depends on, checked over every stack file's render.

Unique object names (a duplicate fails the create), servers after their weight syncs, no access entry
for the identity running `pulumi up`, the control-plane log group before the cluster, zones where the
pools' instance types are offered, and a known-missing AMI failing in seconds.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pulumi.errors import RunError

from stacks.identity import admin_role_problems, caller_role_arn
from stacks.loader import load_settings
from stacks.ops import mocks
from stacks.ops.render import Rendered, is_secret, render_stack
from stacks.serving import server_model_ids
from stacks.settings import REPO
from stacks.zones import choose_zones
from tests.fixtures.pulumi_stack import render_with

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in Path(REPO).glob("Pulumi.*.yaml"))
CALLER_ROLE = f"arn:aws:iam::{mocks.ACCOUNT_ID}:role/vllm-poc-deploy"


@pytest.fixture(scope="module", params=STACKS)
def stack(request) -> tuple[str, Rendered]:
    return request.param, render_stack(request.param)


def names(deps: list[str]) -> set[str]:
    return {d.rsplit("::", 1)[-1] for d in deps}


def test_every_stack_file_is_rendered_here():
    assert {"dev", "g7e"} <= set(STACKS)


def test_object_names_are_unique_per_kind_and_namespace(stack):
    _, rendered = stack
    keys = Counter((o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                   for o in rendered.kubernetes_objects())
    assert [k for k, n in keys.items() if n > 1] == []
    aws_names = Counter((r.type, r.inputs.get("name")) for r in rendered.registrations
                        if r.type.startswith("aws:") and isinstance(r.inputs.get("name"), str))
    assert [k for k, n in aws_names.items() if n > 1] == []


def test_every_server_waits_for_the_syncs_of_its_models(stack):
    name, rendered = stack
    settings = load_settings(name)
    syncs = {r.inputs["spec"]["template"]["spec"]["containers"][0]["args"][2]: r.name
             for r in rendered.of_type("kubernetes:batch/v1:Job")
             if r.inputs["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-weight-sync"}
    assert set(syncs) == set(settings.model_ids())
    for server in settings.servers:
        deployment = rendered.one("kubernetes:apps/v1:Deployment", f"server-{server.name}-deployment")
        assert {syncs[m] for m in server_model_ids(server)} <= names(deployment.dependencies)


def test_no_access_entry_for_the_identity_running_pulumi_up(stack):
    _, rendered = stack
    entries = rendered.one("eks:index:Cluster").inputs.get("accessEntries") or {}
    principals = [e["principalArn"] for e in entries.values()]
    principals += [r.inputs["principalArn"] for r in rendered.of_type("aws:eks/accessEntry:AccessEntry")]
    assert CALLER_ROLE not in principals


def test_the_control_plane_log_group_exists_before_the_cluster(stack):
    name, rendered = stack
    cluster_name = load_settings(name).cluster.name
    group = rendered.one("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs["name"] == f"/aws/eks/{cluster_name}/cluster"
    assert group.inputs["retentionInDays"] == 14
    assert group.name in names(rendered.one("eks:index:Cluster").dependencies)


def test_log_retention_is_configurable_and_checked():
    rendered = render_with(cluster={"name": "vllm-poc-dev", "publicAccessCidrs": ["203.0.113.10/32"], "logRetentionDays": 90})
    assert rendered.one("aws:cloudwatch/logGroup:LogGroup").inputs["retentionInDays"] == 90
    with pytest.raises(Exception, match="logRetentionDays.*CloudWatch Logs retention"):
        render_with(cluster={"name": "vllm-poc-dev", "publicAccessCidrs": ["203.0.113.10/32"], "logRetentionDays": 10})


# -- weight syncs ---------------------------------------------------------------------------------


def sync_jobs(rendered: Rendered) -> list[dict]:
    return [j for j in rendered.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-weight-sync"]


def test_sync_jobs_run_on_system_nodes_with_pinned_code_and_wait_for_identity(dev):
    jobs = sync_jobs(dev)
    assert len(jobs) == 2  # the FP8 checkpoint and the MTP assistant
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"vllm-poc/role": "system"}
        assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}]
        (container,) = pod["containers"]
        assert "nvidia.com/gpu" not in str(container["resources"])
        assert "/library/python:" in container["image"] and container["args"][0] == "sync"
        scratch = next(v for v in pod["volumes"] if v["name"] == "scratch")
        assert scratch["emptyDir"]["sizeLimit"] == "20Gi"
        assert job["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
        # a problem a retry cannot fix (exit 2: gated, bad revision, missing shard) fails the Job, and
        # `pulumi up` with it, at once
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert {"action": "FailJob", "onExitCodes": {"containerName": "sync", "operator": "In", "values": [2]}} in rules
        assert job["spec"]["activeDeadlineSeconds"] == 60 * 60
        assert "skipAwait" not in str(job["metadata"]["annotations"])  # pulumi up waits for it
        (code,) = [c for c in dev.k8s("ConfigMap") if c["metadata"]["name"] == job["metadata"]["name"]]
        assert {"hub.py", "store.py", "__main__.py"} <= set(code["data"])
        assert "huggingface_hub==2.4.0" in code["data"]["requirements.txt"]
    assert dev.outputs["weightSyncJobs"] == {
        j["spec"]["template"]["spec"]["containers"][0]["args"][2]: j["metadata"]["name"] for j in jobs}
    registration = dev.one("kubernetes:batch/v1:Job", "weights-google-gemma-4-31b-it-assistant-job")
    assert {"weight-sync-identity-association", "storage-weights", "cluster-system"} <= names(registration.dependencies)


def test_hf_token_becomes_a_secret_the_job_reads(dev):
    assert not dev.k8s("Secret") and "HF_TOKEN" not in str(sync_jobs(dev))
    rendered = render_with(hfToken="hf_abc")
    (secret,) = rendered.k8s("Secret")
    assert secret["metadata"]["name"] == "hf-token" and secret["stringData"] == {"token": "[secret]"}
    registration = rendered.one("kubernetes:core/v1:Secret")
    assert is_secret(registration.inputs["stringData"])  # a Pulumi secret in state, never plain text
    env = sync_jobs(rendered)[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in env


def test_stage_weights_source_checks_instead_of_syncing():
    rendered = render_with(weights={"source": "stage-weights"})
    jobs = sync_jobs(rendered)
    assert len(jobs) == 2
    for job in jobs:
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "check" and "python -m stacks stage-weights" in args[args.index("--stage-hint") + 1]


def test_hub_source_needs_a_revision_for_every_model():
    with pytest.raises(Exception, match=r"weights.revisions: no revision for google/gemma-4-31B-it-assistant"):
        render_with(weights={"revisions": {"RedHatAI/gemma-4-31B-it-FP8-dynamic": "a" * 40}})


def test_a_new_revision_is_a_new_sync_job():
    before = {j["metadata"]["name"] for j in sync_jobs(render_with())}
    after = {j["metadata"]["name"] for j in sync_jobs(render_with(weights={"revisions": {
        "RedHatAI/gemma-4-31B-it-FP8-dynamic": "b" * 40, "google/gemma-4-31B-it-assistant": "main"}}))}
    assert len(before & after) == 1  # the assistant's Job is unchanged, the target's is new


# -- access entries ---------------------------------------------------------------------------------


def test_config_refuses_the_callers_own_role_as_admin():
    with pytest.raises(RunError, match=r"adminRoleArns\[1\].*role running `pulumi up`"):
        render_with(cluster={"name": "vllm-poc-dev", "publicAccessCidrs": ["203.0.113.10/32"], "adminRoleArns": [
            "arn:aws:iam::123456789012:role/ops", "arn:aws:iam::123456789012:role/ci/vllm-poc-deploy"]})
    other = render_with(cluster={"name": "vllm-poc-dev", "publicAccessCidrs": ["203.0.113.10/32"], "adminRoleArns": ["arn:aws:iam::123456789012:role/ops"]})
    entries = other.one("eks:index:Cluster").inputs["accessEntries"]
    assert [e["principalArn"] for e in entries.values()] == ["arn:aws:iam::123456789012:role/ops"]


def test_caller_role_from_sts():
    assert caller_role_arn("arn:aws:sts::123456789012:assumed-role/deploy/gh-123") == "arn:aws:iam::123456789012:role/deploy"
    assert caller_role_arn("arn:aws:iam::123456789012:user/alice") is None
    assert admin_role_problems(["arn:aws:iam::123456789012:role/deploy"], "arn:aws:iam::123456789012:user/alice") == []
    # same role name in another account is another role
    assert admin_role_problems(["arn:aws:iam::999999999999:role/deploy"],
                               "arn:aws:sts::123456789012:assumed-role/deploy/s") == []


# -- zones and AMI ----------------------------------------------------------------------------------


def subnet_zones(rendered: Rendered) -> set[str]:
    return {s.inputs["availabilityZone"] for s in rendered.of_type("aws:ec2/subnet:Subnet")}


def test_zones_come_from_offerings_unless_given(dev):
    # g7e is offered in b-d only (the mocks): the region's first two zones would strand that pool
    assert subnet_zones(dev) == {"ap-northeast-2b", "ap-northeast-2c"}
    # a stack without pinned zones (and no live VPC) takes today's choice
    only_g6e = render_with(gpuPools=[{"name": "l40s", "instanceType": "g6e.2xlarge", "gpuLimit": 4}],
                           bench=None, servers=None, weights=None, network={"vpcCidr": "10.40.0.0/16"})
    assert subnet_zones(only_g6e) == {"ap-northeast-2a", "ap-northeast-2b"}
    given = render_with(network={"vpcCidr": "10.40.0.0/16", "availabilityZones": ["ap-northeast-2c", "ap-northeast-2d"]})
    assert subnet_zones(given) == {"ap-northeast-2c", "ap-northeast-2d"}


def test_a_pool_type_offered_in_none_of_the_zones_is_refused_when_servers_run_on_it():
    zones = {"vpcCidr": "10.41.0.0/16", "availabilityZones": ["ap-northeast-2a", "ap-northeast-2e"]}
    with pytest.raises(RunError, match=r"gpuPools\[0\].instanceType: g7e.2xlarge is offered in .*2b.*none of the VPC's zones"):
        render_with("g7e", network=zones)
    # dev's g7e pool has no server: its NodePool is rendered, and nothing waits for its nodes
    idle = render_with(network={**zones, "vpcCidr": "10.40.0.0/16"})
    assert subnet_zones(idle) == {"ap-northeast-2a", "ap-northeast-2e"}
    assert "g7e" in {o["metadata"]["name"] for o in idle.k8s("NodePool")}
    zones, problems = choose_zones(["r-a", "r-b", "r-c"], {"x": {"r-c"}, "y": {"r-a", "r-b"}},
                                   {"pool0": "x", "pool1": "y"}, 2)
    assert zones == ["r-a", "r-c"] and problems == []


def test_a_missing_nvidia_ami_fails_before_anything_is_created(monkeypatch):
    from stacks.versions import pins

    parameter = pins().nvidia_ami_parameter("1.36")
    monkeypatch.setattr(mocks, "MISSING_PARAMETERS", {parameter})
    with pytest.raises(RunError, match=r"v20260930 has no NVIDIA AL2023 AMI for Kubernetes 1.36.*al2023_ami_release") as err:
        render_with()
    assert parameter in str(err.value)


# -- GPU node check -----------------------------------------------------------------------------------


def test_each_pool_with_servers_gets_a_node_check_after_its_syncs_and_before_its_servers(stack):
    name, rendered = stack
    settings = load_settings(name)
    checks = {r.inputs["metadata"]["labels"]["app.kubernetes.io/instance"]: r
              for r in rendered.of_type("kubernetes:batch/v1:Job")
              if r.inputs["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-gpu-node-check"}
    assert set(checks) == {s.pool for s in settings.servers}  # dev: l40s only, not the idle pools
    for pool, check in checks.items():
        spec = check.inputs["spec"]
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {"vllm-poc/pool": pool}
        assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])  # it holds no GPU
        assert spec["activeDeadlineSeconds"] == 900 and spec["backoffLimit"] == 0
        assert int(check.inputs["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) < 45 * 60
        sync_names = {f"weights-{m.replace('/', '-').lower()}-job"
                      for s in settings.servers if s.pool == pool for m in server_model_ids(s)}
        assert sync_names | {f"gpu-{pool}"} <= names(check.dependencies)  # after the weights and the NodePool
    for server in settings.servers:
        deployment = rendered.one("kubernetes:apps/v1:Deployment", f"server-{server.name}-deployment")
        assert checks[server.pool].name in names(deployment.dependencies)


def test_scratch_space_must_fit_a_system_node():
    with pytest.raises(Exception, match=r"weights.scratchGib: 40 GiB does not fit .* 50 GiB disk"):
        render_with(weights={"revisions": {"RedHatAI/gemma-4-31B-it-FP8-dynamic": "main",
                                           "google/gemma-4-31B-it-assistant": "main"}, "scratchGib": 40})
