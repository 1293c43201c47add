"""Rules on vLLM servers: an FP8 checkpoint keeps an FP8 KV cache, and --max-num-seqs admits the
bench's highest concurrency."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .values import get, is_unknown
from .workloads import vllm_servers


# Rule: FP8 checkpoint needs --kv-cache-dtype fp8

# The PoC measured it: FP8-dynamic checkpoints ship kv_cache_scheme=None, so the KV cache stays BF16 and
# capacity halves (12,150 vs 23,320 tokens); FP8 then loses S2/S4 to NVFP4 for that reason alone.
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3")


# A server variant generated to measure the KV cache dtype (stacks/variants.py) says so in its labels;
# it is the one deliberate exception (the PoC's "FP8 (BF16 KV)" measurement).
VARIANT_LABEL = "vllm-poc/variant"


def measures_kv_cache_dtype(props: Mapping[str, Any]) -> bool:
    value = get(props, "metadata", "labels", VARIANT_LABEL)
    return isinstance(value, str) and "kvCacheDtype" in value.split(".")


def check_fp8_kv_cache(resource_type: str, props: Mapping[str, Any], name: str = "",
                       config: Mapping[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    if measures_kv_cache_dtype(props):
        return messages
    for label, serve in vllm_servers(resource_type, name, props):
        model = serve.model
        if not isinstance(model, str) or "fp8" not in model.lower():
            continue
        dtype = serve.option("--kv-cache-dtype")
        if is_unknown(dtype):
            continue
        if dtype is None:
            messages.append(
                f"{label}: serves the FP8 checkpoint '{model}' without --kv-cache-dtype; the KV cache "
                f"then stays BF16 with half the token capacity. Add '--kv-cache-dtype fp8' "
                f"(accepted values: {', '.join(FP8_KV_CACHE_DTYPES)}).")
        elif dtype not in FP8_KV_CACHE_DTYPES:
            messages.append(
                f"{label}: serves the FP8 checkpoint '{model}' with --kv-cache-dtype {dtype}; "
                f"use one of: {', '.join(FP8_KV_CACHE_DTYPES)}.")
    return messages


# Rule: --max-num-seqs must admit the bench's highest concurrency

DEFAULT_BENCH_MAX_CONCURRENCY = 64
# vLLM's default when --max-num-seqs is absent: 256, or 1024 on GPUs with >= 70 GiB (not A100).
# The smaller one is what we can count on without knowing the GPU.
VLLM_DEFAULT_MAX_NUM_SEQS = 256


def _bench_max_concurrency(config: Mapping[str, Any] | None) -> int:
    raw = (config or {}).get("benchMaxConcurrency", DEFAULT_BENCH_MAX_CONCURRENCY)
    # Policy config travels as a protobuf Struct, so integers arrive as floats (64.0).
    return int(float(raw))


def check_max_num_seqs(resource_type: str, props: Mapping[str, Any], name: str = "",
                       config: Mapping[str, Any] | None = None) -> list[str]:
    bench_max = _bench_max_concurrency(config)
    messages: list[str] = []
    for label, serve in vllm_servers(resource_type, name, props):
        raw = serve.option("--max-num-seqs")
        if is_unknown(raw):
            continue
        if raw is None:
            if VLLM_DEFAULT_MAX_NUM_SEQS < bench_max:
                messages.append(
                    f"{label}: --max-num-seqs is not set, so vLLM may use its default of "
                    f"{VLLM_DEFAULT_MAX_NUM_SEQS}, below the bench's highest concurrency {bench_max}. "
                    f"Set --max-num-seqs to at least {bench_max}.")
            continue
        try:
            value = int(str(raw))
        except ValueError:
            messages.append(f"{label}: --max-num-seqs '{raw}' is not an integer; "
                            f"set it to an integer of at least {bench_max}.")
            continue
        if value < bench_max:
            messages.append(
                f"{label}: --max-num-seqs {value} is below the bench's highest concurrency "
                f"{bench_max}; requests above {value} would queue in vLLM and the sweep would measure "
                f"the queue, not the server. Set it to at least {bench_max} (policy config "
                f"benchMaxConcurrency).")
    return messages
