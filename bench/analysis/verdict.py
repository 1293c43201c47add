"""The verdict, decided on intervals: pass, fail or inconclusive, always with its reasons.

A sweep measures a server at a handful of loads, so its capacity under the SLO is known only
between two of them. This module turns that into numbers a capacity review can sign.

Capacity of one side in one scenario (output tok/s per replica; per GPU for the ratio):

- grid: [tok/s at the highest load that meets the SLO, tok/s at the lowest load above it that
  misses it); the throughput between two tested loads lies between theirs.
- search (`sweep --capacity-search`): the same bracket from the grid and the search's extra points
  together, so it is tighter; a point the search could not confirm with confidence counts as
  missing the SLO (bench.analysis.capacity).
- open loop (Poisson arrivals at offered rates): [output tok/s at the rate capacity, at the next
  offered rate, which misses the SLO).
- open upper end: the highest load tested still meets the SLO, so the capacity is at least the
  throughput there and has no known upper bound.
- never meets the SLO at the loads tested: at concurrency 1 (one request at a time, the lightest
  closed-loop load) that means a capacity of 0; when the lowest load tested was higher, the
  capacity lies between 0 and the throughput there.

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
from typing import Any

from bench.analysis import capacity as C
from bench.analysis import results as R

INF = math.inf
GRID, SEARCH, OPEN_LOOP = "grid", "search", "open_loop"
MEETS, NEVER, NO_DATA = "meets_slo", "never_meets_slo", "no_data"
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
CONCURRENCY, RATE = "concurrency", "req/s"


@dataclass(frozen=True)
class Capacity:
    """One side's capacity under the SLO in one scenario: output tok/s in [lo, hi) per replica.

    hi is INF for an open upper end. `load_pass` is the highest load that met the SLO, `load_fail`
    the lowest load above it that missed it (for a side that never meets the SLO: the lowest load
    tested); loads are concurrencies or offered req/s (`unit`).
    """

    source: str
    state: str
    lo: float | None = None
    hi: float | None = None
    unit: str = CONCURRENCY
    load_pass: float | None = None
    load_fail: float | None = None
    load_max: float | None = None
    confirmed: bool = False
    # req/s at the two ends (for loads stated in requests); None where unknown
    req_lo: float | None = None
    req_hi: float | None = None

    @property
    def known(self) -> bool:
        return self.state != NO_DATA

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "state": self.state,
            "output_tok_s": None if not self.known else [_end(self.lo), _end(self.hi)],
            "load_unit": self.unit,
            "load_pass": self.load_pass,
            "load_fail": self.load_fail,
            "load_max": self.load_max,
            "confirmed": self.confirmed,
        }


def _end(value: float | None) -> float | None:
    """An interval end for JSON: a number, or null for no finite bound."""
    if value is None or math.isinf(value) or math.isnan(value):
        return None
    return round(value, 4)


# ---------------------------------------------------------------------------------------------
# Capacity of one side


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def closed_loop(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]], *,
                ttft_ms: float, decode_ms: float, decode_metric: str = "itl",
                min_requests: int = C.DEFAULT_SEARCH_REQUESTS, repeats: int = C.DEFAULT_REPEATS) -> Capacity:
    """The closed-loop capacity interval from the usable grid runs and the search's runs."""
    usable = [r for r in grid if r.valid and r.raw and r.output_tok_s is not None]
    judged = {r.concurrency: C.judge_results([r.raw], ttft_ms=ttft_ms, decode_ms=decode_ms,
                                             decode_metric=decode_metric) for r in usable}
    search = {c: runs for c, runs in search.items() if runs}
    source = SEARCH if search else GRID
    if not judged and not search:
        return Capacity(source, NO_DATA)
    state = C.Search(judged, min_requests=min_requests, repeats=repeats)
    for c, runs in search.items():
        state.extra[c] = C.judge_results([d for _, d in runs], ttft_ms=ttft_ms, decode_ms=decode_ms,
                                         decode_metric=decode_metric)
        state.run_requests[c] = [r.completed or 0 for r, _ in runs]
    tok: dict[int, float | None] = {r.concurrency: r.output_tok_s for r in usable}
    req: dict[int, float | None] = {r.concurrency: r.req_s for r in usable}
    for c, runs in search.items():
        tok[c] = _mean([r.output_tok_s for r, _ in runs])
        req[c] = _mean([r.req_s for r, _ in runs])
    loads = sorted(set(judged) | set(search))
    lo_c, hi_c = state.bounds()
    if lo_c is None:
        lowest = loads[0]
        zero = lowest <= 1
        return Capacity(source, NEVER, 0.0, 0.0 if zero else (tok.get(lowest) or 0.0), CONCURRENCY,
                        None, lowest, loads[-1], req_lo=0.0, req_hi=0.0 if zero else req.get(lowest))
    passing = [c for c in loads if c <= lo_c and (state.decided(c) is True or (
        state.decided(c) is None and c not in state.extra and c in judged and judged[c].point_pass))]
    best = max((c for c in passing if tok.get(c) is not None), key=lambda c: tok[c], default=None)
    lo = tok[best] if best is not None else 0.0
    req_lo = req.get(best) if best is not None else 0.0
    if hi_c is None:
        hi, req_hi = INF, INF
    else:
        hi = max(tok.get(hi_c) or 0.0, lo)
        req_hi = max(req.get(hi_c) or 0.0, req_lo or 0.0) if req_lo is not None else req.get(hi_c)
    return Capacity(source, MEETS, lo, hi, CONCURRENCY, lo_c, hi_c, loads[-1],
                    confirmed=state.decided(lo_c) is True, req_lo=req_lo, req_hi=req_hi)


