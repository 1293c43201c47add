"""Karpenter: controller identity and permissions, node role, interruption queue, charts, ordering."""

from __future__ import annotations

import json

import pytest

from stacks.versions import pins

CLUSTER = "vllm-poc-dev"


def deps(registration) -> set[str]:
    return {d.rsplit("::", 1)[-1] for d in registration.dependencies}


def controller_statements(dev) -> list[dict]:
    return [s for p in dev.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("karpenter-controller-")
            for s in json.loads(p.inputs["policy"])["Statement"]]


def test_controller_role_is_assumed_through_pod_identity(dev):
    role = dev.one("aws:iam/role:Role", "karpenter-controller")
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    # only Karpenter's own service account on this cluster may use it
    assert statement["Condition"]["StringEquals"] == {
        "aws:SourceAccount": "123456789012",
        "aws:RequestTag/eks-cluster-arn": f"arn:aws:eks:ap-northeast-2:123456789012:cluster/{CLUSTER}",
        "aws:RequestTag/kubernetes-namespace": "kube-system",
        "aws:RequestTag/kubernetes-service-account": "karpenter",
    }
    association = dev.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "karpenter-controller")
    assert association.inputs["namespace"] == "kube-system"
    assert association.inputs["serviceAccount"] == "karpenter"
    assert association.inputs["roleArn"] == role.outputs["arn"]
    assert association.inputs["clusterName"] == CLUSTER


def test_controller_has_the_reference_policy_groups(dev):
    groups = {p.inputs["name"] for p in dev.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("karpenter-controller-")}
    assert groups == {f"karpenter-{g}" for g in ("node-lifecycle", "iam-integration", "eks-integration",
                                                 "interruption", "zonal-shift", "resource-discovery")}
    actions = {a for s in controller_statements(dev) for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"ec2:RunInstances", "ec2:CreateFleet", "ec2:TerminateInstances", "iam:PassRole", "eks:DescribeCluster",
            "sqs:ReceiveMessage", "ec2:DescribeInstanceStatus", "ssm:GetParameter", "pricing:GetProducts"} <= actions
    assert not any("*" in a for a in actions), "wildcard actions"


def test_destructive_actions_are_scoped_to_this_cluster(dev):
    for statement in controller_statements(dev):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a in ("ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "iam:DeleteInstanceProfile",
                     "iam:RemoveRoleFromInstanceProfile") for a in actions):
            conditions = json.dumps(statement["Condition"])
            assert f"aws:ResourceTag/kubernetes.io/cluster/{CLUSTER}" in conditions
    (describe,) = [s for s in controller_statements(dev) if s["Action"] == "eks:DescribeCluster"]
    assert describe["Resource"] == f"arn:aws:eks:ap-northeast-2:123456789012:cluster/{CLUSTER}"
    (passrole,) = [s for s in controller_statements(dev) if s["Action"] == "iam:PassRole"]
    assert passrole["Resource"] == dev.one("aws:iam/role:Role", "karpenter-node").outputs["arn"]


def test_node_role_and_its_access_entry(dev):
    role = dev.one("aws:iam/role:Role", "karpenter-node")
    assert role.inputs["name"] == f"KarpenterNodeRole-{CLUSTER}"
    attached = {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if a.name.startswith("karpenter-node-")}
    assert attached == {"AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                        "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore"}
    entry = dev.one("aws:eks/accessEntry:AccessEntry", "karpenter-node")
    assert entry.inputs["type"] == "EC2_LINUX"
    assert entry.inputs["principalArn"] == role.outputs["arn"]
    assert "kubernetesGroups" not in entry.inputs  # not allowed with EC2_LINUX


def test_interruption_queue(dev):
    queue = dev.one("aws:sqs/queue:Queue")
    assert queue.inputs["name"] == CLUSTER
    assert queue.inputs["messageRetentionSeconds"] == 300
    assert queue.inputs["sqsManagedSseEnabled"] is True
    statements = json.loads(dev.one("aws:sqs/queuePolicy:QueuePolicy").inputs["policy"])["Statement"]
    allow = next(s for s in statements if s["Effect"] == "Allow")
    assert set(allow["Principal"]["Service"]) == {"events.amazonaws.com", "sqs.amazonaws.com"}
    deny = next(s for s in statements if s["Effect"] == "Deny")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


@pytest.mark.parametrize(("source", "detail_type"), [
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("aws.ec2", "EC2 Instance State-change Notification"),
    ("aws.health", "AWS Health Event"),
])
def test_eventbridge_rules_feed_the_queue(dev, source, detail_type):
    rules = [r for r in dev.of_type("aws:cloudwatch/eventRule:EventRule")
             if json.loads(r.inputs["eventPattern"]) == {"source": [source], "detail-type": [detail_type]}]
    assert len(rules) == 1, "pattern key must be 'detail-type'"
    (target,) = [t for t in dev.of_type("aws:cloudwatch/eventTarget:EventTarget") if t.name == rules[0].name]
    assert target.inputs["arn"] == dev.one("aws:sqs/queue:Queue").outputs["arn"]
    assert target.inputs["rule"] == rules[0].outputs["name"]


def test_charts_are_pinned_and_configured(dev):
    releases = {r["name"]: r for r in dev.helm_releases()}
    crd, controller = releases["karpenter-crd"], releases["karpenter"]
    for release in (crd, controller):
        assert release["version"] == pins().karpenter_chart == "1.14.1"
        assert release["namespace"] == "kube-system"
    assert crd["chart"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert controller["chart"] == "oci://public.ecr.aws/karpenter/karpenter"
    assert controller["skipCrds"] is True
    values = controller["values"]
    assert values["settings"] == {"clusterName": CLUSTER, "interruptionQueue": CLUSTER}
    assert {"name": "AWS_REGION", "value": "ap-northeast-2"} in values["controller"]["env"]
    assert values["nodeSelector"]["vllm-poc/role"] == "system"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in values["tolerations"]
    assert values["replicas"] == 2


def test_controller_chart_goes_before_its_iam_and_queue_on_destroy(dev):
    # Pulumi deletes a resource before what it depends on: the chart must depend on them all.
    release = dev.one("kubernetes:helm.sh/v3:Release", "karpenter")
    needed = {"karpenter-crd", "karpenter-controller", "karpenter-node", "karpenter-interruption",
              "karpenter-spot-interruption", "karpenter-rebalance", "karpenter-health",
              "karpenter-controller-node-lifecycle", "cluster-system", "cluster-eks-pod-identity-agent"}
    assert needed <= deps(release)
