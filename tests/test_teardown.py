"""pre-destroy and teardown-check: kubectl commands as plain functions, AWS parts against moto over HTTP."""

from __future__ import annotations

import argparse
import json
import subprocess
from types import SimpleNamespace

import boto3
import pytest

from stacks.ops import teardown
from stacks.ops.teardown.leftovers import find_leftovers, find_log_groups
from stacks.ops.teardown.ownership import karpenter_owned
from stacks.ops.teardown.pre_destroy import delete_steps, run_steps, update_kubeconfig_step, wait_for_instances_gone

CLUSTER = "vllm-poc-dev"
OTHER = "someone-elses-cluster"
REGION = "ap-northeast-2"


def _settings(vpc_id=None, storage="destroy"):
    """Stand-in for stacks.settings.StackSettings with the attributes teardown reads."""
    return SimpleNamespace(
        region=REGION, project="vllm-poc", stack="dev", cluster=SimpleNamespace(name=CLUSTER),
        gpu_pools=[], network=SimpleNamespace(vpc_id=vpc_id), storage=SimpleNamespace(teardown=storage),
    )


def _tags(resource_type: str, tags: dict[str, str]) -> list[dict]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []


def karpenter_node_tags(cluster: str, pool: str = "l40s") -> dict[str, str]:
    return {
        "karpenter.sh/nodepool": pool,
        "karpenter.sh/nodeclaim": f"{pool}-abcde",
        "karpenter.k8s.aws/ec2nodeclass": pool,
        f"kubernetes.io/cluster/{cluster}": "owned",
        "eks:eks-cluster-name": cluster,
    }


@pytest.fixture
def ec2(aws):
    return boto3.client("ec2")


@pytest.fixture
def ami(ec2):
    return ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"][0]["ImageId"]


def _run_instance(ec2, ami, tags: dict[str, str], instance_type="g6e.2xlarge", subnet=None) -> str:
    kw = {"SubnetId": subnet} if subnet else {}
    return ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType=instance_type,
                             TagSpecifications=_tags("instance", tags), **kw)["Instances"][0]["InstanceId"]


def _state(ec2, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]


# --------------------------------------------------------------------------------------------------
# pre-destroy: commands


def test_delete_commands_follow_the_stack_labels_in_order():
    steps = delete_steps("/tmp/kc", None)
    assert [s.argv for s in steps] == [
        ["kubectl", "--kubeconfig", "/tmp/kc", "delete", "jobs.batch", "--all-namespaces", "--cascade=foreground",
         "--selector", "app.kubernetes.io/part-of=vllm-poc", "--ignore-not-found", "--wait", "--timeout=15m"],
        ["kubectl", "--kubeconfig", "/tmp/kc", "delete", "deployments.apps", "--all-namespaces", "--cascade=foreground",
         "--selector", "app.kubernetes.io/part-of=vllm-poc", "--ignore-not-found", "--wait", "--timeout=15m"],
        ["kubectl", "--kubeconfig", "/tmp/kc", "delete", "nodepools.karpenter.sh",
         "--selector", "app.kubernetes.io/part-of=vllm-poc", "--ignore-not-found", "--wait", "--timeout=15m"],
        ["kubectl", "--kubeconfig", "/tmp/kc", "delete", "ec2nodeclasses.karpenter.k8s.aws",
         "--selector", "app.kubernetes.io/part-of=vllm-poc", "--ignore-not-found", "--wait", "--timeout=15m"],
    ]
    with_context = delete_steps(None, "admin@dev", wait_minutes=5)[2].argv
    assert with_context[:3] == ["kubectl", "--context", "admin@dev"] and "--timeout=5m" in with_context
    assert update_kubeconfig_step(CLUSTER, REGION, "/tmp/kc").argv == [
        "aws", "eks", "update-kubeconfig", "--name", CLUSTER, "--region", REGION, "--kubeconfig", "/tmp/kc"]


def test_dry_run_prints_commands_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings())

    def no_runner(*a, **k):
        raise AssertionError("dry run must not execute anything")

    args = argparse.Namespace(stack="dev", kubeconfig=None, context=None, wait_minutes=20, poll_seconds=15, dry_run=True)
    assert teardown.run_pre_destroy(args, runner=no_runner) == 0
    out = capsys.readouterr().out
    assert f"aws eks update-kubeconfig --name {CLUSTER} --region {REGION} --kubeconfig " in out
    lines = [line for line in out.splitlines() if line.startswith("kubectl")]
    assert [line.split()[4] for line in lines] == [
        "jobs.batch", "deployments.apps", "nodepools.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"]


