"""One environment of the PoC, composed from validated settings.

Read top to bottom, this is the order things depend on each other: network, cluster, Karpenter,
GPU capacity, storage and identities, model servers, benchmark Jobs. Deletion runs the other way.
"""

from __future__ import annotations

import hashlib
import json

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from bench.common import workloads as bench_workloads
from components.bench_job import BenchJob, BenchJobArgs, BenchNodeAccess, BenchPromptSet
from components.cluster import Cluster, ClusterArgs
from components.gpu_capacity import GpuCapacity, GpuCapacityArgs, GpuPoolSpec
from components.gpu_telemetry import DcgmExporter, DcgmExporterArgs
from components.karpenter import Karpenter, KarpenterArgs
from components.mix_check_job import pod_labels as mixcheck_pod_labels
from components.image_mirror import ImageMirror, ImageMirrorArgs, mirror_transformation
from components.labels import PART_OF
from components.network import Network, NetworkArgs
from components.network_policy import BenchReach, NetworkPolicies, NetworkPoliciesArgs, ServerReach
from components.pod_security import namespace_labels
from components.vllm_server import ServeSpec, VllmServer, VllmServerArgs, replace_api_key, selector_labels
from components.weight_store import (CompileCacheWriters, WeightStore, WeightStoreArgs, bucket_name, model_prefix,
                                     results_prefix)
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs, bench_statements
from stacks import s3_ranges, serving, variants
from stacks.job_code import SWEEP_MODULE, bench_code, measured_code, module_code
from stacks.account_checks import (check_caller, check_placeholders, check_gpu_ami, mirror_credential_arn,
                                   stack_zones)
from stacks.release_stack import RELEASE_POD_LABELS, gpu_release, release_gpus, release_output
from stacks.report_stack import report_job
from stacks.settings import BenchSettings, StackSettings
from stacks.fleet_stack import fleet, fleet_spec, rolling_update
from stacks.fleet_stack import pool_of as fleet_pool
from stacks.startup_stack import image_cache_spec, startup_job, startup_reader_rbac, streamer_jobs
from stacks.versions import pins
from stacks.weight_plan import gpu_node_checks, weight_syncs

NAMESPACE = "vllm"
BENCH_SERVICE_ACCOUNT = "vllm-bench"


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


def bench_prompts() -> dict[str, str]:
    """The data files the scenarios read (the Korean prompt set): one ConfigMap per stack, projected
    into the package's data/ folder in every bench Job."""
    return bench_workloads.data_files()


def bench_config_hash(spec: ServeSpec, bench: BenchSettings, code: dict[str, str],
                      hardware: dict[str, object] | None = None, *, bench_round: int | None = None) -> str:
    """What shapes the numbers: the hardware (instance type, GPUs, capacity types), the server's
    image, flags and env, the sweep settings, and the code that runs in the sweep's Jobs (the import
    closures of `bench.run.sweep` and `bench.startup.collect`, stacks/job_code.py) with the prompt
    set. A server moved to another pool gets a new Job and a new results prefix, so `--resume` never
    keeps another machine's results; an edit to the report's pages, the demo or the docs renames
    nothing. A round past the first (bench.round) is one more sweep of the same configuration: a new
    hash, while round 1 hashes as it did before rounds existed, so no stack's first sweep is renamed."""
    bench_round = bench.round if bench_round is None else bench_round
    payload = {
        "hardware": hardware or {},
        "server": {"image": spec.image, "args": list(spec.args), "env": spec.env, "gpus": spec.gpus},
        # The report Job's settings and the GPU release are not the sweep's: changing them never re-runs one.
        "bench": bench.model_dump(mode="json", exclude={"compare", "release_gpus", "round"}),
        "code": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in code.items()},
    }
    if bench_round > 1:
        payload["round"] = bench_round
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def pool_capacity_types(settings: StackSettings, server_name: str) -> list[str]:
    """Capacity types a server's node may have: its pool's, plus on-demand with the fallback pool."""
    pool = settings.pool(settings.server(server_name).pool)
    types = list(pool.capacity_types)
    if pool.on_demand_fallback and "on-demand" not in types:
        types.append("on-demand")
    return types


def bench_hardware(settings: StackSettings, server_name: str, spec: ServeSpec) -> dict[str, object]:
    pool = settings.pool(settings.server(server_name).pool)
    return {"instance_type": pool.instance.name, "gpus": spec.gpus, "image": spec.image,
            "capacity_types": pool_capacity_types(settings, server_name)}


