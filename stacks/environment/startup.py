"""Start-up parts of the environment: the per-pool streamer Jobs and the image-cache volume.

Kept out of the composition (stacks/environment/__init__.py) so that it reads top to bottom; it calls these.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi

from components.image_cache import ImageCacheSpec
from components.labels import PART_OF
from components.startup_job import StartupJob, StartupJobArgs, StartupReaderRbac
from components.streamer_job import StreamerJob, StreamerJobArgs, streamer_statements
from components.vllm_server import selector_labels
from components.weight_store import model_prefix, results_prefix
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs
from stacks.job_code import TIMELINE_MODULE, module_code
from stacks.serving import MODELS
from stacks.settings import GpuPoolSettings, StackSettings
from stacks.settings.startup import streamer_model

STREAMER_SERVICE_ACCOUNT = "vllm-streamer"
# The module each Job runs (`python -m <module>`); it mounts that module and what it imports.
STREAMER_MODULE = "bench.startup.streamer"


def image_cache_spec(pool: GpuPoolSettings) -> ImageCacheSpec | None:
    cache = pool.image_cache
    if cache is None:
        return None
    return ImageCacheSpec(cache.snapshot_id, cache.volume_gib, cache.initialization_rate)


def streamer_prefix(stack: str) -> str:
    return f"{results_prefix(stack)}streamer/"


def streamer_plan(settings: StackSettings) -> dict[str, str]:
    """pool name -> model profile key, for the pools whose streamerJob is on."""
    plan = {}
    for pool in settings.gpu_pools:
        if pool.streamer_job is not None:
            model = streamer_model(pool.streamer_job, [s.model for s in settings.servers if s.pool == pool.name])
            if model is not None:
                plan[pool.name] = model
    return plan


def streamer_hash(pool: GpuPoolSettings, model: str, image: str, code: dict[str, str]) -> str:
    payload = {
        "pool": pool.name, "instance": pool.instance_type, "model": MODELS[model].hf_id, "image": image,
        "job": pool.streamer_job.model_dump(mode="json"),
        "code": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(code.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def streamer_jobs(settings: StackSettings, *, image: str, code: dict[str, str], namespace: str,
                  weights_bucket: str, store: Any, cluster: Any, account_id: Any,
                  depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions,
                  model_waits: dict[str, pulumi.Resource] | None = None) -> dict[str, pulumi.Output[str]]:
    """One StreamerJob per pool with streamerJob set; returns pool -> results URI.

    `model_waits` maps a Hugging Face id to what stages its weights (the weight-sync Job): the
    streamer Job starts after it, never on an empty prefix."""
    plan = streamer_plan(settings)
    if not plan:
        return {}
    prefixes = sorted({model_prefix(MODELS[m].hf_id) for m in plan.values()})
    identity = WorkloadIdentity(
        "streamer-identity",
        WorkloadIdentityArgs(
            cluster_name=cluster.name, cluster_arn=cluster.arn, account_id=account_id, namespace=namespace,
            service_account=STREAMER_SERVICE_ACCOUNT,
            statements=streamer_statements(store.weights_bucket_arn, prefixes, store.results_bucket_arn,
                                           streamer_prefix(settings.stack), settings.storage.kms_key_arn),
            labels={"app.kubernetes.io/name": "vllm-streamer", **PART_OF},
            depends_on=depends_on,
        ),
        opts=opts,
    )
    results: dict[str, pulumi.Output[str]] = {}
    code = module_code(code, STREAMER_MODULE)
    for pool_name, model in plan.items():
        pool = settings.pool(pool_name)
        job_settings = pool.streamer_job
        config_hash = streamer_hash(pool, model, image, code)
        job = StreamerJob(
            f"streamer-{pool_name}",
            StreamerJobArgs(
                pool=pool_name, instance_type=pool.instance_type, namespace=namespace, image=image,
                service_account=STREAMER_SERVICE_ACCOUNT,
                model_uri=f"s3://{weights_bucket}/{model_prefix(MODELS[model].hf_id)}",
                results_uri=pulumi.Output.concat("s3://", store.results_bucket_name, "/",
                                                 streamer_prefix(settings.stack), f"{pool_name}/{config_hash[:10]}/"),
                concurrencies=list(job_settings.concurrencies), memory_limit_gib=list(job_settings.memory_limit_gib),
                repeats=job_settings.repeats, memory_request_gib=job_settings.memory_request_gib(),
                region=settings.region, code=code, config_hash=config_hash,
                depends_on=[store, identity.association, identity.service_account,
                            *([model_waits[MODELS[model].hf_id]] if MODELS[model].hf_id in (model_waits or {}) else [])],
            ),
            opts=opts,
        )
        results[pool_name] = job.results_uri
    return results


def startup_reader_rbac(namespace: str, service_account: str, opts: pulumi.ResourceOptions) -> StartupReaderRbac:
    return StartupReaderRbac("startup-reader", namespace, service_account, opts=opts)


def startup_job(settings: StackSettings, target: str, server: Any, *, namespace: str, service_account: str,
                results_uri: pulumi.Input[str], code: dict[str, str], config_hash: str,
                depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions) -> StartupJob:
    """The timeline of a bench target's pods, recorded before its sweep starts."""
    spec = server.spec
    sleep = settings.server(target).sleep_mode
    return StartupJob(
        f"startup-{target}",
        StartupJobArgs(
            server=target, namespace=namespace, image=spec.image, service_account=service_account,
            server_pod_labels=selector_labels(spec), results_uri=results_uri, region=settings.region,
            code=module_code(code, TIMELINE_MODULE), config_hash=config_hash,
            sleep_wake_port=spec.port if sleep else None,
            served_model=spec.served_model_name if sleep else None, depends_on=depends_on,
        ),
        opts=opts,
    )