class FakeRunner:
    def __init__(self, results: dict[str, tuple[int, str]] | None = None):
        self.results = results or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        rc, err = next(((rc, err) for word, (rc, err) in self.results.items() if word in argv), (0, ""))
        return subprocess.CompletedProcess(argv, rc, stdout="", stderr=err)


def test_run_steps_tolerates_a_missing_crd_and_stops_on_failure():
    steps = delete_steps("/kc", None)
    missing = FakeRunner({"nodepools.karpenter.sh": (1, 'error: the server doesn\'t have a resource type "nodepools"')})
    assert run_steps(steps, missing, log=lambda m: None)
    assert len(missing.calls) == 4

    broken = FakeRunner({"jobs.batch": (1, "error: You must be logged in to the server (Unauthorized)")})
    assert not run_steps(steps, broken, log=lambda m: None)
    assert len(broken.calls) == 1  # Deployments and NodePools are not touched after a failure


# --------------------------------------------------------------------------------------------------
# pre-destroy: waiting for Karpenter's instances (moto)


def test_wait_returns_once_karpenter_instances_are_terminated(ec2, ami):
    ours = [_run_instance(ec2, ami, karpenter_node_tags(CLUSTER, p)) for p in ("l40s", "g7e")]
    only_eks_tag = _run_instance(ec2, ami, {"karpenter.sh/nodepool": "l40s", "eks:eks-cluster-name": CLUSTER})
    decoys = [
        _run_instance(ec2, ami, karpenter_node_tags(OTHER)),  # another cluster's Karpenter node
        _run_instance(ec2, ami, {f"kubernetes.io/cluster/{CLUSTER}": "owned", "eks:nodegroup-name": "system"}),  # managed node group
        _run_instance(ec2, ami, {}),  # untagged
    ]
    logs: list[str] = []

    def sleep(seconds):  # Karpenter terminates the nodes while we wait
        assert seconds == 15
        ec2.terminate_instances(InstanceIds=ours + [only_eks_tag])

    left = wait_for_instances_gone(ec2, CLUSTER, timeout_s=600, sleep=sleep, log=logs.append)
    assert left == []
    assert logs[0].startswith("waiting for 3 Karpenter instance(s)") and "nodepool g7e" in logs[0]
    assert all(_state(ec2, i) == "running" for i in decoys)


def test_wait_is_bounded(ec2, ami):
    stuck = _run_instance(ec2, ami, karpenter_node_tags(CLUSTER))
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    logs: list[str] = []
    left = wait_for_instances_gone(ec2, CLUSTER, timeout_s=40, interval_s=15, sleep=sleep,
                                            clock=lambda: now[0], log=logs.append)
    assert [i["InstanceId"] for i in left] == [stuck]
    assert now[0] == 40 and logs[-1].startswith("timed out: 1 Karpenter instance(s)")


def test_pre_destroy_runs_cleanup_then_waits(ec2, ami, monkeypatch, capsys):
    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings())
    node = _run_instance(ec2, ami, karpenter_node_tags(CLUSTER))
    runner = FakeRunner()
    args = argparse.Namespace(stack="dev", kubeconfig="/kc", context=None, wait_minutes=1, poll_seconds=15, dry_run=False)
    rc = teardown.run_pre_destroy(args, clients={"ec2": ec2}, runner=runner,
                                  sleep=lambda s: ec2.terminate_instances(InstanceIds=[node]))
    assert rc == 0
    assert [c[4] for c in runner.calls] == [
        "jobs.batch", "deployments.apps", "nodepools.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"]

    failing = FakeRunner({"deployments.apps": (1, "boom")})
    assert teardown.run_pre_destroy(args, clients={"ec2": ec2}, runner=failing) == 1
    assert "fix it and rerun" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# teardown-check (moto with planted orphans and decoys)


