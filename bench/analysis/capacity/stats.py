"""SLO capacity to a known precision: per-request samples, bootstrap p99 intervals, the search.

Plain functions over plain data (no I/O besides reading result dictionaries), shared by the sweep
(which decides what to run next) and the report (which recomputes every figure from the files).

- Samples: `vllm bench serve --save-detailed` keeps per-request `ttfts` and `itls` (seconds) and
  `output_lens`. TPOT per request = (latency - TTFT) / (output_len - 1); vLLM's latency is the last
  chunk's arrival, so latency - TTFT = the sum of that request's ITLs (0.33 also stores `latencies`,
  used when present).
- p99: numpy's default (linear) percentile, what vLLM reports.
- 95 % interval of a p99: percentile bootstrap over requests (a resample draws whole requests, so
  the ITLs of one request stay together), fixed seed: the same file always gives the same interval.
- Run-to-run noise: two identical runs differ by more than one run's requests say (a run-level
  slowdown), so each p99 interval is widened by the run-to-run band (`noise`) of its own figure
  (the TTFT p99 by the TTFT p99's spread between repeats, the decode p99 by the decode p99's):
  measured from the points run more than once, else the default. A point passes with confidence
  when the upper ends of the TTFT and decode intervals are within the limits (on at least
  MIN_P99_REQUESTS requests), fails with confidence when a lower end is above a limit; otherwise it
  straddles. Repeats of one point are pooled (its typical run's p99, the interval of all its
  requests, a band shrinking with the number of runs). A point that does not pass with confidence counts as failing:
  capacity is never claimed on a maybe.
- A decode latency that streaming does not resolve (an ITL p99 under MIN_DECODE_MS: tokens arrive
  bunched in chunks) is no evidence for the decode limit: such a check is UNMEASURED, and the point
  cannot pass with confidence on it.
- The search over loads lives in bench.analysis.capacity.search.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

import numpy as np

from bench.analysis.results import _num  # the one reader's number rule (as bench.run.sizing)

PASS, FAIL, STRADDLE, UNMEASURED = "pass", "fail", "straddle", "unmeasured"
NEVER_MEETS_SLO = "never_meets_slo"
# A streamed decode latency below this is tokens arriving bunched in one chunk, not a decode step.
MIN_DECODE_MS = 1.0
BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95
Z95 = 1.96
# A p99 needs about 100 requests before one lies above it: fewer give no interval for it.
MIN_P99_REQUESTS = 100
# The run-to-run band assumed where no point was measured twice (docs/benchmark.md, "Run-to-run
# noise"): two runs at four points on one H200 server differed by up to 12 % on output tok/s, about
# 1.47 standard deviations of a difference: 1.96 x 12 / 1.47 / sqrt(2) = 11 %. A CPU demo spreads
# far more (27 % and 61 % between two identical runs): pass --noise-pct to the sweep there.
DEFAULT_NOISE_PCT = 11.0
NOISE_PRIOR_DF = 1  # the default's weight beside measured repeats, in degrees of freedom: one repeat's worth


# ---------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True)
class Samples:
    """Per-request latencies of one or more runs, in milliseconds."""

    ttft_ms: tuple[float, ...]
    tpot_ms: tuple[float | None, ...]  # None for a request with a single output token
    itl_ms: tuple[tuple[float, ...], ...]  # one tuple of gaps per request
    e2e_ms: tuple[float, ...] = ()  # TTFT plus the decode time, per request (empty where not read)

    @property
    def requests(self) -> int:
        return len(self.ttft_ms)

    def __add__(self, other: "Samples") -> "Samples":
        return Samples(self.ttft_ms + other.ttft_ms, self.tpot_ms + other.tpot_ms, self.itl_ms + other.itl_ms,
                       self.e2e_ms + other.e2e_ms)


def samples_from_result(data: dict[str, Any]) -> Samples | None:
    """Per-request samples of a `--save-detailed` result; None when the file has no detail."""
    ttfts, itls, outs = data.get("ttfts"), data.get("itls"), data.get("output_lens")
    if not isinstance(ttfts, list) or not isinstance(itls, list) or not isinstance(outs, list):
        return None
    if not (len(ttfts) == len(itls) == len(outs)) or not ttfts:
        return None
    errors = data.get("errors") if isinstance(data.get("errors"), list) else [""] * len(ttfts)
    latencies = data.get("latencies") if isinstance(data.get("latencies"), list) else None
    t, p, i, e = [], [], [], []
    for n, (ttft, gaps, out) in enumerate(zip(ttfts, itls, outs)):
        if n < len(errors) and errors[n]:
            continue  # a failed request has no latency; the run is invalid anyway
        try:
            ttft_s = float(ttft)
            gaps_s = [float(g) for g in (gaps or [])]
            out_n = int(out)
        except (TypeError, ValueError):
            return None
        t.append(ttft_s * 1000)
        i.append(tuple(g * 1000 for g in gaps_s))
        decode_s = sum(gaps_s)
        if latencies is not None and n < len(latencies):
            try:
                decode_s = float(latencies[n]) - ttft_s
            except (TypeError, ValueError):
                pass
        p.append(decode_s * 1000 / (out_n - 1) if out_n > 1 else None)
        e.append((ttft_s + decode_s) * 1000)
    if not t:
        return None
    return Samples(tuple(t), tuple(p), tuple(i), tuple(e))


def pool(samples: Iterable[Samples]) -> Samples | None:
    total: Samples | None = None
    for s in samples:
        total = s if total is None else total + s
    return total


# ---------------------------------------------------------------------------------------------
# Percentiles and intervals


def p99(values: Iterable[float]) -> float | None:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return float(np.percentile(arr, 99)) if arr.size else None


def p99_interval(values: Iterable[float]) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of the p99 of one value per request (a TTFT, an end-to-end latency) within
    one run; None below MIN_P99_REQUESTS, where a p99 is about the slowest request."""
    values = [v for v in values if v is not None]
    return bootstrap_p99([[v] for v in values]) if len(values) >= MIN_P99_REQUESTS else None


