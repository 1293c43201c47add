"""One environment of the PoC, composed from validated settings.

Read top to bottom, this is the order things depend on each other: network, cluster, Karpenter,
GPU capacity, storage and identities, model servers, benchmark Jobs. Deletion runs the other way.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.cluster import Cluster, ClusterArgs
from components.gpu_capacity import GpuCapacity, GpuCapacityArgs, GpuPoolSpec
from components.karpenter import Karpenter, KarpenterArgs
from components.network import Network, NetworkArgs
from stacks.settings import StackSettings
from stacks.versions import pins


def stack_tags(settings: StackSettings) -> dict[str, str]:
    return {
        "vllm-poc/stack": settings.stack,
        "vllm-poc/cluster": settings.cluster.name,
        "managed-by": "pulumi",
        **settings.tags,
    }


def gpu_pool_specs(settings: StackSettings) -> list[GpuPoolSpec]:
    return [
        GpuPoolSpec(
            name=pool.name,
            instance_type=pool.instance_type,
            gpus_per_instance=pool.instance.gpus,
            capacity_types=list(pool.capacity_types),
            gpu_limit=pool.gpu_limit,
            weight=pool.weight,
            raid0=pool.use_raid0,
            root_volume_gib=pool.root_volume,
            consolidate_after=pool.consolidate_after,
            expire_after=pool.expire_after,
            on_demand_fallback=pool.on_demand_fallback,
        )
        for pool in settings.gpu_pools
    ]


def build(settings: StackSettings) -> dict[str, object]:
    """Declare every resource of the environment; returns the stack outputs."""
    versions = pins()
    tags = stack_tags(settings)
    aws_provider = aws.Provider("aws", region=settings.region, default_tags=aws.ProviderDefaultTagsArgs(tags=tags))
    on_aws = pulumi.ResourceOptions(providers={"aws": aws_provider})
    account_id = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=aws_provider)).account_id

    if settings.network.create_vpc:
        zones = aws.get_availability_zones(
            state="available", opts=pulumi.InvokeOptions(provider=aws_provider)
        ).names[: settings.network.availability_zone_count]
    else:
        zones = sorted(settings.network.private_subnets or {})
    network = Network(
        "network",
        NetworkArgs(
            cluster_name=settings.cluster.name,
            region=settings.region,
            vpc_cidr=settings.network.vpc_cidr,
            availability_zones=list(zones),
            nat_per_az=settings.network.nat_gateways == "per-az",
            vpc_id=settings.network.vpc_id,
            private_subnets=settings.network.private_subnets,
            public_subnets=settings.network.public_subnets,
        ),
        opts=on_aws,
    )

    cluster = Cluster(
        "cluster",
        ClusterArgs(
            name=settings.cluster.name,
            kubernetes_version=settings.cluster.kubernetes_version,
            region=settings.region,
            account_id=account_id,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
            public_subnet_ids=network.public_subnet_ids,
            system_instance_types=list(settings.system_nodes.instance_types),
            system_min_size=settings.system_nodes.min_size,
            system_desired_size=settings.system_nodes.desired_size,
            system_max_size=settings.system_nodes.max_size,
            system_disk_size_gib=settings.system_nodes.disk_size_gib,
            public_access_cidrs=list(settings.cluster.public_access_cidrs),
            admin_role_arns=list(settings.cluster.admin_role_arns),
            log_types=list(settings.cluster.log_types),
            tags=tags,
        ),
        opts=on_aws,
    )
    on_cluster = pulumi.ResourceOptions(providers={"aws": aws_provider, "kubernetes": cluster.provider})

    karpenter = Karpenter(
        "karpenter",
        KarpenterArgs(
            cluster_name=settings.cluster.name,
            cluster=cluster.name,
            cluster_arn=cluster.arn,
            region=settings.region,
            account_id=account_id,
            chart_version=versions.karpenter_chart,
            depends_on=[cluster.system_nodes, *cluster.addons],
        ),
        opts=on_cluster,
    )

    gpu = GpuCapacity(
        "gpu",
        GpuCapacityArgs(
            cluster_name=settings.cluster.name,
            node_role_name=karpenter.node_role.name,
            ami_alias=versions.al2023_alias,
            device_plugin_version=versions.nvidia_device_plugin_chart,
            pools=gpu_pool_specs(settings),
            tags=tags,
            karpenter=karpenter.releases,
        ),
        opts=on_cluster,
    )

    return {
        "region": settings.region,
        "clusterName": cluster.name,
        "kubeconfig": cluster.kubeconfig,
        "nodePools": sorted(gpu.node_pools),
        "karpenterInterruptionQueue": karpenter.queue.name,
    }
