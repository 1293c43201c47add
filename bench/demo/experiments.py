"""The PoC's experiments as data, one change at a time: what `gpu-check --experiment NAME` runs
(bench/demo/gpu_experiment.py runs them).

Each experiment names its question, the seeds' figures it is set beside, its variants (what each changes in
`vllm serve`: gpu_full.flags' choices, flags added, flags removed), the scenarios and concurrencies it sweeps,
whether it searches the capacity under the SLO, its minutes per variant on an H200 with a warm compile cache,
and a mixed load after the sweeps where it has one (gpu_mixed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.demo import gpu_mixed, gpu_settings


@dataclass(frozen=True)
class Variant:
    label: str
    override: dict[str, Any] = field(default_factory=dict)  # gpu_full.flags' choices (full size only)
    extra: tuple[str, ...] = ()  # vllm serve flags added
    drop: tuple[str, ...] = ()  # vllm serve flags removed


@dataclass(frozen=True)
class Experiment:
    name: str
    question: str
    seeds: str  # the seeds' figures it is set beside
    variants: tuple[Variant, ...]
    scenarios: dict[str, tuple[int, ...]]  # scenario -> concurrencies
    capacity_search: bool = False
    minutes: float = 4.0  # per variant on an H200 with a warm compile cache: start, every scenario, stop
    mixed: gpu_mixed.MixedLoad | None = None  # after the sweeps, every scenario at once (gpu_mixed)

    def variant(self, label: str) -> Variant | None:
        return next((v for v in self.variants if v.label == label), None)


_STACK_CAP = ("--max-num-seqs", str(gpu_settings.MAX_NUM_SEQS))


def _seqs(n: int) -> Variant:
    return Variant(f"seqs-{n}", extra=("--max-num-seqs", str(n)))


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment("kv-sizing", "KV cache tokens at --gpu-memory-utilization 0.85, 0.90 and 0.95, and whether S1_chat at "
               "c=32 changes with them",
               "blog, g7e.2xlarge: 114,240 / 125,537 / 136,833 KV tokens; 518.1 tok/s at c=32 for all three",
               tuple(Variant(f"util-{u:.2f}", {"gpu_memory_utilization": u}) for u in (0.85, 0.90, 0.95)),
               {"S1_chat": (32,)}, minutes=2.5),
    Experiment("max-num-seqs", "--max-num-seqs 16, 32, 64 and 128 at c=32 and c=64: a cap, or a tuning value?",
               "blog: at c=32, 16 gave 367.4 tok/s and 32/64/128 518; at c=64, 32 gave 520.4 and 64/128 671",
               tuple(_seqs(n) for n in (16, 32, 64, 128)), {"S1_chat": (32, 64)}, minutes=3.0),
    Experiment("prefix-caching", "prefix caching off and on with a 90 % shared prefix (S5_shared_prefix) at c=8",
               "blog, g7e.2xlarge: 180.4 -> 253.5 tok/s (+40.5 %) and TTFT p99 2,856 -> 1,353 ms (2.1x shorter) at "
               "c=8 with caching on",
               (Variant("caching-off", extra=("--no-enable-prefix-caching",), drop=("--enable-prefix-caching",)),
                Variant("caching-on")), {"S5_shared_prefix": (8,)}, minutes=3.5),
    Experiment("precision", "bf16 against FP8 weights (fp8 KV cache on both) on the capacity under the SLO, "
               "not only the peak",
               "blog: NVFP4 over BF16 1.9x at the peak and 6.3x under the SLO; PoC report table 6 (FP8 against NVFP4 "
               "on an L40S)", (Variant("fp8", {"precision": "fp8"}), Variant("bf16", {"precision": "bf16"})),
               {"S1_chat": (1, 4, 16, 32, 64)}, capacity_search=True, minutes=7.0),
    Experiment("scenarios", "all four scenarios with the capacity under the SLO (FP8 weights, fp8 KV cache)",
               "PoC report table 8: g7e peaks 1,871 / 910 / 395 / 402 tok/s (S1 / S2 / S3 / S4), L40S 536 / 226 / "
               "81.7 / 98.6", (Variant("fp8"),),
               {s: (1, 4, 16, 32, 64) for s in ("S1_chat", "S2_summary", "S3_moderation", "S4_rag")},
               capacity_search=True, minutes=25.0),
    Experiment("tensor-parallel", "TP=1, 2 and 4 (issue 38): S1_chat and S4_rag with the capacity under the SLO, "
               "per replica and per GPU; start-up and KV tokens per TP size",
               "PoC report: TP=2/4 on g6e.12xlarge (PCIe) still to be done",
               tuple(Variant(f"tp{n}", {"tensor_parallel_size": n}) for n in (1, 2, 4)),
               {"S1_chat": (1, 4, 16, 32, 64), "S4_rag": (1, 4, 8, 16, 32)}, capacity_search=True,
               minutes=12.0),
    Experiment("sleep-mode", "sleep mode off and on: does vLLM 0.26's start-up memory profile count negative non-torch "
               "memory only with sleep mode's allocator, sizing the KV cache past the utilization's share, and does "
               "S2_summary at c=16 (sixteen 1,024-token prompts) then run the GPU out of memory?",
               "PoC: level-1 sleep 26.8 s, wake 3.6 s (the stack's sleepMode, off by default); the H100 box with sleep "
               "mode on: -4.4 GiB of non-torch memory, a 43.74 GiB KV cache where 0.90 leaves 38.5, out of memory "
               "at S2_summary c=16; vLLM issue 40256 reports the same allocator over-counting",
               (Variant("sleep-off", extra=("--no-enable-sleep-mode",)),  # said, so that compare's table says "off"
                Variant("sleep-on", extra=("--enable-sleep-mode",))),
               {"S2_summary": (4, 16)}, minutes=3.5),
    Experiment("priority", "batch requests at a lower priority (--scheduling-policy priority) in a mixed load at "
               "81 % of saturation: what do the interactive scenarios gain and the batch one lose?",
               "blog: at 81 % of saturation the deprioritized requests' e2e p99 rose 1 %, interactive requests were "
               "unaffected, and the slowest workload's e2e p99 fell from 15.1 s to 11.5 s (24 %)",
               # both with the stack's cap on running sequences: without it (vLLM's default) 101 ran at once on an
               # H100 on 2026-12-07 and none waited, so the policy had nothing to order
               (Variant("fcfs", extra=_STACK_CAP), Variant("priority", extra=(*_STACK_CAP, "--scheduling-policy",
                                                                              "priority"))),
               {"S1_chat": (64,), "S4_rag": (64,), "S2_summary": (64,)},
               mixed=gpu_mixed.MixedLoad(batch=("S2_summary",)), minutes=5.0),
)}
