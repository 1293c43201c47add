"""gpu-check's full-size path (`--model-shape gemma-4-31b`): the Gemma-4-31B architecture with random
weights (bench/demo/full_model.py), its input checks, the tensor-parallel size (issue 38), its serving
flags and environment, and what a start's log says about the engine vLLM built (KV cache tokens, the
attention backend it chose, the quantization and KV cache dtype it ran, the full layers' head size).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from bench.demo import full_model, gpu_settings
from bench.startup import memory

TINY = "tiny"
SHAPES = (TINY, full_model.SHAPE)
# Sweep points and start-up budget per shape: a 31B cold start took 247 s on an H200 (torch.compile 130 s);
# c=1 runs at about 0.7 requests/s there, so three points keep the sweep step within a few minutes.
DEFAULTS: dict[str, dict[str, Any]] = {
    TINY: {"concurrencies": "1,4,16,64", "health_timeout": 600.0},
    full_model.SHAPE: {"concurrencies": "1,16,64", "health_timeout": 900.0},
}
SPECULATIVE_SKIPPED = ("random weights: a draft model of random weights agrees with nothing, so its acceptance "
                       "would measure nothing (the PoC's MTP draft needs the real checkpoint)")
NOT_MEASURED = (
    "With --model-shape gemma-4-31b the weights are random (vllm serve --load-format dummy): the kernels, the KV "
    "cache's size, start-up, sleep and wake and throughput are the real architecture's, but accuracy, speculative "
    "decoding's acceptance, the vision tower (the folder is the text model) and anything that depends on what the "
    "weights say are not measured. FP8 is vLLM's online quantization of those weights (--quantization fp8), not "
    "the FP8-dynamic checkpoint; the attention backend is the one this vLLM picks here (the serving image may "
    "pick another).")
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0"}  # NVLink multicast stays off on the lent multi-GPU machines


def full(args: argparse.Namespace) -> bool:
    return getattr(args, "model_shape", TINY) == full_model.SHAPE


def check_args(args: argparse.Namespace, error: type[Exception]) -> None:
    """The full-size flags' checks (raises `error` naming the flag and the fix); fills the shape's defaults."""
    shape = getattr(args, "model_shape", TINY)
    if shape not in SHAPES:
        raise error(f"--model-shape {shape}: choose {' or '.join(SHAPES)}")
    for key, value in DEFAULTS[shape].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    tp = getattr(args, "tensor_parallel_size", 1)
    if not isinstance(tp, int) or tp < 1:
        raise error(f"--tensor-parallel-size {tp}: give a whole number of GPUs, 1 or more")
    if not full(args):
        for flag, value, default in (("--tensor-parallel-size", tp, 1),
                                     ("--precision", getattr(args, "precision", "fp8"), "fp8"),
                                     ("--kv-cache-dtype", getattr(args, "kv_cache_dtype", "fp8"), "fp8")):
            if value != default:
                raise error(f"{flag} {value}: only with --model-shape {full_model.SHAPE} (the tiny model runs "
                            "bf16 on one GPU)")
        return
    if getattr(args, "precision", "fp8") not in full_model.PRECISIONS:
        raise error(f"--precision {args.precision}: choose {' or '.join(full_model.PRECISIONS)}")
    if getattr(args, "kv_cache_dtype", "fp8") not in full_model.KV_CACHE_DTYPES:
        raise error(f"--kv-cache-dtype {args.kv_cache_dtype}: choose {' or '.join(full_model.KV_CACHE_DTYPES)}")
    if not 0 < args.gpu_memory_utilization < 1:
        raise error(f"--gpu-memory-utilization {args.gpu_memory_utilization:g}: give a fraction between 0 and 1, "
                    "e.g. 0.9")


def check_device(args: argparse.Namespace, gpu: bool, gpus: int, error: type[Exception]) -> None:
    """After the version probe: a full-size model needs a GPU, and the tensor-parallel size the GPUs seen."""
    if not full(args):
        return
    if not gpu:
        raise error(f"--model-shape {full_model.SHAPE}: this needs a GPU (a 31B model does not run on vLLM's CPU "
                    "build); run it on the GPU machine, or leave the flag out for the tiny model")
    if args.tensor_parallel_size > gpus:
        raise error(f"--tensor-parallel-size {args.tensor_parallel_size}: this machine shows {gpus} GPU"
                    f"{'s' if gpus != 1 else ''}; give {gpus} or fewer, or run on a machine with more")


def choice(args: argparse.Namespace) -> dict[str, Any]:
    """What a record's model is: the shape, and for the full size the choices that change its compiled graphs."""
    if not full(args):
        return {"shape": TINY}
    return {"shape": full_model.SHAPE, "precision": args.precision, "kv_cache_dtype": args.kv_cache_dtype,
            "tensor_parallel_size": args.tensor_parallel_size}


def describe(model: dict[str, Any]) -> str:
    if model.get("shape") != full_model.SHAPE:
        return "the tiny model"
    return (f"{full_model.SHAPE} with random weights ({model.get('precision')} weights, {model.get('kv_cache_dtype')} "
            f"KV cache, tensor parallel {model.get('tensor_parallel_size')})")


def tp_of(flags: list[str]) -> int:
    """The tensor-parallel size a `vllm serve` flag list asks for (1 without the flag)."""
    return int(flags[flags.index("--tensor-parallel-size") + 1]) if "--tensor-parallel-size" in flags else 1


