"""The verdict over every scenario: pass, fail or inconclusive, its reasons, and the interval that
decided it (summary.json `verdict`).

Each scenario's call (bench.analysis.verdict: `slo_call` on the slo basis, `peak_call` on the peak
basis) says where its ratio interval lies against the threshold; `decide` puts them together with
what makes the comparison incomplete: it passes when every scenario clears the threshold and nothing
is missing, fails when some scenario falls short even in its best case on sides that measured the
same thing, and is inconclusive otherwise, with the reasons and the commands that settle them.
"""

from __future__ import annotations

from typing import Any

from bench.analysis.capacity.interval import json_end
from bench.analysis.verdict import FAIL, INCONCLUSIVE, PASS, Call


def decide(calls: list[Call], *, basis: str, threshold: float, issues: list[str],
           incomparable: list[str]) -> dict[str, Any]:
    """summary.json's verdict: state, reasons, and the figures behind them.

    `issues` make the comparison incomplete (no pass); `incomparable` (a subset) make the sides
    differ in what they measured, so even a failing interval is not trusted (no fail either)."""
    states = [c.state for c in calls]
    if not calls:
        state = INCONCLUSIVE
    elif FAIL in states and not incomparable:
        state = FAIL
    elif states and all(s == PASS for s in states) and not issues:
        state = PASS
    else:
        state = INCONCLUSIVE
    reasons: list[str] = []
    if not calls:
        reasons.append("no scenario to compare: neither sweep has a usable run")
    if state != PASS:
        # A scenario a side did not measure is already an issue (with the command that runs it).
        covered = {c.scenario for c in calls if c.interval is None
                   and any(i.startswith(f"scenario {c.scenario}: no usable run") for i in issues)}
        reasons += [c.reason for c in calls if c.reason and c.scenario not in covered
                    and (state == INCONCLUSIVE or c.state == FAIL)]
        if state == INCONCLUSIVE:
            reasons += issues
        elif incomparable:
            reasons += incomparable
    # The interval of one scenario, the one with the smallest low end (never the low end of one
    # scenario with the high end of another).
    binding = min((c for c in calls if c.interval is not None), key=lambda c: (c.interval[0], c.interval[1]),
                  default=None)
    lo, hi = binding.interval if binding is not None else (None, None)
    return {
        "threshold": threshold,
        "min_ratio": json_end(lo) if lo is not None else None,
        "pass": state == PASS,
        "basis": basis,
        "state": state,
        "reasons": reasons,
        "min_ratio_interval": [json_end(lo), json_end(hi)] if lo is not None else None,
        "min_ratio_scenario": binding.scenario if binding is not None else None,
    }


STATE_WORDS = {PASS: "PASS", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE"}
# `bench report --exit-code`
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
