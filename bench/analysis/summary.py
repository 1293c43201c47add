"""summary.json of a report: per-scenario figures, the comparison with a baseline and what it lacks.

`build_summary` writes every key the report's help lists (bench/analysis/report.py): the runs, the
peak and best run under the SLO per scenario, the per-GPU and cost ratios, the capacity under the
SLO and the verdict (bench/analysis/capacity_report.py), and the files the report did not use.
`completeness_issues` and `comparability_issues` say why a comparison cannot pass yet, each with
the command that settles it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.analysis import capacity_report as CR
from bench.analysis import checks
from bench.analysis import results as R
from bench.analysis.capacity import interval as CAP
from bench.analysis.side import MANIFEST, Side, SloChoice, run_row, whole_reason
from bench.common import locations
from bench.startup import report as startup_report


def closed_peak(side: Side, name: str) -> dict[str, Any] | None:
    """The peak of a scenario over every closed-loop run of the sweep and its repeats: the usable grid runs
    and the capacity search's runs, the runs of one concurrency averaged
    (bench.analysis.capacity.interval.closed_peak)."""
    return CR.sides_peak(side.sweeps, name)


def scenario_summary(side: Side, ttft_ms: float, decode_ms: float, metric: str = "itl") -> dict[str, Any]:
    """Per scenario the peak (every closed-loop run) and the capacity under the SLO with its run;
    `slo` is filled in from the one capacity figure (bench.analysis.capacity_report.add_to_summary)."""
    out = {}
    for name in side.scenarios:
        top = closed_peak(side, name)
        tested = max((r.concurrency for r in side.runs if r.scenario == name), default=None)
        out[name] = {
            "peak": top,
            "slo": None,
            # the peak sits at the highest concurrency tested: the test, not the server, set it
            "peak_at_edge": (top["concurrency"] == tested) if top else None,
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 4)


def _per(value: float | None, gpus: int) -> float | None:
    return None if value is None else round(value / gpus, 4)


def compare(side: Side, base: Side) -> dict[str, dict[str, Any]]:
    out = {}
    names = side.scenarios + [s for s in base.scenarios if s not in side.scenarios]
    for name in names:
        top, btop = closed_peak(side, name), closed_peak(base, name)
        cand = top["output_tok_s"] if top else None
        ref = btop["output_tok_s"] if btop else None
        per_gpu = _ratio(cand / side.gpus if cand is not None else None,
                         ref / base.gpus if ref is not None else None)
        cost = None
        # A looked-up price follows the capacity the run landed on; with that unknown there is no
        # cost ratio. A price given explicitly is used as given.
        if side.cost_price() and base.cost_price() and cand is not None and ref is not None:
            cost = _ratio(cand / side.cost_price(), ref / base.cost_price())
        out[name] = {
            "baseline_peak_tok_s": ref,
            "peak_tok_s": cand,
            "throughput_ratio": per_gpu,
            "cost_efficiency_ratio": cost,
            # what the ratios divide: GPUs per side and the peaks per GPU
            "gpus": {"candidate": side.gpus, "baseline": base.gpus},
            "peak_per_gpu_tok_s": {"candidate": _per(cand, side.gpus), "baseline": _per(ref, base.gpus)},
        }
    return out


def _run_issues(s: Side, who: str, where: str) -> list[str]:
    """The invalid, missing and suspect runs of one sweep that block a pass, `who` naming the sweep."""
    issues = []
    bad = s.invalid()
    if bad:
        listed = ", ".join(f"{r.scenario} c={r.concurrency}" for r in bad)
        runs = "run" if len(bad) == 1 else "runs"
        issues.append(f"{who} has {len(bad)} invalid or missing {runs} ({listed}): run "
                      f"{'it' if len(bad) == 1 else 'them'} again (`bench sweep --resume` on {where} runs "
                      "only what is missing or invalid)")
    # A run whose decode latency was not measured is left out of the figures (the capacity interval
    # says what that leaves open) but does not block: nothing better is measurable at that load.
    doubtful = [r for r in s.suspect_runs() if not (s.suspect(r) or "").startswith(R.UNMEASURED_DECODE)]
    collapsed = [r for r in doubtful if (s.suspect(r) or "").startswith(R.SPEC_COLLAPSE)]
    doubtful = [r for r in doubtful if r not in collapsed]
    if collapsed:
        listed = "; ".join(f"{r.scenario} c={r.concurrency}: {s.suspect(r)}" for r in collapsed)
        issues.append(f"{who} ran speculative decoding that collapsed ({listed}): fix the draft "
                      "(model, quantisation, vLLM version) and sweep again; a working MTP draft accepted about "
                      "55 % on Korean text")
    if doubtful:
        listed = ", ".join(f"{r.scenario} c={r.concurrency}" for r in doubtful)
        runs = "run" if len(doubtful) == 1 else "runs"
        issues.append(f"{who} has {len(doubtful)} suspect {runs} (prompts served from the "
                      f"prefix cache: {listed}): run {'it' if len(doubtful) == 1 else 'them'} again "
                      "(`bench sweep --resume`)")
    return issues


def completeness_issues(side: Side, base: Side) -> list[str]:
    """What is missing from a comparison, each with the command that completes it; any issue
    blocks a passing verdict. A side's repeats (`Side.repeats`) are held to the same rules."""
    issues = []
    for who, s in (("candidate", side), ("baseline", base)):
        for sweep in s.sweeps:
            issues += _run_issues(sweep, f"the {who} ({s.label})" if sweep is s
                                  else f"the {who}'s repeat {locations.origin(sweep.path, sweep.manifest)}",
                                  "that side" if sweep is s else "that folder")
    names = side.scenarios + [s for s in base.scenarios if s not in side.scenarios]
    for name in names:
        if name not in side.scenarios or not side.valid(name):
            issues.append(f"scenario {name}: no usable run in the candidate ({side.label}): run it "
                          f"(`bench sweep --scenarios {name} --resume` against the candidate)")
            continue
        if name not in base.scenarios or not base.valid(name):
            issues.append(f"scenario {name}: no usable run in the baseline ({base.label}): run it "
                          f"(`bench sweep --scenarios {name} --resume` against the baseline)")
            continue
        cc = sorted(r.concurrency for r in side.runs if r.scenario == name)
        bc = sorted(r.concurrency for r in base.runs if r.scenario == name)
        if cc != bc:
            issues.append(f"scenario {name}: the concurrencies differ ({', '.join(map(str, cc))} vs baseline "
                          f"{', '.join(map(str, bc))}): sweep both sides at the same --concurrencies")
    return issues


