"""The SLO capacity search: bisection over loads until the capacity is known to a target width.

One class for both kinds of load: closed-loop concurrencies (integers) and open-loop offered rates
in req/s (any positive number, bisected geometrically). Plain data in, a decision out: the sweep
(bench/run/extra_runs.py) asks `next_step()` what to run, runs it at the size it chooses, and
`observe()`s the result; the report (bench.analysis.capacity.interval) builds the same object from the files
and reads the capacity off it. `--resume` replays the search over the files already there.

The rules (docs/benchmark.md, "The capacity search"):

- A point is judged on all its runs together (bench.analysis.capacity.judge_results): it PASSES
  with confidence when the upper end of each p99's 95 % interval, widened by its own figure's
  run-to-run band (each p99's own spread between comparable repeats), is
  within its limit on at least 100 requests; it FAILS for sure when a lower end is above a limit;
  anything else is SOFT (straddling a limit, a decode latency too small to measure, too few
  requests): never claimed as capacity, never taken for a miss.
- The capacity lies between the throughput at the highest load that passes (`lo`) and the
  throughput at the lowest load above it that fails for sure (`hi`). The search stops when those two
  throughputs are within `target` of each other (`precision`; 1.22 by default: +-10 % around the
  middle). The interval it reports (`ends`, `width`) also widens each end by its run-to-run band:
  the output tok/s band, the figure the ends are.
- The run-to-run bands come only from comparable repeats: runs at the same load with the same
  number of requests (a repeat is always run at its point's first size). Where none exist, the
  default band is assumed; the default also counts as one degree of freedom beside measured ones.
  A measured output tok/s band above MAX_BAND_PCT means the runs disagree: the measurement is
  broken, and the search stops naming those runs rather than turning the spread into a wide
  interval. A latency p99's band, however wide, only widens its own check (a point its widened
  check cannot judge is soft and gets repeats): on 2 cores two runs of the demo's candidate at c=16
  agreed within 8 % in output tok/s while their TTFT p99s (153 and 201 ms against a 500 ms limit)
  made a band of over 30 %, far inside the limit either way.
- Narrowing, in order: where repeats alone can bring the ends within the target (a pair of points, each
  the pass end or a SOFT point that repeats would settle as a pass, and the sure miss or one they would
  settle as a miss, their throughputs within the target, each needing at most `repeats` more runs if its
  p99s stay as measured while their bootstrap intervals and the band shrink with the square root of its
  runs: `runs_to_settle`), the
  cheapest such pair's members are repeated; else the untested gap between two tested loads inside
  [lo, hi] whose throughputs lie furthest apart is bisected; then a SOFT point inside gets its repeats
  (`repeats`). Where the p99 climbs slowly through its limit (the H200's S1_chat, 2026-12-06: TTFT p99
  473 to 529 ms from c=25 to c=30 against a run-to-run band near 8 %), bisecting every gap first spent
  the budget on points at the limit that no repeat could settle. Once the ends' throughputs are close
  enough, each end is repeated (`end_repeats`) while the bands keep the interval wider than the target:
  the repeats measure the band and narrow it.
- Past the target, the pass end is placed (`point`, 1.05 by default): while the next tested load above
  it lies further than that in throughput, the gap between them is bisected, so that the point figure
  (the pass end's throughput) does not depend on where a search's bisection happened to reach the
  target. Two H100 searches of S1_chat on 2026-12-06 reached 1.22x with their pass ends at c=22 (958.9
  tok/s) and c=20 (901.6), 6.4 % apart, both under a sure miss at c=24; the second stopped with 2.5 of
  its 7 GPU minutes unspent and c=22 untried. These runs are optional (`Step.past_target`): the sweep
  starts one only where its budget also holds a repeat, and a budget that holds neither leaves the
  target reached. Where the next tested load lies within `point` but straddles a limit, it is repeated
  (a repeat needs budget for itself only) if repeats could settle it as a pass: its confidence moves the
  figure by a whole step (two more H100 servers that day put their pass ends at c=22 and c=23, 6.1 %
  apart, c=23 measured once on each at 468 and 449 ms).
- Below the lowest tested load the search halves the load; above the highest it doubles it, up to
  `ceiling`. With no sure miss yet, the highest straddling load is repeated
  first: it settles into the upper end soonest.
- Integer loads stop being divisible: where the two ends are neighbouring concurrencies and their
  throughputs are further apart than the target, the closed loop cannot say more (`ADJACENT`); the
  open-loop rate search, which can be bisected continuously, then carries the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from bench.analysis.capacity import stats as C

TARGET_WIDTH = 1.22  # +-10 %: 1.1 / 0.9
MAX_BAND_PCT = 30.0
DEFAULT_REPEATS = 4  # extra comparable runs of a point whose interval straddles a limit
DEFAULT_END_REPEATS = 1  # repeats of each end where the bands keep the interval wider than the target
POINT_WIDTH = 1.05  # past the target: the pass end and the next tested load above it, in throughput
MIN_RATE_STEP = 1.03  # rates closer than this are not worth telling apart
MAX_SETTLE_RUNS = 10_000  # runs_to_settle's "never"

PASS, FAIL, SOFT = "pass", "fail", "soft"
# Why a search stopped (`Search.stopped`)
NARROW = "narrow"  # known to the target width
NEVER = "never"  # the lightest load misses the SLO for sure
OPEN = "open"  # nothing up to the ceiling misses the SLO for sure
ADJACENT = "adjacent"  # neighbouring concurrencies further apart than the target
EDGE = "edge"  # every load between the ends measured and repeated: the SLO's edge is not sharper
BROKEN = "broken"  # repeats disagree past MAX_BAND_PCT


@dataclass(frozen=True)
class Run:
    """One measured run: its result dictionary (with per-request detail) and its file's name."""

    raw: dict[str, Any]
    name: str

    @property
    def requests(self) -> int:
        for key in ("num_prompts", "completed"):
            v = C._num(self.raw.get(key))  # noqa: SLF001
            if v:
                return int(v)
        return 0

    @property
    def tok_s(self) -> float | None:
        return C._num(self.raw.get("output_throughput"))  # noqa: SLF001

    @property
    def req_s(self) -> float | None:
        return C._num(self.raw.get("request_throughput"))  # noqa: SLF001


