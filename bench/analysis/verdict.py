"""The verdict, decided on intervals: pass, fail or inconclusive, always with its reasons.

A sweep measures a server at a handful of loads, so its capacity under the SLO is known only
between two of them. This module turns that into numbers a capacity review can sign.

Each side's capacity is an interval of output tok/s per replica, read off its runs by
bench.analysis.capacity.interval (grid, capacity search or open loop; open ends where a load
that misses the SLO was not reached); the ratio divides two of them per GPU.

Ratio of two capacities (candidate [a_lo, a_hi), baseline [b_lo, b_hi), both per GPU):
[a_lo / b_hi, a_hi / b_lo). An open end gives 0 below or no bound above; a baseline of exactly 0
against a candidate that serves something gives no finite ratio at all (only the candidate meets
the SLO), which clears any threshold. Both sides use the same kind of figure: open loop when both
have open-loop runs that bracket their rate capacity, else closed loop (grid or search); never one
of each.

States, per scenario and overall (threshold T):

- pass: the lower end of the ratio clears T in every scenario, and the comparison is complete and
  like for like;
- fail: the upper end is below T in some scenario (even the best case falls short), on sides that
  are like for like;
- inconclusive: anything else: an interval that straddles T (the command that narrows it is
  named), a scenario one side did not measure, invalid runs, sides that differ in what they ran.
  Missing data is never a fail.

The peak basis keeps the PoC report's method: per scenario (peak output tok/s / GPUs) over the
baseline's, the smallest ratio against T; it gets the same three states (a missing peak is
inconclusive, never a fail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.analysis import capacity as C
from bench.analysis.capacity import search as S
from bench.analysis.capacity.interval import (BROKEN, CONCURRENCY, GRID, INF, MEETS, NEVER, SEARCH, Capacity,
                                              figure)

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


# ---------------------------------------------------------------------------------------------
# Ratios


def _div(x: float, y: float) -> float | None:
    """x / y with open ends; None where the quotient has no meaning (0/0, inf/inf)."""
    if math.isinf(y):
        return 0.0 if not math.isinf(x) else None
    if y == 0:
        return INF if x > 0 else None
    return x / y


def ratio_interval(a: Capacity, b: Capacity, a_gpus: int, b_gpus: int) -> tuple[float, float] | None:
    """[lo, hi) of (candidate per GPU) / (baseline per GPU); None when it cannot be formed."""
    if not a.known or not b.known:
        return None
    # Each end's run-to-run band comes off before dividing and goes back on in quadrature: the two
    # sides' runs are independent, so their noise does not line up at its worst on both at once.
    a_lo, a_hi = a.lo * (1 + a.band_lo) / a_gpus, a.hi / (1 + a.band_hi) / a_gpus
    b_lo, b_hi = b.lo * (1 + b.band_lo) / b_gpus, b.hi / (1 + b.band_hi) / b_gpus
    if a_hi == 0 and b_hi == 0:
        return None  # neither side serves anything within the SLO
    lo = _div(a_lo, b_hi)
    hi = 0.0 if a_hi == 0 else _div(a_hi, b_lo)
    if lo is not None and not math.isinf(lo):
        lo /= 1 + math.hypot(a.band_lo, b.band_hi)
    if hi is not None and not math.isinf(hi):
        hi *= 1 + math.hypot(a.band_hi, b.band_lo)
    lo = 0.0 if lo is None else lo
    hi = INF if hi is None else hi
    return round(lo, 4) if not math.isinf(lo) else lo, round(hi, 4) if not math.isinf(hi) else hi


def point_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 4)


# ---------------------------------------------------------------------------------------------
# Words


def ratio_text(value: float | None) -> str:
    if value is None:
        return "unknown"
    if math.isinf(value):
        return "no finite value"
    return f"{value:.2f}x"


def unbounded_ratio_text(lo: float, hi: float) -> str | None:
    """The words for a ratio interval that a measured end does not close, or None for one that two
    measured ends bound. A lower end of 0 comes from a capacity that is open above (the baseline
    still met the SLO at its highest load), so it is worded as no bound, never as a measured 0x;
    the pages word their other intervals themselves and share these cases."""
    if math.isinf(lo):
        return "unbounded (only the candidate meets the SLO)"
    if lo <= 0 and math.isinf(hi):
        return "no bound either way (the capacities it is made of are open)"
    if lo <= 0 < hi:
        return f"{hi:.2f}x or less (no lower bound)"
    if hi <= 0:
        return "0x (only the baseline meets the SLO)"
    return None


def interval_text(interval: tuple[float, float] | list | None) -> str:
    """'1.80x to 2.40x', '1.80x or more (no upper bound)', '8.00x or less (no lower bound)', or why
    there is none (unbounded_ratio_text)."""
    if interval is None:
        return "no interval"
    lo, hi = (INF if v is None else v for v in interval)
    unbounded = unbounded_ratio_text(lo, hi)
    if unbounded:
        return unbounded
    if math.isinf(hi):
        return f"{lo:.2f}x or more (no upper bound)"
    if lo == hi:
        return f"{lo:.2f}x"
    return f"{lo:.2f}x to {hi:.2f}x"


def _n(v: float | None, digits: int = 1) -> str:
    return "unknown" if v is None else f"{v:,.{digits}f}"


def load_text(unit: str, value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"c={value:g}" if unit == CONCURRENCY else f"{value:g} req/s"


def noise_words(pct: float | None, source: str | None, by_figure: dict[str, Any] | None = None) -> str:
    """The run-to-run band in words: "run-to-run band 11 %, assumed, no point was run twice"; where a
    figure other than output tok/s set the headline (`by_figure`, summary.json's `noise_pct_by_figure`),
    the output tok/s band first, the one that widened the ends, then the largest and its figure:
    "run-to-run band 6.43 % on output tok/s (the largest, 14.18 %, on the decode p99), measured from
    repeats". A latency p99's band widens its own check only (on 2 cores an ITL p99 band of 170 % sat
    beside a capacity interval 1.36x wide), so it never reads as the interval's."""
    if pct is None:
        return ""
    how = {"measured": ", measured from repeats", "assumed": ", assumed, no point was run twice",
           "default": ", assumed, no point was run twice"}.get(source or "", "")
    tok, widest = _below_headline(pct, by_figure)
    if tok is None:
        return f"run-to-run band {pct:g} %{how}"
    named = f", on the {C.FIGURE_WORDS[widest]}" if widest else ""
    return f"run-to-run band {tok:g} % on output tok/s (the largest, {pct:g} %{named}){how}"