def comparability_issues(side: Side, base: Side, vary: tuple[str, ...] = ()) -> list[str]:
    """Why the two sides did not measure the same thing; these block a pass and a fail alike."""
    issues = []
    for who, s in (("candidate", side), ("baseline", base)):
        if s.manifest_error:
            issues.append(f"the {who}'s manifest.json ({s.path / MANIFEST}) is {s.manifest_error}, so its "
                          "sweep settings cannot be checked against the other side: fetch the folder again "
                          "(`bench fetch`) or restore the file")
    for name in side.scenarios:
        la, lb = side.lengths.get(name), base.lengths.get(name)
        if la and lb and None not in la and None not in lb and la != lb:
            issues.append(f"scenario {name}: the input/output lengths differ ({la[0]}/{la[1]} tokens vs baseline "
                          f"{lb[0]}/{lb[1]}): sweep both sides with the same scenario lengths")
    issues += checks.like_for_like(side.manifest, base.manifest, vary)[0]
    return issues


# ---------------------------------------------------------------------------------------------
# The runs a report lists, and their counts (the report's header and its printed line count these)


def extra_runs(side: Side, who: str) -> list[dict[str, Any]]:
    """summary.json `extra_runs`: the capacity search's and the open loop's runs of a side that the
    figures read (valid), as rows like `runs`' with their side, kind, file and load; a side with repeats
    lists every sweep's, each file named after its folder too (`<folder>/search/...`)."""
    return [row for sweep in side.sweeps for row in _extra_runs(sweep, who, bool(side.repeats))]


def _extra_runs(side: Side, who: str, qualify: bool) -> list[dict[str, Any]]:
    rows = []
    for scenario, by_c in CR.search_runs(side.path).items():
        for c, runs in sorted(by_c.items()):
            rows += [_extra_row(r, who, "search", c, None, qualify) for r, _ in runs]
    for scenario, by_rate in CR.open_loop_runs(side.path).items():
        for rate, runs in sorted(by_rate.items()):
            rows += [_extra_row(r, who, "open_loop", None, rate, qualify) for r, _ in runs]
    return rows