@dataclass(frozen=True)
class Step:
    """What to run next: a new load (sized by the caller), or a repeat at the point's first size."""

    load: float
    repeat: bool
    why: str
    requests: int | None = None  # a repeat's size (its point's first run's)
    past_target: bool = False  # the target is reached: a run that places the pass end, where the budget allows


@dataclass
class Search:
    """Bisection of the SLO capacity over one kind of load (see the module docstring)."""

    ttft_ms: float
    decode_ms: float
    decode_metric: str = "itl"
    integer: bool = True  # concurrencies; False: offered rates
    target: float = TARGET_WIDTH
    repeats: int = DEFAULT_REPEATS
    end_repeats: int = DEFAULT_END_REPEATS
    point: float = POINT_WIDTH  # place the pass end to this factor past the target; at or above `target`: off
    default_noise_pct: float | Mapping[str, float] = C.DEFAULT_NOISE_PCT  # one for all figures, or per figure
    ceiling: float | None = None  # the highest load the search may try
    floor: float | None = None  # the lowest (rates; concurrencies stop at 1)
    points: dict[float, list[Run]] = field(default_factory=dict)
    stopped: str | None = None
    exhausted: set = field(default_factory=set)  # loads that are not repeated again (a repeat fell short)
    _cache: dict[tuple, C.Judgement] = field(default_factory=dict, repr=False)
    _noise: tuple[int, C.Noise] | None = field(default=None, repr=False)

    # -- evidence --------------------------------------------------------------------------------
    def observe(self, load: float, raw: dict[str, Any], name: str) -> None:
        self.points.setdefault(self.key(load), []).append(Run(raw, name))

    def key(self, load: float) -> float:
        return int(load) if self.integer else float(load)

    def loads(self) -> list[float]:
        return sorted(load for load, runs in self.points.items() if runs)

    def runs(self, load: float) -> list[Run]:
        return self.points.get(load, [])

    def comparable(self) -> list[list[Run]]:
        """Groups of comparable repeats: runs at one load with one number of requests."""
        groups = []
        for load in self.loads():
            by_size: dict[int, list[Run]] = {}
            for run in self.runs(load):
                by_size.setdefault(run.requests, []).append(run)
            groups += [g for g in by_size.values() if len(g) > 1]
        return groups

    def noise(self) -> C.Noise:
        runs = sum(len(v) for v in self.points.values())
        if self._noise is None or self._noise[0] != runs:
            groups = self.comparable()
            self._noise = (runs, C.noise(([r.raw for r in g] for g in groups), self.default_noise_pct,
                                         names=[[r.name for r in g] for g in groups],
                                         decode_metric=self.decode_metric))
        return self._noise[1]

    def broken(self) -> C.Noise | None:
        """The noise, when the measured output tok/s band says the repeats disagree (above MAX_BAND_PCT)."""
        n = self.noise()
        tok = n.measured_by_figure.get(C.OUTPUT_TOK_S)
        return n if tok is not None and tok > MAX_BAND_PCT else None

    def judgement(self, load: float) -> C.Judgement:
        runs = self.runs(load)
        key = (load, len(runs))
        if key not in self._cache:  # the bootstrap, once per point and number of runs; the band moves
            self._cache[key] = C.judge_results([r.raw for r in runs], ttft_ms=self.ttft_ms, decode_ms=self.decode_ms,
                                               decode_metric=self.decode_metric, noise_pct=0.0)
        return C.with_band(self._cache[key], self.noise())  # each check its own figure's band

    def state(self, load: float) -> str:
        """PASS, FAIL or SOFT. A point without per-request detail (a folder from before the sweep kept
        it) passes on its point estimates, as the PoC read its tables, but unconfirmed (`confirmed`)."""
        j = self.judgement(load)
        if C.confident(j, C.MIN_P99_REQUESTS) or (not j.detailed and j.point_pass):
            return PASS
        return FAIL if j.state == C.FAIL else SOFT

    def confirmed(self, load: float) -> bool:
        return C.confident(self.judgement(load), C.MIN_P99_REQUESTS)

    # -- figures ---------------------------------------------------------------------------------
    def tok_s(self, load: float) -> float | None:
        return _weighted([(r.tok_s, r.requests) for r in self.runs(load)])

    def req_s(self, load: float) -> float | None:
        return _weighted([(r.req_s, r.requests) for r in self.runs(load)])

    def band(self, load: float) -> float:
        """The run-to-run band (a fraction) of the mean output tok/s of this load's runs."""
        weights = [max(1, r.requests) for r in self.runs(load)]
        effective = sum(weights) ** 2 / sum(w * w for w in weights) if weights else 1.0
        return C.band(self.noise().figure(C.OUTPUT_TOK_S), effective)

    def bounds(self) -> tuple[float | None, float | None]:
        """(highest load that passes, lowest load above it that fails for sure); None where there is none."""
        loads = self.loads()
        passing = [x for x in loads if self.state(x) == PASS]
        lo = max(passing) if passing else None
        fails = [x for x in loads if (lo is None or x > lo) and self.state(x) == FAIL]
        return lo, (min(fails) if fails else None)

    def ends(self) -> tuple[float | None, float | None]:
        """The capacity interval in output tok/s, bands included: (lo, hi); hi None for an open end."""
        lo, hi = self.bounds()
        if lo is None:
            return None, None
        low = (self.tok_s(lo) or 0.0) / (1 + self.band(lo))
        if hi is None:
            return low, None
        top = max(self.tok_s(hi) or 0.0, self.tok_s(lo) or 0.0) * (1 + self.band(hi))
        return low, top

    def width(self) -> float | None:
        """hi / lo of the capacity interval, bands included; None while it has no upper end."""
        low, top = self.ends()
        if low is None or top is None or low <= 0:
            return None
        return top / low

    def precision(self) -> float | None:
        """How far apart the throughputs at the two ends are (hi / lo, bands left out): what the
        search narrows to `target`; None while there is no upper end."""
        lo, hi = self.bounds()
        if lo is None or hi is None:
            return None
        return self.spread(lo, hi)

    def spread(self, a: float, b: float) -> float:
        """How far the throughput at the higher load `b` lies above that at `a` (bands left out); 1
        where it measured no more (a saturated server, or a slow run: the capacity is then the lower
        load's throughput within its band)."""
        x, y = self.tok_s(a) or 0.0, self.tok_s(b) or 0.0
        if x <= 0:
            return math.inf
        return max(1.0, y / x)

    # -- the next run ----------------------------------------------------------------------------
    def next_step(self) -> Step | None:
        """What to run next, or None with `stopped` saying why."""
        self.stopped = None
        loads = self.loads()
        if not loads:
            self.stopped = NEVER
            return None
        if self.broken():
            self.stopped = BROKEN
            return None
        lo, hi = self.bounds()
        if lo is None:
            return self._below(loads)
        if hi is None:
            return self._above(lo, loads)
        if self.spread(lo, hi) <= self.target * (1 + 1e-9):
            width = self.width()
            if width is not None and width > self.target * (1 + 1e-9):
                # the ends' throughputs are close; their bands still widen the interval: repeats at
                # the ends measure the band and halve its variance (the pass end first)
                short = [x for x in (lo, hi) if len(self.runs(x)) < 1 + self.end_repeats and x not in self.exhausted]
                if short:
                    x = min(short, key=lambda v: (len(self.runs(v)), v != lo))
                    return self._repeat(x, "an end of the interval: a repeat narrows its run-to-run band")
            place = self._place_step(lo, loads)
            if place is not None:
                return place
            self.stopped = NARROW
            return None
        inside = [x for x in loads if lo <= x <= hi]
        soft = [x for x in inside if lo < x < hi and self._repeatable(x)]
        if soft and self.noise().measured_pct is None:
            # the band is still assumed: a repeat of a point at the edge measures it and may settle the
            # point, which moves an end as far as a bisection would
            x = min(soft, key=lambda v: (len(self.runs(v)), v))
            return self._repeat(x, "straddles a limit while the band is assumed: a repeat measures it")
        settle = self._settle_step(lo, hi, soft)
        if settle is not None:
            return settle
        gaps = [(a, b) for a, b in zip(inside, inside[1:]) if self._between(a, b) is not None]
        if gaps:
            a, b = max(gaps, key=lambda g: (self.spread(*g), -g[0]))
            return Step(self._between(a, b), False, f"bisect between {self.words(a)} and {self.words(b)}")
        if soft:
            x = min(soft, key=lambda v: (len(self.runs(v)), v))
            return self._repeat(x, "straddles a limit: a repeat adds requests")
        self.stopped = ADJACENT if self.integer and hi - lo <= 1 else EDGE
        return None

    def _place_step(self, lo: float, loads: list[float]) -> Step | None:
        """Past the target: a bisection between the pass end and the next tested load above it, where their
        throughputs lie further apart than `point` and a load between them is left to try; None otherwise."""
        if self.point >= self.target:
            return None
        above = [x for x in loads if x > lo]
        if not above:
            return None
        nxt = above[0]
        mid, apart = self._between(lo, nxt), self.spread(lo, nxt)
        if mid is not None and apart > self.point * (1 + 1e-9):
            return Step(mid, False, f"the target is reached; placing the pass end: {self.words(lo)} and "
                                    f"{self.words(nxt)} lie {apart:.2f}x apart in throughput (to {self.point:g}x)",
                        past_target=True)
        # the next load above straddles a limit: where repeats could settle it as a pass, it becomes the pass end,
        # one step up (two fresh H100 servers put theirs at c=22 and c=23, 6 % apart, on 2026-12-06)
        if apart > 1 + 1e-9 and self.state(nxt) == SOFT and self._repeatable(nxt) \
                and self.runs_to_settle(nxt, PASS) <= 1 + self.repeats:
            return replace(self._repeat(nxt, f"the target is reached; placing the pass end: {self.words(nxt)}, "
                                             f"{apart:.2f}x above {self.words(lo)} in throughput, straddles a limit, "
                                             "and repeats could settle that it meets the SLO"), past_target=True)
        return None

    def runs_to_settle(self, load: float, way: str) -> float:
        """How many runs in all the point needs before its widened p99 intervals could settle it `way` (PASS:
        every check's upper end within its limit; FAIL: one check's lower end past it), were its p99s to stay
        as measured while repeats pool more requests (the bootstrap interval closing in on the p99 by the
        square root of the runs) and shrink the run-to-run band by the same root; inf where no number of runs
        up to MAX_SETTLE_RUNS would (the p99 lies at the limit or on its other side)."""
        j, noise = self.judgement(load), self.noise()
        have = max(1, len(self.runs(load)))
        need = []
        for check, figure in ((j.ttft, C.TTFT), (j.decode, C.DECODE)):
            if check.p99_ms is None or check.ci_ms is None or not check.measurable:
                return math.inf
            need.append(_runs_to_cross(check.p99_ms, check.ci_ms, check.limit_ms, noise.figure(figure) / 100.0,
                                       have, below=way == PASS))
        return max(need) if way == PASS else min(need)

    def _settle_step(self, lo: float, hi: float, soft: list[float]) -> Step | None:
        """The cheapest way to bring the ends within the target by repeats alone: a pair of points, the
        pass end or a straddling point that repeats would settle as a pass, and the sure miss or one they
        would settle as a miss, whose throughputs lie within the target; the member that needs fewer more
        runs is repeated first. None where no such pair needs at most `repeats` more runs of a point."""
        limit = 1 + self.repeats
        ups = [(lo, 0.0)] + [(x, self.runs_to_settle(x, PASS)) for x in soft]
        downs = [(hi, 0.0)] + [(x, self.runs_to_settle(x, FAIL)) for x in soft]
        best = None
        for a, need_a in ups:
            for b, need_b in downs:
                if b <= a or need_a > limit or need_b > limit or self.spread(a, b) > self.target * (1 + 1e-9):
                    continue
                more_a = 0 if a == lo else max(1, math.ceil(need_a) - len(self.runs(a)))
                more_b = 0 if b == hi else max(1, math.ceil(need_b) - len(self.runs(b)))
                key = (more_a + more_b, self.spread(a, b))
                if best is None or key < best[0]:  # (lo, hi) itself lies wider than the target: never a pair
                    best = (key, a, more_a, b, more_b)
        if best is None:
            return None
        _, a, more_a, b, more_b = best
        x = a if more_a and (not more_b or more_a <= more_b) else b
        way = "meets the SLO" if x == a else "misses the SLO"
        return self._repeat(x, f"straddles a limit; repeats would settle that it {way}, which brings the ends within "
                               f"{self.target:g}x ({self.words(a)} and {self.words(b)})")

    def _repeatable(self, load: float) -> bool:
        return len(self.runs(load)) < 1 + self.repeats and load not in self.exhausted

    def _repeat(self, load: float, why: str) -> Step:
        return Step(load, True, why, self.runs(load)[0].requests)

    def _below(self, loads: list[float]) -> Step | None:
        low = loads[0]
        if self.state(low) == SOFT and self._repeatable(low):
            return self._repeat(low, "the lowest load straddles a limit: a repeat adds requests")
        if self.integer:
            lower = max(1, int(low) // 2) if low > 1 else None
        else:
            lower = low / 2 if self.floor is None or low / 2 >= self.floor else None
            lower = None if lower is None else _round_rate(lower)
        if lower is None or lower in self.points:
            self.stopped = NEVER
            return None
        return Step(lower, False, f"nothing passes down to {self.words(low)}: halve the load")

    def _above(self, lo: float, loads: list[float]) -> Step | None:
        above = [x for x in loads if x > lo]
        soft = [x for x in above if self._repeatable(x)]
        if soft:
            # the highest first: latency grows with load, so it lies furthest past the limit and settles into
            # the upper end soonest; a point at the limit itself may never settle (on the H100, c=24's TTFT
            # p99 read 478 to 500 ms in five runs while c=32's 620 ms, once repeated, would have closed the end)
            return self._repeat(max(soft), "straddles a limit with no sure miss above it: a repeat adds requests")
        top = loads[-1]
        higher: float | None = 2 * top if self.integer else _round_rate(top * 1.5)
        if self.ceiling is not None and higher > self.ceiling:
            higher = self.ceiling if self.ceiling > top else None
        if higher is None or self.key(higher) in self.points:
            self.stopped = OPEN
            return None
        return Step(self.key(higher), False, f"nothing misses the SLO for sure up to {self.words(top)}: go higher")

    def _between(self, a: float, b: float) -> float | None:
        if self.integer:
            return (int(a) + int(b)) // 2 if b - a > 1 else None
        if b / a <= MIN_RATE_STEP:
            return None
        mid = _round_rate(math.sqrt(a * b))
        return mid if a < mid < b and mid not in self.points else None

    def words(self, load: float | None) -> str:
        if load is None:
            return "-"
        return f"c={int(load)}" if self.integer else f"{load:g} req/s"

    # -- where it stands, in words -----------------------------------------------------------------
    def standing(self) -> str:
        """Where the search stands, in one sentence."""
        noise = self.broken()
        if noise:
            return broken_words(noise)
        lo, hi = self.bounds()
        if lo is None:
            loads = self.loads()
            if not loads:
                return "nothing was measured"
            return f"no load meets the SLO with confidence (down to {self.words(loads[0])})"
        low, top = self.ends()
        head = f"meets the SLO at {self.words(lo)} ({_tok(self.tok_s(lo))})"
        if hi is None:
            return head + f"; nothing up to {self.words(self.loads()[-1])} misses it for sure: at least {_tok(low)}"
        band = band_words(self.noise())
        return (head + f", misses it for sure at {self.words(hi)} ({_tok(self.tok_s(hi))}): ends "
                f"{ratio_words(self.precision(), self.target)} apart (target {self.target:g}x); with each end's "
                f"run-to-run band ({band}) the capacity lies in {_tok(low)} to {_tok(top)}")

    def stop_words(self) -> str | None:
        """Why the search stopped short of the target, in words; None when it reached it or has not stopped."""
        if self.stopped in (None, NARROW):
            return None
        lo, hi = self.bounds()
        if self.stopped == ADJACENT:
            return (f"{self.words(lo)} and {self.words(hi)} are neighbours {self.spread(lo, hi):.2f}x apart in "
                    "throughput: the closed loop cannot narrow it further; the open-loop rate search carries "
                    "the answer")
        if self.stopped == EDGE:
            return ("every load between the ends was measured and repeated: at this run size the SLO's edge is "
                    "not sharper; a longer --window-s adds requests to every run")
        if self.stopped == OPEN:
            return f"nothing up to {self.words(self.loads()[-1])} misses the SLO for sure: the upper end stays open"
        if self.stopped == NEVER:
            return f"the SLO is missed for sure at {self.words(self.loads()[0])}, the lightest load tried"
        if self.stopped == BROKEN:
            return broken_words(self.noise())
        return None


def _runs_to_cross(p99: float, ci: tuple[float, float], limit: float, pct: float, have: int, *, below: bool) -> float:
    """The fewest runs m (at least `have`, as a real number) after which a p99 measured over `have` runs, its
    bootstrap interval `ci` narrowed by sqrt(have / m) and widened by the band pct / sqrt(m), lies wholly
    below `limit` (`below`) or wholly above it; inf where MAX_SETTLE_RUNS runs would not."""
    if (p99 >= limit) if below else (p99 <= limit):
        return math.inf

    def settled(m: float) -> bool:
        shrink, wide = math.sqrt(have / m), 1 + pct / math.sqrt(m)
        if below:
            return (p99 + (ci[1] - p99) * shrink) * wide <= limit
        return (p99 - (p99 - ci[0]) * shrink) / wide > limit

    low, high = float(have), float(MAX_SETTLE_RUNS)
    if settled(low):
        return low
    if not settled(high):
        return math.inf
    for _ in range(60):  # both widenings shrink as m grows: bisect the first m that settles
        mid = (low + high) / 2
        low, high = (low, mid) if settled(mid) else (mid, high)
    return high


def queued_prefill_rate(prefill_ms: float | None, ttft_ms: float, share: float = 0.01) -> float | None:
    """Where the SLO holds one request at a time (the closed loop passes at c=1 only): the offered Poisson
    rate below which the TTFT p99 could still meet `ttft_ms`, in req/s. A request that arrives while another
    prefills waits out the rest of that prefill, and misses the limit when it arrived within the first
    2 x prefill - limit of it; about rate x that window of the requests do, and a p99 allows `share` (1 %).
    None where the prefill is unknown or one queued prefill still meets the limit. An estimate from the closed
    loop's TTFTs (their median as the prefill), not a measurement: it ignores decode steps between prefills
    and two arrivals batched into one step, which both make it lower."""
    if not prefill_ms or prefill_ms <= 0 or 2 * prefill_ms <= ttft_ms:
        return None
    return share / ((2 * prefill_ms - ttft_ms) / 1000)


def ratio_words(ratio: float, target: float) -> str:
    """A ratio set beside its target with the digits that tell them apart: "1.21x", and "1.223x" where two
    decimals would read as the target it misses (the H100's second S1_chat search: 1,153.7 / 943.7)."""
    words = f"{ratio:.2f}x"
    if words == f"{target:.2f}x" and ratio > target * (1 + 1e-9):
        words = f"{ratio:.3f}x"
    return words


def band_words(noise: C.Noise) -> str:
    """The band that widens the ends, in words: "output tok/s band 6.43 % measured from 3 comparable
    runs", with the largest figure's where another figure set it ("...; the largest, 14.18 %, on the
    decode p99")."""
    tok = noise.figure(C.OUTPUT_TOK_S)
    if noise.measured_pct is None:
        return f"output tok/s band {tok:g} % assumed: no comparable repeat"
    words = f"output tok/s band {tok:g} % measured from {noise.repeats} comparable runs"
    if noise.widest not in (None, C.OUTPUT_TOK_S) and noise.pct != tok:
        words += f"; the largest, {noise.pct:g} %, on the {C.FIGURE_WORDS[noise.widest]}"
    return words


def broken_words(noise: C.Noise) -> str:
    runs = ", ".join(" = ".join(g) for g in noise.names) if noise.names else "the repeats"
    tok = noise.measured_by_figure.get(C.OUTPUT_TOK_S, noise.measured_pct)
    return (f"broken measurement: repeats of the same run differ in output tok/s by a band of {tok:.1f} % (more than "
            f"{MAX_BAND_PCT:g} %), from {noise.repeats} comparable runs ({runs}); a figure from them would not mean "
            "anything: find what disturbed the server (another load on it, a restart, throttling) and run again")


def _weighted(pairs: list[tuple[float | None, int]]) -> float | None:
    got = [(v, max(1, w)) for v, w in pairs if v is not None]
    total = sum(w for _, w in got)
    return sum(v * w for v, w in got) / total if got else None


def _round_rate(rate: float) -> float:
    return float(f"{rate:.4g}")


def _tok(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} tok/s"