def bench_prices(settings: StackSettings, server_name: str, spec: ServeSpec) -> dict[str, float]:
    """USD per hour of the server's GPUs per capacity type: config (bench.pricePerHour), else catalog."""
    pool = settings.pool(settings.server(server_name).pool)
    instance = pool.instance
    types = pool_capacity_types(settings, server_name)
    catalog_prices = {"on-demand": instance.on_demand_usd_hour, "spot": instance.spot_usd_hour}
    configured = settings.bench.price_per_hour.get(server_name)
    if isinstance(configured, (int, float)):
        configured = {t: float(configured) for t in types}
    prices = {t: (configured or {}).get(t) or catalog_prices.get(t) for t in types}
    share = spec.gpus / instance.gpus
    return {t: round(p * share, 4) for t, p in prices.items() if p}


def bench_sweep_args(settings: StackSettings, server_name: str, spec: ServeSpec) -> list[str]:
    bench = settings.bench
    instance = settings.pool(settings.server(server_name).pool).instance
    prices = bench_prices(settings, server_name, spec)
    args = [
        "--scenarios", ",".join(bench.scenarios),
        "--concurrencies", ",".join(map(str, bench.concurrencies)),
        "--window-s", f"{bench.window_s:g}",
        "--min-prompts", str(bench.min_prompts),
        "--budget-minutes", f"{bench.budget_minutes:g}",
        "--seed", str(bench.seed),
        "--label", f"{settings.stack}/{server_name}",
        "--instance-type", instance.name,
        "--gpus", str(spec.gpus),
        "--server-args", json.dumps(list(spec.args)),
        "--image", spec.image,
        "--capacity-types", ",".join(pool_capacity_types(settings, server_name)),
    ]
    if prices:
        args += ["--prices", ",".join(f"{t}={p:g}" for t, p in sorted(prices.items()))]
    for scenario, values in sorted(bench.scenario_concurrencies.items()):
        args += ["--scenario-concurrencies", f"{scenario}={','.join(map(str, sorted(values)))}"]
    server = settings.server(server_name)
    if server.variant_of is not None:
        args += ["--variant", json.dumps({"base": server.variant_of.base, "cross": server.variant_of.cross,
                                          "settings": {k: getattr(server, variants.snake(k))
                                                       for k in server.variant_of.settings}},
                                         sort_keys=True)]
    if bench.capacity_search:
        args.append("--capacity-search")
    return args


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


BENCH_POD_NAME = "vllm-bench"
STARTUP_POD_NAME = "vllm-startup"


def vpc_cidr_of(settings: StackSettings, aws_provider: aws.Provider) -> str:
    if settings.network.create_vpc:
        return settings.network.vpc_cidr
    return aws.ec2.get_vpc(id=settings.network.vpc_id, opts=pulumi.InvokeOptions(provider=aws_provider)).cidr_block


