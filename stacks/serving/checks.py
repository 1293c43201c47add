"""A server against its pool and the bench: GPU count and memory, host memory, the bench's highest
concurrency and longest request. The stack's cross-key check (stacks/settings/stack.py) runs it for
every server; each problem names its key."""

from __future__ import annotations

from stacks import catalog
from stacks.serving.profiles import MODELS, TRAFFIC_CLASSES
from stacks.serving.server import (VALID_TP, ServerSettings, env_problem, extra_args_problem, kv_cache_dtype_problem,
                                   measures_kv_cache_dtype, model_problem, tensor_parallel_problem,
                                   traffic_class_problem)
from stacks.serving.sizing import GPU_HEADROOM_GIB, PROCESS_OVERHEAD_GIB, per_gpu, required_gpu_memory_gib


def check_server(
    server: ServerSettings,
    pool_instance_type: str | catalog.InstanceType,
    bench_max_concurrency: int | None,
    *,
    key: str = "vllm-poc:servers[0]",
    bench_max_tokens: int | None = None,
) -> list[str]:
    """Problems of a server on its pool and under the bench, one line each naming its key.

    Empty list = fine. `key` is the server's config path (e.g. `vllm-poc:servers[1]`).
    `bench_max_tokens` (optional) is the longest request the bench sends, input plus output.
    """
    problems = [
        f"{key}.{field_key}: {problem}"
        for field_key, problem in (
            ("model", model_problem(server.model)),
            ("trafficClass", traffic_class_problem(server.traffic_class)),
            ("tensorParallelSize", tensor_parallel_problem(server.tensor_parallel_size)),
            ("kvCacheDtype", kv_cache_dtype_problem(server.model, server.kv_cache_dtype,
                                                     measured=measures_kv_cache_dtype(server.variant_of))),
            ("extraArgs", extra_args_problem(list(server.extra_args))),
            ("env", env_problem(dict(server.env))),
        )
        if problem
    ]
    try:
        instance = (pool_instance_type if isinstance(pool_instance_type, catalog.InstanceType)
                    else catalog.gpu_instance(pool_instance_type))
    except KeyError as err:
        problems.append(f"{key}.pool: {err.args[0]}")
        return problems
    if server.model not in MODELS or server.traffic_class not in TRAFFIC_CLASSES:
        return problems  # nothing below can be judged without a profile

    tp = server.tensor_parallel_size
    tp_fits = tp in VALID_TP and tp <= instance.gpus
    if tp in VALID_TP and tp > instance.gpus:
        fits = [t for t in VALID_TP if t <= instance.gpus]
        problems.append(
            f"{key}.tensorParallelSize: {tp} GPUs do not fit one {instance.name} ({instance.gpus} "
            f"GPU{'s' if instance.gpus > 1 else ''}); use {' or '.join(map(str, fits))}, or a pool "
            "of g6e.12xlarge (4 GPUs)"
        )

    usable = instance.gpu_memory_gib * server.effective_gpu_memory_utilization
    if tp_fits and required_gpu_memory_gib(server) > usable:
        fits = [t for t in VALID_TP if t <= instance.gpus
                and required_gpu_memory_gib(server, tensor_parallel_size=t) <= usable]
        fix = (f"set tensorParallelSize to {fits[0]}" if fits else
               "use a pool with more GPU memory (g7e.2xlarge: 96 GiB per GPU, or TP on "
               "g6e.12xlarge) or a quantized model (fp8-dynamic, nvfp4)")
        problems.append(
            f"{key}.tensorParallelSize: {server.model} needs {required_gpu_memory_gib(server):.1f} "
            f"GiB per GPU at tensorParallelSize {tp} (weights {server.profile.weights_gib:g} GiB"
            f"{' + MTP draft' if server.uses_speculative else ''} split over {tp} GPU"
            f"{'s' if tp > 1 else ''} + {GPU_HEADROOM_GIB:g} GiB headroom) but {instance.name} "
            f"offers {usable:.1f} GiB ({instance.gpu_memory_gib} GiB x "
            f"{server.effective_gpu_memory_utilization:.2f}); {fix}"
        )

    if bench_max_concurrency is not None and server.max_num_seqs < bench_max_concurrency:
        problems.append(
            f"{key}.maxNumSeqs: {server.max_num_seqs} is below the bench's highest concurrency "
            f"{bench_max_concurrency}; vLLM would silently cap throughput there; "
            f"set maxNumSeqs to at least {bench_max_concurrency}"
        )
    if bench_max_tokens is not None and server.max_model_len < bench_max_tokens:
        problems.append(
            f"{key}.maxModelLen: {server.max_model_len} is shorter than the bench's longest request "
            f"({bench_max_tokens} tokens); set maxModelLen to at least {bench_max_tokens}"
        )

    if server.sleep_mode and tp_fits:
        _, memory_per_gpu = per_gpu(instance)
        host = memory_per_gpu * tp
        # Level-1 sleep moves the weights into host memory, inside the pod's memory limit.
        need = server.profile.weights_gib + PROCESS_OVERHEAD_GIB
        if host < need:
            problems.append(
                f"{key}.sleepMode: level-1 sleep offloads {server.profile.weights_gib:g} GiB of "
                f"weights to host memory, but the pod gets {host} GiB on {instance.name}; turn "
                "sleepMode off or use a larger instance"
            )
    return problems