def open_loop(points: list[dict[str, Any]]) -> Capacity | None:
    """The open-loop capacity interval from `{"rate", "meets", "output_tok_s"}` points; None without any.

    A rate counts only when it and every lower offered rate meet the SLO (as the rate capacity)."""
    pts = sorted((p for p in points if p.get("output_tok_s") is not None), key=lambda p: p["rate"])
    if not pts:
        return None
    best = fail = None
    for p in pts:
        if not p["meets"]:
            fail = p
            break
        best = p
    top = pts[-1]["rate"]
    if best is None:
        return Capacity(OPEN_LOOP, NEVER, 0.0, fail["output_tok_s"], RATE, None, fail["rate"], top,
                        req_lo=0.0, req_hi=fail.get("req_s"))
    hi = INF if fail is None else max(fail["output_tok_s"], best["output_tok_s"])
    req_hi = INF if fail is None else (max(fail.get("req_s") or 0.0, best.get("req_s") or 0.0)
                                       if best.get("req_s") is not None else fail.get("req_s"))
    return Capacity(OPEN_LOOP, MEETS, best["output_tok_s"], hi, RATE, best["rate"],
                    fail["rate"] if fail else None, top, confirmed=True, req_lo=best.get("req_s"), req_hi=req_hi)


def bounded(cap: Capacity | None) -> bool:
    """An interval with both ends finite (a failing load above the capacity was measured)."""
    return cap is not None and cap.known and cap.hi is not None and not math.isinf(cap.hi)


def pair(cand: dict[str, Any] | None, base: dict[str, Any] | None) -> tuple[Capacity, Capacity, str | None]:
    """The same kind of capacity on both sides: open loop where both sides ran it and bracketed
    their rate capacity (an offered rate above it missed the SLO), else closed loop. An open loop
    whose every offered rate met the SLO says only "at least", which the closed loop improves on."""
    empty = {"closed": Capacity(GRID, NO_DATA), "open": None}
    cand, base = cand or empty, base or empty
    if bounded(cand.get("open")) and bounded(base.get("open")):
        return cand["open"], base["open"], OPEN_LOOP
    a, b = cand["closed"], base["closed"]
    if not a.known and not b.known:
        return a, b, None
    return a, b, SEARCH if SEARCH in (a.source, b.source) else GRID


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
    a_lo, a_hi = a.lo / a_gpus, a.hi / a_gpus
    b_lo, b_hi = b.lo / b_gpus, b.hi / b_gpus
    if a_hi == 0 and b_hi == 0:
        return None  # neither side serves anything within the SLO
    lo = _div(a_lo, b_hi)
    hi = 0.0 if a_hi == 0 else _div(a_hi, b_lo)
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