def _plant(ec2, ami):
    """Orphans of CLUSTER and decoys that belong to someone else or to nobody; returns ids by role."""
    iam, elbv2, elb, s3 = (boto3.client(n) for n in ("iam", "elbv2", "elb", "s3"))
    ids: dict[str, object] = {}
    stack_vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    other_vpc = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    subnet_a = ec2.create_subnet(VpcId=stack_vpc, CidrBlock="10.40.0.0/20", AvailabilityZone="ap-northeast-2a")["Subnet"]["SubnetId"]
    subnet_b = ec2.create_subnet(VpcId=stack_vpc, CidrBlock="10.40.16.0/20", AvailabilityZone="ap-northeast-2b")["Subnet"]["SubnetId"]
    other_subnet = ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.50.0.0/20", AvailabilityZone="ap-northeast-2a")["Subnet"]["SubnetId"]
    ids["vpc"] = stack_vpc

    ids["instance"] = _run_instance(ec2, ami, karpenter_node_tags(CLUSTER), subnet=subnet_a)
    ids["decoy_instances"] = [
        _run_instance(ec2, ami, karpenter_node_tags(OTHER)),
        _run_instance(ec2, ami, {}, instance_type="m5.large"),
    ]

    lt = lambda name, tags: ec2.create_launch_template(  # noqa: E731
        LaunchTemplateName=name, LaunchTemplateData={"InstanceType": "g6e.2xlarge"},
        TagSpecifications=_tags("launch-template", tags))["LaunchTemplate"]["LaunchTemplateId"]
    ids["launch_template"] = lt("karpenter.k8s.aws/1234", {"karpenter.k8s.aws/cluster": CLUSTER, "karpenter.k8s.aws/ec2nodeclass": "l40s"})
    ids["decoy_lts"] = [lt("other", {"karpenter.k8s.aws/cluster": OTHER}), lt("plain", {})]

    iam.create_role(RoleName="KarpenterNodeRole", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}))
    profile_tags = {f"kubernetes.io/cluster/{CLUSTER}": "owned", "karpenter.sh/managed-by": CLUSTER,
                    "karpenter.k8s.aws/ec2nodeclass": "l40s", "topology.kubernetes.io/region": REGION}
    iam.create_instance_profile(InstanceProfileName=f"{CLUSTER}_123", Tags=[{"Key": k, "Value": v} for k, v in profile_tags.items()])
    iam.add_role_to_instance_profile(InstanceProfileName=f"{CLUSTER}_123", RoleName="KarpenterNodeRole")
    ids["instance_profile"] = f"{CLUSTER}_123"
    iam.create_instance_profile(InstanceProfileName="other_1", Tags=[{"Key": "karpenter.sh/managed-by", "Value": OTHER},
                                                                       {"Key": f"kubernetes.io/cluster/{OTHER}", "Value": "owned"}])
    iam.create_instance_profile(InstanceProfileName="untagged")
    # ours by cluster tag but not made by Karpenter (e.g. a node group's): never touched
    iam.create_instance_profile(InstanceProfileName="nodegroup", Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}])
    ids["decoy_profiles"] = ["other_1", "untagged", "nodegroup"]

    eni = lambda subnet, tags: ec2.create_network_interface(  # noqa: E731
        SubnetId=subnet, TagSpecifications=_tags("network-interface", tags))["NetworkInterface"]["NetworkInterfaceId"]
    ids["eni"] = eni(subnet_a, {"cluster.k8s.amazonaws.com/name": CLUSTER})
    ids["eni_in_vpc"] = eni(subnet_b, {})  # untagged, in the stack's VPC: listed, never deleted
    attached = eni(subnet_a, {"cluster.k8s.amazonaws.com/name": CLUSTER})
    ec2.attach_network_interface(NetworkInterfaceId=attached, InstanceId=ids["decoy_instances"][1], DeviceIndex=1)
    ids["decoy_enis"] = [eni(other_subnet, {}), eni(other_subnet, {"cluster.k8s.amazonaws.com/name": OTHER}), attached]

    vol = lambda tags: ec2.create_volume(AvailabilityZone="ap-northeast-2a", Size=100,  # noqa: E731
                                         TagSpecifications=_tags("volume", tags))["VolumeId"]
    ids["volume"] = vol({f"kubernetes.io/cluster/{CLUSTER}": "owned"})
    ids["decoy_volumes"] = [vol({}), vol({f"kubernetes.io/cluster/{OTHER}": "owned"})]

    lb = lambda name, tags: elbv2.create_load_balancer(  # noqa: E731
        Name=name, Subnets=[subnet_a, subnet_b], Type="application",
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()] or [{"Key": "team", "Value": "web"}])["LoadBalancers"][0]["LoadBalancerArn"]
    ids["lb"] = lb("k8s-vllm-gemma", {"elbv2.k8s.aws/cluster": CLUSTER})
    ids["decoy_lbs"] = [lb("web", {}), lb("k8s-other", {"elbv2.k8s.aws/cluster": OTHER})]
    elb.create_load_balancer(LoadBalancerName="a1b2c3", AvailabilityZones=["ap-northeast-2a"],
                             Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                             Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}])
    elb.create_load_balancer(LoadBalancerName="legacy", AvailabilityZones=["ap-northeast-2a"],
                             Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 80}])

    def bucket(name, tags, objects=1):
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
        if tags:
            s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]})
        for i in range(objects):
            s3.put_object(Bucket=name, Key=f"models/x/{i}", Body=b"w" * 1024)

    bucket("vllm-poc-dev-weights-123456789012-ap-northeast-2", {"vllm-poc/stack": "dev", "vllm-poc/data": "weights"}, 3)
    bucket("vllm-poc-dev-results-123456789012-ap-northeast-2", {"vllm-poc/stack": "dev", "vllm-poc/data": "results"}, 0)  # empty
    bucket("vllm-poc-prod-weights-123456789012-ap-northeast-2", {"vllm-poc/stack": "prod", "vllm-poc/data": "weights"})
    bucket("unrelated-data", {})
    return ids


