"""Capacity figures of one sweep folder, recomputed from its files (report, plan).

The sweep stores the SLO capacity search's runs under `search/` and the open-loop runs under
`open_loop/` (see bench/extra_runs.py); nothing here trusts the manifest's own conclusions.

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
import re
from pathlib import Path
from typing import Any

from bench import capacity as C
from bench import results as R

SEARCH_DIR = "search"
OPEN_LOOP_DIR = "open_loop"
_SEARCH_NAME = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9_-]*)_c(?P<c>[0-9]+)\.run(?P<k>[0-9]+)\.json$")
_OPEN_NAME = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9_-]*)_rate(?P<rate>[0-9.]+)\.json$")


def search_filename(scenario: str, concurrency: int, run: int) -> str:
    return f"{scenario}_c{concurrency}.run{run}.json"


def open_loop_filename(scenario: str, rate: float) -> str:
    return f"{scenario}_rate{rate:g}.json"


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


def open_loop_runs(folder: Path) -> dict[str, list[tuple[float, R.RunResult, dict[str, Any]]]]:
    out: dict[str, list[tuple[float, R.RunResult, dict[str, Any]]]] = {}
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
            out.setdefault(m["scenario"], []).append((float(m["rate"]), *got))
    return {s: sorted(v, key=lambda x: x[0]) for s, v in out.items()}


def grid_judgements(runs: list[R.RunResult], *, ttft_ms: float, decode_ms: float,
                    decode_metric: str) -> dict[int, C.Judgement]:
    return {r.concurrency: C.judge_results([r.raw], ttft_ms=ttft_ms, decode_ms=decode_ms,
                                           decode_metric=decode_metric)
            for r in runs if r.valid and r.raw}


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 3) if known else None


def slo_capacity(grid: list[R.RunResult], search: dict[int, list[tuple[R.RunResult, dict[str, Any]]]], *,
                 ttft_ms: float, decode_ms: float, decode_metric: str = "itl",
                 min_requests: int = C.DEFAULT_SEARCH_REQUESTS, repeats: int = C.DEFAULT_REPEATS
                 ) -> dict[str, Any] | None:
    judged = grid_judgements(grid, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
    if not judged:
        return None
    state = C.Search(judged, min_requests=min_requests, repeats=repeats)
    for c, runs in search.items():
        state.extra[c] = C.judge_results([d for _, d in runs], ttft_ms=ttft_ms, decode_ms=decode_ms,
                                         decode_metric=decode_metric)
        state.run_requests[c] = [r.completed or 0 for r, _ in runs]
    lo, hi = state.bounds()
    if lo is None:
        return {"state": C.NEVER_MEETS_SLO}
    if state._passes(lo) is not True:  # noqa: SLF001 - the search never confirmed its pass end
        return None
    judgement = state.extra.get(lo) or judged[lo]
    source = [r for r, _ in search.get(lo, [])] or [r for r in grid if r.concurrency == lo]
    return {
        "concurrency_pass": lo,
        "concurrency_fail": hi,
        "output_tok_s": _mean([r.output_tok_s for r in source]),
        "req_s": _mean([r.req_s for r in source]),
        "ttft_p99_ci_ms": C._ci(judgement.ttft.ci_ms),  # noqa: SLF001
        "decode_p99_ci_ms": C._ci(judgement.decode.ci_ms),  # noqa: SLF001
    }


def open_loop_points(runs: list[tuple[float, R.RunResult, dict[str, Any]]], *, ttft_ms: float,
                     decode_ms: float, decode_metric: str = "itl") -> list[dict[str, Any]]:
    points = []
    for rate, result, data in runs:
        j = C.judge_results([data], ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
        goodput = C._num(data.get("request_goodput"))  # noqa: SLF001
        points.append({
            "rate": rate,
            "req_s": result.req_s,
            "output_tok_s": result.output_tok_s,
            "goodput_req_s": goodput,
            "attainment_pct": (round(100 * goodput / result.req_s, 2)
                               if goodput is not None and result.req_s else None),
            "meets": j.point_pass,
            **{k: v for k, v in j.as_dict().items() if k not in ("state", "runs", "detailed")},
        })
    return points


def search_settings(folder: Path) -> tuple[int, int]:
    """(requests behind a pass, repeats) the sweep searched with (manifest), else the defaults."""
    try:
        settings = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["extra"]["settings"]
        return int(settings["search_requests"]), int(settings["search_repeats"])
    except (OSError, ValueError, KeyError, TypeError):
        return C.DEFAULT_SEARCH_REQUESTS, C.DEFAULT_REPEATS


def scenario_capacity(folder: Path, grid: list[R.RunResult], *, ttft_ms: float, decode_ms: float,
                      decode_metric: str = "itl", min_requests: int | None = None,
                      repeats: int | None = None) -> dict[str, dict[str, Any]]:
    """{scenario: {"slo_capacity", "rate_capacity", "open_loop"}} for every scenario of the grid."""
    swept_requests, swept_repeats = search_settings(folder)
    min_requests = swept_requests if min_requests is None else min_requests
    repeats = swept_repeats if repeats is None else repeats
    searched = search_runs(folder)
    opened = open_loop_runs(folder)
    out = {}
    names = []
    for r in grid:
        if r.scenario not in names:
            names.append(r.scenario)
    for name in names:
        runs = [r for r in grid if r.scenario == name]
        points = open_loop_points(opened.get(name, []), ttft_ms=ttft_ms, decode_ms=decode_ms,
                                  decode_metric=decode_metric)
        out[name] = {
            "slo_capacity": slo_capacity(runs, searched.get(name, {}), ttft_ms=ttft_ms, decode_ms=decode_ms,
                                         decode_metric=decode_metric, min_requests=min_requests,
                                         repeats=repeats),
            "rate_capacity": C.rate_capacity(points),
            "open_loop": points,
        }
    return out


def slo_throughput(entry: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """(output tok/s, req/s, basis) of a scenario under the SLO: rate capacity, else closed loop."""
    rate = entry.get("rate_capacity")
    if rate and rate.get("output_tok_s") is not None:
        return rate["output_tok_s"], rate["req_s"], "rate_capacity"
    closed = entry.get("slo_capacity")
    if closed and "state" not in closed and closed.get("output_tok_s") is not None:
        return closed["output_tok_s"], closed["req_s"], "slo_capacity"
    if closed and closed.get("state") == C.NEVER_MEETS_SLO:
        return None, None, C.NEVER_MEETS_SLO
    return None, None, "unknown"


# ---------------------------------------------------------------------------------------------
# summary.json and report.md (called by bench.report)

MEETS_SLO, NOT_SEARCHED = "meets_slo", "not_searched"


def side_state(entry: dict[str, Any]) -> str:
    closed = entry.get("slo_capacity")
    if closed and closed.get("state") == C.NEVER_MEETS_SLO:
        return C.NEVER_MEETS_SLO
    if entry.get("rate_capacity") or (closed and "state" not in closed):
        return MEETS_SLO
    return NOT_SEARCHED


def _pair(mine: dict[str, Any], theirs: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """Same-kind SLO throughputs of both sides: rate capacity if both have it, else closed loop."""
    a, b = mine.get("rate_capacity"), theirs.get("rate_capacity")
    if a and b and a.get("output_tok_s") is not None and b.get("output_tok_s") is not None:
        return a["output_tok_s"], b["output_tok_s"], "rate_capacity"
    a, b = mine.get("slo_capacity"), theirs.get("slo_capacity")
    if a and b and "state" not in a and "state" not in b:
        return a["output_tok_s"], b["output_tok_s"], "slo_capacity"
    return None, None, None


def add_to_summary(summary: dict[str, Any], side, base, *, ttft_ms: float, decode_ms: float,
                   decode_metric: str, basis: str, threshold: float, issues: list[str]) -> dict[str, Any]:
    """Adds slo_capacity / rate_capacity per scenario, SLO ratios per comparison, the verdict basis."""
    mine = scenario_capacity(side.path, side.runs, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
    for name, entry in summary["scenarios"].items():
        got = mine.get(name, {})
        entry["slo_capacity"] = got.get("slo_capacity")
        entry["rate_capacity"] = got.get("rate_capacity")
    extra = {"candidate": mine}
    if base is None or summary["comparison"] is None:
        return extra
    theirs = scenario_capacity(base.path, base.runs, ttft_ms=ttft_ms, decode_ms=decode_ms, decode_metric=decode_metric)
    extra["baseline"] = theirs
    for name, comp in summary["comparison"].items():
        m, t = mine.get(name, {}), theirs.get(name, {})
        cand, ref, kind = _pair(m, t)
        ratio = cost = None
        if cand is not None and ref:
            ratio = round((cand / side.gpus) / (ref / base.gpus), 4)
            if side.price_per_hour and base.price_per_hour:
                cost = round((cand / side.price_per_hour) / (ref / base.price_per_hour), 4)
        comp["slo_ratio"] = ratio
        comp["slo_cost_efficiency_ratio"] = cost
        comp["baseline_state"] = side_state(t)
        extra.setdefault("comparison", {})[name] = {"slo_basis": kind, "candidate_state": side_state(m)}
    summary["verdict"] = verdict(summary["comparison"], threshold, issues, basis, extra.get("comparison", {}))
    return extra


def verdict(comparison: dict[str, dict[str, Any]], threshold: float, issues: list[str], basis: str,
            details: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """min_ratio and pass on the chosen basis; a baseline that never meets the SLO while the
    candidate does counts as clearing the threshold (no finite ratio), a missing figure never does."""
    if basis == "peak":
        ratios = [c["throughput_ratio"] for c in comparison.values()]
        known = [r for r in ratios if r is not None]
        ok = bool(known) and len(known) == len(ratios)
    else:
        known, ok = [], bool(comparison)
        for name, c in comparison.items():
            mine = (details or {}).get(name, {}).get("candidate_state")
            if c.get("slo_ratio") is not None:
                known.append(c["slo_ratio"])
            elif not (c.get("baseline_state") == C.NEVER_MEETS_SLO and mine == MEETS_SLO):
                ok = False
    min_ratio = min(known) if known else None
    passed = ok and (min_ratio is None or min_ratio >= threshold) and not issues
    return {"threshold": threshold, "min_ratio": min_ratio, "pass": bool(passed), "basis": basis}


def _n(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ci(v: list[float] | None) -> str:
    return "-" if not v else f"[{v[0]:,.1f}, {v[1]:,.1f}]"


def markdown(summary: dict[str, Any], extra: dict[str, Any], manifest: dict[str, Any] | None,
             decode_metric: str) -> list[str]:
    lines = ["", "## Capacity under the SLO", "",
             "Closed loop: the concurrency bracket [pass, fail) from the capacity search; the pass end passed "
             "with confidence (upper end of the 95 % bootstrap interval of each p99 within its limit, at least "
             "the configured number of requests, repeats pooled). Open loop: Poisson arrivals at offered rates "
             "around that capacity; the rate capacity is the highest offered rate whose p99s meet the SLO. "
             "Closed-loop and open-loop figures are never mixed in one number.", "",
             f"| Scenario | Bracket [pass, fail) | Output tok/s | req/s | TTFT p99 95 % CI (ms) "
             f"| {decode_metric.upper()} p99 95 % CI (ms) | Rate capacity (req/s) | Output tok/s at it | Goodput (req/s) |",
             "|---|---|---:|---:|---|---|---:|---:|---:|"]
    for name, s in summary["scenarios"].items():
        cap, rate = s.get("slo_capacity"), s.get("rate_capacity")
        if cap is None:
            closed = ["not searched (run the sweep with --capacity-search)", "-", "-", "-", "-"]
        elif "state" in cap:
            closed = ["never meets the SLO", "-", "-", "-", "-"]
        else:
            fail = cap["concurrency_fail"] if cap["concurrency_fail"] is not None else "untested (above the grid)"
            closed = [f"[{cap['concurrency_pass']}, {fail})", _n(cap["output_tok_s"]), _n(cap["req_s"], 3),
                      _ci(cap["ttft_p99_ci_ms"]), _ci(cap["decode_p99_ci_ms"])]
        opened = ([_n(rate["req_s"], 3), _n(rate["output_tok_s"]), _n(rate["goodput_req_s"], 3)] if rate
                  else ["-", "-", "-"])
        lines.append(f"| {name} | " + " | ".join(closed + opened) + " |")
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
                      f"windows / wall of the runs, {timing.get('bench_client', '?')} client); idle between two "
                      f"measured windows {'-' if idle is None else f'{idle:.2f} s'} per run."]
    ext = (manifest or {}).get("extra") or {}
    totals = ext.get("totals")
    if totals:
        lines += ["", f"Extra runs (search and open loop): {totals['runs']} ({totals['search_runs']} search, "
                      f"{totals['open_loop_runs']} open loop), GPU time {totals['gpu_s']:.1f} s = "
                      f"{totals['added_pct']}% of the grid's {totals['grid_gpu_s']:.1f} s."]
        for name, info in (ext.get("scenarios") or {}).items():
            if info.get("stopped"):
                lines.append(f"- {name}: {info['stopped']}")
    return lines


def comparison_markdown(summary: dict[str, Any], base_label: str, extra: dict[str, Any]) -> list[str]:
    comp = summary.get("comparison") or {}
    details = extra.get("comparison") or {}
    if not comp:
        return []
    lines = ["", f"### Under the SLO against {base_label}", "",
             "| Scenario | SLO ratio (per GPU) | Basis | SLO cost-efficiency ratio | Baseline | Candidate |",
             "|---|---:|---|---:|---|---|"]
    for name, c in comp.items():
        c = {**c, **details.get(name, {})}
        ratio = "-" if c.get("slo_ratio") is None else f"{c['slo_ratio']:.2f}x"
        cost = "-" if c.get("slo_cost_efficiency_ratio") is None else f"{c['slo_cost_efficiency_ratio']:.2f}x"
        basis = {"rate_capacity": "open-loop rate capacity", "slo_capacity": "closed-loop SLO capacity"}.get(
            c.get("slo_basis"), "-")
        lines.append(f"| {name} | {ratio} | {basis} | {cost} | {c.get('baseline_state')} | {c.get('candidate_state')} |")
    return lines
