"""Capacity figures of one sweep folder, recomputed from its files (report, plan).

The sweep stores the SLO capacity search's runs under `search/` and the open-loop runs under
`open_loop/` (see bench/run/extra_runs.py); nothing here trusts the manifest's own conclusions.

Per scenario:
- `slo_capacity`: the closed-loop bracket `[concurrency_pass, concurrency_fail)` whose pass end
  passed with confidence (95 % bootstrap intervals of the pooled repeats), its output tok/s and
  req/s (mean of the repeats) and the intervals; `{"state": "never_meets_slo"}` when no tested
  concurrency meets the SLO; None when the search did not run (or did not confirm a pass end).
- `rate_capacity`: the highest offered Poisson rate whose p99s meet the SLO (point estimates,
  every lower rate meeting it too), its output tok/s and goodput; None without open-loop runs.
- `open_loop`: every open-loop point (offered rate, achieved req/s, goodput, attainment, p99s).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from bench.analysis import answer
from bench.analysis import capacity as C
from bench.analysis import decision as D
from bench.analysis import results as R
from bench.analysis.capacity import search as S
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP

SEARCH_DIR = "search"
OPEN_LOOP_DIR = "open_loop"
_SEARCH_NAME = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9_-]*)_c(?P<c>[0-9]+)\.run(?P<k>[0-9]+)\.json$")
# open-loop runs: `<scenario>_rate<R>.run<k>.json`; a sweep from before the rate search wrote `_rate<R>.json`
_OPEN_NAME = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9_-]*)_rate(?P<rate>[0-9]+(?:\.[0-9]+)?)"
                        r"(?:\.run(?P<k>[0-9]+))?\.json$")


def search_filename(scenario: str, concurrency: int, run: int) -> str:
    return f"{scenario}_c{concurrency}.run{run}.json"


def open_loop_filename(scenario: str, rate: float, run: int = 1) -> str:
    return f"{scenario}_rate{rate:g}.run{run}.json"


def _load(path: Path, scenario: str, concurrency: int) -> tuple[R.RunResult, dict[str, Any]] | None:
    result = R.load_result(path, R.Expectation(scenario=scenario, concurrency=concurrency))
    return (result, result.raw) if result.valid else None


def search_runs(folder: Path) -> dict[str, dict[int, list[tuple[R.RunResult, dict[str, Any]]]]]:
    """Valid search runs per scenario and concurrency, repeats in run order."""
    out: dict[str, dict[int, list[tuple[int, R.RunResult, dict[str, Any]]]]] = {}
    for file in sorted((folder / SEARCH_DIR).glob("*.json")) if (folder / SEARCH_DIR).is_dir() else []:
        m = _SEARCH_NAME.match(file.name)
        if not m:
            continue
        got = _load(file, m["scenario"], int(m["c"]))
        if got:
            out.setdefault(m["scenario"], {}).setdefault(int(m["c"]), []).append((int(m["k"]), *got))
    return {s: {c: [(r, d) for _, r, d in sorted(v, key=lambda x: x[0])] for c, v in by_c.items()}
            for s, by_c in out.items()}


def open_loop_runs(folder: Path) -> dict[str, dict[float, list[tuple[R.RunResult, dict[str, Any]]]]]:
    """Valid open-loop runs per scenario and offered rate, repeats in run order."""
    out: dict[str, dict[float, list[tuple[int, R.RunResult, dict[str, Any]]]]] = {}
    for file in sorted((folder / OPEN_LOOP_DIR).glob("*.json")) if (folder / OPEN_LOOP_DIR).is_dir() else []:
        m = _OPEN_NAME.match(file.name)
        if not m:
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        cap = data.get("max_concurrency") if isinstance(data, dict) else None
        got = _load(file, m["scenario"], int(cap) if isinstance(cap, int) else 0)
        if got:
            out.setdefault(m["scenario"], {}).setdefault(float(m["rate"]), []).append((int(m["k"] or 1), *got))
    return {s: {rate: [(r, d) for _, r, d in sorted(v, key=lambda x: x[0])] for rate, v in sorted(by_r.items())}
            for s, by_r in out.items()}


def slo_capacity(cap: CAP.Capacity) -> dict[str, Any] | None:
    """summary.json `slo_capacity`: the closed loop's bracket read off the one closed-loop capacity
    (bench.analysis.capacity.interval.closed_loop); None where no load meets the SLO with confidence."""
    if cap.state == CAP.NEVER:
        return {"state": C.NEVER_MEETS_SLO}
    if not cap.known or not cap.confirmed:
        return None
    judgement = cap.judgement
    return {
        "concurrency_pass": cap.load_pass,
        "concurrency_fail": cap.load_fail,
        "output_tok_s": None if cap.point is None else round(cap.point, 3),
        "req_s": None if cap.req_point is None else round(cap.req_point, 3),
        "ttft_p99_ci_ms": C.ci_json(judgement.ttft) if judgement else None,
        "decode_p99_ci_ms": C.ci_json(judgement.decode) if judgement else None,
        "source_run": cap.source_run,
        "repeats": cap.repeats,
    }


def open_loop_points(runs: dict[float, list[tuple[R.RunResult, dict[str, Any]]]], *, ttft_ms: float,
                     decode_ms: float, decode_metric: str = "itl", qualify: bool = False) -> list[dict[str, Any]]:
    """Every open-loop run as a row: offered rate, achieved req/s, goodput, attainment, its p99s."""
    points = []
    for rate, at_rate in sorted(runs.items()):
        for result, data in at_rate:
            j = C.judge_results([data], ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
            goodput = C._num(data.get("request_goodput"))  # noqa: SLF001
            points.append({
                "rate": rate,
                "file": CAP.run_file(result, qualify),
                "req_s": result.req_s,
                "output_tok_s": result.output_tok_s,
                "goodput_req_s": goodput,
                "attainment_pct": (round(100 * goodput / result.req_s, 2)
                                   if goodput is not None and result.req_s else None),
                "meets": j.point_pass,
                **{k: v for k, v in j.as_dict().items() if k not in ("state", "runs", "detailed")},
            })
    return points


def rate_search(runs: dict[float, list[tuple[R.RunResult, dict[str, Any]]]], *, ttft_ms: float, decode_ms: float,
                decode_metric: str, noise_pct: float | dict[str, float], target: float,
                qualify: bool = False) -> S.Search | None:
    """The open loop's evidence as the rate search sees it; None without open-loop runs."""
    if not runs:
        return None
    state = S.Search(ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric, integer=False,
                     default_noise_pct=noise_pct, target=target)
    for rate, at_rate in runs.items():
        for result, data in at_rate:
            state.observe(rate, data, CAP.run_file(result, qualify))
    return state