def _extra_row(run: R.RunResult, who: str, kind: str, concurrency: int | None, rate: float | None,
               qualify: bool = False) -> dict[str, Any]:
    return {"side": who, "scenario": run.scenario, "kind": kind, "file": CAP.run_file(run, qualify),
            "concurrency": concurrency, "rate": rate, "output_tok_s": run.output_tok_s, "req_s": run.req_s,
            "ttft_p99_ms": run.ttft_p99_ms, "itl_p99_ms": run.itl_p99_ms, "tpot_p99_ms": run.tpot_p99_ms}


def invalid_attempts(side: Side, who: str) -> list[dict[str, Any]]:
    """summary.json `invalid_attempts`: every invalid attempt a side's manifest records that no other
    row lists (a grid run's failed attempts before its last one, every failed extra run), with its
    reason made whole and what became of the run (`then`: "valid" once run again, else "invalid"); a
    side with repeats lists every sweep's, each file named after its folder too."""
    rows = []
    for sweep in side.sweeps:
        for row in _invalid_attempts(sweep, who):
            if side.repeats and row.get("file"):
                row["file"] = f"{sweep.path.name}/{row['file']}"
            rows.append(row)
    return rows


def _invalid_attempts(side: Side, who: str) -> list[dict[str, Any]]:
    m = side.manifest or {}
    out = []
    for rec in m.get("runs") or []:
        if not isinstance(rec, dict):
            continue
        attempts = [a for a in rec.get("attempts") or [] if isinstance(a, dict)]
        for a in attempts[:-1]:
            if a.get("valid") is False:
                out.append({"side": who, "scenario": rec.get("scenario"), "kind": "grid",
                            "concurrency": rec.get("concurrency"), "rate": None, "attempt": a.get("n"),
                            "file": a.get("file"), "reason": whole_reason(side.path, a.get("reason"), a.get("log")),
                            "then": "valid" if attempts[-1].get("valid") else "invalid"})
    extra = [r for r in ((m.get("extra") or {}).get("runs") or []) if isinstance(r, dict)]
    for i, r in enumerate(extra):
        if r.get("valid") is not False:
            continue
        stem = str(r.get("file") or "").split(".attempt")[0]
        later = [x for x in extra[i + 1:] if x.get("valid") and str(x.get("file") or "").startswith(stem + ".")]
        log = f"logs/{r.get('kind')}.{stem}.attempt{r.get('attempt')}.log" if stem else None
        out.append({"side": who, "scenario": r.get("scenario"), "kind": r.get("kind"),
                    "concurrency": r.get("concurrency") if r.get("rate") is None else None, "rate": r.get("rate"),
                    "attempt": r.get("attempt"), "file": r.get("file"),
                    "reason": whole_reason(side.path, r.get("reason"), log) or "no reason recorded",
                    "then": "valid" if stem and later else "invalid"})
    return out