def _check(args_extra: dict | None = None, confirm=input):
    args = argparse.Namespace(**{"stack": "dev", "delete": False, "yes": False, "json": False, "wait_minutes": 1,
                                 **(args_extra or {})})
    clients = {n: boto3.client(n) for n in ("ec2", "iam", "elbv2", "elb", "s3")}
    return teardown.run_teardown_check(args, clients=clients, confirm=confirm, sleep=lambda s: None)


def _found(ec2, ids, storage="destroy", vpc=True):
    clients = {n: boto3.client(n) for n in ("iam", "elbv2", "elb", "s3")}
    return find_leftovers(CLUSTER, "dev", ec2=ec2, vpc_id=ids["vpc"] if vpc else None, teardown=storage, **clients)


def test_check_lists_orphans_and_leaves_decoys_out(ec2, ami, monkeypatch, capsys):
    ids = _plant(ec2, ami)
    found = {(x.kind, x.id): x for x in _found(ec2, ids)}
    assert set(found) == {
        ("instance", ids["instance"]),
        ("launch-template", ids["launch_template"]),
        ("instance-profile", ids["instance_profile"]),
        ("eni", ids["eni"]),
        ("eni", ids["eni_in_vpc"]),
        ("volume", ids["volume"]),
        ("load-balancer", ids["lb"]),
        ("classic-load-balancer", "a1b2c3"),
        ("bucket", "vllm-poc-dev-weights-123456789012-ap-northeast-2"),
    }
    assert not found[("eni", ids["eni_in_vpc"])].deletable
    assert not found[("bucket", "vllm-poc-dev-weights-123456789012-ap-northeast-2")].deletable
    assert found[("instance-profile", ids["instance_profile"])].extra["roles"] == ["KarpenterNodeRole"]
    # without a VPC of its own (the stack created one, now gone) an untagged ENI is nobody's business
    assert ("eni", ids["eni_in_vpc"]) not in {(x.kind, x.id) for x in _found(ec2, ids, vpc=False)}

    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings(vpc_id=ids["vpc"]))
    assert _check() == 1
    out = capsys.readouterr().out
    assert "9 unexpected, 7 removable with --delete" in out
    assert _check({"json": True}) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and len(data["leftovers"]) == 9


def test_retained_weights_bucket_is_listed_but_expected(ec2, ami, monkeypatch, capsys):
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="vllm-poc-dev-weights-1-ap-northeast-2", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_tagging(Bucket="vllm-poc-dev-weights-1-ap-northeast-2",
                          Tagging={"TagSet": [{"Key": "vllm-poc/stack", "Value": "dev"}, {"Key": "vllm-poc/data", "Value": "weights"}]})
    s3.put_object(Bucket="vllm-poc-dev-weights-1-ap-northeast-2", Key="models/a", Body=b"x")
    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings(storage="retain-weights"))
    assert _check() == 0
    out = capsys.readouterr().out
    assert "kept" in out and "storage.teardown=retain-weights" in out and "0 unexpected" in out

    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings(storage="destroy"))
    assert _check() == 1  # with teardown=destroy the same bucket is a leftover