def rate_capacity(cap: CAP.Capacity | None, points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """summary.json `rate_capacity`: the highest offered rate that meets the SLO with confidence."""
    if cap is None or cap.state != CAP.MEETS:
        return None
    at = [p for p in points if p["rate"] == cap.load_pass and p.get("goodput_req_s") is not None]
    goodput = sum(p["goodput_req_s"] for p in at) / len(at) if at else None
    return {"req_s": cap.load_pass, "output_tok_s": None if cap.point is None else round(cap.point, 3),
            "goodput_req_s": None if goodput is None else round(goodput, 4)}


def search_settings(folder: Path) -> tuple[float, float]:
    """(assumed run-to-run band %, target width) the sweep searched with (manifest), else the defaults."""
    settings = _settings(folder)
    noise = C._num(settings.get("noise_pct"))  # noqa: SLF001
    target = C._num(settings.get("target_width"))  # noqa: SLF001
    return (noise if noise is not None and noise >= 0 else C.DEFAULT_NOISE_PCT,
            target if target is not None and target > 1 else S.TARGET_WIDTH)


def _settings(folder: Path) -> dict[str, Any]:
    try:
        settings = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["extra"]["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return settings if isinstance(settings, dict) else {}


def scenario_capacity(folder: Path | list[Path], grid: list[R.RunResult], *, ttft_ms: float, decode_ms: float,
                      decode_metric: str = "itl") -> dict[str, dict[str, Any]]:
    """{scenario: {"slo_capacity", "rate_capacity", "open_loop", "closed", "open", "peak"}} for every
    scenario of the grid. `closed` and `open` are the capacity intervals (bench.analysis.capacity.interval.Capacity)
    of the closed loop (grid and search) and of the open loop (None without open-loop runs); `peak`
    the peak over every closed-loop run (bench.analysis.capacity.interval.closed_peak).
    Pass the usable grid runs (valid, not suspect). Several folders (sweeps of one server setting, each from
    a fresh server) are pooled: their runs at one load with one size are comparable repeats, so the band
    includes the spread between servers; each run is named after its folder too, and the band assumed
    where nothing was repeated is the widest the sweeps set."""
    folders = folder if isinstance(folder, list) else [folder]
    qualify = len(folders) > 1
    settings = [search_settings(f) for f in folders]
    noise_pct, target = max(n for n, _ in settings), settings[0][1]
    searched = _pool(search_runs(f) for f in folders)
    opened = _pool(open_loop_runs(f) for f in folders)
    out = {}
    names = []
    for r in grid:
        if r.scenario not in names:
            names.append(r.scenario)
    for name in names:
        runs = [r for r in grid if r.scenario == name]
        found = searched.get(name, {})
        at_rates = opened.get(name, {})
        points = open_loop_points(at_rates, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric,
                                  qualify=qualify)
        closed = CAP.closed_loop(runs, found, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric,
                               noise_pct=noise_pct, target=target, qualify=qualify)
        # One server setting, one scenario: the open loop starts from the closed loop's bands, figure by figure.
        band = closed.noise_by_figure or (closed.noise_pct if closed.noise_pct is not None else noise_pct)
        opener = CAP.open_loop(rate_search(at_rates, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric,
                                         noise_pct=band, target=target, qualify=qualify))
        out[name] = {
            "slo_capacity": slo_capacity(closed),
            "rate_capacity": rate_capacity(opener, points),
            "open_loop": points,
            "closed": closed,
            "open": opener,
            "peak": CAP.closed_peak(runs, found, qualify),
        }
    return out


def _pool(per_folder) -> dict[str, dict[Any, list[tuple[R.RunResult, dict[str, Any]]]]]:
    """Several folders' search or open-loop runs as one: per scenario and load, the folders' runs in turn."""
    out: dict[str, dict[Any, list[tuple[R.RunResult, dict[str, Any]]]]] = {}
    for runs in per_folder:
        for scenario, by_load in runs.items():
            for load, at_load in by_load.items():
                out.setdefault(scenario, {}).setdefault(load, []).extend(at_load)
    return {s: dict(sorted(by_load.items())) for s, by_load in out.items()}


def capacity_files(folder: Path) -> set[Path]:
    """The search and open-loop files the capacity figures read (valid runs with the sweep's names)."""
    used = {Path(r.path) for by_c in search_runs(folder).values() for runs in by_c.values() for r, _ in runs}
    used |= {Path(r.path) for by_rate in open_loop_runs(folder).values() for runs in by_rate.values()
             for r, _ in runs}
    return used


# ---------------------------------------------------------------------------------------------
# summary.json and report.md (called by bench.analysis.report)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _usable(side) -> list[R.RunResult]:
    return [r for r in side.runs if side.usable(r)]


def side_capacity(side, *, ttft_ms: float, decode_ms: float, decode_metric: str = "itl") -> dict[str, dict[str, Any]]:
    """A side's (bench.analysis.side.Side) capacity under an SLO per scenario (`scenario_capacity`), the one
    way every command gets it: the side judged with the SLO's TTFT limit first (a run whose decode latency
    was not measurable counts only where its TTFT misses alone), then its usable runs; a side with repeats
    (`Side.repeats`, each from a fresh server) pools them all (`sides_capacity`)."""
    return sides_capacity(side.sweeps, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)


def sides_capacity(sides: list, *, ttft_ms: float, decode_ms: float, decode_metric: str = "itl"
                   ) -> dict[str, dict[str, Any]]:
    """`side_capacity` of several sweeps of one server setting pooled (`scenario_capacity`'s folders): the
    capacity of a variant measured from more than one fresh server."""
    for side in sides:
        side.judge_with(ttft_ms)
    return scenario_capacity([side.path for side in sides], [r for side in sides for r in _usable(side)],
                             ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)


def sides_peak(sides: list, name: str) -> dict[str, Any] | None:
    """The peak of a scenario over every closed-loop run of one or more sweeps of one server setting (the
    usable grid runs and the capacity search's, the runs of one concurrency averaged across the sweeps:
    bench.analysis.capacity.interval.closed_peak), as `scenario_capacity` pools them: with several sweeps each run
    is named after its folder too."""
    grid = [r for side in sides for r in side.valid(name)]
    searched = _pool(search_runs(side.path) for side in sides)
    return CAP.closed_peak(grid, searched.get(name, {}), len(sides) > 1)


def band_credit(a: CAP.Capacity, b: CAP.Capacity) -> tuple[float | None, float | None]:
    """How far each end of the ratio lies inside the quotient of the two capacities as shown
    (`ratio_interval`): low end = candidate lo / baseline hi x the first, high end = candidate hi /
    baseline lo / the second. Each is (1 + band a)(1 + band b) / (1 + their quadrature sum), 1 where
    no band widened the ends; None for an end without a finite value."""
    if not a.known or not b.known:
        return None, None

    def credit(x: float, y: float) -> float:
        return round((1 + x) * (1 + y) / (1 + math.hypot(x, y)), 4)

    interval = V.ratio_interval(a, b, 1, 1)
    if interval is None:
        return None, None
    lo, hi = interval
    return (credit(a.band_lo, b.band_hi) if 0 < lo < CAP.INF else None,
            credit(a.band_hi, b.band_lo) if 0 < hi < CAP.INF else None)


def add_to_summary(summary: dict[str, Any], side, base, *, ttft_ms: float, decode_ms: float,
                   decode_metric: str, basis: str, threshold: float, issues: list[str],
                   incomparable: list[str] | None = None) -> dict[str, Any]:
    """Adds per scenario slo_capacity / rate_capacity and their intervals, per comparison the SLO
    ratio with its interval and source, and the verdict (bench.analysis.verdict) on the chosen basis."""
    mine = side_capacity(side, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
    for sweep in side.sweeps:
        sweep.used |= capacity_files(sweep.path)
    for name, entry in summary["scenarios"].items():
        got = mine.get(name, {})
        entry["slo_capacity"] = got.get("slo_capacity")
        entry["rate_capacity"] = got.get("rate_capacity")
        closed, opened = got.get("closed") or CAP.Capacity(CAP.GRID, CAP.NO_DATA), got.get("open")
        entry["slo_capacity_interval"] = closed.as_dict()
        entry["rate_capacity_interval"] = opened.as_dict() if opened else None
        # The capacity under the SLO, closed loop, with its run: the same figure as the interval's.
        entry["slo"] = ({"concurrency": closed.load_pass, "output_tok_s": _round(closed.point), "loop": closed.loop,
                         "source_run": closed.source_run} if closed.state == CAP.MEETS else None)
    extra: dict[str, Any] = {"candidate": mine}
    if base is None or summary["comparison"] is None:
        return extra
    theirs = side_capacity(base, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
    for sweep in base.sweeps:
        sweep.used |= capacity_files(sweep.path)
    extra["baseline"] = theirs
    labels = (side.label, base.label)
    calls, peak_calls = [], []
    priced = side.cost_price() is not None and base.cost_price() is not None
    for name, comp in summary["comparison"].items():
        a, b, source = CAP.pair(mine.get(name), theirs.get(name))
        call = V.slo_call(name, a, b, source, a_gpus=side.gpus, b_gpus=base.gpus, threshold=threshold,
                          labels=labels)
        cost = None
        if priced and CAP.figure(a) is not None and CAP.figure(b):
            cost = V.point_ratio(CAP.figure(a) / side.cost_price(), CAP.figure(b) / base.cost_price())
        comp["slo_ratio"] = call.point
        comp["slo_cost_efficiency_ratio"] = cost
        comp["baseline_state"] = b.state
        comp["slo_ratio_interval"] = ([CAP.json_end(call.interval[0]), CAP.json_end(call.interval[1])]  # noqa: SLF001
                                      if call.interval else None)
        comp["slo_basis_source"] = source
        comp["slo_state"] = call.state
        # The two capacities behind the ratio (the kind the pair used), per replica with their runs
        # and per GPU, so that every page can show them beside it and a reader can rebuild it.
        comp["candidate_slo_capacity"] = a.as_dict()
        comp["baseline_slo_capacity"] = b.as_dict()
        comp["slo_capacity_per_gpu"] = {"candidate": _per_gpu(a, side.gpus), "baseline": _per_gpu(b, base.gpus)}
        # The two figures per GPU (each the mean of its load's runs) that `slo_ratio` divides.
        comp["slo_figure_per_gpu"] = {"candidate": _figure_per_gpu(a, side.gpus), "baseline": _figure_per_gpu(b, base.gpus)}
        # The ratio's ends are the quotients of those capacities times/over this credit: the two
        # sides' run-to-run bands combined in quadrature rather than added (independent runs).
        comp["slo_ratio_band_credit"] = list(band_credit(a, b))
        extra.setdefault("comparison", {})[name] = {"candidate": a, "baseline": b, "call": call}
        calls.append(call)
        missing = [f"the {w} ({label})" for w, label, peak in (("candidate", side.label, comp["peak_tok_s"]),
                                                               ("baseline", base.label, comp["baseline_peak_tok_s"]))
                   if peak is None]
        peak_calls.append(V.peak_call(name, comp["throughput_ratio"], threshold=threshold, labels=labels,
                                      missing=missing))
    summary["verdict"] = D.decide(calls if basis == "slo" else peak_calls, basis=basis, threshold=threshold,
                                  issues=issues, incomparable=incomparable or [])
    return extra


def _per_gpu(cap: CAP.Capacity, gpus: int) -> list[float | None] | None:
    """[lo, hi] output tok/s per GPU of a capacity (null hi: no upper bound); None when unknown."""
    if not cap.known or cap.lo is None:
        return None
    return [CAP.json_end(cap.lo / gpus), CAP.json_end(cap.hi / gpus if cap.hi is not None else None)]  # noqa: SLF001


def _figure_per_gpu(cap: CAP.Capacity, gpus: int) -> float | None:
    value = CAP.figure(cap)
    return None if value is None else round(value / gpus, 4)


def _n(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ci(v: list[float] | None) -> str:
    return "-" if not v else f"[{v[0]:,.1f}, {v[1]:,.1f}]"


def _source_text(interval: dict[str, Any]) -> str:
    if interval.get("source") == CAP.SEARCH:
        return "capacity search" + ("" if interval.get("confirmed") or interval.get("state") != CAP.MEETS
                                    else " (pass end not confirmed)")
    return CAP.SOURCE_WORDS.get(interval.get("source"), str(interval.get("source")))


def markdown(summary: dict[str, Any], extra: dict[str, Any], manifest: dict[str, Any] | None,
             decode_metric: str) -> list[str]:
    lines = ["", "## Capacity under the SLO", "",
             "The capacity is the output tok/s at the highest load that meets the SLO (the mean of that load's "
             "runs), named with its run; its "
             "95 % interval runs from that figure to the tok/s at the lowest load above it that misses the SLO "
             "for sure (throughput grows with load, so no load between the two serves more), both ends widened "
             "by the run-to-run band (measured from repeats, else assumed). "
             "Grid: the sweep's concurrencies. Capacity search (`sweep --capacity-search`): extra concurrencies "
             "between those two, until the bracket is narrow; its pass end must pass with confidence (upper end "
             "of the 95 % interval of each p99, run-to-run band included, within its limit, enough requests, "
             "repeats pooled). "
             "Open loop: Poisson arrivals at offered rates around that capacity; the rate capacity is the "
             "highest offered rate whose p99s meet the SLO (every lower rate meeting it too). Closed-loop and "
             "open-loop figures are never mixed in one number.", "",
             f"| Scenario | Capacity under the SLO, closed loop | From the run | Where the SLO holds | Bracket from "
             f"| TTFT p99 95 % CI at the pass end (ms) | {decode_metric.upper()} p99 95 % CI (ms) "
             "| Rate capacity (req/s) | Output tok/s at it | Goodput (req/s) |",
             "|---|---|---|---|---|---|---|---:|---:|---:|"]
    for name, s in summary["scenarios"].items():
        cap, rate = s.get("slo_capacity"), s.get("rate_capacity")
        interval = s.get("slo_capacity_interval") or CAP.Capacity(CAP.GRID, CAP.NO_DATA).as_dict()
        cis = [_ci(cap["ttft_p99_ci_ms"]), _ci(cap["decode_p99_ci_ms"])] if cap and "state" not in cap else ["-", "-"]
        figure = (answer.figure_words(interval) if interval.get("state") == CAP.MEETS
                  else answer.capacity_words(interval).split(" (")[0])
        opened = ([_n(rate["req_s"], 3), _n(rate["output_tok_s"]), _n(rate["goodput_req_s"], 3)] if rate
                  else ["-", "-", "-"])
        lines.append(f"| {name} | {figure} | {answer.from_words(interval)} | {answer.bracket_words(interval)} "
                     f"| {_source_text(interval)} | " + " | ".join(cis + opened) + " |")
    searched = [r for r in summary.get("extra_runs") or [] if r.get("kind") == "search"]
    if searched:
        lines += ["", "### Capacity-search runs", "",
                  "| Sweep | Scenario | Concurrency | File | Output tok/s | req/s | TTFT p99 (ms) "
                  f"| {decode_metric.upper()} p99 (ms) |",
                  "|---|---|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['side']} | {r['scenario']} | {r['concurrency']} | `{r['file']}` | {_n(r.get('output_tok_s'))} "
                  f"| {_n(r.get('req_s'), 3)} | {_n(r.get('ttft_p99_ms'))} "
                  f"| {_n(r.get('tpot_p99_ms' if decode_metric == 'tpot' else 'itl_p99_ms'))} |" for r in searched]
    points = {n: e.get("open_loop") or [] for n, e in (extra.get("candidate") or {}).items()}
    if any(points.values()):
        lines += ["", "### Open loop: goodput and SLO attainment against offered rate", "",
                  f"| Scenario | Offered req/s | Achieved req/s | Output tok/s | Goodput req/s | Attainment "
                  f"| TTFT p99 (ms) | {decode_metric.upper()} p99 (ms) | Meets SLO |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, pts in points.items():
            for p in pts:
                att = f"{p['attainment_pct']:.1f}%" if p["attainment_pct"] is not None else "-"
                lines.append(f"| {name} | {p['rate']:g} | {_n(p['req_s'], 3)} | {_n(p['output_tok_s'])} "
                             f"| {_n(p['goodput_req_s'], 3)} | {att} | {_n(p['ttft_p99_ms'])} "
                             f"| {_n(p['decode_p99_ms'])} | {'yes' if p['meets'] else 'no'} |")
    sessions = (manifest or {}).get("sessions") or []
    timing = (sessions[-1].get("timing") or {}) if sessions and isinstance(sessions[-1], dict) else {}
    if timing.get("busy_share_pct") is not None:
        idle = timing.get("idle_between_windows_s")
        lines += ["", f"GPU busy share of the last sweep session: {timing['busy_share_pct']:.1f}% (measured "
                      f"windows / wall of the runs, {timing.get('bench_client') or 'unknown'} client); idle "
                      "between two "
                      f"measured windows {'-' if idle is None else f'{idle:.2f} s'} per run."]
    ext = (manifest or {}).get("extra") or {}
    totals = ext.get("totals")
    if totals:
        lines += ["", budget_words(totals)]
        for name, info in (ext.get("scenarios") or {}).items():
            for loop in ("closed", "open_loop"):
                got = info.get(loop)
                if isinstance(got, dict) and got.get("stopped"):
                    lines.append(f"- {name}, {'closed' if loop == 'closed' else 'open'} loop: {got['stopped']}")
                elif isinstance(got, str):
                    lines.append(f"- {name}, open loop: {got}")
            if isinstance(info.get("stopped"), str):
                lines.append(f"- {name}: {info['stopped']}")
    return lines


def budget_words(totals: dict[str, Any]) -> str:
    """The sweep's GPU time against its budget, in a sentence (manifest `extra.totals`)."""
    def mins(v: Any) -> str:
        return f"{v / 60:.1f} min" if isinstance(v, (int, float)) else "unknown"

    budget = totals.get("budget_s")
    return (f"GPU time of the last invocation: {mins(totals.get('total_gpu_s'))}"
            + (f" of its {mins(budget)} budget" if budget else "")
            + f" (grid {mins(totals.get('grid_gpu_s'))}, capacity search {mins(totals.get('gpu_s'))} in "
            f"{totals.get('runs', 0)} runs: {totals.get('search_runs', 0)} closed loop, "
            f"{totals.get('open_loop_runs', 0)} open loop).")


def comparison_markdown(summary: dict[str, Any], labels: tuple[str, str], extra: dict[str, Any]) -> list[str]:
    """The one SLO ratio per scenario: its interval (what the verdict uses) beside the two capacities
    per GPU it divides, each with the run it came from."""
    comp = summary.get("comparison") or {}
    if not comp:
        return []
    cand, base = labels
    lines = ["", f"### Under the SLO against {base}", "",
             "Per GPU, the ratio of the two capacities under the SLO: its low end divides the candidate's low end "
             "by the baseline's high end, its high end the other way round; both capacities are beside it, so "
             "each end can be rebuilt.", "",
             f"| Scenario | SLO ratio per GPU (the verdict's interval) | {cand} capacity per GPU "
             f"| {base} capacity per GPU | Rebuilt | From | SLO cost-efficiency ratio | Scenario decides |",
             "|---|---|---|---|---|---|---:|---|"]
    for name, c in comp.items():
        per, fig = c.get("slo_capacity_per_gpu") or {}, c.get("slo_figure_per_gpu") or {}
        a = c.get("candidate_slo_capacity") or CAP.Capacity(CAP.GRID, CAP.NO_DATA).as_dict()
        b = c.get("baseline_slo_capacity") or CAP.Capacity(CAP.GRID, CAP.NO_DATA).as_dict()
        cost = "-" if c.get("slo_cost_efficiency_ratio") is None else f"{c['slo_cost_efficiency_ratio']:.2f}x"
        lines.append(f"| {name} | {V.interval_text(c.get('slo_ratio_interval'))} "
                     f"| {answer.capacity_words(a, per.get('candidate'), fig.get('candidate'))} "
                     f"| {answer.capacity_words(b, per.get('baseline'), fig.get('baseline'))} "
                     f"| {answer.ratio_rebuilt(c) or '-'} "
                     f"| {CAP.SOURCE_WORDS.get(c.get('slo_basis_source'), '-')} | {cost} "
                     f"| {D.STATE_WORDS.get(c.get('slo_state'), '-').lower()} |")
    return lines
