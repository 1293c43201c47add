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
from pathlib import Path
from typing import Any

from bench.analysis import capacity as C
from bench.analysis import results as R
from bench.analysis.capacity import search as S

INF = math.inf
GRID, SEARCH, OPEN_LOOP = "grid", "search", "open_loop"
MEETS, NEVER, NO_DATA, BROKEN = "meets_slo", "never_meets_slo", "no_data", "broken_measurement"
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
CONCURRENCY, RATE = "concurrency", "req/s"


@dataclass(frozen=True)
class Capacity:
    """One side's capacity under the SLO in one scenario: output tok/s in [lo, hi) per replica.

    `point` is the capacity figure itself: the output tok/s at `load_pass`, the highest load that
    met the SLO (the mean of its runs), measured by `source_runs` (`source_run` the first). [lo, hi)
    is its 95 % interval: from the point divided by (1 + the output tok/s run-to-run band of its runs)
    to the most a load below `load_fail` (the lowest load above it that missed the SLO) serves, times
    (1 + its band) (`closed_loop`); hi is INF for an open upper end. For a side that never meets the SLO `load_fail` is the lowest
    load tested. Loads are concurrencies or offered req/s (`unit`); `loop` is closed or open.
    `noise_pct` is the largest figure's run-to-run band of one run (`noise_source`: measured from
    repeats, or assumed); `noise_by_figure` each figure's (output tok/s, TTFT, decode), the output
    tok/s one widening the ends; `repeats` how many runs measured the point.
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
    point: float | None = None
    req_point: float | None = None
    source_runs: tuple[str, ...] = ()
    fail_runs: tuple[str, ...] = ()
    repeats: int = 0
    noise_pct: float | None = None
    noise_source: str | None = None
    noise_by_figure: dict[str, float] | None = None
    judgement: Any = None  # the pass end's pooled judgement (bench.analysis.capacity), closed loop
    band_lo: float = 0.0  # the run-to-run band (a fraction) that widened lo, and hi
    band_hi: float = 0.0
    measured_repeats: int = 0  # comparable runs the band was measured from (0: assumed)
    reason: str | None = None  # why a broken measurement is broken
    target: float | None = None  # the width the search aimed for

    @property
    def known(self) -> bool:
        return self.state not in (NO_DATA, BROKEN)

    @property
    def width(self) -> float | None:
        """hi / lo of the interval; None for an open end or a side that never meets the SLO."""
        if self.state != MEETS or not self.lo or self.hi is None or math.isinf(self.hi):
            return None
        return self.hi / self.lo

    @property
    def source_run(self) -> str | None:
        return self.source_runs[0] if self.source_runs else None

    @property
    def loop(self) -> str:
        return "open" if self.unit == RATE else "closed"

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
            "point_tok_s": _end(self.point) if self.state == MEETS else None,
            "loop": self.loop,
            "source_run": self.source_run,
            "source_runs": list(self.source_runs),
            "fail_runs": list(self.fail_runs),
            "repeats": self.repeats,
            "noise_pct": self.noise_pct,
            "noise_pct_by_figure": self.noise_by_figure,
            "noise_source": self.noise_source,
            "noise_repeats": self.measured_repeats,
            "width": _end(self.width),
            "target_width": self.target,
            "reason": self.reason,
        }


def _end(value: float | None) -> float | None:
    """An interval end for JSON: a number, or null for no finite bound."""
    if value is None or math.isinf(value) or math.isnan(value):
        return None
    return round(value, 4)


# ---------------------------------------------------------------------------------------------
# Capacity of one side


def run_file(run: R.RunResult, qualify: bool = False) -> str:
    """A run's file as its sweep folder names it, the name every page and record gives it: `S1_chat_c8.json`,
    `search/S1_chat_c10.run2.json`, `open_loop/S1_chat_rate2.5.run1.json`; with `qualify` (the runs of several
    sweeps pooled) after the sweep folder's own name: `S1_chat.earlier-1/S1_chat_c8.json`."""
    path = Path(run.path or "")
    nested = path.parent.name in ("search", "open_loop")
    name = f"{path.parent.name}/{path.name}" if nested else path.name
    if qualify:
        return f"{(path.parent.parent if nested else path.parent).name}/{name}"
    return name


def weighted(runs: list[R.RunResult], attr: str) -> float | None:
    """The request-weighted mean of a figure over the runs of one point."""
    pairs = [(getattr(r, attr), max(1, r.completed or 0)) for r in runs if getattr(r, attr) is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if pairs else None


def _effective(runs: list[R.RunResult]) -> float:
    """How many independent runs a request-weighted mean is worth ((sum w)^2 / sum w^2)."""
    weights = [max(1, r.completed or 0) for r in runs]
    return (sum(weights) ** 2 / sum(w * w for w in weights)) if weights else 1.0


def closed_points(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]]
                  ) -> dict[int, list[R.RunResult]]:
    """Every usable closed-loop run per concurrency: the grid's, then the capacity search's."""
    points: dict[int, list[R.RunResult]] = {}
    for r in grid:
        if r.valid and r.output_tok_s is not None:
            points.setdefault(r.concurrency, []).append(r)
    for c, runs in search.items():
        points.setdefault(c, []).extend(r for r, _ in runs if r.valid and r.output_tok_s is not None)
    return {c: points[c] for c in sorted(points) if points[c]}