def test_delete_yes_removes_only_tagged_orphans_in_order(ec2, ami, monkeypatch, capsys):
    ids = _plant(ec2, ami)
    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings(vpc_id=ids["vpc"]))
    rc = _check({"delete": True, "yes": True})
    out = capsys.readouterr().out
    assert rc == 1  # the untagged ENI in the VPC and the weights bucket are left for a person to decide

    order = [line.split()[1] for line in out.splitlines() if line.startswith("deleted ")]
    assert order == ["instances", "ENI", "volume", "launch", "instance", "load", "classic"]
    remaining = {(x.kind, x.id) for x in _found(ec2, ids)}
    assert remaining == {("eni", ids["eni_in_vpc"]), ("bucket", "vllm-poc-dev-weights-123456789012-ap-northeast-2")}
    assert _state(ec2, ids["instance"]) == "terminated"

    # the decoys are all still there
    iam, elbv2, elb = boto3.client("iam"), boto3.client("elbv2"), boto3.client("elb")
    assert all(_state(ec2, i) == "running" for i in ids["decoy_instances"])
    assert len(ec2.describe_launch_templates(LaunchTemplateIds=ids["decoy_lts"])["LaunchTemplates"]) == 2
    assert {p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]} == set(ids["decoy_profiles"])
    assert iam.get_role(RoleName="KarpenterNodeRole")  # the role itself is never deleted
    assert len(ec2.describe_network_interfaces(NetworkInterfaceIds=ids["decoy_enis"])["NetworkInterfaces"]) == 3
    assert len(ec2.describe_volumes(VolumeIds=ids["decoy_volumes"])["Volumes"]) == 2
    assert {lb["LoadBalancerArn"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]} == set(ids["decoy_lbs"])
    assert [lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]] == ["legacy"]
    assert len(boto3.client("s3").list_buckets()["Buckets"]) == 4


def test_delete_needs_confirmation(ec2, ami, monkeypatch, capsys):
    node = _run_instance(ec2, ami, karpenter_node_tags(CLUSTER))
    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings())
    prompts: list[str] = []

    def answer(prompt):
        prompts.append(prompt)
        return "yes"  # not the cluster name

    assert _check({"delete": True}, confirm=answer) == 1
    assert CLUSTER in prompts[0] and "not confirmed" in capsys.readouterr().out
    assert _state(ec2, node) == "running"

    assert _check({"delete": True}, confirm=lambda p: CLUSTER) == 0
    assert _state(ec2, node) == "terminated"


def test_ownership_predicates():
    ours = karpenter_node_tags(CLUSTER)
    assert karpenter_owned(ours, CLUSTER)
    assert not karpenter_owned(ours, OTHER)
    assert not karpenter_owned({f"kubernetes.io/cluster/{CLUSTER}": "owned"}, CLUSTER)  # not Karpenter's
    assert not karpenter_owned({"karpenter.sh/discovery": CLUSTER}, CLUSTER)  # our subnet/SG discovery tag
    assert karpenter_owned({"karpenter.k8s.aws/cluster": CLUSTER}, CLUSTER)


def test_leftover_control_plane_log_group_is_listed(ec2, monkeypatch, capsys):
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")
    logs.create_log_group(logGroupName="/aws/eks/another-cluster/cluster")  # not ours
    found = find_log_groups(logs, CLUSTER)
    assert [(x.kind, x.id, x.deletable) for x in found] == [("log-group", f"/aws/eks/{CLUSTER}/cluster", False)]
    assert "no retention" in found[0].detail and "delete-log-group" in found[0].note

    monkeypatch.setattr(teardown, "_load_settings", lambda stack: _settings())
    args = argparse.Namespace(stack="dev", delete=False, yes=False, json=False, wait_minutes=1)
    clients = {n: boto3.client(n) for n in ("ec2", "iam", "elbv2", "elb", "s3", "logs")}
    assert teardown.run_teardown_check(args, clients=clients, sleep=lambda s: None) == 1
    assert f"log-group  /aws/eks/{CLUSTER}/cluster" in capsys.readouterr().out
