"""vLLM's start-up memory profile: what it subtracted from `--gpu-memory-utilization`'s share of the GPU to
size the KV cache, and the one reading of it that warns.

vLLM 0.26 logs, once per worker, `Desired GPU memory utilization is (0.9, 71.26 GiB). Actual usage is 30.64 GiB
for weight, 2.83 GiB for peak activation, -4.4 GiB for non-torch memory, and 0.82 GiB for CUDAGraph memory`
The KV cache gets the share less those four. A negative non-torch figure hands the KV cache that much more
than the share: on the H200 and H100 boxes (vLLM 0.26, sleep mode on) it read -4.4 GiB, and on the H100 sixteen
1,024-token prompts then ran the GPU out of memory (docs/full-size.md). On an L40S, 10 % headroom at 0.90 is
4.8 GB, less than that plus a missed activation peak.

The start-up table (`bench startup`), the stack's start-up records and report, and gpu-check's pages read it
from here.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

KEYS = ("budget", "weights", "peak_activation", "non_torch", "cuda_graphs")
_GIB = r"(-?[0-9][0-9,]*(?:\.[0-9]+)?) GiB"
PROFILE = re.compile(rf"Desired GPU memory utilization is \([0-9.]+, {_GIB}\)\. Actual usage is {_GIB} for weight, "
                     rf"{_GIB} for peak activation, {_GIB} for non-torch memory, and {_GIB} for CUDAGraph memory")


def phase_key(key: str) -> str:
    """The flat key of one figure in a parsed log (bench.startup.phases): memory_<key>_gib."""
    return f"memory_{key}_gib"


def figure(match: re.Match, key: str) -> float:
    return float(match[KEYS.index(key) + 1].replace(",", ""))


def parse(text: str) -> dict[str, float] | None:
    """The first profile in a log's text, {KEYS: GiB}; None where the log has none (another vLLM, a CPU build,
    or a start that did not get that far)."""
    m = PROFILE.search(text)
    return {key: figure(m, key) for key in KEYS} if m else None


def from_phases(phases: Mapping[str, Any]) -> dict[str, float] | None:
    """The profile out of a parsed log's flat keys (bench.startup.phases.parse_log); None where not logged."""
    profile = {key: phases.get(phase_key(key)) for key in KEYS}
    return None if profile["budget"] is None else profile


def warning(profile: Mapping[str, Any] | None) -> str | None:
    """One sentence where the profile counted negative non-torch memory; None otherwise (or without one)."""
    below = (profile or {}).get("non_torch")
    if below is None or below >= 0:
        return None
    return (f"vLLM counted {below:g} GiB of non-torch memory, so its KV cache takes {-below:g} GiB past the "
            f"utilization's {profile['budget']:g} GiB: under long prompts at high concurrency the GPU may run out of "
            "memory (lower --gpu-memory-utilization, or check it with a long-prompt scenario)")
