"""The GPU release of an environment (`bench.releaseGpus`): which Jobs use each benchmarked server,
the wake and release Jobs (components/release_job.py), and the stack output `gpuRelease`.

Kept out of the composition (stacks/environment/__init__.py) so that it reads top to bottom; it calls these.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components import bench_job, startup_job
from components.release_job import POD_LABELS as RELEASE_POD_LABELS
from components.release_job import GpuRelease, GpuReleaseArgs, ServerRelease
from stacks.job_code import module_code
from stacks.environment.report import report_job_names
from stacks.settings import StackSettings
from stacks.versions import pins

RELEASE_MODULE = "bench.run.release"


def server_jobs(target: str, config_hash: str, report_jobs: dict[str, list[str]]) -> list[str]:
    """Every Job that uses a benchmarked server: its start-up record and sweep, then the report Jobs
    that read its sweep (and the mixed-traffic check that runs on it)."""
    return [startup_job.job_name(target, config_hash), bench_job.job_name(target, config_hash),
            *report_jobs.get(target, [])]


def release_gpus(settings: StackSettings) -> bool:
    """Whether the stack has GPU release Jobs: bench.releaseGpus and at least one benchmarked server."""
    return settings.bench.release_gpus and bool(settings.bench.targets)


def gpu_release(settings: StackSettings, servers: dict[str, Any], hashes: dict[str, str],
                prefixes: dict[str, str], earlier: dict[str, list[str]], *, namespace: str, code: dict[str, str],
                depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions) -> GpuRelease | None:
    """The wake Jobs (now, before the sweeps) of a stack with bench.releaseGpus; None when off."""
    if not release_gpus(settings):
        return None
    report_jobs = report_job_names(settings, prefixes, namespace=namespace, code=code, earlier=earlier)
    plan = [
        ServerRelease(server=target, sweep_hash=hashes[target],
                      jobs=server_jobs(target, hashes[target], report_jobs),
                      replicas=servers[target].spec.replicas, wake_timeout_s=servers[target].spec.deploy_timeout_s,
                      depends_on=[servers[target].deployment])
        for target in settings.bench.targets
    ]
    return GpuRelease("gpu-release", GpuReleaseArgs(namespace=namespace, image=pins().weight_sync_image,
                                                    code=module_code(code, RELEASE_MODULE), servers=plan,
                                                    depends_on=depends_on), opts=opts)


def hourly_usd(prices: dict[str, float]) -> float:
    """What a server's GPUs cost an hour at most (its dearest capacity type), 0 where no price is known."""
    return max(prices.values(), default=0.0)


def release_output(settings: StackSettings, prices: dict[str, dict[str, float]],
                   release: GpuRelease | None) -> dict[str, Any]:
    """The stack output `gpuRelease`: each server's fate and the GPU cost an hour while measuring and
    after the release (catalog or configured prices; the cluster's own nodes are not counted)."""
    fates: dict[str, str] = {}
    for server in settings.servers:
        if release is not None and server.name in release.wake_jobs:
            fates[server.name] = "released once its start-up record, sweep and report are done"
        elif server.name in settings.bench.targets:
            fates[server.name] = "kept running (bench.releaseGpus is false)"
        else:
            fates[server.name] = "kept running (not benchmarked)"
    running = sum(hourly_usd(prices[name]) for name in prices)
    kept = sum(hourly_usd(prices[name]) for name, fate in fates.items() if fate.startswith("kept"))
    return {"servers": fates, "gpuUsdPerHourWhileMeasuring": round(running, 2),
            "gpuUsdPerHourAfterRelease": round(kept, 2)}
