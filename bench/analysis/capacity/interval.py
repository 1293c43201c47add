"""One side's capacity under the SLO in one scenario, as an interval of output tok/s per replica.

A sweep measures a server at a handful of loads, so its capacity under the SLO is known only between
two of them. `Capacity` holds that interval with the runs it came from; the verdict
(bench.analysis.verdict) divides two of them, and every page shows the same object.

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

Each end is widened by the run-to-run band of the runs behind it (bench.analysis.capacity.stats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.analysis.capacity import search as S
from bench.analysis.capacity import stats as C

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
            "output_tok_s": None if not self.known else [json_end(self.lo), json_end(self.hi)],
            "load_unit": self.unit,
            "load_pass": self.load_pass,
            "load_fail": self.load_fail,
            "load_max": self.load_max,
            "confirmed": self.confirmed,
            "point_tok_s": json_end(self.point) if self.state == MEETS else None,
            "loop": self.loop,
            "source_run": self.source_run,
            "source_runs": list(self.source_runs),
            "fail_runs": list(self.fail_runs),
            "repeats": self.repeats,
            "noise_pct": self.noise_pct,
            "noise_pct_by_figure": self.noise_by_figure,
            "noise_source": self.noise_source,
            "noise_repeats": self.measured_repeats,
            "width": json_end(self.width),
            "target_width": self.target,
            "reason": self.reason,
        }


def json_end(value: float | None) -> float | None:
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


def figure(cap: Capacity) -> float | None:
    """The capacity figure (output tok/s at the highest load meeting the SLO: the mean of that load's
    runs), 0 for a side that misses the SLO even one request at a time, None without data or where it
    is known only to lie below a load that was not the lightest (never meeting the SLO from c > 1)."""
    if not cap.known:
        return None
    if cap.state == NEVER:
        return 0.0 if cap.hi == 0 else None
    return cap.point if cap.point is not None else cap.lo


SOURCE_WORDS = {GRID: "grid", SEARCH: "capacity search", OPEN_LOOP: "open loop", None: "none"}
