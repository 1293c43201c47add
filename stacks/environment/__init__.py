"""One environment of the PoC, composed from validated settings.

Read top to bottom, this is the order things depend on each other: network, cluster, Karpenter,
GPU capacity, storage and identities, model servers, benchmark Jobs. Deletion runs the other way.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.cluster import Cluster, ClusterArgs
from components.gpu_capacity import GpuCapacity, GpuCapacityArgs, GpuPoolSpec
from components.gpu_telemetry import DcgmExporter, DcgmExporterArgs
from components.image_mirror import ImageMirror, ImageMirrorArgs, mirror_transformation
from components.karpenter import Karpenter, KarpenterArgs
from components.labels import PART_OF
from components.network import Network, NetworkArgs
from components.pod_security import namespace_labels
from components.vllm_server import VllmServer, VllmServerArgs, replace_api_key
from components.weight_store import CompileCacheWriters, WeightStore, WeightStoreArgs, bucket_name
from stacks import serving
from stacks.account_checks import (check_caller, check_placeholders, check_gpu_ami, mirror_credential_arn,
                                   stack_zones)
from stacks.environment.bench import bench_jobs, bench_prices
from stacks.environment.fleet import fleet, fleet_spec, rolling_update
from stacks.environment.fleet import pool_of as fleet_pool
from stacks.environment.reach import network_policies, vpc_cidr_of
from stacks.environment.release import release_output
from stacks.environment.report import report_job
from stacks.environment.startup import image_cache_spec, streamer_jobs
from stacks.environment.weights import gpu_node_checks, weight_syncs
from stacks.job_code import bench_code
from stacks.settings import StackSettings
from stacks.versions import pins

NAMESPACE = "vllm"


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
            image_cache=image_cache_spec(pool),
            benchmarks=any(settings.server(t).pool == pool.name for t in settings.bench.targets),
        )
        for pool in settings.gpu_pools
    ]


def image_mirror(settings: StackSettings, account_id: str, provider: aws.Provider,
                 node_roles: dict[str, pulumi.Input[str]], opts: pulumi.ResourceOptions) -> ImageMirror | None:
    """The ECR pull-through cache for Docker Hub (cluster.imageMirror), and the stack transformation that
    points every container declared from here on at it (components/image_mirror.py)."""
    prefix = settings.cluster.mirror_prefix
    if prefix is None:
        return None
    credential_arn = mirror_credential_arn(settings, provider)
    mirror = ImageMirror("image-mirror", ImageMirrorArgs(
        region=settings.region, account_id=account_id, repository_prefix=prefix, credential_arn=credential_arn,
        node_role_names=node_roles), opts=opts)
    pulumi.runtime.register_stack_transformation(mirror_transformation(mirror.registry, mirror.prefix))
    return mirror


def build(settings: StackSettings) -> dict[str, object]:
    """Declare every resource of the environment; returns the stack outputs."""
    versions = pins()
    tags = stack_tags(settings)
    aws_provider = aws.Provider("aws", region=settings.region, default_tags=aws.ProviderDefaultTagsArgs(tags=tags))
    on_aws = pulumi.ResourceOptions(providers={"aws": aws_provider})
    caller = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=aws_provider))
    account_id = caller.account_id
    check_caller(settings, caller.arn)
    check_placeholders(settings, account_id)
    check_gpu_ami(settings, aws_provider)

    if settings.network.create_vpc:
        zones = stack_zones(settings, aws_provider)
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
            ecr_endpoints=settings.network.ecr_endpoints,
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
            private_access_security_groups=list(settings.cluster.private_access_security_groups),
            private_access_cidrs=list(settings.cluster.private_access_cidrs),
            admin_role_arns=list(settings.cluster.admin_role_arns),
            log_types=settings.cluster.enabled_log_types,
            log_retention_days=settings.cluster.log_retention_days,
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
            depends_on=[cluster.system_nodes, *cluster.addons.values()],
        ),
        opts=on_cluster,
    )

    image_mirror(settings, account_id, aws_provider, {"system-nodes": cluster.system_node_role.name,
                                                      "gpu-nodes": karpenter.node_role.name}, on_aws)

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
    # GPU utilisation, memory and power per node, read by the bench during each run
    DcgmExporter("dcgm-exporter", DcgmExporterArgs(chart_version=versions.dcgm_exporter_chart,
                                                   depends_on=list(karpenter.releases)), opts=on_cluster)

    # -- storage, identities, servers --------------------------------------------------------
    name_prefix = f"vllm-poc-{settings.stack}"
    model_ids = sorted({m for server in settings.servers for m in serving.server_model_ids(server)})
    store = WeightStore(
        "storage",
        WeightStoreArgs(
            name_prefix=name_prefix,
            account_id=account_id,
            region=settings.region,
            teardown=settings.storage.teardown,
            kms_key_arn=settings.storage.kms_key_arn,
            model_ids=model_ids,
            tags=tags,
            compile_cache_writers=CompileCacheWriters(
                cluster.arn, NAMESPACE, [s.name for s in settings.servers if s.compile_cache]),
        ),
        opts=on_aws,
    )
    weights_bucket = bucket_name(name_prefix, "weights", account_id, settings.region)
    namespace = k8s.core.v1.Namespace(
        "vllm",
        metadata={"name": NAMESPACE, "labels": {**PART_OF, **namespace_labels(settings.cluster.kubernetes_version)}},
        opts=on_cluster,
    )
    pod_identity_agent = cluster.pod_identity_agent
    syncs = weight_syncs(settings, NAMESPACE, cluster, store, namespace, weights_bucket, account_id, on_cluster)
    # After the weights, one node per pool with servers: a node that never comes fails `up` in minutes.
    node_checks = gpu_node_checks(settings, NAMESPACE, namespace, gpu.node_pools, syncs, on_cluster)

    servers: dict[str, VllmServer] = {}
    for server in settings.servers:
        pool = settings.pool(server.pool)
        spec = serving.build_serve_spec(
            server, pool.instance, serving.ModelUris.for_bucket(weights_bucket, server),
            region=settings.region, raid0=pool.use_raid0,
        )
        spec = replace_api_key(spec, settings.security.api_key_secret)
        spec = serving.with_compile_cache(spec, server, pool.instance, weights_bucket=weights_bucket,
                                          revisions=settings.weights.revisions, region=settings.region)
        spec = fleet_spec(settings, spec)
        node_pools = [gpu.node_pools[n] for n in (pool.name, f"{pool.name}-on-demand") if n in gpu.node_pools]
        servers[server.name] = VllmServer(
            f"server-{server.name}",
            VllmServerArgs(
                spec=spec,
                namespace=NAMESPACE,
                identity=serving.server_identity_args(
                    server, spec, cluster_name=cluster.name, cluster_arn=cluster.arn, account_id=account_id,
                    namespace=NAMESPACE, weights_bucket_arn=store.weights_bucket_arn,
                    kms_key_arn=settings.storage.kms_key_arn, depends_on=[namespace, pod_identity_agent],
                ),
                # Never on an empty prefix: the server waits for its models' syncs (or staging checks).
                depends_on=[namespace, *node_pools, store, node_checks[server.pool].job,
                            *(syncs[m].job for m in serving.server_model_ids(server))],
                # do-not-disrupt on a benchmark target and on its bench pod (same node, for as long as it
                # runs) blocks consolidation; drift is held by the GPU NodePools' budgets, which allow it
                # no node (components/gpu_capacity.py): past terminationGracePeriod drift would evict a
                # sweep despite the annotation. Spot reclaim and expiry still can (docs/operations.md).
                do_not_disrupt=server.name in settings.bench.targets,
                released_by_job=settings.bench.release_gpus and server.name in settings.bench.targets,
                # A new round is a new pod (a fresh server) even when the GPUs were never released.
                bench_round=settings.bench.round if server.name in settings.bench.targets else 1,
                autoscaled=fleet_pool(settings, server.name) is not None,
                rolling_update=rolling_update(settings, spec),
            ),
            opts=on_cluster,
        )

    # Run:ai streamer throughput per pool (gpuPools[].streamerJob), stored beside the bench results.
    code = bench_code()  # the bench package, read once: the streamer, sweep, start-up and report Jobs mount it
    streamer_results = streamer_jobs(
        settings, image=versions.vllm_image, code=code, namespace=NAMESPACE, weights_bucket=weights_bucket,
        store=store, cluster=cluster, account_id=account_id, depends_on=[namespace, pod_identity_agent],
        opts=on_cluster, model_waits={model: sync.job for model, sync in syncs.items()},
    )

    # -- benchmark ----------------------------------------------------------------------------
    bench = bench_jobs(settings, servers, namespace_name=NAMESPACE, namespace=namespace, cluster=cluster,
                       store=store, account_id=account_id, weights_bucket=weights_bucket, code=code,
                       opts=on_cluster)
    # The answer: report, plan (and compare) from those sweeps, written to S3 by a Job that waits for them.
    report, report_jobs = report_job(settings, bench.prefixes, bench.earlier, namespace_name=NAMESPACE,
                                     namespace=namespace, cluster=cluster, store=store, account_id=account_id,
                                     code=code, aws_provider=aws_provider, bench_jobs=bench.jobs,
                                     servers=servers, weights_bucket=weights_bucket, bench_access=bench.access,
                                     opts=on_cluster)
    # The GPUs go back once every Job that uses a server has ended (created after those Jobs).
    for target in bench.sweep_jobs if bench.release else []:
        bench.release.release_after(target, [*bench.sweep_jobs[target], *report_jobs])

    # -- network reach --------------------------------------------------------------------------
    network_policies(settings, servers, namespace_name=NAMESPACE, namespace=namespace, aws_provider=aws_provider,
                     opts=on_cluster)
    # Autoscaled pools and the SLO's metrics and alerts (vllm-poc:fleet)
    fleet_outputs = fleet(settings, {name: s.spec for name, s in servers.items()}, namespace=NAMESPACE,
                          vpc_cidr=vpc_cidr_of(settings, aws_provider) if settings.fleet else "",
                          depends_on=[namespace, *(s.deployment for s in servers.values())], opts=on_cluster)

    return {
        "region": settings.region,
        "clusterName": cluster.name,
        "kubeconfig": cluster.kubeconfig,
        "nodePools": sorted(gpu.node_pools),
        "karpenterInterruptionQueue": karpenter.queue.name,
        "weightsBucket": store.weights_bucket_name,
        "resultsBucket": store.results_bucket_name,
        "modelUris": store.model_uris,
        "weightSyncJobs": {model: sync.job_name for model, sync in syncs.items()},
        "servers": {name: s.url for name, s in servers.items()},
        # what each server's spec says beside its flags (fallbacks, sleep mode, loader basis), for the reviewer
        **({"serverNotes": notes} if (notes := {name: list(s.notes) for name, s in servers.items() if s.notes}) else {}),
        "benchResults": bench.results,
        "streamerResults": streamer_results,
        **({"report": report} if report else {}),
        "gpuRelease": release_output(settings, {name: bench_prices(settings, name, s.spec) for name, s in servers.items()},
                                     bench.release),
        **({"fleet": fleet_outputs} if fleet_outputs else {}),
    }