def run_counts(side: Side, extra: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json `run_counts` of one side: its grid runs (usable, invalid, suspect), its extra runs
    by kind and its invalid attempts, counted from the rows the report lists. With repeats the counts
    cover every sweep of the side, and `repeats` counts the repeats' share alike (with `sweeps`, how many)."""
    counts = _counts(side.sweeps, extra, attempts)
    if side.repeats:
        counts["repeats"] = {"sweeps": len(side.repeats), **_counts(
            side.repeats, [row for r in side.repeats for row in _extra_runs(r, "", False)],
            [row for r in side.repeats for row in _invalid_attempts(r, "")])}
    return counts


def _counts(sweeps: list[Side], extra: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> dict[str, int]:
    grid = [(s, r) for s in sweeps for r in s.runs]
    return {"grid": len(grid), "grid_usable": sum(1 for s, r in grid if s.usable(r)),
            "grid_invalid": sum(1 for _, r in grid if not r.valid),
            "grid_suspect": sum(1 for s, r in grid if r.valid and s.suspect(r)),
            "search": sum(1 for r in extra if r["kind"] == "search"),
            "open_loop": sum(1 for r in extra if r["kind"] == "open_loop"),
            "invalid_attempts": len(attempts)}


def repeat_runs(side: Side, who: str) -> list[dict[str, Any]]:
    """summary.json `repeat_runs` rows of one side: each repeat's grid runs as `runs` lists the first sweep's,
    with their side and sweep (where its results live)."""
    return [{**run_row(r, sweep), "side": who, "sweep": locations.origin(sweep.path, sweep.manifest)}
            for sweep in side.repeats for r in sweep.runs]


def build_summary(side: Side, base: Side | None, *, ttft_ms: float, itl_ms: float,
                  threshold: float, decode_metric: str = "itl",
                  vary: tuple[str, ...] = (), basis: str = "peak",
                  slo_choice: SloChoice | None = None,
                  rehearsed: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """summary.json, and the issues that make a comparison incomplete. The decode limit `itl_ms`
    applies to the p99 of `decode_metric`; `slo_choice` says where the SLO came from (the sweeps'
    manifests, a flag that differs from them, or the default) and what differs; `rehearsed` is the
    rehearsal's figures (`rehearsal` below), None without one."""
    decode_ms = itl_ms
    for s in (side, base):
        if s is not None:
            s.judge_with(ttft_ms)
    comparison = compare(side, base) if base else None
    incomparable = comparability_issues(side, base, vary) if base else []
    issues = (completeness_issues(side, base) + incomparable) if base else []
    summary = {
        "slo": {"ttft_p99_ms": ttft_ms, "itl_p99_ms": itl_ms, "decode_metric": decode_metric,
                "source": slo_choice.source if slo_choice else "flags",
                "notes": list(slo_choice.notes) if slo_choice else []},
        "runs": [run_row(r, side) for r in side.runs],
        "scenarios": scenario_summary(side, ttft_ms, decode_ms, decode_metric),
        "comparison": comparison,
        "verdict": None,
        "ignored_files": [],
        "rehearsal": rehearsed,
        "extra_runs": extra_runs(side, "candidate") + (extra_runs(base, "baseline") if base else []),
        "invalid_attempts": invalid_attempts(side, "candidate") + (invalid_attempts(base, "baseline") if base else []),
    }

    def mine(key: str, who: str) -> list[dict[str, Any]]:
        return [row for row in summary[key] if row["side"] == who]

    summary["run_counts"] = {
        "candidate": run_counts(side, mine("extra_runs", "candidate"), mine("invalid_attempts", "candidate")),
        "baseline": run_counts(base, mine("extra_runs", "baseline"), mine("invalid_attempts", "baseline"))
        if base else None}
    # where each sweep's results live, as report.md's Results names them (the S3 prefix it uploaded to)
    summary["sweeps"] = {"candidate": [locations.origin(s.path, s.manifest) for s in side.sweeps],
                         "baseline": [locations.origin(s.path, s.manifest) for s in base.sweeps] if base else None}
    if side.repeats or (base and base.repeats):
        summary["repeat_runs"] = repeat_runs(side, "candidate") + (repeat_runs(base, "baseline") if base else [])
    # Capacity under the SLO (grid, search and open-loop files), SLO ratios, the verdict.
    side.capacity = CR.add_to_summary(summary, side, base, ttft_ms=ttft_ms, decode_ms=itl_ms,
                                      decode_metric=decode_metric, basis=basis, threshold=threshold,
                                      issues=issues, incomparable=incomparable)
    # the start-up records the report's Startup section reads (bench.startup.report) are used, not left out
    for s in [side, *side.repeats] + ([base, *base.repeats] if base else []):
        s.used |= startup_report.record_files(s.path)
    summary["ignored_files"] = checks.unused_files(side.path, side.used, side.manifest_error)
    summary["ignored_files"] += _unused_of_repeats(side, "")
    if base:
        summary["ignored_files"] += [{"file": f"baseline:{f['file']}", "reason": f["reason"]}
                                     for f in checks.unused_files(base.path, base.used, base.manifest_error)]
        summary["ignored_files"] += _unused_of_repeats(base, "baseline:")
    return summary, issues


def _unused_of_repeats(side: Side, prefix: str) -> list[dict[str, str]]:
    """The files of a side's repeats that no figure read, named `<prefix><folder>/<file>`."""
    return [{"file": f"{prefix}{r.path.name}/{f['file']}", "reason": f["reason"]}
            for r in side.repeats for f in checks.unused_files(r.path, r.used, r.manifest_error)]


def basis_intervals(summary: dict[str, Any]) -> dict[str, list[Any] | None]:
    """Per scenario, the ratio interval per GPU the verdict decided on: `slo_ratio_interval` on the slo
    basis, the peak ratio as [r, r] on the peak basis (null ends: no finite bound)."""
    basis = (summary.get("verdict") or {}).get("basis")
    out: dict[str, list[Any] | None] = {}
    for name, c in (summary.get("comparison") or {}).items():
        if basis == "slo":
            out[name] = c.get("slo_ratio_interval")
        else:
            out[name] = [c["throughput_ratio"]] * 2 if c.get("throughput_ratio") is not None else None
    return out


def fleet_range(current: int, intervals: dict[str, list[Any] | None], per_replica: float
                ) -> tuple[list[int | None] | None, list[dict[str, Any] | None], str | None]:
    """(replicas_range, what each end divides by, why there is no range): today's replicas over the
    ratio intervals the verdict decided on, per replica (per GPU x `per_replica`, candidate GPUs /
    baseline GPUs), rounded up. The fleet carries every scenario, so its high end divides by the
    smallest low end (the verdict's own `min_ratio_interval`) and its low end by the smallest high end:
    [ceil(current / smallest high end), ceil(current / smallest low end)]. An end without a finite
    ratio leaves that side open (null); a scenario without an interval, one the candidate does not
    serve within the SLO, or ends open both ways give no range, and a reason in words."""
    missing = [n for n, iv in intervals.items() if not iv]
    if not intervals or missing:
        return None, [None, None], ("the verdict has no ratio interval in " + (", ".join(missing) or "any scenario")
                                    + " to divide today's replicas by (see its reasons)")
    ends = {n: [CAP.INF if v is None else float(v) * per_replica for v in iv] for n, iv in intervals.items()}
    zero = [n for n, (lo, hi) in ends.items() if hi <= 0]
    if zero:
        return None, [None, None], (f"the candidate meets the SLO at no load tested in {', '.join(zero)}, so no count "
                                    "of its replicas carries today's load there within the SLO")
    sized = {n: e for n, e in ends.items() if not math.isinf(e[0])}  # only the candidate meets the SLO: no load
    if not sized:
        return None, [None, None], ("only the candidate meets the SLO: today's fleet carries no load within it at "
                                    "the loads tested, so there is no load to size the candidate's fleet for")

    def end(k: int) -> dict[str, Any] | None:
        name, (lo, hi) = min(sized.items(), key=lambda item: item[1][k])
        ratio = (lo, hi)[k]
        if math.isinf(ratio) or ratio <= 0:
            return None
        ratio = round(ratio, 4)
        return {"scenario": name, "end": ("low", "high")[k], "ratio_per_replica": ratio,
                "replicas": max(1, math.ceil(current / ratio - 1e-9))}

    divided = [end(1), end(0)]
    if divided == [None, None]:
        return None, divided, "the ratio intervals have no bound either way (the capacities they divide are open)"
    return [d["replicas"] if d else None for d in divided], divided, None


def fleet(summary: dict[str, Any], *, current: int, threshold: float, candidate: Side,
          baseline: Side) -> dict[str, Any]:
    """summary.json `verdict.fleet`: what the answer means for today's fleet, from the ratio intervals
    the verdict decided on: the candidate's replicas that carry what `current` replicas of the baseline
    carry (`fleet_range`; `divided_by` names the scenario, end and ratio per replica behind each end of
    `replicas_range`; no headroom or spares: the replica plan adds those); what the baseline ran
    (today's fleet must run the same for "today" to hold); and the per-GPU ratio each smaller fleet
    needs (threshold and twice the threshold: 12 replicas -> 8 need 1.5x, 4 need 3x)."""
    span, divided, reason = fleet_range(current, basis_intervals(summary), candidate.gpus / baseline.gpus)
    m = baseline.manifest or {}
    ran = {"label": baseline.label, "instance_type": m.get("instance_type"), "gpus": baseline.gpus,
           "model": (m.get("server") or {}).get("model") or (m.get("config") or {}).get("model"),
           "vllm_version": (m.get("server") or {}).get("vllm_version"), "image": m.get("image"),
           "served_flags": m.get("served_flags") if isinstance(m.get("served_flags"), str) else
           (" ".join(map(str, m["served_flags"])) if m.get("served_flags") else None)}
    targets = []
    for factor in (threshold, 2 * threshold):
        k = int(current // factor) if factor > 0 else 0
        if 1 <= k < current and k not in [t["replicas"] for t in targets]:
            targets.append({"replicas": k, "needs_ratio_per_gpu": round(current / k * baseline.gpus / candidate.gpus, 4)})
    return {
        "current": current,
        "replicas_range": span,
        "divided_by": divided,
        "basis": (summary.get("verdict") or {}).get("basis"),
        "gpus": {"candidate": candidate.gpus, "baseline": baseline.gpus},
        "candidate": candidate.label,
        "reason": reason,
        "baseline": ran,
        "targets": targets,
    }


REHEARSAL_FILE = "rehearsal.json"
_REHEARSAL_KEYS = ("pool", "scenario", "request_rate", "duration_s", "slo", "requests", "run", "autoscaler",
                   "replica_hours", "cost_usd")


def _pct(part: Any, whole: Any) -> float | None:
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (part, whole))
    return round(100.0 * part / whole, 2) if ok and whole > 0 else None


def rehearsal(record: dict[str, Any] | None, source: str | None) -> dict[str, Any] | None:
    """summary.json `rehearsal`: what `bench rehearse` found (its rehearsal.json, read from `source`),
    as the report shows it: the run's p99s against the SLO, the share of requests that met it, the
    autoscaler's simulated decisions (the reads where its recommendation, the replicas asked for or
    those serving changed), replica-hours and cost against the plan's fixed fleet. None without a
    rehearsal; ValueError naming what a record lacks."""
    if record is None:
        return None
    if not isinstance(record, dict):
        raise ValueError("it is not a JSON object")
    missing = [k for k in _REHEARSAL_KEYS if k not in record]
    if missing:
        raise ValueError(f"it has no {', '.join(missing)}")
    slo, run, req, auto = record["slo"], record["run"], record["requests"], record["autoscaler"]
    hours, cost = record["replica_hours"], record["cost_usd"]

    def within(value: Any, limit: Any) -> bool | None:
        return None if not isinstance(value, (int, float)) else value <= limit

    decisions, last = [], None
    for step in auto.get("steps") or []:
        now = (step["recommended"], step["replicas"], step["ready"])
        if now != last:
            decisions.append({"t": step["t"], "values": dict(step.get("values") or {}), "recommended": now[0],
                              "replicas": now[1], "ready": now[2]})
        last = now
    return {
        "source": source,
        "pool": record["pool"], "configuration": record.get("configuration"), "scenario": record["scenario"],
        "request_rate": record["request_rate"], "planned_peak_req_s": record.get("planned_peak_req_s"),
        "rate_from": record.get("rate_from"), "burstiness": record.get("burstiness"),
        "duration_s": record["duration_s"], "base_url": record.get("base_url"),
        "slo": {"ttft_p99_ms": slo["ttft_p99_ms"], "itl_p99_ms": slo["itl_p99_ms"]},
        "ttft_p99_ms": run.get("ttft_p99_ms"), "itl_p99_ms": run.get("itl_p99_ms"),
        "ttft_within_slo": within(run.get("ttft_p99_ms"), slo["ttft_p99_ms"]),
        "itl_within_slo": within(run.get("itl_p99_ms"), slo["itl_p99_ms"]),
        "requests": {"sent": req["sent"], "answered": req["answered"], "met": req["met"]},
        "attainment_pct": _pct(req["met"], req["sent"]),
        "held": record.get("held"),
        "autoscaler": {"min_replicas": auto["min_replicas"], "max_replicas": auto["max_replicas"],
                       "startup_s": auto["startup_s"], "peak_replicas": auto.get("peak_replicas"),
                       "short_s": auto.get("short_s"), "samples": auto.get("samples"), "decisions": decisions},
        "replica_hours": {"autoscaled": hours["autoscaled"], "planned": hours["planned"],
                          "share_of_plan_pct": _pct(hours["autoscaled"], hours["planned"])},
        "usd_hour": dict(record.get("usd_hour") or {}),
        "cost_usd": {k: cost.get(k) for k in ("autoscaled_on_demand", "planned_on_demand", "autoscaled_spot",
                                               "planned_spot")},
    }


def load_rehearsal(given: str | None) -> dict[str, Any] | None:
    """summary.json `rehearsal` from `bench report --rehearsal` (the folder `bench rehearse --out`
    wrote, or its rehearsal.json); None without one. ValueError says what is wrong and how to fix it."""
    if not given:
        return None
    path = Path(given)
    if path.is_dir():
        path = path / REHEARSAL_FILE
    how = "give the folder `bench rehearse --out` wrote, or its rehearsal.json"
    if not path.is_file():
        raise ValueError(f"no such file: {path} ({how})")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return rehearsal(record, locations.display(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}): {how}") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not a rehearsal record ({exc}): {how}") from None
    except KeyError as exc:
        raise ValueError(f"{path} is not a rehearsal record (it has no {exc.args[0]}): {how}") from None
    except (TypeError, AttributeError):
        raise ValueError(f"{path} is not a rehearsal record (a field has the wrong type): {how}") from None