def network_policies(settings: StackSettings, servers: dict[str, VllmServer], namespace: k8s.core.v1.Namespace,
                     aws_provider: aws.Provider, opts: pulumi.ResourceOptions) -> NetworkPolicies:
    """Default deny plus what each workload needs (components/network_policy.py)."""
    invoke = pulumi.InvokeOptions(provider=aws_provider)
    vpc_cidr = vpc_cidr_of(settings, aws_provider)
    # The AWS-managed prefix list the S3 gateway endpoint routes to (read at deploy time; a
    # NetworkPolicy takes CIDRs, and `pulumi up` refreshes them; stacks/s3_ranges.py notices drift).
    prefix_list = s3_ranges.prefix_list_name(settings.region)
    s3_cidrs = aws.ec2.get_prefix_list(name=prefix_list, opts=invoke).cidr_blocks
    security = settings.security
    compare = settings.bench.compare
    mixed_traffic_server = compare.candidate if compare is not None and compare.mixed_traffic else None
    reach = [
        ServerReach(
            name=name,
            pod_labels=selector_labels(server.spec),
            port=server.spec.port,
            client_namespaces=list(security.dev_endpoint_namespaces if settings.server(name).sleep_mode
                                   else security.client_namespaces),
            bench_pod_labels=({"app.kubernetes.io/name": BENCH_POD_NAME, "app.kubernetes.io/instance": name}
                              if name in settings.bench.targets else None),
            startup_pod_labels=({"app.kubernetes.io/name": STARTUP_POD_NAME, "app.kubernetes.io/instance": name}
                                if name in settings.bench.targets else None),
            mixcheck_pod_labels=mixcheck_pod_labels(name) if name == mixed_traffic_server else None,
        )
        for name, server in servers.items()
    ]
    benches = [
        BenchReach(
            name=target,
            pod_labels={"app.kubernetes.io/name": BENCH_POD_NAME, "app.kubernetes.io/instance": target},
            server_pod_labels=selector_labels(servers[target].spec),
            port=servers[target].spec.port,
            # the sweep reads its own node (capacity type, instance type) from the API server
            kubernetes_api=True,
        )
        for target in settings.bench.targets
    ] + [
        # The start-up Job: reads pods, events, nodes and NodeClaims; times /sleep and /wake_up.
        BenchReach(
            name=f"startup-{target}",
            pod_labels={"app.kubernetes.io/name": STARTUP_POD_NAME, "app.kubernetes.io/instance": target},
            server_pod_labels=selector_labels(servers[target].spec),
            port=servers[target].spec.port,
            kubernetes_api=True,
        )
        for target in settings.bench.targets
    ] + [
        # The mixed-traffic check: its server's API port, nothing more.
        BenchReach(
            name=f"mixcheck-{name}",
            pod_labels=mixcheck_pod_labels(name),
            server_pod_labels=selector_labels(servers[name].spec),
            port=servers[name].spec.port,
            telemetry=False,
        )
        for name in [mixed_traffic_server] if name
    ]
    return NetworkPolicies(
        "network-policies",
        NetworkPoliciesArgs(namespace=NAMESPACE, vpc_cidr=vpc_cidr, s3_cidrs=list(s3_cidrs or []),
                            s3_prefix_list=prefix_list,
                            ranges_parameter=s3_ranges.parameter_name(settings.cluster.name),
                            servers=reach, benches=benches, depends_on=[namespace],
                            api_clients={"gpu-release": dict(RELEASE_POD_LABELS)} if release_gpus(settings) else {}),
        opts=opts,
    )


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
    streamer_results = streamer_jobs(
        settings, image=versions.vllm_image, code=bench_code(), namespace=NAMESPACE, weights_bucket=weights_bucket,
        store=store, cluster=cluster, account_id=account_id, depends_on=[namespace, pod_identity_agent],
        opts=on_cluster, model_waits={model: sync.job for model, sync in syncs.items()},
    )

    # -- benchmark ----------------------------------------------------------------------------
    results: dict[str, pulumi.Output[str]] = {}
    prefixes: dict[str, str] = {}
    earlier: dict[str, list[str]] = {}
    bench_jobs: list[pulumi.Resource] = []
    sweep_jobs: dict[str, list[pulumi.Resource]] = {}
    release = None
    bench_access: list[pulumi.Resource] = []
    if settings.bench.targets:
        bench_identity = WorkloadIdentity(
            "bench-identity",
            WorkloadIdentityArgs(
                cluster_name=cluster.name,
                cluster_arn=cluster.arn,
                account_id=account_id,
                namespace=NAMESPACE,
                service_account=BENCH_SERVICE_ACCOUNT,
                statements=bench_statements(
                    store.weights_bucket_arn,
                    sorted({settings.server(t).profile.hf_id for t in settings.bench.targets}),
                    store.results_bucket_arn,
                    results_prefix(settings.stack),
                    settings.storage.kms_key_arn,
                ),
                labels={"app.kubernetes.io/name": "vllm-bench", **PART_OF},
                depends_on=[namespace, pod_identity_agent],
            ),
            opts=on_cluster,
        )
        bench_access = [bench_identity.association, bench_identity.service_account]
        BenchNodeAccess("bench-node-access", NAMESPACE, BENCH_SERVICE_ACCOUNT,
                        labels={"app.kubernetes.io/name": "vllm-bench"}, depends_on=[namespace],
                        opts=on_cluster)
        code = bench_code()
        prompt_files = bench_prompts()
        prompts = BenchPromptSet("bench-prompts", NAMESPACE, prompt_files, depends_on=[namespace], opts=on_cluster)
        reader = startup_reader_rbac(NAMESPACE, BENCH_SERVICE_ACCOUNT, on_cluster)
        # The prompt set is hashed with the code the sweep runs: a changed prompt file starts new sweeps.
        measured = {**measured_code(code), **{f"data/{k}": v for k, v in prompt_files.items()}}
        hashes = {target: bench_config_hash(servers[target].spec, settings.bench, measured,
                                            bench_hardware(settings, target, servers[target].spec))
                  for target in settings.bench.targets}
        prefixes = {target: f"{results_prefix(settings.stack)}{target}/{h[:10]}/" for target, h in hashes.items()}
        # Rounds 1..N-1 of the same configuration: the report pools those found in S3 (bench.round).
        earlier = {target: [f"{results_prefix(settings.stack)}{target}/{h[:10]}/" for h in (
            bench_config_hash(servers[target].spec, settings.bench, measured,
                              bench_hardware(settings, target, servers[target].spec), bench_round=k)
            for k in range(1, settings.bench.round))] for target in settings.bench.targets}
        # A server released after an earlier sweep is woken before a new one (bench.releaseGpus).
        release = gpu_release(settings, servers, hashes, prefixes, earlier, namespace=NAMESPACE, code=code,
                              depends_on=[namespace], opts=on_cluster)
        for target in settings.bench.targets:
            server = servers[target]
            spec = server.spec
            config_hash = hashes[target]
            target_results = pulumi.Output.concat(
                "s3://", store.results_bucket_name, "/", results_prefix(settings.stack), f"{target}/{config_hash[:10]}/")
            # Start-up timeline (and sleep/wake) of the target's pods, before its sweep begins.
            recorded = startup_job(
                settings, target, server, namespace=NAMESPACE, service_account=BENCH_SERVICE_ACCOUNT,
                results_uri=target_results, code=code, config_hash=config_hash, opts=on_cluster,
                depends_on=[server.deployment, reader, bench_identity.association, bench_identity.service_account,
                            *([release.wake_jobs[target]] if release else [])])
            job = BenchJob(
                f"bench-{target}",
                BenchJobArgs(
                    server=target,
                    namespace=NAMESPACE,
                    image=spec.image,
                    service_account=BENCH_SERVICE_ACCOUNT,
                    base_url=server.url,
                    served_model=spec.served_model_name,
                    tokenizer_uri=f"s3://{weights_bucket}/{model_prefix(settings.server(target).profile.hf_id)}",
                    results_uri=pulumi.Output.concat(
                        "s3://", store.results_bucket_name, "/", results_prefix(settings.stack),
                        f"{target}/{config_hash[:10]}/"),
                    sweep_args=bench_sweep_args(settings, target, spec),
                    server_pod_labels=selector_labels(spec),
                    kubernetes_api=True,
                    region=settings.region,
                    code=module_code(code, SWEEP_MODULE),
                    config_hash=config_hash,
                    prompts=prompts,
                    api_key_secret=settings.security.api_key_secret,
                    depends_on=[server.deployment, bench_identity.association, bench_identity.service_account,
                                recorded.job],
                ),
                opts=on_cluster,
            )
            results[target] = job.results_uri
            bench_jobs.append(job.job)
            sweep_jobs[target] = [recorded.job, job.job]

    # The answer: report, plan (and compare) from those sweeps, written to S3 by a Job that waits for them.
    report, report_jobs = report_job(settings, prefixes, earlier, namespace_name=NAMESPACE, namespace=namespace,
                                     cluster=cluster, store=store, account_id=account_id, code=bench_code(),
                                     aws_provider=aws_provider, bench_jobs=bench_jobs, servers=servers,
                                     weights_bucket=weights_bucket, bench_access=bench_access, opts=on_cluster)
    # The GPUs go back once every Job that uses a server has ended (created after those Jobs).
    for target in sweep_jobs if release else []:
        release.release_after(target, [*sweep_jobs[target], *report_jobs])

    # -- network reach --------------------------------------------------------------------------
    network_policies(settings, servers, namespace, aws_provider, on_cluster)
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
        "benchResults": results,
        "streamerResults": streamer_results,
        **({"report": report} if report else {}),
        "gpuRelease": release_output(settings, {name: bench_prices(settings, name, s.spec) for name, s in servers.items()},
                                     release),
        **({"fleet": fleet_outputs} if fleet_outputs else {}),
    }
