"""GPU capacity: one EC2NodeClass and NodePool per pool, and the NVIDIA device plugin."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.image_cache import ImageCacheSpec
from components.image_cache import apply as with_image_cache
from components.labels import PART_OF
from components.network import DISCOVERY_TAG

POOL_LABEL = "vllm-poc/pool"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# The device plugin chart schedules its DaemonSet only on nodes with one of a few labels; Karpenter's
# nodes carry this one from the NodePool template (no node-feature-discovery needed).
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DEVICE_PLUGIN_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
# Karpenter drains GPU nodes and terminates their instances before a NodePool or EC2NodeClass
# delete returns; a node running a vLLM pod can take a while to drain.
DELETE_TIMEOUT = "30m"
# Voluntary disruption of GPU nodes. A node runs a server (and its sweep) until the server goes, so
# Karpenter may never drift it (an AMI release, a tag or a subnet change after `up`) nor consolidate it
# as underutilized: both would evict a running benchmark within terminationGracePeriod, do-not-disrupt
# or not. An empty node (no server left) is removed one at a time. Spot reclaim and expireAfter are
# not voluntary: budgets do not hold them (docs/operations.md says how a sweep resumes).
DISRUPTION_BUDGETS = [
    {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
    {"nodes": "1", "reasons": ["Empty"]},
]
# A Spot pool's on-demand fallback gives way to Spot when Spot returns: its nodes are consolidated when
# underutilized too, which for a node of one server means replaced by a cheaper (Spot) node of the pool
# and the server moved there, one node at a time (the server's PodDisruptionBudget holds it to one
# replica). Where a benchmark target runs on the pool its fallback stays WhenEmpty with the budgets above:
# a sweep is never moved, and its server's node is removed once empty (do-not-disrupt holds it till then).
FALLBACK_BUDGETS = [
    {"nodes": "0", "reasons": ["Drifted"]},
    {"nodes": "1", "reasons": ["Underutilized", "Empty"]},
]


@dataclass(frozen=True)
class GpuPoolSpec:
    name: str
    instance_type: str
    gpus_per_instance: int
    capacity_types: list[str]
    gpu_limit: int
    weight: int
    raid0: bool
    root_volume_gib: int
    consolidate_after: str
    expire_after: str
    on_demand_fallback: bool = False
    image_cache: ImageCacheSpec | None = None  # vLLM image pre-loaded on an EBS snapshot
    benchmarks: bool = False  # a benchmark target runs on this pool: no node of it is ever consolidated


@dataclass(frozen=True)
class GpuCapacityArgs:
    cluster_name: str
    node_role_name: pulumi.Input[str]
    ami_alias: str  # al2023@vYYYYMMDD, pinned: @latest drifts every node on each AMI release
    device_plugin_version: str
    pools: list[GpuPoolSpec]
    tags: dict[str, str] = field(default_factory=dict)
    # Karpenter's charts: every NodePool/EC2NodeClass depends on them, so they are deleted first.
    karpenter: list[pulumi.Resource] = field(default_factory=list)


def ec2_node_class_spec(pool: GpuPoolSpec, args: GpuCapacityArgs, role: str) -> dict:
    spec: dict = {
        "role": role,
        "amiSelectorTerms": [{"alias": args.ami_alias}],
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: args.cluster_name}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: args.cluster_name}}],
        "blockDeviceMappings": [{
            "deviceName": "/dev/xvda",
            "rootVolume": True,
            "ebs": {"volumeSize": f"{pool.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True,
                    "deleteOnTermination": True},
        }],
        # Pods get AWS credentials from Pod Identity, never from the node role through IMDS.
        "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                            "httpPutResponseHopLimit": 1, "httpTokens": "required"},
        "tags": {**args.tags, "vllm-poc/pool": pool.name},
    }
    if pool.raid0:
        # kubelet, containerd and emptyDir move onto the striped NVMe (3.8 TB on g6e.12xlarge); the
        # vLLM image and the compile cache live there (as on the PoC's g6e.12xlarge).
        spec["instanceStorePolicy"] = "RAID0"
    return with_image_cache(spec, pool.image_cache)


def disruption(pool: GpuPoolSpec, fallback: bool) -> dict:
    """Voluntary disruption of a NodePool: only empty nodes go, one at a time; a Spot pool's on-demand
    fallback also consolidates back onto Spot, unless the pool runs a benchmark target."""
    gives_way = fallback and not pool.benchmarks
    budgets = FALLBACK_BUDGETS if gives_way else DISRUPTION_BUDGETS
    return {
        "consolidationPolicy": "WhenEmptyOrUnderutilized" if gives_way else "WhenEmpty",
        "consolidateAfter": pool.consolidate_after,
        "budgets": [{**budget, "reasons": list(budget["reasons"])} for budget in budgets],
    }


def node_pool_spec(pool: GpuPoolSpec, node_class: str, capacity_types: list[str], weight: int,
                   fallback: bool = False) -> dict:
    return {
        "weight": weight,
        "template": {
            "metadata": {"labels": {POOL_LABEL: pool.name, GPU_PRESENT_LABEL: "true", **PART_OF}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [pool.instance_type]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                ],
                "taints": [dict(GPU_TAINT)],
                "expireAfter": pool.expire_after,
                # Bounds the drain once a node must go: at expiry, or when teardown deletes the NodePool.
                # Past it, pods are deleted even with do-not-disrupt, so drift and consolidation must
                # never start on a node that serves: the budgets below allow them none.
                "terminationGracePeriod": "1h",
            },
        },
        "limits": {"nvidia.com/gpu": str(pool.gpu_limit)},
        "disruption": disruption(pool, fallback),
    }


class GpuCapacity(pulumi.ComponentResource):
    """Karpenter NodePools for the GPU pools; workloads select a pool with the `vllm-poc/pool` label.

    A Spot pool with `on_demand_fallback` gets a second, lower-weight on-demand NodePool with the
    same pool label: when Spot capacity for a single instance type runs short, Karpenter caches the
    shortage and launches from the fallback instead of leaving the server pending.
    """

    node_pools: dict[str, k8s.apiextensions.CustomResource]
    node_classes: dict[str, k8s.apiextensions.CustomResource]
    device_plugin: k8s.helm.v3.Release

    def __init__(self, name: str, args: GpuCapacityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:gpu:GpuCapacity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        after_karpenter = child.merge(pulumi.ResourceOptions(
            depends_on=list(args.karpenter), custom_timeouts=pulumi.CustomTimeouts(delete=DELETE_TIMEOUT),
        ))
        self.node_classes, self.node_pools = {}, {}

        for pool in args.pools:
            node_class = k8s.apiextensions.CustomResource(
                f"{name}-{pool.name}-class",
                api_version="karpenter.k8s.aws/v1",
                kind="EC2NodeClass",
                metadata={"name": pool.name, "labels": dict(PART_OF)},
                spec=pulumi.Output.from_input(args.node_role_name).apply(
                    lambda role, pool=pool: ec2_node_class_spec(pool, args, role)),
                opts=after_karpenter,
            )
            self.node_classes[pool.name] = node_class
            pool_opts = after_karpenter.merge(pulumi.ResourceOptions(depends_on=[*args.karpenter, node_class]))
            variants = [(pool.name, pool.capacity_types, pool.weight, False)]
            if pool.on_demand_fallback:
                variants.append((f"{pool.name}-on-demand", ["on-demand"], max(1, pool.weight // 10), True))
            for pool_name, capacity_types, weight, fallback in variants:
                self.node_pools[pool_name] = k8s.apiextensions.CustomResource(
                    f"{name}-{pool_name}",
                    api_version="karpenter.sh/v1",
                    kind="NodePool",
                    metadata={"name": pool_name, "labels": dict(PART_OF)},
                    spec=node_pool_spec(pool, pool.name, capacity_types, weight, fallback),
                    opts=pool_opts,
                )

        # The AL2023 NVIDIA AMI ships the driver and container toolkit but not the device plugin;
        # without it nodes never report nvidia.com/gpu and Karpenter never marks them initialized.
        self.device_plugin = k8s.helm.v3.Release(
            f"{name}-device-plugin",
            name="nvidia-device-plugin",
            chart="nvidia-device-plugin",
            version=args.device_plugin_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=DEVICE_PLUGIN_REPOSITORY),
            namespace="kube-system",
            values={
                "nodeSelector": {GPU_PRESENT_LABEL: "true"},
                "tolerations": [
                    {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                ],
                "priorityClassName": "system-node-critical",
            },
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.karpenter))),
        )
        self.register_outputs({"nodePools": list(self.node_pools)})