def environment(env: dict[str, str], tensor_parallel_size: int) -> dict[str, str]:
    return {**env, **NCCL_ENV} if tensor_parallel_size > 1 else dict(env)


def flags(args: argparse.Namespace, **override: Any) -> list[str]:
    """`vllm serve` flags of the full-size folder with this run's choices (`override` changes one, for the
    experiments: precision, kv_cache_dtype, gpu_memory_utilization, tensor_parallel_size)."""
    choice = {"precision": args.precision, "kv_cache_dtype": args.kv_cache_dtype,
              "gpu_memory_utilization": args.gpu_memory_utilization,
              "tensor_parallel_size": args.tensor_parallel_size, **override}
    return [*full_model.serve_flags(**choice), *gpu_settings.SERVE_FLAGS]


# What a start's log says about the engine, beside bench/startup/phases.py's phases.
_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]+\) with config: (.*)")
_ENGINE_KEYS = {"load_format": str, "tensor_parallel_size": int, "quantization": str, "kv_cache_dtype": str,
                "dtype": str}
_BACKEND = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend\b")
_FA_VERSION = re.compile(r"Using FlashAttention version (\d+)")
_HETEROGENEOUS = re.compile(r"heterogeneous head dimensions \(head_dim=(\d+), global_head_dim=(\d+)\)")


def log_figures(text: str) -> dict[str, Any]:
    """{"attention_backend", "flash_attn_version", "head_dims" [sliding, full] or None, the engine's
    load_format, tensor_parallel_size, quantization, kv_cache_dtype and dtype as vLLM logged them}. The memory
    profile is the start-up phases' (bench/startup/memory.py)."""
    out: dict[str, Any] = {"attention_backend": None, "flash_attn_version": None, "head_dims": None}
    for line in text.splitlines():
        if (m := _ENGINE.search(line)) and "engine" not in out:
            out["engine"] = {}
            for key, kind in _ENGINE_KEYS.items():
                if v := re.search(rf"\b{key}=([^,]+)", m[1]):
                    value = v[1].strip().removeprefix("torch.")
                    out["engine"][key] = None if value == "None" else kind(value)
        if (m := _BACKEND.search(line)) and out["attention_backend"] is None:
            out["attention_backend"] = m[1]
        if (m := _FA_VERSION.search(line)) and out["flash_attn_version"] is None:
            out["flash_attn_version"] = int(m[1])
        if (m := _HETEROGENEOUS.search(line)) and out["head_dims"] is None:
            out["head_dims"] = [int(m[1]), int(m[2])]
    if out["attention_backend"] is None and out["flash_attn_version"]:
        out["attention_backend"] = "FLASH_ATTN"
    out.setdefault("engine", None)
    return out


def memory_warning(figures: dict[str, Any]) -> str | None:
    """A start whose memory profile (its figures' `memory_gib`) counted negative non-torch memory, in one sentence
    (bench/startup/memory.py); None otherwise."""
    return memory.warning(figures.get("memory_gib"))


def start_problems(figures: dict[str, Any], args: argparse.Namespace, **override: Any) -> list[str]:
    """What a full-size start must show: the full layers' head size seen, and the precision and tensor-parallel
    size asked for (the run's, or a variant's `override`)."""
    problems = []
    if figures.get("head_dims") is None:
        problems.append("vLLM did not log the Gemma 4 head dimensions (head_dim 256, global_head_dim 512): the full "
                        "layers may have the sliding layers' shape (the transformers trap: check --hf-overrides)")
    asked = {"precision": args.precision, "kv_cache_dtype": args.kv_cache_dtype,
             "tensor_parallel_size": args.tensor_parallel_size, **override}
    quantization = full_model.PRECISIONS[asked["precision"]]
    want = {"quantization": quantization[1] if quantization else None, "kv_cache_dtype": asked["kv_cache_dtype"],
            "load_format": "dummy", "tensor_parallel_size": asked["tensor_parallel_size"]}
    engine = figures.get("engine") or {}
    for key, value in want.items():
        if key in engine and engine[key] != value:
            problems.append(f"the engine ran {key} {engine[key] or 'none'}, not {value or 'none'}")
    return problems


def model_record(summary: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The record's "model" section."""
    if not full(args):
        return {"shape": TINY, "weights": "random (a tiny Llama, bench/demo/tiny_model.py)",
                "parameters": summary.get("parameters"), "dtype": summary.get("dtype"), "tensor_parallel_size": 1}
    keys = full_model.summary(full_model.config(), 0)  # the folder's summary, not a step's bookkeeping
    summary = {k: v for k, v in summary.items() if k in keys}
    return {**summary, "precision": args.precision, "quantization": "online FP8 (--quantization fp8)"
            if args.precision == "fp8" else "none (bf16)", "kv_cache_dtype": args.kv_cache_dtype,
            "gpu_memory_utilization": args.gpu_memory_utilization, "tensor_parallel_size": args.tensor_parallel_size,
            "not_measured": NOT_MEASURED}


def model_dir(work: Path, args: argparse.Namespace) -> Path:
    """Each shape its own folder, so switching shapes in one --out keeps the other's."""
    return work / ("model" if not full(args) else f"model-{full_model.SHAPE}")