def widen(ci: tuple[float, float], band: float) -> tuple[float, float]:
    """A within-run interval widened by a run-to-run band (a fraction): what two identical runs could read."""
    return ci[0] / (1 + band), ci[1] * (1 + band)


_BOOTSTRAPS: dict[tuple, tuple[float, float]] = {}  # a search judges the same runs again and again
_BOOTSTRAPS_KEPT = 4096


def bootstrap_p99(groups: list[list[float]], *, resamples: int = BOOTSTRAP_RESAMPLES,
                  confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of the p99 of all values, resampling whole groups.

    `groups` holds one list per request (one TTFT; or that request's ITLs). Each resample draws
    len(groups) requests with replacement; its p99 is the nearest-rank 0.99 quantile of the drawn
    requests' values, computed with the draw counts as weights (no copying of values). The answer
    depends only on the values, so it is kept for the next call with the same ones.
    """
    groups = [g for g in groups if g]
    if not groups:
        return None
    key = (resamples, confidence, seed, hashlib.blake2b(
        np.asarray([len(g) for g in groups], dtype=np.int64).tobytes()
        + np.asarray([v for g in groups for v in g], dtype=float).tobytes(), digest_size=16).digest())
    if key not in _BOOTSTRAPS:
        if len(_BOOTSTRAPS) >= _BOOTSTRAPS_KEPT:
            _BOOTSTRAPS.pop(next(iter(_BOOTSTRAPS)))
        _BOOTSTRAPS[key] = _bootstrap_p99(groups, resamples, confidence, seed)
    return _BOOTSTRAPS[key]


def _bootstrap_p99(groups: list[list[float]], resamples: int, confidence: float,
                   seed: int) -> tuple[float, float]:
    n = len(groups)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    if all(len(g) == 1 for g in groups):
        values = np.asarray([g[0] for g in groups], dtype=float)
        stats = _p99_of_draws(values, draws)
    else:
        lengths = np.fromiter((len(g) for g in groups), dtype=np.int64, count=n)
        owner = np.repeat(np.arange(n), lengths)
        values = np.concatenate([np.asarray(g, dtype=float) for g in groups])
        order = np.argsort(values, kind="stable")
        values, owner = values[order], owner[order]
        total = lengths[draws].sum(axis=1).astype(float)  # each resample's values
        target = 0.99 * total - 1e-9
        # The p99 sits in the top values: look there first (cumulative weight from the top), and
        # fall back to the whole array for a resample whose p99 lies below that slice. Only the requests
        # that own a top value are counted per resample (a resamples x requests count matrix is slow to
        # fill: 0.2 s a bootstrap at 3,000 requests).
        m = len(values)
        top = max(0, m - max(64, m // 50))
        kept, slot = np.unique(owner[top:], return_inverse=True)
        u = len(kept)
        where = np.full(n, u, dtype=np.int64)  # a request without a top value counts in bin u, never read
        where[kept] = np.arange(u)
        bins = where[draws] + (np.arange(resamples) * (u + 1))[:, None]
        counts = np.bincount(bins.ravel(), minlength=resamples * (u + 1)).reshape(resamples, u + 1)
        w = counts[:, slot].astype(float)
        after = np.cumsum(w[:, ::-1], axis=1)[:, ::-1] - w  # weight above each position
        below = (total[:, None] - after) < target[:, None]
        pos = top + below.sum(axis=1)
        stats = values[np.minimum(pos, m - 1)]
        for r in np.nonzero(~below[:, 0])[0] if top > 0 else []:
            cum = np.cumsum(np.bincount(draws[r], minlength=n)[owner].astype(float))
            stats[r] = values[min(int((cum < target[r]).sum()), m - 1)]
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return float(lo), float(hi)


def _p99_of_draws(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Each resample's nearest-rank p99 of single values (one per request): its rank-th smallest draw, as a
    sort would give. From a few hundred requests on, the draws landing among the top 2 % of the values are
    counted instead (the p99 sits there; a resample whose p99 lies below that slice is partitioned whole):
    the same figures, in half the time of partitioning every resample."""
    n, resamples = len(values), len(draws)
    rank = max(0, math.ceil(0.99 * n) - 1)
    if n < 400:
        return np.partition(values[draws], rank, axis=1)[:, rank]
    order = np.argsort(values, kind="stable")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)  # each request's place among the sorted values
    width = max(64, n // 50)
    top = n - width
    rows, cols = np.nonzero((position >= top)[draws])
    slot = position[draws[rows, cols]] - top
    counts = np.bincount(rows * width + slot, minlength=resamples * width).reshape(resamples, width)
    from_top = (np.cumsum(counts[:, ::-1], axis=1) < n - rank).sum(axis=1)  # places above the p99's, from the top
    inside = from_top < width
    stats = np.empty(resamples)
    stats[inside] = values[order[n - 1 - from_top[inside]]]
    for r in np.nonzero(~inside)[0]:
        stats[r] = np.partition(values[draws[r]], rank)[rank]
    return stats


@dataclass(frozen=True)
class MetricCheck:
    name: str
    limit_ms: float
    p99_ms: float | None
    ci_ms: tuple[float, float] | None  # within-run bootstrap interval
    band: float = 0.0  # run-to-run band (fraction) for the runs pooled here
    enough: bool = True  # enough requests for a p99 interval (MIN_P99_REQUESTS)
    floor_ms: float = 0.0  # a p99 below this measures nothing (MIN_DECODE_MS for a streamed decode latency)

    @property
    def measurable(self) -> bool:
        return self.p99_ms is None or self.p99_ms >= self.floor_ms

    @property
    def interval_ms(self) -> tuple[float, float] | None:
        """The 95 % interval of this p99: the bootstrap interval widened by the run-to-run band."""
        return None if self.ci_ms is None else widen(self.ci_ms, self.band)

    @property
    def state(self) -> str:
        if self.p99_ms is None:
            return FAIL
        if not self.measurable:
            return UNMEASURED
        if self.ci_ms is None:  # no detail: the point estimate, widened by the band
            if self.p99_ms * (1 + self.band) <= self.limit_ms:
                return PASS
            return FAIL if self.p99_ms / (1 + self.band) > self.limit_ms else STRADDLE
        lo, hi = self.interval_ms  # type: ignore[misc]
        if lo > self.limit_ms:
            return FAIL
        if hi <= self.limit_ms and self.enough:
            return PASS
        return STRADDLE


@dataclass(frozen=True)
class Judgement:
    """How one point (a concurrency or a rate, repeats pooled) stands against the SLO."""

    state: str  # PASS (with confidence), FAIL, STRADDLE
    requests: int
    runs: int
    ttft: MetricCheck
    decode: MetricCheck
    detailed: bool

    @property
    def point_pass(self) -> bool:
        """The point estimates alone meet both limits (what the grid's table shows)."""
        return all(m.p99_ms is not None and m.p99_ms <= m.limit_ms for m in (self.ttft, self.decode))

    def as_dict(self) -> dict[str, Any]:
        out = {
            "state": self.state, "requests": self.requests, "runs": self.runs, "detailed": self.detailed,
            "ttft_p99_ms": _r(self.ttft.p99_ms), "ttft_p99_ci_ms": ci_json(self.ttft),
            "decode_metric": self.decode.name, "decode_p99_ms": _r(self.decode.p99_ms),
            "decode_p99_ci_ms": ci_json(self.decode),
        }
        if self.detailed and not self.ttft.enough:
            out["p99_ci_note"] = too_few_words(self.requests)
        return out


def too_few_words(requests: int) -> str:
    return (f"not enough requests for a p99 interval ({requests}; at least {MIN_P99_REQUESTS}): "
            "the p99 of so few requests is about their slowest one")


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def ci_json(check: MetricCheck | tuple[float, float] | None) -> list[float] | None:
    """A p99 interval for JSON, `[low, high]` in ms to the microsecond: a check's widened interval (none where too
    few requests make one), or an interval as given."""
    if isinstance(check, MetricCheck):
        check = check.interval_ms if check.enough else None
    return None if check is None else [round(check[0], 3), round(check[1], 3)]


def combine(checks: Iterable[MetricCheck]) -> str:
    states = [c.state for c in checks]
    for state in (FAIL, UNMEASURED, STRADDLE):
        if state in states:
            return state
    return PASS


def band(noise_pct: float | None, runs: int) -> float:
    """The run-to-run band (a fraction) of the mean of `runs` independent runs."""
    return (noise_pct or 0.0) / 100.0 / math.sqrt(max(1.0, runs))


def check_bands(noise_pct: float | Noise | None, runs: int) -> tuple[float, float]:
    """(TTFT band, decode band) as fractions for the mean of `runs` runs: a Noise widens each check
    by its own figure's band; one number (an assumed band, a caller with one figure) widens both."""
    if isinstance(noise_pct, Noise):
        return band(noise_pct.figure(TTFT), runs), band(noise_pct.figure(DECODE), runs)
    return band(noise_pct, runs), band(noise_pct, runs)


def judge_samples(samples: Samples, *, ttft_ms: float, decode_ms: float, decode_metric: str = "itl",
                  runs: int = 1, seed: int = 0, noise_pct: float | Noise = 0.0) -> Judgement:
    ttft_groups = [[v] for v in samples.ttft_ms]
    if decode_metric == "tpot":
        decode_groups = [[v] for v in samples.tpot_ms if v is not None]
    elif decode_metric == "itl":
        decode_groups = [list(g) for g in samples.itl_ms]
    else:
        raise ValueError(f"decode metric must be itl or tpot, got {decode_metric!r}")
    ttft_wide, decode_wide = check_bands(noise_pct, runs)
    enough = samples.requests >= MIN_P99_REQUESTS
    ttft = MetricCheck("ttft", ttft_ms, p99(samples.ttft_ms), bootstrap_p99(ttft_groups, seed=seed), ttft_wide,
                       enough)
    flat = [v for g in decode_groups for v in g]
    decode = MetricCheck(decode_metric, decode_ms, p99(flat), bootstrap_p99(decode_groups, seed=seed + 1),
                         decode_wide, enough, _floor(decode_metric))
    return Judgement(combine((ttft, decode)), samples.requests, runs, ttft, decode, detailed=True)


def judge_summary(ttft_p99: float | None, decode_p99: float | None, *, ttft_ms: float, decode_ms: float,
                  decode_metric: str = "itl", requests: int = 0, noise_pct: float | Noise = 0.0) -> Judgement:
    """A point without per-request detail: point estimates only (never 'with confidence')."""
    ttft_wide, decode_wide = check_bands(noise_pct, 1)
    ttft = MetricCheck("ttft", ttft_ms, ttft_p99, None, ttft_wide)
    decode = MetricCheck(decode_metric, decode_ms, decode_p99, None, decode_wide, floor_ms=_floor(decode_metric))
    return Judgement(combine((ttft, decode)), requests, 1, ttft, decode, detailed=False)


def _floor(decode_metric: str) -> float:
    """ITL is timed per streamed chunk: below MIN_DECODE_MS it times chunk bunching, not decoding.
    TPOT divides a request's whole decode time and stays measurable."""
    return MIN_DECODE_MS if decode_metric == "itl" else 0.0


def judge_results(results: list[dict[str, Any]], *, ttft_ms: float, decode_ms: float,
                  decode_metric: str = "itl", noise_pct: float | Noise = 0.0) -> Judgement:
    """Judge one point from its result dictionaries: the runs with per-request detail pooled (their
    requests together, the run-to-run band shrinking with the number of runs), else the last run's
    point estimates. `noise_pct`: one band for both checks, or a Noise (each check its figure's)."""
    if not results:
        raise ValueError("no results to judge")
    per_run = [s for s in (samples_from_result(r) for r in results) if s is not None]
    if per_run:
        pooled = pool(per_run)
        assert pooled is not None
        judged = judge_samples(pooled, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric,
                               runs=len(per_run), noise_pct=noise_pct)
        if len(per_run) < 2:
            return judged
        # Runs differ by a run-level factor: one slow run would own the pooled p99. The point's p99
        # is the typical run's (request-weighted geometric mean of the runs' p99s); the pooled
        # requests' interval is moved onto it.
        singles = [judge_samples(s, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
                   for s in per_run]
        weights = [s.requests for s in per_run]
        checks = []
        for name in ("ttft", "decode"):
            whole = getattr(judged, name)
            values = [getattr(j, name).p99_ms for j in singles]
            if whole.p99_ms is None or whole.ci_ms is None or any(v is None or v <= 0 for v in values):
                checks.append(whole)
                continue
            typical = math.exp(sum(w * math.log(v) for w, v in zip(weights, values)) / sum(weights))
            scale = typical / whole.p99_ms
            checks.append(MetricCheck(whole.name, whole.limit_ms, typical,
                                      (whole.ci_ms[0] * scale, whole.ci_ms[1] * scale), whole.band, whole.enough,
                                      whole.floor_ms))
        return Judgement(combine(checks), judged.requests, judged.runs, checks[0], checks[1], detailed=True)
    last = results[-1]
    key = "p99_tpot_ms" if decode_metric == "tpot" else "p99_itl_ms"
    return judge_summary(_num(last.get("p99_ttft_ms")), _num(last.get(key)), ttft_ms=ttft_ms,
                         decode_ms=decode_ms, decode_metric=decode_metric,
                         requests=int(_num(last.get("completed")) or 0), noise_pct=noise_pct)


def with_band(j: Judgement, noise_pct: float | Noise) -> Judgement:
    """The same judgement under another run-to-run band: the bootstrap intervals are kept, only their
    widening changes (a search re-judges every point each time a repeat moves the band). A Noise
    widens the TTFT check by the TTFT band and the decode check by the decode band."""
    ttft_wide, decode_wide = check_bands(noise_pct, j.runs)
    checks = [replace(j.ttft, band=ttft_wide), replace(j.decode, band=decode_wide)]
    return Judgement(combine(checks), j.requests, j.runs, checks[0], checks[1], j.detailed)


def confident(j: Judgement, min_requests: int) -> bool:
    """Counts as passing for the capacity: passes with confidence on enough requests."""
    return j.state == PASS and j.detailed and j.requests >= min_requests


# ---------------------------------------------------------------------------------------------
# Run-to-run noise

# The figures of one run whose spread between repeats of one point is the run-to-run noise. Each
# figure's band widens what it measures: output tok/s the capacity's ends, the TTFT p99 the TTFT
# check, the decode p99 the decode check. A p99's spread between repeats holds its own sampling error
# as well, which the bootstrap interval already counts: the check is the more cautious for it. A
# median's spread is no measure of the p99's: near saturation the median moves with the phase of the
# prefill batches while the tail barely does (the H100 box, S1_chat at c=24, five repeats: TTFT
# medians a 24.63 % band, TTFT p99s 478 to 500 ms a 3.19 % one, 5.69 % pooled with the default; a
# c=32 run at 620 ms was no sure miss under the median's). The figures need not spread alike: on the
# H200 the c=24 repeats' output tok/s agreed within 0.7 to 1.4 % while their ITL medians set a 14.18 %
# band.
OUTPUT_TOK_S, TTFT, DECODE = "output_tok_s", "ttft", "decode"
# the decode p99 as the SLO's decode metric reads it (ITL per streamed chunk, TPOT per request)
DECODE_KEYS = {"itl": ("p99_itl_ms",), "tpot": ("p99_tpot_ms",)}
NOISE_FIGURES = {OUTPUT_TOK_S: ("output_throughput",), TTFT: ("p99_ttft_ms",), DECODE: DECODE_KEYS["itl"]}
FIGURE_WORDS = {OUTPUT_TOK_S: "output tok/s", TTFT: "TTFT p99", DECODE: "decode p99"}


@dataclass(frozen=True)
class Noise:
    """The run-to-run bands used. A band is 1.96 x the relative standard deviation of one run (the
    half-width, in % of the mean, that holds 95 % of single runs), the default pooled with what
    comparable repeats measured. `pct` is the headline: the band of the figure that spread most
    (`widest`), with `measured_pct` (None without repeats) what the repeats alone measured of it, as
    `df` degrees of freedom; `repeats` counts the runs that measured it and `names` names them, one
    group per point. `by_figure` holds each figure's own band (NOISE_FIGURES), pooled alike; a figure
    that no repeat measured has the default; empty where nothing was measured (all the default).
    `measured_by_figure` holds what the repeats alone measured of each figure they measured."""

    pct: float
    measured_pct: float | None
    df: int
    repeats: int = 0
    names: tuple[tuple[str, ...], ...] = ()
    by_figure: Mapping[str, float] = field(default_factory=dict)
    widest: str | None = None
    measured_by_figure: Mapping[str, float] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return "measured" if self.measured_pct is not None else "assumed"

    def figure(self, name: str) -> float:
        """The band (%) of one figure of NOISE_FIGURES."""
        if name not in NOISE_FIGURES:
            raise ValueError(f"no run-to-run band for {name!r}: one of {', '.join(NOISE_FIGURES)}")
        return self.by_figure.get(name, self.pct)

    def bands(self) -> dict[str, float]:
        """Every figure's band (%), for summary.json's `noise_pct_by_figure`."""
        return {name: self.figure(name) for name in NOISE_FIGURES}


def run_figure(result: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        v = _num(result.get(key))
        if v is not None and v > 0:
            return v
    return None


def noise(points: Iterable[list[dict[str, Any]]], default_pct: float | Mapping[str, float] = DEFAULT_NOISE_PCT,
          names: list[list[str]] | None = None, decode_metric: str = "itl") -> Noise:
    """The run-to-run bands from groups of comparable repeats (each a list of results: one load, one
    size; the caller groups them, bench.analysis.capacity.search.Search.comparable).

    Per figure (output tok/s, TTFT p99, the decode p99 of `decode_metric`) the pooled variance of log
    values between the runs of each group, and that figure's band; the largest figure's is the
    headline `pct`. Few repeats estimate a spread poorly, so the default counts as NOISE_PRIOR_DF
    degrees of freedom beside each figure's. `default_pct`: one default for every figure, or one per
    figure (the open loop starts from the closed loop's bands)."""
    if decode_metric not in DECODE_KEYS:
        raise ValueError(f"decode metric must be itl or tpot, got {decode_metric!r}")
    figures = {**NOISE_FIGURES, DECODE: DECODE_KEYS[decode_metric]}
    defaults = (dict(default_pct) if isinstance(default_pct, Mapping)
                else dict.fromkeys(NOISE_FIGURES, float(default_pct)))
    missing = [name for name in NOISE_FIGURES if name not in defaults]
    if missing:
        raise ValueError(f"no default run-to-run band for {', '.join(missing)}")
    per_figure = {name: [0.0, 0] for name in NOISE_FIGURES}
    runs_seen = 0
    for runs in points:
        runs_seen += len(runs)
        for name, keys in figures.items():
            # a streamed decode p99 under MIN_DECODE_MS times chunk bunching, not decoding: no figure
            floor = _floor(decode_metric) if name == DECODE else 0.0
            logs = [math.log(v) for v in (run_figure(r, keys) for r in runs) if v is not None and v >= floor]
            if len(logs) >= 2:
                mean = sum(logs) / len(logs)
                per_figure[name][0] += sum((x - mean) ** 2 for x in logs)
                per_figure[name][1] += len(logs) - 1
    measured = {name: (ss / df, df) for name, (ss, df) in per_figure.items() if df > 0}
    if not measured:
        if isinstance(default_pct, Mapping):
            return Noise(max(defaults.values()), None, 0, by_figure=defaults)
        return Noise(float(default_pct), None, 0)
    bands = {name: _pooled(*measured[name], defaults[name]) if name in measured else defaults[name]
             for name in NOISE_FIGURES}
    widest = max(measured, key=lambda name: measured[name])
    var, df = measured[widest]
    alone = {name: round(100 * Z95 * math.sqrt(v), 2) for name, (v, _df) in measured.items()}
    return Noise(bands[widest], alone[widest], df, runs_seen, tuple(tuple(g) for g in (names or [])), bands, widest,
                 alone)


def _pooled(var: float, df: int, default_pct: float) -> float:
    """A measured variance of log values (df degrees of freedom) pooled with the default as
    NOISE_PRIOR_DF degrees of freedom, as a band in %."""
    prior = (default_pct / 100 / Z95) ** 2
    pooled = (df * var + NOISE_PRIOR_DF * prior) / (df + NOISE_PRIOR_DF)
    return round(100 * Z95 * math.sqrt(pooled), 2)
