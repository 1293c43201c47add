"""What may be listed and deleted: AWS resources made by Karpenter, or tagged, for this cluster."""

from __future__ import annotations

from typing import Any, Iterable

# Tag keys only Karpenter writes; `karpenter.sh/discovery` is ours (subnets, security group) and excluded.
KARPENTER_KEYS = (
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.sh/managed-by",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/cluster",
)
LIVE_INSTANCE_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


def tag_dict(tags: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or []}


def tagged_for_cluster(tags: dict[str, str], cluster: str) -> bool:
    return (
        f"kubernetes.io/cluster/{cluster}" in tags
        or tags.get("eks:eks-cluster-name") == cluster
        or tags.get("karpenter.k8s.aws/cluster") == cluster
        or tags.get("karpenter.sh/managed-by") == cluster
        or tags.get("cluster.k8s.amazonaws.com/name") == cluster  # VPC CNI's ENIs
        or tags.get("elbv2.k8s.aws/cluster") == cluster
        or tags.get("KubernetesCluster") == cluster  # in-tree cloud provider, EBS CSI volumes
    )


def karpenter_owned(tags: dict[str, str], cluster: str) -> bool:
    """Made by Karpenter, for this cluster: both a Karpenter-only key and this cluster's tag."""
    return any(k in tags for k in KARPENTER_KEYS) and tagged_for_cluster(tags, cluster)


def karpenter_instances(ec2, cluster: str) -> list[dict[str, Any]]:
    """Live instances Karpenter launched for this cluster (either of the cluster tags it writes)."""
    found: dict[str, dict[str, Any]] = {}
    for cluster_filter in (
        {"Name": f"tag:kubernetes.io/cluster/{cluster}", "Values": ["owned"]},
        {"Name": "tag:eks:eks-cluster-name", "Values": [cluster]},
    ):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]},
            cluster_filter,
            {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES},
        ])
        for page in pages:
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    if karpenter_owned(tag_dict(inst.get("Tags")), cluster):
                        found[inst["InstanceId"]] = inst
    return [found[k] for k in sorted(found)]


def describe_instance(inst: dict[str, Any]) -> str:
    tags = tag_dict(inst.get("Tags"))
    return (f"{inst['InstanceId']} ({inst.get('InstanceType')}, {inst['State']['Name']}, "
            f"nodepool {tags.get('karpenter.sh/nodepool', '?')})")