def closed_peak(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]],
                qualify: bool = False) -> dict[str, Any] | None:
    """The peak over every closed-loop run of the sweep (the grid's and the search's; the runs of
    one concurrency averaged): {"concurrency", "output_tok_s", "req_s", "loop", "source_run",
    "source_runs"}; ties go to the lower concurrency."""
    points = closed_points(grid, search)
    if not points:
        return None
    c = max(points, key=lambda k: (weighted(points[k], "output_tok_s") or 0.0, -k))
    runs = points[c]
    tok, req = weighted(runs, "output_tok_s"), weighted(runs, "req_s")
    files = [run_file(r, qualify) for r in runs]
    return {"concurrency": c, "output_tok_s": None if tok is None else round(tok, 3),
            "req_s": None if req is None else round(req, 4), "loop": "closed", "source_run": files[0],
            "source_runs": files}


def closed_search(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]], *,
                  ttft_ms: float, decode_ms: float, decode_metric: str = "itl", noise_pct: float = C.DEFAULT_NOISE_PCT,
                  target: float = S.TARGET_WIDTH, qualify: bool = False) -> S.Search:
    """The closed loop's evidence as the search sees it: the grid's runs and the search's per concurrency
    (`qualify`: runs named after their sweep folder too, for several sweeps pooled)."""
    state = S.Search(ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric, default_noise_pct=noise_pct,
                     target=target)
    for r in grid:
        if r.valid and r.raw and r.output_tok_s is not None:
            state.observe(r.concurrency, r.raw, run_file(r, qualify))
    for c, runs in search.items():
        for r, d in runs:
            if r.valid and d and r.output_tok_s is not None:
                state.observe(c, d, run_file(r, qualify))
    return state


def closed_loop(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]], *,
                ttft_ms: float, decode_ms: float, decode_metric: str = "itl",
                noise_pct: float = C.DEFAULT_NOISE_PCT, target: float = S.TARGET_WIDTH,
                qualify: bool = False) -> Capacity:
    """The capacity under the SLO, closed loop: the one function behind every page's figure.

    The capacity is the output tok/s at the highest concurrency that meets the SLO with confidence
    (the PoC's definition), from the grid's runs and the capacity search's together
    (bench.analysis.capacity.search.Search judges each concurrency on all its runs, p99 intervals widened by
    the run-to-run band); its 95 % interval runs from that figure to the throughput at the lowest
    concurrency above it that misses the SLO for sure, each end widened by its band.
    `noise_pct` is the band assumed where no point was measured twice; `qualify` as for `closed_search`."""
    state = closed_search(grid, search, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric,
                          noise_pct=noise_pct, target=target, qualify=qualify)
    return from_search(state, SEARCH if search else GRID, CONCURRENCY)


def from_search(state: S.Search, source: str, unit: str) -> Capacity:
    """A side's capacity interval read off a search's evidence (closed or open loop)."""
    loads = state.loads()
    if not loads:
        return Capacity(source, NO_DATA, unit=unit)
    noise = state.noise()
    common = dict(noise_pct=noise.pct, noise_source=noise.source, measured_repeats=noise.repeats,
                  noise_by_figure=noise.bands())
    broken = state.broken()
    if broken:
        return Capacity(source, BROKEN, unit=unit, load_max=loads[-1], reason=S.broken_words(broken),
                        fail_runs=tuple(n for g in broken.names for n in g), **common)
    names = {x: tuple(r.name for r in state.runs(x)) for x in loads}
    lo_c, hi_c = state.bounds()
    if lo_c is None:
        lowest = loads[0]
        tok, req, wide = state.tok_s(lowest) or 0.0, state.req_s(lowest) or 0.0, state.band(lowest)
        zero = unit == CONCURRENCY and lowest <= 1 and state.state(lowest) == S.FAIL
        return Capacity(source, NEVER, 0.0, 0.0 if zero else tok * (1 + wide), unit, None, lowest, loads[-1],
                        band_hi=0.0 if zero else wide, req_lo=0.0, req_hi=0.0 if zero else req * (1 + wide),
                        fail_runs=names[lowest], **common)
    tok, req, wide = state.tok_s(lo_c) or 0.0, state.req_s(lo_c) or 0.0, state.band(lo_c)
    low, top = state.ends()
    if hi_c is None:
        hi, req_hi, band_hi = INF, INF, 0.0
    else:
        band_hi = state.band(hi_c)
        hi = top if top is not None else INF
        req_hi = max(state.req_s(hi_c) or 0.0, req) * (1 + band_hi)
    judgement = state.judgement(lo_c)
    return Capacity(source, MEETS, low, hi, unit, lo_c, hi_c, loads[-1], band_lo=wide, band_hi=band_hi,
                    confirmed=C.confident(judgement, C.MIN_P99_REQUESTS), req_lo=req / (1 + wide), req_hi=req_hi,
                    point=tok, req_point=req, source_runs=names[lo_c],
                    fail_runs=names[hi_c] if hi_c is not None else (), repeats=len(names[lo_c]),
                    judgement=judgement, target=state.target, **common)


def open_loop(search: S.Search | None) -> Capacity | None:
    """The open-loop capacity interval from the rate search's runs; None without any."""
    if search is None or not search.loads():
        return None
    return from_search(search, OPEN_LOOP, RATE)


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


SOURCE_WORDS = {GRID: "grid", SEARCH: "capacity search", OPEN_LOOP: "open loop", None: "none"}


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


def figure(cap: Capacity) -> float | None:
    """The capacity figure (output tok/s at the highest load meeting the SLO: the mean of that load's
    runs), 0 for a side that misses the SLO even one request at a time, None without data or where it
    is known only to lie below a load that was not the lightest (never meeting the SLO from c > 1)."""
    if not cap.known:
        return None
    if cap.state == NEVER:
        return 0.0 if cap.hi == 0 else None
    return cap.point if cap.point is not None else cap.lo


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