def capacity_text(cap: Capacity) -> str:
    """A side's capacity in words: the tok/s interval and the loads that bound it."""
    if cap.state == NO_DATA:
        return "unknown (no usable run)"
    if cap.state == NEVER:
        where = f"misses it from {load_text(cap.unit, cap.load_fail)}"
        if cap.hi == 0:
            return f"0 tok/s: never meets the SLO at the loads tested ({where}, one request at a time)"
        return f"below {_n(cap.hi)} tok/s: never meets the SLO at the loads tested ({where})"
    if cap.hi is None or math.isinf(cap.hi):
        return (f"{_n(cap.lo)} tok/s or more (still meets the SLO at {load_text(cap.unit, cap.load_pass)}, "
                "the highest load tested: no upper bound)")
    span = _n(cap.lo) if _n(cap.lo) == _n(cap.hi) else f"{_n(cap.lo)} to {_n(cap.hi)}"
    return (f"{span} tok/s (meets the SLO at {load_text(cap.unit, cap.load_pass)}, "
            f"misses it at {load_text(cap.unit, cap.load_fail)})")


SOURCE_WORDS = {GRID: "grid", SEARCH: "capacity search", OPEN_LOOP: "open loop", None: "none"}


def narrowing_advice(source: str | None, a: Capacity, b: Capacity, labels: tuple[str, str]) -> str:
    """The command that narrows a straddling interval."""
    tips = []
    for cap, label in ((a, labels[0]), (b, labels[1])):
        if cap.known and cap.state == MEETS and (cap.hi is None or math.isinf(cap.hi)):
            more = ("add higher concurrencies (`bench sweep --concurrencies ...,128 --resume`)"
                    if cap.unit == CONCURRENCY else "add higher offered rates (`--open-loop-rates ...,130`)")
            tips.append(f"{label} still meets the SLO at its highest load ({load_text(cap.unit, cap.load_pass)}): "
                        + more)
    if source == GRID:
        tips.append("run both sweeps again with `--capacity-search --resume` (the grid is kept; the search "
                    "adds only the points that narrow each side's bracket)")
    elif source == SEARCH:
        tips.append("narrow the search: `bench sweep --capacity-search --resume` with a smaller --search-bracket "
                    "(e.g. 0.1), or a larger --extra-budget where the budget stopped it")
    elif source == OPEN_LOOP:
        tips.append("add offered rates between the rate capacity and the next rate (`--open-loop-rates`, in "
                    "percent of the closed-loop capacity) on both sides")
    return "; ".join(tips)


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
    point = point_ratio(a.lo / a_gpus if a.known and a.lo is not None else None,
                        b.lo / b_gpus if b.known and b.lo is not None else None)
    state = _state_of(interval, threshold)
    thr = f"{threshold:g}x"
    if not a.known or not b.known:
        who = [f"the {w} ({label})" for w, label, cap in (("candidate", cand, a), ("baseline", base, b))
               if not cap.known]
        reason = (f"{name}: {' and '.join(who)} has no usable run, so its capacity under the SLO is unknown; "
                  "run the scenario (`bench sweep --scenarios " + name + " --resume` on that side)")
    elif interval is None:
        reason = (f"{name}: neither side meets the SLO at any load tested, so there is no ratio under the SLO; "
                  "compare the peaks (`--verdict-basis peak`) or review the SLO limits")
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


def decide(calls: list[Call], *, basis: str, threshold: float, issues: list[str],
           incomparable: list[str]) -> dict[str, Any]:
    """summary.json's verdict: state, reasons, and the figures behind them.

    `issues` make the comparison incomplete (no pass); `incomparable` (a subset) make the sides
    differ in what they measured, so even a failing interval is not trusted (no fail either)."""
    states = [c.state for c in calls]
    intervals = [c.interval for c in calls if c.interval is not None]
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
    smallest = min(intervals, key=lambda i: (i[0], i[1]), default=None)
    lo, hi = smallest if smallest is not None else (None, None)
    return {
        "threshold": threshold,
        "min_ratio": _end(lo) if lo is not None else None,
        "pass": state == PASS,
        "basis": basis,
        "state": state,
        "reasons": reasons,
        "min_ratio_interval": [_end(lo), _end(hi)] if lo is not None else None,
    }


STATE_WORDS = {PASS: "PASS", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE"}
# `bench report --exit-code`
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