def _below_headline(pct: float, by_figure: dict[str, Any] | None) -> tuple[float | None, str | None]:
    """(the output tok/s band, the figure that set the headline) where the tok/s band is below the headline."""
    if not isinstance(by_figure, dict):
        return None, None
    tok = by_figure.get(C.OUTPUT_TOK_S)
    if not isinstance(tok, (int, float)) or isinstance(tok, bool) or tok >= pct:
        return None, None
    return tok, next((name for name in C.NOISE_FIGURES if by_figure.get(name) == pct), None)



def higher_load_advice(cap: Capacity) -> str:
    """What adds loads above a capacity that still meets the SLO at the highest one it ran; '' for a
    capacity that is not open at the top. The search goes above the grid by itself (up to
    `--search-max-concurrency`), so `--resume` in the same folder adds them."""
    if not cap.known or cap.state != MEETS or not (cap.hi is None or math.isinf(cap.hi)) or cap.load_max is None:
        return ""
    top = cap.load_max
    if cap.unit == CONCURRENCY:
        return (f"raise `--search-max-concurrency` above c={top:g}, the highest it ran, and run "
                "`bench sweep --capacity-search --resume` on the same folder")
    return (f"offered rates above {top:g} req/s, the highest it ran, come with `bench sweep --capacity-search "
            "--open-loop always --resume` on the same folder")


def adjacent(cap: Capacity) -> bool:
    """A closed-loop capacity whose ends are two neighbouring concurrencies: no concurrency narrows it."""
    return (cap.state == MEETS and cap.unit == CONCURRENCY and cap.load_pass is not None
            and cap.load_fail is not None and cap.load_fail - cap.load_pass <= 1)


def search_tip(ends_adjacent: bool) -> str:
    """What narrows a capacity search's interval: more budget, or where every interval's ends are already
    neighbouring concurrencies, the open loop's rates between them."""
    if ends_adjacent:
        return ("the ends are already neighbouring concurrencies, so only offered rates between them narrow it: "
                "`bench sweep --capacity-search --open-loop always --resume`")
    return ("narrow the capacity search: `bench sweep --capacity-search --resume` with more `--budget-minutes` (the "
            "sweep's last lines say how much)")


