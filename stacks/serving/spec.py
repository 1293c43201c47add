"""The exact `vllm serve` spec of one server on one instance type: `build_serve_spec` turns (server
settings, the pool's instance type, the model's S3 URIs) into the argument list, env, resource
requests, volumes and probe budgets; then the compile cache and the server's own IAM role.
`components/vllm_server.py` only renders that spec as Kubernetes objects.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pulumi

from components import compile_cache as cc
from components.vllm_server import Probe, ServeSpec, selector_labels
from components.weight_store import cache_prefix
from components.workload_identity import WorkloadIdentityArgs, server_statements
from stacks import catalog, job_code
from stacks.serving.profiles import LOADER_PROFILES, MTP_DRAFT, loader_profile
from stacks.serving.server import (MEASURED_KV_CACHE_DTYPES, MIN_GPU_MEMORY_UTILIZATION, ModelUris, ServerSettings,
                                   measures_kv_cache_dtype, server_model_ids, server_model_prefixes)
from stacks.serving.sizing import (CACHE_GIB_RAID0, CACHE_GIB_ROOT, DEPLOY_TIMEOUT_S, ENGINE_READY_TIMEOUT_S,
                                   EPHEMERAL_GIB_RAID0, EPHEMERAL_GIB_ROOT, HTTP_KEEP_ALIVE_S, PROCESS_OVERHEAD_GIB,
                                   SHM_GIB_PER_RANK, SLEEP_MODE_EXTRA_KV_GIB, STARTUP_BUDGET_S, per_gpu,
                                   sleep_mode_utilization)

GIB = 1024**3
PORT = 8000
CACHE_MOUNT = "/var/cache/vllm"


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def loader_config(server: ServerSettings, instance: catalog.InstanceType) -> dict[str, int]:
    """`--model-loader-extra-config` for runai_streamer, per loading process.

    Without distributed streaming each tensor-parallel rank streams the checkpoint itself, so the
    ranks of one pod share the node's NIC (concurrency split between them) and each keeps its own
    buffer (capped to what fits beside the engine in the rank's share of host memory).
    """
    profile = loader_profile(instance)
    tp = server.tensor_parallel_size
    # The PoC's per-pod figure stays for TP=1; TP ranks of one pod split it.
    concurrency = max(16, profile.concurrency // tp)
    _, memory_per_gpu = per_gpu(instance)
    memory_gib = max(1, min(profile.memory_limit_gib, memory_per_gpu - PROCESS_OVERHEAD_GIB))
    return {"concurrency": concurrency, "memory_limit": memory_gib * GIB}


def speculative_config(server: ServerSettings, uris: ModelUris) -> dict | None:
    if not server.uses_speculative:
        return None
    if not uris.draft:
        raise ValueError(f"server {server.name!r} uses MTP speculative decoding but no draft URI was given")
    return {"method": MTP_DRAFT.method, "model": uris.draft,
            "num_speculative_tokens": server.num_speculative_tokens}


def variant_labels(server: ServerSettings) -> dict[str, str]:
    """Labels that say a server is a variant, of which base, changing which settings."""
    if server.variant_of is None:
        return {}
    return {"vllm-poc/variant-of": server.variant_of.base,
            "vllm-poc/variant": ".".join(server.variant_of.settings)}


def build_serve_spec(
    server: ServerSettings,
    instance: catalog.InstanceType,
    uris: ModelUris,
    *,
    region: str,
    raid0: bool | None = None,
) -> ServeSpec:
    """The exact `vllm serve` invocation and pod shape of one server on one instance type.

    `raid0` says whether the pool stripes instance-store NVMe under /mnt/k8s-disks/0 (default: the
    instance has instance store). Call `check_server` first: this function assumes a valid pairing.
    """
    profile, traffic = server.profile, server.traffic
    raid0 = instance.has_instance_store if raid0 is None else raid0
    tp = server.tensor_parallel_size

    args: list[str] = [
        uris.model,
        "--served-model-name", profile.hf_id,
        "--host", "0.0.0.0",
        "--port", str(PORT),
        # Direct S3 streaming: 29-32 s vs 149 s through Mountpoint FUSE (PoC startup A/B test).
        "--load-format", "runai_streamer",
        "--model-loader-extra-config", _json(loader_config(server, instance)),
        "--tensor-parallel-size", str(tp),
        "--max-model-len", str(server.max_model_len),
        "--max-num-seqs", str(server.max_num_seqs),
        "--gpu-memory-utilization", f"{server.effective_gpu_memory_utilization:.2f}",
        "--kv-cache-dtype", server.effective_kv_cache_dtype,
        # On by default for Gemma 4, stated so a later default change cannot flip it: +40.5%
        # throughput and 2.1x lower TTFT p99 with shared prefixes (public Gemma-4 measurement).
        "--enable-prefix-caching",
        "--tool-call-parser", "gemma4",
        "--reasoning-parser", "gemma4",
        "--enable-auto-tool-choice",
    ]
    spec_config = speculative_config(server, uris)
    if spec_config is not None:
        args += ["--speculative-config", _json(spec_config)]
    if traffic.priority_scheduling:
        args += ["--scheduling-policy", "priority"]
    if traffic.text_only:
        args += ["--limit-mm-per-prompt", _json({"image": 0})]
    if server.sleep_mode:
        args += ["--enable-sleep-mode"]
    args += list(server.extra_args)

    env = {
        # EKS Pod Identity injects credentials into the pod but not the region.
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        # Compile and asset caches on the cache volume survive container restarts: torch.compile
        # 73 s -> 8.5 s (PoC). VLLM_ASSETS_CACHE does not follow VLLM_CACHE_ROOT, so both are set.
        "VLLM_CACHE_ROOT": CACHE_MOUNT,
        "VLLM_ASSETS_CACHE": f"{CACHE_MOUNT}/assets",
        "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
        # The 600 s default is shorter than a cold TP compile after a slow load.
        "VLLM_ENGINE_READY_TIMEOUT_S": str(ENGINE_READY_TIMEOUT_S),
        # An idle connection outlives its clients' pools (see HTTP_KEEP_ALIVE_S).
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(HTTP_KEEP_ALIVE_S),
        # Weights, config and tokenizer all come from S3; nothing may fall back to the Hub.
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if server.sleep_mode:
        # vLLM routes /sleep and /wake_up only when its development mode is on.
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.update(server.env)

    cpu_per_gpu, memory_per_gpu = per_gpu(instance)
    memory_gib = memory_per_gpu * tp
    requests = {
        "cpu": str(cpu_per_gpu * tp),
        "memory": f"{memory_gib}Gi",
        "ephemeral-storage": f"{EPHEMERAL_GIB_RAID0 if raid0 else EPHEMERAL_GIB_ROOT}Gi",
        "nvidia.com/gpu": str(tp),
    }
    # No CPU limit (throttling the tokenizer and scheduler hurts TTFT); memory limit = request so a
    # leak is contained to the pod; GPUs as extended resources need limit = request.
    limits = {"memory": requests["memory"], "nvidia.com/gpu": str(tp)}

    notes: list[str] = []
    fallback = profile.fallback_notes.get(instance.gpu_name)
    if fallback:
        notes.append(fallback)
    if server.sleep_mode:
        notes.append("sleep mode exposes vLLM's development endpoints (/sleep, /wake_up, "
                     "/collective_rpc, ...): keep the Service cluster-internal.")
        utilization = server.effective_gpu_memory_utilization
        lower = sleep_mode_utilization(utilization, instance.gpu_memory_gib)
        notes.append(f"sleep mode: vLLM 0.26's start-up memory profile can count negative non-torch memory and size "
                     f"the KV cache past gpuMemoryUtilization {utilization:.2f}: at full size on an H100 it came out "
                     f"{SLEEP_MODE_EXTRA_KV_GIB:g} GiB larger than without sleep mode, and the pods that started "
                     "from the compile cache ran out of GPU memory under S2_summary at c=16, where pods without "
                     f"sleep mode served c=64; {instance.name} leaves "
                     f"{instance.gpu_memory_gib * (1 - utilization):.1f} GiB outside that share"
                     + (f"; gpuMemoryUtilization {lower:.2f} keeps the KV cache about the size it has without sleep "
                        "mode" if lower > MIN_GPU_MEMORY_UTILIZATION else "") +
                     ". The start-up record warns with this pod's figure (bench startup).")
    if server.uses_speculative and server.num_speculative_tokens != 4:
        notes.append(f"num_speculative_tokens {server.num_speculative_tokens}: the PoC measured 4; "
                     "4 vs 8 with fp8 KV at high concurrency is an open sweep.")
    if measures_kv_cache_dtype(server.variant_of) and server.effective_kv_cache_dtype in MEASURED_KV_CACHE_DTYPES \
            and server.effective_kv_cache_dtype not in profile.allowed_kv_cache_dtypes:
        notes.append(f"measurement variant of {server.variant_of.base}: {server.model} with a "
                     f"{server.effective_kv_cache_dtype} KV cache (about half the KV tokens, as the PoC measured); "
                     "not a configuration to serve with.")
    loader = loader_profile(instance)
    if instance.name not in LOADER_PROFILES:
        notes.append(f"{instance.name}: Run:ai loader settings {loader.basis}.")

    return ServeSpec(
        name=server.name,
        pool=server.pool,
        replicas=server.replicas,
        labels={"vllm-poc/model": server.model, "vllm-poc/traffic-class": server.traffic_class,
                **variant_labels(server)},
        image=server.image,
        # Explicit: the image's ENTRYPOINT is not relied on.
        command=("vllm", "serve"),
        args=tuple(args),
        env=env,
        requests=requests,
        limits=limits,
        gpus=tp,
        cache_size_gib=CACHE_GIB_RAID0 if raid0 else CACHE_GIB_ROOT,
        cache_mount_path=CACHE_MOUNT,
        shm_size_gib=SHM_GIB_PER_RANK * tp,
        startup_probe=Probe("/health", period_s=10, timeout_s=5,
                            failure_threshold=STARTUP_BUDGET_S // 10),
        readiness_probe=Probe("/health", period_s=10, timeout_s=5, failure_threshold=3),
        # Generous: a saturated server (c=64) answers /health late, and a restart costs minutes.
        liveness_probe=Probe("/health", period_s=15, timeout_s=10, failure_threshold=6),
        termination_grace_s=120,
        deploy_timeout_s=DEPLOY_TIMEOUT_S,
        served_model_name=profile.hf_id,
        port=PORT,
        notes=tuple(notes),
    )


def server_notes(server: ServerSettings, pool_instance_type: str) -> list[str]:
    """Warnings that are not errors (fallback kernels, unmeasured settings)."""
    instance = catalog.gpu_instance(pool_instance_type)
    return list(build_serve_spec(server, instance, ModelUris.for_bucket("b", server),
                                 region="unused").notes)


# The compile cache may fill at most this share of the cache volume; the rest is for the assets and
# whatever the server compiles beyond it.
_CACHE_SHARE_OF_VOLUME = 0.5


def compile_cache_code() -> tuple[dict[str, str], dict[str, str]]:
    """(the weights modules, the bench modules) the server pod's cache steps run, as it mounts them."""
    return job_code.compile_cache_code()

def with_compile_cache(spec: ServeSpec, server: ServerSettings, instance: catalog.InstanceType, *,
                       weights_bucket: str, revisions: dict[str, str], region: str) -> ServeSpec:
    """The spec with its compile cache in S3 (components/compile_cache.py), keyed by what decides
    whether a cache applies; unchanged when the server's compileCache is off."""
    if not server.compile_cache:
        return spec
    key, inputs = cc.cache_key(
        image=spec.image, models=[(m, revisions.get(m, "main")) for m in server_model_ids(server)],
        args=spec.args, env=spec.env, gpu=instance.gpu_name, tensor_parallel_size=server.tensor_parallel_size)
    code, helpers = compile_cache_code()
    cache = cc.CompileCache(key=key, uri=f"s3://{weights_bucket}/{cache_prefix(key)}", inputs=inputs,
                            region=region, max_gib=round(spec.cache_size_gib * _CACHE_SHARE_OF_VOLUME, 1),
                            code=code, helpers=helpers)
    return dataclasses.replace(spec, compile_cache=cache)


def server_identity_args(
    server: ServerSettings,
    spec: ServeSpec,
    *,
    cluster_name: pulumi.Input[str],
    cluster_arn: pulumi.Input[str],
    account_id: pulumi.Input[str],
    namespace: str,
    weights_bucket_arn: pulumi.Input[str],
    kms_key_arn: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
    tags: dict[str, str] | None = None,
) -> WorkloadIdentityArgs:
    """The server's own role: read its model prefixes (target and draft) and the caches."""
    return WorkloadIdentityArgs(
        cluster_name=cluster_name,
        cluster_arn=cluster_arn,
        account_id=account_id,
        namespace=namespace,
        service_account=server.name,
        statements=server_statements(weights_bucket_arn, server_model_prefixes(server), kms_key_arn,
                                     compile_cache_key=spec.compile_cache.key if spec.compile_cache else None),
        labels=selector_labels(spec),
        tags=dict(tags or {}),
        depends_on=list(depends_on),
    )
