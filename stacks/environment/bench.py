"""The benchmark of an environment: per benchmarked server (bench.targets) its start-up record and its
sweep Job, with the identity, prompt set and RBAC they share, and the hash that names each sweep's results.

A sweep's results prefix, runs/<stack>/<server>/<hash>/, is named by `bench_config_hash`: what shapes the
numbers (hardware, the server's image, flags and env, the sweep settings, the code the Jobs run and the
prompt set). Kept out of the composition (stacks/environment/__init__.py) so that it reads top to bottom;
it calls `bench_jobs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from bench.common import workloads as bench_workloads
from components.bench_job import BenchJob, BenchJobArgs, BenchNodeAccess, BenchPromptSet
from components.cluster import Cluster
from components.labels import PART_OF
from components.release_job import GpuRelease
from components.vllm_server import ServeSpec, VllmServer, selector_labels
from components.weight_store import WeightStore, model_prefix, results_prefix
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs, bench_statements
from stacks import variants
from stacks.environment.release import gpu_release
from stacks.environment.startup import startup_job, startup_reader_rbac
from stacks.job_code import SWEEP_MODULE, measured_code, module_code
from stacks.settings import BenchSettings, StackSettings

SERVICE_ACCOUNT = "vllm-bench"


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


@dataclass
class Benchmark:
    """What the rest of the environment needs of the benchmark; empty without bench.targets."""

    results: dict[str, pulumi.Output[str]] = field(default_factory=dict)  # server -> its sweep's s3:// folder
    prefixes: dict[str, str] = field(default_factory=dict)  # server -> runs/<stack>/<server>/<hash>/
    earlier: dict[str, list[str]] = field(default_factory=dict)  # server -> its earlier rounds' prefixes
    jobs: list[pulumi.Resource] = field(default_factory=list)  # the sweep Jobs
    sweep_jobs: dict[str, list[pulumi.Resource]] = field(default_factory=dict)  # server -> start-up and sweep Jobs
    release: GpuRelease | None = None  # the wake and release Jobs (bench.releaseGpus)
    access: list[pulumi.Resource] = field(default_factory=list)  # the bench identity's association and account


def bench_jobs(settings: StackSettings, servers: dict[str, VllmServer], *, namespace_name: str,
               namespace: k8s.core.v1.Namespace, cluster: Cluster, store: WeightStore, account_id: str,
               weights_bucket: str, code: dict[str, str], opts: pulumi.ResourceOptions) -> Benchmark:
    """The benchmark's resources, after the servers they measure; each sweep Job after its server's start-up
    record, which waits for the server (and, with bench.releaseGpus, for its wake Job). `code`: the bench
    package (stacks.job_code.bench_code)."""
    if not settings.bench.targets:
        return Benchmark()
    results: dict[str, pulumi.Output[str]] = {}
    jobs: list[pulumi.Resource] = []
    sweep_jobs: dict[str, list[pulumi.Resource]] = {}
    bench_identity = WorkloadIdentity(
        "bench-identity",
        WorkloadIdentityArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            account_id=account_id,
            namespace=namespace_name,
            service_account=SERVICE_ACCOUNT,
            statements=bench_statements(
                store.weights_bucket_arn,
                sorted({settings.server(t).profile.hf_id for t in settings.bench.targets}),
                store.results_bucket_arn,
                results_prefix(settings.stack),
                settings.storage.kms_key_arn,
            ),
            labels={"app.kubernetes.io/name": "vllm-bench", **PART_OF},
            depends_on=[namespace, cluster.pod_identity_agent],
        ),
        opts=opts,
    )
    access = [bench_identity.association, bench_identity.service_account]
    BenchNodeAccess("bench-node-access", namespace_name, SERVICE_ACCOUNT,
                    labels={"app.kubernetes.io/name": "vllm-bench"}, depends_on=[namespace],
                    opts=opts)
    prompt_files = bench_prompts()
    prompts = BenchPromptSet("bench-prompts", namespace_name, prompt_files, depends_on=[namespace], opts=opts)
    reader = startup_reader_rbac(namespace_name, SERVICE_ACCOUNT, opts)
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
    release = gpu_release(settings, servers, hashes, prefixes, earlier, namespace=namespace_name, code=code,
                          depends_on=[namespace], opts=opts)
    for target in settings.bench.targets:
        server = servers[target]
        spec = server.spec
        config_hash = hashes[target]
        target_results = pulumi.Output.concat(
            "s3://", store.results_bucket_name, "/", results_prefix(settings.stack), f"{target}/{config_hash[:10]}/")
        # Start-up timeline (and sleep/wake) of the target's pods, before its sweep begins.
        recorded = startup_job(
            settings, target, server, namespace=namespace_name, service_account=SERVICE_ACCOUNT,
            results_uri=target_results, code=code, config_hash=config_hash, opts=opts,
            depends_on=[server.deployment, reader, bench_identity.association, bench_identity.service_account,
                        *([release.wake_jobs[target]] if release else [])])
        job = BenchJob(
            f"bench-{target}",
            BenchJobArgs(
                server=target,
                namespace=namespace_name,
                image=spec.image,
                service_account=SERVICE_ACCOUNT,
                base_url=server.url,
                served_model=spec.served_model_name,
                tokenizer_uri=f"s3://{weights_bucket}/{model_prefix(settings.server(target).profile.hf_id)}",
                results_uri=target_results,
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
            opts=opts,
        )
        results[target] = job.results_uri
        jobs.append(job.job)
        sweep_jobs[target] = [recorded.job, job.job]
    return Benchmark(results=results, prefixes=prefixes, earlier=earlier, jobs=jobs, sweep_jobs=sweep_jobs,
                     release=release, access=access)