def narrowing_advice(source: str | None, a: Capacity, b: Capacity, labels: tuple[str, str]) -> str:
    """The command that narrows a straddling interval; it never asks for a load either side already ran."""
    tips = []
    for cap, label in ((a, labels[0]), (b, labels[1])):
        more = higher_load_advice(cap)
        if more:
            tips.append(f"{label} still meets the SLO at its highest load ({load_text(cap.unit, cap.load_max)}): "
                        f"{more}")
    if source == GRID:
        tips.append("run both sweeps again with `--capacity-search --resume` (the grid is kept; the search "
                    "adds only the loads that narrow each side's interval)")
    elif source == SEARCH and a.known and b.known and all(adjacent(cap) for cap in (a, b)):
        tips.append(search_tip(True))
    else:
        wide = [f"{label} ({cap.width:.2f}x)" for cap, label in ((a, labels[0]), (b, labels[1]))
                if cap.width is not None and cap.width > (cap.target or S.TARGET_WIDTH) + 1e-9]
        if wide:
            tips.append("narrow " + " and ".join(wide) + ": `bench sweep --capacity-search --resume` with more "
                        "`--budget-minutes` (the sweep's last lines say how much), or a longer `--window-s` where "
                        "repeats straddle the limit")
    return "; ".join(tips) or "measure both sides again: their intervals are as narrow as the search makes them"


def broken_call_words(name: str, cap: Capacity, label: str) -> str:
    return f"{name}: the {label}'s {cap.reason or 'measurement is broken'}"


# ---------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class Call:
    """The decision in one scenario."""

    scenario: str
    state: str
    interval: tuple[float, float] | None
    point: float | None
    source: str | None
    reason: str | None


def _state_of(interval: tuple[float, float] | None, threshold: float) -> str:
    if interval is None:
        return INCONCLUSIVE
    lo, hi = interval
    if lo >= threshold:
        return PASS
    if hi < threshold:
        return FAIL
    return INCONCLUSIVE



def slo_call(name: str, a: Capacity, b: Capacity, source: str | None, *, a_gpus: int, b_gpus: int,
             threshold: float, labels: tuple[str, str]) -> Call:
    cand, base = labels
    interval = ratio_interval(a, b, a_gpus, b_gpus)
    point = point_ratio(figure(a) / a_gpus if figure(a) is not None else None,
                        figure(b) / b_gpus if figure(b) is not None else None)
    state = _state_of(interval, threshold)
    thr = f"{threshold:g}x"
    broken = [(w, label, cap) for w, label, cap in (("candidate", cand, a), ("baseline", base, b))
              if cap.state == BROKEN]
    if broken:
        reason = "; ".join(broken_call_words(name, cap, f"{w} ({label})") for w, label, cap in broken)
        return Call(name, INCONCLUSIVE, None, None, source, reason)
    if not a.known or not b.known:
        who = [f"the {w} ({label})" for w, label, cap in (("candidate", cand, a), ("baseline", base, b))
               if not cap.known]
        reason = (f"{name}: {' and '.join(who)} has no usable run, so its capacity under the SLO is unknown; "
                  "run the scenario (`bench sweep --scenarios " + name + " --resume` on that side)")
    elif interval is None:
        reason = (f"{name}: neither side meets the SLO at any load tested, so there is no ratio under the SLO; "
                  "compare the peaks (`--basis peak`) or review the SLO limits")
    elif state == FAIL:
        if a.state == NEVER:
            reason = (f"{name}: the candidate ({cand}) never meets the SLO at the loads tested "
                      f"(it misses from {load_text(a.unit, a.load_fail)})")
        else:
            reason = (f"{name}: even the best case is below the {thr} threshold (SLO ratio per GPU "
                      f"{interval_text(interval)})")
    elif state == INCONCLUSIVE:
        reason = (f"{name}: the SLO ratio per GPU, {interval_text(interval)}, spans the {thr} threshold; "
                  f"to settle it, {narrowing_advice(source, a, b, (cand, base))}")
    else:
        reason = None
    return Call(name, state, interval, point, source, reason)


def peak_call(name: str, ratio: float | None, *, threshold: float, labels: tuple[str, str],
              missing: list[str]) -> Call:
    if ratio is None:
        who = " and ".join(missing) or "a side"
        return Call(name, INCONCLUSIVE, None, None, None,
                    f"{name}: no peak in {who} (no usable run); run the scenario "
                    f"(`bench sweep --scenarios {name} --resume` on that side)")
    interval = (ratio, ratio)
    state = PASS if ratio >= threshold else FAIL
    reason = None if state == PASS else (f"{name}: the peak ratio per GPU, {ratio:.2f}x, is below the "
                                         f"{threshold:g}x threshold")
    return Call(name, state, interval, ratio, None, reason)
