"""Seeds of the prompts each `vllm bench serve` process draws.

vLLM's random dataset fixes prompt i by `--seed` and position, so two runs with the same seed send
the same first prompts, and a server with prefix caching serves those from its cache: the second
run looks faster than the hardware is. Every process therefore gets its own seed, derived from the
sweep's `--seed` and what the process is for:

- measured run: (sweep seed, scenario, concurrency, attempt);
- its warm-up: the same plus the purpose "warmup", so warm-up prompts are never measured prompts.

The derivation is a hash, so two sweeps with the same `--seed` (the two sides of a comparison) send
identical prompts run for run, and no two runs of one sweep share a seed.
"""

from __future__ import annotations

import hashlib

MEASURE = "measure"
WARMUP = "warmup"
_MAX = 2**31 - 1  # numpy's and Python's seeders both take it; vLLM passes it to both


def run_seed(sweep_seed: int, scenario: str, concurrency: int, attempt: int, purpose: str = MEASURE) -> int:
    key = f"vllm-poc/{sweep_seed}/{scenario}/c{concurrency}/attempt{attempt}/{purpose}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % _MAX
