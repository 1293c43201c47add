"""Cluster: EKS in API mode, pinned version, system node group, add-ons after the nodes."""

from __future__ import annotations

import json

from components.cluster import ADDONS
from stacks.ops.render import is_secret, unsecret
from tests.fixtures.pulumi_stack import render_with

ADMIN = "arn:aws:iam::123456789012:role/ci-deploy"


def test_eks_cluster_inputs(dev):
    cluster = dev.one("eks:index:Cluster")
    inputs = cluster.inputs
    assert inputs["name"] == "vllm-poc-dev"
    assert inputs["version"] == "1.36"
    assert inputs["authenticationMode"] == "API"
    assert inputs["skipDefaultNodeGroup"] is True
    assert inputs["createOidcProvider"] is False  # Pod Identity, not IRSA
    assert inputs["nodeAssociatePublicIpAddress"] is False
    assert len(inputs["privateSubnetIds"]) == 2
    # the add-ons are declared by this stack after the node group, not inside eks.Cluster
    assert inputs["useDefaultVpcCni"] is True
    assert inputs["corednsAddonOptions"]["enabled"] is False
    assert inputs["kubeProxyAddonOptions"]["enabled"] is False
    assert cluster.parent_name == "cluster"


def test_system_node_group_spans_the_private_subnets_and_is_tainted(dev):
    group = dev.one("eks:index:ManagedNodeGroup").inputs
    assert group["subnetIds"] == dev.one("eks:index:Cluster").inputs["privateSubnetIds"]
    assert group["scalingConfig"] == {"minSize": 2, "desiredSize": 2, "maxSize": 3}
    assert group["instanceTypes"] == ["m7i.xlarge"]
    assert group["amiType"] == "AL2023_x86_64_STANDARD"
    assert group["labels"] == {"vllm-poc/role": "system"}
    assert group["taints"] == [{"key": "CriticalAddonsOnly", "value": "true", "effect": "NO_SCHEDULE"}]
    # named by a prefix, so that a replacement (created before the old group goes) never collides with it
    assert group["nodeGroupNamePrefix"] == "vllm-poc-dev-system-" and "nodeGroupName" not in group


def test_the_node_group_prefix_leaves_room_for_the_unique_suffix():
    from components.cluster import NODE_GROUP_PREFIX_MAX, system_node_group_prefix

    assert system_node_group_prefix("vllm-poc-fleet") == "vllm-poc-fleet-system-"
    longest = system_node_group_prefix("a" * 38)  # the longest cluster name config accepts
    assert len(longest) == NODE_GROUP_PREFIX_MAX == 63 - 26 and longest.endswith("-system-")


def test_addons_are_created_after_the_system_node_group(dev):
    addons = {a.inputs["addonName"]: a for a in dev.of_type("aws:eks/addon:Addon")}
    assert set(addons) == set(ADDONS) == {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
    for addon in addons.values():
        assert "cluster-system" in [d.rsplit("::", 1)[-1] for d in addon.dependencies]
        assert addon.inputs["clusterName"] == "vllm-poc-dev"


def test_system_node_role_has_the_worker_policies(dev):
    attached = {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if a.name.startswith("cluster-system-node")}
    assert attached == {"AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                        "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore"}
    role = dev.one("aws:iam/role:Role", "cluster-system-node")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_cluster_security_group_is_tagged_for_karpenter(dev):
    (tag,) = [t for t in dev.of_type("aws:ec2/tag:Tag") if t.parent_name == "cluster"]
    assert tag.inputs["key"] == "karpenter.sh/discovery" and tag.inputs["value"] == "vllm-poc-dev"
    assert tag.inputs["resourceId"] == dev.one("eks:index:Cluster").outputs["clusterSecurityGroupId"]


def test_kubernetes_provider_has_a_stable_identity(dev):
    provider = dev.one("pulumi:providers:kubernetes")
    assert provider.inputs["clusterIdentifier"] == "vllm-poc-dev"
    assert is_secret(provider.inputs["kubeconfig"])
    kubeconfig = json.loads(unsecret(provider.inputs["kubeconfig"]))
    assert kubeconfig["users"][0]["user"]["exec"]["args"][-1] == "vllm-poc-dev"


def test_admin_roles_get_cluster_admin_access_entries():
    rendered = render_with(cluster={"name": "vllm-poc-dev", "publicAccessCidrs": ["203.0.113.10/32"], "kubernetesVersion": "1.36", "adminRoleArns": [ADMIN]})
    entries = rendered.one("eks:index:Cluster").inputs["accessEntries"]
    (entry,) = entries.values()
    assert entry["principalArn"] == ADMIN
    (policy,) = entry["accessPolicies"].values()
    assert policy["policyArn"].endswith("AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"] == {"type": "cluster"}


def test_stack_outputs(dev):
    assert dev.outputs["region"] == "ap-northeast-2"
    assert dev.outputs["clusterName"] == "vllm-poc-dev"
    assert json.loads(dev.outputs["kubeconfig"])["kind"] == "Config"
    assert dev.outputs["nodePools"] == ["g7e", "g7e-on-demand", "l40s", "l40s-x4"]


def test_audit_log_is_opt_in_and_api_and_authenticator_stay_on(dev):
    from stacks.settings import ClusterSettings

    # PoC stacks: api and authenticator only; the audit stream (the largest, billed per GB) is off.
    assert dev.one("eks:index:Cluster").inputs["enabledClusterLogTypes"] == ["api", "authenticator"]
    assert ClusterSettings().enabled_log_types == ["api", "authenticator"]
    assert ClusterSettings(auditLogs=True).enabled_log_types == ["api", "authenticator", "audit"]
    assert ClusterSettings(logTypes=["api", "audit"], auditLogs=True).enabled_log_types == ["api", "audit"]
