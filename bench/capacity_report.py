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


def scenario_capacity(folder: Path, grid: list[R.RunResult], *, ttft_ms: float, decode_ms: float,
                      decode_metric: str = "itl", min_requests: int = C.DEFAULT_SEARCH_REQUESTS,
                      repeats: int = C.DEFAULT_REPEATS) -> dict[str, dict[str, Any]]:
    """{scenario: {"slo_capacity", "rate_capacity", "open_loop"}} for every scenario of the grid."""
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
