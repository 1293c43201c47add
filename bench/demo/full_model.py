"""The Gemma-4-31B architecture at full size, with random weights: a model folder for
`vllm serve --load-format dummy`, and the one list of serving flags that folder needs.

No weights reach a GPU box that has no way out, but vLLM serves an architecture from its config alone
when the load format is `dummy` (each weight filled with random values in place, no file read). So
this writes config.json (the text model's shape: 60 layers, 5 sliding-window layers to 1 full, hidden
5376, MLP 21504, 32 query heads; sliding layers 16 KV heads of 256, full layers 4 KV heads of 512 with
K = V; window 1024; vocabulary 262,144; final logit soft-cap 30; 30.7 B parameters), a
generation_config.json and the tiny model's word-level tokenizer (bench/demo/tiny_model.py, 32,000
words: the bench's random prompts keep their lengths through a decode and encode). The shape follows
the public descriptions of google/gemma-4-31B-it and the recipe the H200 figures of 2026-12-04 were
measured with (shared/gpu/gemma4-31b-shape.py).

What random weights do not measure: accuracy, speculative decoding's acceptance (a draft of random
weights agrees with nothing), the vision tower (the folder is the text model, Gemma4ForCausalLM), and
any path that depends on what the weights say (when a request stops: the bench ignores the end of
sequence). What they do measure: the kernels' time for the real shape, the KV cache's size, start-up
(compile, CUDA graphs), sleep and wake with the real weights' bytes.

The transformers trap: transformers 5.17 and later keep `head_dim` and `num_key_value_heads` per layer
for Gemma 4 and raise AmbiguousGlobalPerLayerAttributeError when vLLM 0.26 reads the global value, and
they drop `global_head_dim` and `num_global_key_value_heads` from the config object, which vLLM 0.26
reads with getattr (the full layers then get the sliding layers' shape, silently). So the config sets
`allow_global_per_layer_attribute_access`, and FOLDER_FLAGS passes the dropped keys with
`--hf-overrides`.

    python -m bench.demo.full_model OUT_DIR [--vocab-words N]

writes the folder and prints its summary and the `vllm serve` command line for it. Needs tokenizers and
transformers (the vLLM environment's python), and this checkout on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from bench.demo import gpu_settings, tiny_model

SHAPE = "gemma-4-31b"
ARCHITECTURE = "Gemma4ForCausalLM"
LAYERS = 60
FULL_EVERY = 6  # every sixth layer is full attention (5 sliding : 1 full), the last one included
MAX_MODEL_LEN = 8192  # the PoC's context
GPU_MEMORY_UTILIZATION = 0.90
SUMMARY_FILE = "full_model.json"

# The keys transformers >= 5.17 drops from a Gemma 4 config object and vLLM 0.26 reads with getattr.
HF_OVERRIDES: dict[str, Any] = {"global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": True}
# What the folder needs from `vllm serve`: random weights, the PoC's 8K context, the dropped keys.
FOLDER_FLAGS: tuple[str, ...] = ("--load-format", "dummy", "--max-model-len", str(MAX_MODEL_LEN),
                                 "--hf-overrides", json.dumps(HF_OVERRIDES, separators=(",", ":")))
# Weight precision: the PoC's recommended checkpoint is FP8-dynamic (W8A8); with random weights vLLM
# quantizes the bf16 weights to FP8 as it loads them (online FP8). bf16 is the unquantized comparison.
# NVFP4 needs a quantized checkpoint (no online path), so it is not offered.
PRECISIONS: dict[str, tuple[str, ...]] = {"fp8": ("--quantization", "fp8"), "bf16": ()}
# The KV cache: fp8, as the PoC requires with FP8 weights (12,150 -> 23,320 KV tokens on an L40S).
KV_CACHE_DTYPES: tuple[str, ...] = ("fp8", "auto")
POC_FLAGS: tuple[str, ...] = (*PRECISIONS["fp8"], "--kv-cache-dtype", "fp8")


def config() -> dict[str, Any]:
    """config.json of the text model at full size."""
    return {
        "architectures": [ARCHITECTURE], "model_type": "gemma4_text", "vocab_size": 262144,
        "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": LAYERS, "num_attention_heads": 32,
        "num_key_value_heads": 16, "head_dim": 256, **HF_OVERRIDES, "sliding_window": 1024,
        "max_position_embeddings": 262144,
        "layer_types": ["full_attention" if (i + 1) % FULL_EVERY == 0 else "sliding_attention" for i in range(LAYERS)],
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "final_logit_softcapping": 30.0,
        "hidden_size_per_layer_input": 0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        # transformers >= 5.17 raises AmbiguousGlobalPerLayerAttributeError when vLLM 0.26 reads head_dim
        # or num_key_value_heads from the config of a model whose layers differ; this lets it read them
        "allow_global_per_layer_attribute_access": True,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    }


def parameters(cfg: dict[str, Any]) -> int:
    """Parameters of the text model the config describes (embeddings tied, norms included)."""
    hidden, mlp = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    total = cfg["vocab_size"] * hidden + hidden  # embeddings (tied with the output) and the final norm
    for kind in cfg["layer_types"]:
        full = kind == "full_attention"
        head_dim = cfg["global_head_dim"] if full else cfg["head_dim"]
        kv_heads = cfg["num_global_key_value_heads"] if full else cfg["num_key_value_heads"]
        k_eq_v = full and cfg.get("attention_k_eq_v")
        total += hidden * heads * head_dim * 2  # q and o
        total += hidden * kv_heads * head_dim * (1 if k_eq_v else 2)  # k, and v unless V is K
        total += 2 * head_dim  # q and k norms
        total += 3 * hidden * mlp + 4 * hidden  # gate, up, down; the four layer norms
    return total


def serve_flags(*, precision: str = "fp8", kv_cache_dtype: str = "fp8",
                gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION, tensor_parallel_size: int = 1) -> list[str]:
    """`vllm serve` flags for the folder with the PoC's serving choices (the model-independent ones, prefix
    caching and sleep mode, are bench/demo/gpu_settings.py's and come on top)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"KV cache dtype {kv_cache_dtype!r}: choose from {', '.join(KV_CACHE_DTYPES)}")
    flags = [*FOLDER_FLAGS, *PRECISIONS[precision], "--kv-cache-dtype", kv_cache_dtype,
             "--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
    if tensor_parallel_size != 1:
        flags += ["--tensor-parallel-size", str(tensor_parallel_size)]
    return flags


def summary(cfg: dict[str, Any], vocab_words: int) -> dict[str, Any]:
    full = cfg["layer_types"].count("full_attention")
    return {"shape": SHAPE, "architecture": ARCHITECTURE, "weights": "random (vllm serve --load-format dummy)",
            "parameters": parameters(cfg), "num_hidden_layers": cfg["num_hidden_layers"],
            "sliding_layers": len(cfg["layer_types"]) - full, "full_layers": full,
            "hidden_size": cfg["hidden_size"], "intermediate_size": cfg["intermediate_size"],
            "vocab_size": cfg["vocab_size"], "vocab_words": vocab_words, "dtype": cfg["dtype"],
            "max_model_len": MAX_MODEL_LEN, "hf_overrides": dict(HF_OVERRIDES)}


def build(out: Path, *, vocab_words: int = tiny_model.GPU_VOCAB_WORDS) -> dict[str, Any]:
    """Write the folder (config.json, generation_config.json, the tokenizer, full_model.json); returns the
    summary. Nothing of the weights is written: `--load-format dummy` makes them at start-up."""
    out = Path(out)
    cfg = config()
    tiny_model.save_tokenizer(out, vocab_words, cfg["max_position_embeddings"])
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}))
    result = summary(cfg, vocab_words)
    (out / SUMMARY_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def serve_line(folder: Path, served_name: str = "g4") -> str:
    """The `vllm serve` command line for the folder with the PoC's flags and the stack's, shell-quoted."""
    return shlex.join(["vllm", "serve", str(folder), "--served-model-name", served_name, *serve_flags(),
                       *gpu_settings.SERVE_FLAGS])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demo.full_model",
                                     description="Write the Gemma-4-31B architecture's folder for vllm serve "
                                                 "--load-format dummy (random weights).")
    parser.add_argument("out", type=Path, help="folder to write config.json, the tokenizer and full_model.json to")
    parser.add_argument("--vocab-words", type=int, default=tiny_model.GPU_VOCAB_WORDS,
                        help=f"words in the tokenizer (default {tiny_model.GPU_VOCAB_WORDS}; the model's vocabulary "
                             "stays 262,144)")
    args = parser.parse_args(argv)
    if args.vocab_words < tiny_model.GPU_VOCAB_WORDS:
        parser.error(f"--vocab-words {args.vocab_words}: give {tiny_model.GPU_VOCAB_WORDS} or more (fewer words make "
                     "vLLM's random prompts share prefixes)")
    if args.out.is_file():
        parser.error(f"{args.out} is a file: give a folder")
    result = build(args.out, vocab_words=args.vocab_words)
    print(json.dumps(result))
    print(f"full_model: {result['parameters'] / 1e9:.1f} B parameters (random); serve it with:\n"
          f"{serve_line(args.out.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
