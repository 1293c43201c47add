"""`python -m bench report DIR [--baseline DIR ...] --out OUT`: tables, summary.json and charts.

Reads a sweep folder (results, manifest.json; `python -m bench fetch` downloads one from S3, or give
its s3://bucket/prefix/ directly) and writes to OUT (a folder, or s3://bucket/prefix/ where each file
is uploaded as it is written):

- `report.md`: with a baseline, the verdict first (state, basis, the figure that decided it, and
  what settles an open question); per scenario the peak output tok/s with its req/s and
  concurrency, the concurrency curve (req/s, output tok/s, TTFT and ITL p50/p99, SLO met), the
  capacity under the SLO as an interval, invalid runs with their reasons, spec-decode acceptance
  where the results have it; with a baseline the per-GPU peak and SLO ratios (the SLO ratio with
  its interval) and the cost-efficiency ratios;
- `summary.json` with exactly these keys (other tools read it):
  {"slo": {"ttft_p99_ms", "itl_p99_ms", "decode_metric", "source", "notes"},
   "runs": [{"scenario", "concurrency", "valid", "reason", "completed", "failed", "output_tok_s",
             "req_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "spec_acceptance",
             "suspect", "tpot_p50_ms", "tpot_p99_ms", "prefix_cache_hit_pct", "preemptions",
             "kv_cache_usage_max_pct", "requests_waiting_max", "gpu_util_mean_pct",
             "gpu_mem_used_max_gib", "gpu_power_mean_w", "spec_acceptance_by_position"}],
   "scenarios": {"<scenario>": {"peak": {"concurrency", "output_tok_s", "req_s", "loop", "source_run",
                                         "source_runs"} | null,
                                "slo": {"concurrency", "output_tok_s", "loop", "source_run"} | null,
                                "peak_at_edge": bool | null,
                                "slo_capacity": {"concurrency_pass", "concurrency_fail", "output_tok_s",
                                                 "req_s", "ttft_p99_ci_ms", "decode_p99_ci_ms",
                                                 "source_run", "repeats"}
                                                | {"state": "never_meets_slo"} | null,
                                "rate_capacity": {"req_s", "output_tok_s", "goodput_req_s"} | null,
                                "slo_capacity_interval": INTERVAL,
                                "rate_capacity_interval": INTERVAL | null}},
   "comparison": {"<scenario>": {"baseline_peak_tok_s", "peak_tok_s", "throughput_ratio",
                                 "cost_efficiency_ratio", "slo_ratio", "slo_cost_efficiency_ratio",
                                 "baseline_state", "slo_ratio_interval", "slo_basis_source",
                                 "slo_state", "gpus": {"candidate", "baseline"},
                                 "peak_per_gpu_tok_s": {"candidate", "baseline"},
                                 "candidate_slo_capacity": INTERVAL, "baseline_slo_capacity": INTERVAL,
                                 "slo_capacity_per_gpu": {"candidate": [lo, hi] | null,
                                                          "baseline": [lo, hi] | null},
                                 "slo_figure_per_gpu": {"candidate", "baseline"},
                                 "slo_ratio_band_credit": [low end, high end]}} | null,
   "verdict": {"threshold", "min_ratio", "pass", "basis", "state", "reasons",
               "min_ratio_interval", "min_ratio_scenario", "fleet" (with --current-replicas):
               {"current", "replicas_range": [lo, hi] | null, "divided_by": [{"scenario", "end",
               "ratio_per_replica", "replicas"} | null, same], "basis", "gpus": {"candidate",
               "baseline"}, "candidate", "reason", "baseline": {"label", "instance_type", "gpus",
               "model", "vllm_version", "image", "served_flags"},
               "targets": [{"replicas", "needs_ratio_per_gpu"}]}} | null,
   "extra_runs": [{"side": "candidate" | "baseline", "scenario", "kind": "search" | "open_loop",
                   "file", "concurrency", "rate", "output_tok_s", "req_s", "ttft_p99_ms", "itl_p99_ms",
                   "tpot_p99_ms"}],
   "invalid_attempts": [{"side": "candidate" | "baseline", "scenario", "kind": "grid" | "search" |
                         "open_loop", "concurrency", "rate", "attempt", "file", "reason",
                         "then": "valid" | "invalid"}],
   "run_counts": {"candidate": COUNTS, "baseline": COUNTS | null},
   "ignored_files": [{"file", "reason"}],
   "rehearsal": {"source", "pool", "configuration", "scenario", "request_rate", "planned_peak_req_s",
                 "rate_from", "burstiness", "duration_s", "base_url", "slo": {"ttft_p99_ms", "itl_p99_ms"},
                 "ttft_p99_ms", "itl_p99_ms", "ttft_within_slo", "itl_within_slo",
                 "requests": {"sent", "answered", "met"}, "attainment_pct", "held",
                 "autoscaler": {"min_replicas", "max_replicas", "startup_s", "peak_replicas", "short_s",
                                "samples", "decisions": [{"t", "values", "recommended", "replicas", "ready"}]},
                 "replica_hours": {"autoscaled", "planned", "share_of_plan_pct"},
                 "usd_hour": {"on_demand", "spot"}, "cost_usd": {"autoscaled_on_demand", "planned_on_demand",
                 "autoscaled_spot", "planned_spot"}} | null}
  COUNTS = {"grid", "grid_usable", "grid_invalid", "grid_suspect", "search", "open_loop",
  "invalid_attempts"}: the runs the report lists, counted (the page's header and the command's last
  line word these): a side's grid runs (usable, invalid, suspect), its capacity-search and open-loop
  runs (`extra_runs`), and its invalid attempts (`invalid_attempts`: every
  failed attempt the manifest records that no other row lists, its reason whole, and whether the run
  came back valid).
  INTERVAL = {"source": "grid" | "search" | "open_loop", "state": "meets_slo" | "never_meets_slo"
  | "no_data", "output_tok_s": [lo, hi] | null, "load_unit": "concurrency" | "req/s", "load_pass",
  "load_fail", "load_max", "confirmed", "point_tok_s", "loop": "closed" | "open", "source_run",
  "source_runs", "fail_runs", "repeats", "noise_pct", "noise_source": "measured" | "assumed"}: the
  capacity (`point_tok_s`, the output tok/s at `load_pass`, the highest load meeting the SLO, from
  `source_runs`, `repeats` runs) and its 95 % interval, up to the lowest load above it missing the
  SLO for sure, both ends widened by the run-to-run band `noise_pct`. In every interval [lo, hi] of summary.json a null end has
  no finite bound (an open upper end; a lower end of a ratio where only the candidate meets the
  SLO).
  Metrics of invalid runs are null (their completed/failed counts are kept); `spec_acceptance` is
  vLLM's draft acceptance rate in percent, null without speculative decoding. Telemetry figures
  (prefix-cache hits, preemptions, KV, GPU) come from the manifest, null where not measured;
  `spec_acceptance_by_position` is a list of percents. A suspect run keeps its metrics, with its
  reason in `reason`. `itl_p99_ms` is the decode limit, applied to the p99 of `decode_metric`;
  `source` says where the SLO comes from: "recorded" (the sweeps' manifests), "flags" (a flag that
  differs from them, or sweeps that recorded none) or "default"; `notes` names each flag that
  differs from what a sweep recorded, with both values.
  `rehearsal` (with --rehearsal) is what `bench rehearse` found, read from its rehearsal.json
  (`source`): the run's p99s against the SLO, `attainment_pct` the share of requests sent that met
  it each on its own, the autoscaler's simulated `decisions` (the reads where the rule's
  recommendation, the replicas asked for or those serving changed; `t` seconds into the trace),
  replica-hours and cost autoscaled against the plan's fixed fleet; null without a rehearsal.
  `ignored_files` lists every file of the folder (and, prefixed `baseline:`, of the baseline) that
  the report did not use, with why.
- `chart_<scenario>.png`: output tok/s, TTFT p99 and ITL p99 against concurrency, baseline dashed,
  SLO limits drawn, peak and the capacity under the SLO (its run, and its bracket shaded) marked (needs matplotlib; skipped with a note
  when it is missing);
- `report.html` (unless --no-html): the same report as one self-contained page to open in a browser
  (bench/analysis/pages/): the verdict and its reasons first, the ratio per scenario with its interval, the
  curves, capacity brackets, startup timeline, replica plan, invalid and suspect runs, manifests.

Definitions
- Valid run: `bench.analysis.results` rules (every prompt completed, none failed, ...), and the server did
  not restart during it. Invalid runs are listed and appear in no figure, peak, SLO or ratio.
- Suspect run: valid, but a random-prompt scenario got more than 5 % of its prompt tokens from
  the prefix cache (replayed prompts), speculative decoding accepted fewer draft tokens on real
  text than the floor the sweep recorded (`--min-spec-acceptance-pct`, default 10 %), or the answers streamed
  fewer than two chunks per request (decode latency not measured: no evidence on the decode
  limit; such a run whose TTFT p99 misses the limit counts, as a miss on TTFT alone); excluded
  like an invalid run, with its reason.
- Peak: the highest output tok/s over every closed-loop run (the grid's and the capacity search's;
  runs of one concurrency averaged).
- Throughput under the SLO (`slo`): the capacity figure, the output tok/s at the highest load whose
  TTFT p99 and decode p99 (ITL, or TPOT with `--slo-decode-metric tpot`) are both within the
  limits (default 500 ms and 50 ms), with its run; the same figure as `slo_capacity_interval`'s.
- Peak at the edge: the peak is at the highest concurrency tested; the test set it, not the server.
- Throughput ratio (per GPU): (peak / GPUs) / (baseline peak / baseline GPUs); GPUs come from
  --gpus/--baseline-gpus, else the manifest, else 1.
- Cost-efficiency ratio: (tok/s / price per hour) / (baseline tok/s / baseline price per hour),
  the prices being those of the hardware that served each sweep: --price-per-hour, else the
  manifest. A price given explicitly (here, or to the sweep) is used as given; a price looked up
  by capacity type (Spot or on-demand) needs that type known, else there is no cost ratio.
- SLO capacity (`slo_capacity_interval`): between the output tok/s at the highest load meeting
  the SLO and at the lowest load above it missing it; from the grid, or the capacity search's
  tighter bracket where it ran; an open upper end where the highest load tested still meets it;
  0 where even concurrency 1 misses it. `rate_capacity_interval`: the same over the open loop's
  offered rates.
- SLO ratio (per GPU): `slo_ratio_interval` = [candidate low / baseline high, candidate high /
  baseline low], open loop where both sides ran it, else closed loop (`slo_basis_source`: grid,
  search or open_loop); `slo_ratio` = `slo_figure_per_gpu` candidate / baseline: the two capacity
  figures per GPU (each the mean of the runs at its highest load meeting the SLO, over its side's
  GPUs; null for a side known only to lie below a load), the figures the pages show, not an end of
  the interval. The two capacities the interval divides are `candidate_slo_capacity` and
  `baseline_slo_capacity` (per replica, with their runs) and `slo_capacity_per_gpu`; the pages
  show them beside every ratio. The ends' bands add in
  quadrature, not at their worst on both sides at once: low end = candidate low / baseline high x
  `slo_ratio_band_credit`[0], high end = candidate high / baseline low / [1] (null for an open end),
  shown beside the ratio too. `baseline_state`: meets_slo, never_meets_slo or no_data.
- Verdict (`--verdict-basis`, default slo): `state` pass, fail or inconclusive, with `reasons`
  (what is missing or too uncertain, and the command that settles it) unless it passes. On the
  slo basis: pass when the lower end of the SLO ratio clears --threshold in every scenario and the
  comparison is complete; fail when the upper end is below it in some scenario; inconclusive
  otherwise. On the peak basis (the PoC report's method): the smallest per-scenario peak ratio
  against the threshold. Missing data is never a fail. Complete means every scenario on both
  sides, no invalid or suspect run, the same concurrencies and input/output lengths, and like for
  like (`bench.analysis.checks`: the same dataset, seed, prompts, warm-ups, bench arguments, max model
  length, prefix caching and speculative settings, except those named with --vary); sides that
  are not like for like (or whose manifest cannot be read) never pass nor fail. `min_ratio` is the
  smallest lower end, `min_ratio_interval` the interval of the smallest ratio, `pass` is true in
  state pass only; `min_ratio_interval` is one scenario's interval (the smallest low end), and
  `min_ratio_scenario` names it.
- Fleet (`verdict.fleet`): the candidate's replicas that carry what --current-replicas replicas of
  the baseline carry: today's replicas over the ratio intervals the verdict decided on, per replica
  (per GPU x candidate GPUs / baseline GPUs), rounded up: `replicas_range` = [ceil(current / the
  smallest high end), ceil(current / the smallest low end)] (the latter the verdict's own
  `min_ratio_interval`), `divided_by` naming each end's scenario and ratio. An end without a finite
  ratio leaves that side open (null: "at most 10", "at least 4"); no range (null, with `reason`) where
  a scenario has no interval, the candidate meets the SLO at no load, or only the candidate does. No
  headroom or spares: the replica plan beside the report (plan/plan.json, headroom 0, spares 0) sizes
  the same load the same way. Also what the baseline ran (today's fleet must run the same for
  "today" to hold) and the per-GPU ratio a fleet of the threshold's and twice the threshold's
  reduction needs (12 -> 8 at 1.5x, 4 at 3x).

Exit codes: 0 report written (with --exit-code: pass); 1 with --exit-code: fail; 3 with
--exit-code: inconclusive (also without a baseline); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.analysis import answer, checks, pages
from bench.analysis import capacity_report as CR
from bench.analysis import decision as D
from bench.analysis import plan as P
from bench.analysis import results as R
from bench.analysis import spec as SPEC
from bench.analysis import verdict as V
from bench.analysis.side import (SLO_FLAGS, Side, SloConflict, add_slo_arguments, choose_slo, load_side, meets_slo,
                                 slo_given)
from bench.analysis.summary import build_summary, fleet, load_rehearsal
from bench.common import locations
from bench.common.cli import out_folder, run_one
from bench.startup import report as startup_report

# ---------------------------------------------------------------------------------------------
# Markdown


def _n(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _describe(side: Side) -> list[str]:
    m = side.manifest or {}
    server = m.get("server") or {}
    rows = [
        ("Results", f"`{locations.origin(side.path, m)}`"),
        ("Model", server.get("model") or (m.get("config") or {}).get("model")),
        ("vLLM (server)", server.get("vllm_version")),
        ("Served flags", f"`{m['served_flags']}`" if m.get("served_flags") else None),
        ("Instance type", m.get("instance_type")),
        ("GPUs", side.gpus),
        ("Image", m.get("image")),
        ("Node", ((m.get("hardware") or {}).get("node") or {}).get("node")),
        ("Capacity type", side.capacity_type or "unknown"),
        ("Price per hour", (f"${side.price_per_hour:.2f}" + (f" ({(m.get('hardware') or {}).get('price_source')})"
                            if (m.get("hardware") or {}).get("price_source") else ""))
         if side.price_per_hour else None),
        ("Sweep", f"{m.get('started_at')} to {m.get('finished_at') or 'not finished (interrupted or running)'}"
         if m.get("started_at") else None),
        ("Config hash", f"`{m['config_hash']}`" if m.get("config_hash") else None),
    ]
    for note in (m.get("hardware") or {}).get("notes") or []:
        rows.append(("Hardware note", note))
    if side.manifest_error:
        rows.append(("Manifest", f"unreadable: manifest.json is {side.manifest_error} (plan, hardware and "
                                 "server facts unknown; like-for-like checks impossible)"))
    elif not m:
        rows.append(("Manifest", "none (hand-collected results: plan and server facts unknown)"))
    return [f"- {k}: {v}" for k, v in rows if v not in (None, "")]


def _price(side: Side) -> str:
    if not side.price_per_hour:
        return "unknown"
    how = {"given": "given", "looked up": f"looked up for {side.capacity_type or 'an unknown capacity type'}"}
    return f"${side.price_per_hour:.2f} ({how.get(side.price_source, 'from the manifest')})"


def _lengths(side: Side, name: str) -> str:
    pair = side.lengths.get(name)
    return f"{pair[0]}/{pair[1]}" if pair and None not in pair else "unknown"


def render_markdown(side: Side, base: Side | None, summary: dict[str, Any], issues: list[str],
                    charts: list[str], chart_note: str | None) -> str:
    slo = summary["slo"]
    metric = slo["decode_metric"]
    decode_ms = slo["itl_p99_ms"]
    lim = f"TTFT p99 <= {slo['ttft_p99_ms']:g} ms and {metric.upper()} p99 <= {decode_ms:g} ms"
    counts = summary["run_counts"]
    lines = [f"# Benchmark report: {side.label}", "", f"Runs: {side.label}: {answer.runs_words(counts['candidate'])}"
             + (f"; baseline {base.label}: {answer.runs_words(counts['baseline'])}." if base else "."), ""]
    lines += _describe(side)
    if base:
        lines += ["", f"Baseline: {base.label}", ""] + _describe(base)
    where = {"recorded": "as the sweeps recorded it", "flags": "as the flags set it", "default": "the default (the "
             "sweeps recorded none)"}.get(slo.get("source"), "")
    lines += ["", f"SLO: {lim}{', ' + where if where else ''}."] + [f"- {n}" for n in slo.get("notes") or []]
    if base and summary["verdict"] is not None:
        lines += answer.verdict_markdown(summary["verdict"], side.label, base.label, getattr(base, "plan_link", None),
                                  issues, summary)
    has_spec = any(r.spec_acceptance_rate_pct is not None for r in side.runs if r.valid)
    lines += [
        "",
        "## Definitions",
        "",
        "- A run is **valid** only when every prompt completed and none failed (plus file checks); "
        "invalid runs are listed below and excluded from every table figure, peak, ratio and chart.",
        "- **Peak**: the valid run with the highest output tok/s in the scenario.",
        f"- **Capacity under the SLO** ({lim}): output tok/s known between two tested loads, from the "
        "throughput of the run at the highest load meeting both limits (the figure, named with its run: "
        "load, closed or open loop, file) to that at the lowest load above it missing them. It is the one "
        "capacity figure of this report: its tables, charts, ratios, verdict and replica plan all use it. "
        f"The decode limit applies to {metric.upper()} (`--slo-decode-metric`): ITL is measured per "
        "streamed chunk, TPOT per output token.",
        "- A run is **suspect** when its prompts were served from the prefix cache (hits above "
        f"{R.SUSPECT_PREFIX_CACHE_PCT:g}% of prompt tokens in a random-prompt scenario): it measured the "
        "cache, not the hardware, and is left out of peaks, SLO figures, ratios, charts and the verdict. So is a "
        "run whose speculative decoding accepted fewer draft tokens than the floor (a collapsed draft), and one "
        "whose answers streamed fewer than two chunks per request (its decode latency was not measured, so it is "
        "no evidence for or against the decode limit), unless its TTFT p99 misses the limit on its own.",
        "- A run during which the server restarted is invalid.",
    ]
    if has_spec or any(checks.speculative(checks.served_flags(s.manifest)) not in (None, "off")
                       for s in (side, base) if s):
        lines.append("- Speculative decoding is on: a streamed chunk carries several accepted tokens, so "
                     "ITL (per chunk) rises while TPOT (per token) falls; read both.")
    if base:
        v = summary["verdict"]
        lines += [
            "- **Peak ratio** (per GPU) = (peak / GPUs) / (baseline peak / baseline GPUs).",
            "- **Cost-efficiency ratio** = (tok/s / price per hour) / (baseline tok/s / baseline price "
            "per hour), each price being that of the hardware that served the sweep.",
            "- **SLO ratio** (per GPU): the ratio of the two capacities under the SLO, per GPU, an interval "
            "from (candidate low / baseline high) to (candidate high / baseline low); both capacities are shown "
            "beside it.",
            f"- **Verdict** on the {v['basis']} basis against {v['threshold']:g}x: PASS when "
            + ("the lower end of the SLO ratio clears the threshold in every scenario, FAIL when its upper end "
               "is below it in some scenario, INCONCLUSIVE otherwise (an interval across the threshold, "
               "missing or invalid runs, sides that differ); see How the verdict is decided in docs/benchmark.md."
               if v["basis"] == "slo" else
               "the smallest per-scenario peak ratio clears it, FAIL when some scenario's peak ratio is "
               "below it, INCONCLUSIVE when a scenario has no peak on a side or the comparison is incomplete."),
        ]

    lines += ["", "## Peak throughput per scenario", "",
              "| Scenario | In/out tokens | Peak output tok/s | req/s | Concurrency at peak "
              "| Capacity under the SLO (from the run) |",
              "|---|---|---:|---:|---:|---|"]
    edges = [name for name, s in summary["scenarios"].items() if s.get("peak_at_edge")]
    for name, s in summary["scenarios"].items():
        p = s["peak"]
        lines.append(
            f"| {name} | {_lengths(side, name)} | {_n(p and p['output_tok_s'])} | {_n(p and p['req_s'], 2)} "
            f"| {p['concurrency'] if p else '-'} | {answer.capacity_words(s.get('slo_capacity_interval'))} |"
        )

    if edges:
        lines += ["", f"Peak at the edge ({', '.join(edges)}): the peak is at the highest concurrency "
                  "tested, so the test, not the server, set it; the server may go higher (`peak_at_edge`)."]

    lines += CR.markdown(summary, getattr(side, "capacity", {}), side.manifest,
                         summary["slo"].get("decode_metric", "itl"))

    for name in summary["scenarios"]:
        lines += ["", f"## {name} ({_lengths(side, name)}) concurrency curve", ""]
        head = ("| Concurrency | req/s | output tok/s | TTFT p50 (ms) | TTFT p99 (ms) | ITL p50 (ms) | ITL p99 (ms) "
                "| TPOT p50 (ms) | TPOT p99 (ms) | SLO | Prefix-cache hits | Preemptions | KV max | GPU util |")
        sep = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
        if has_spec:
            head += " Spec acceptance |"
            sep += "---:|"
        lines += [head, sep]
        for run in side.runs:
            if run.scenario != name:
                continue
            if not run.valid:
                row = f"| {run.concurrency} | invalid: {run.reason} | | | | | | | | | | | | |"
                lines.append(row + (" |" if has_spec else ""))
                continue
            tele = side.telemetry.get((run.scenario, run.concurrency)) or {}
            ok = "met" if meets_slo(run, slo["ttft_p99_ms"], decode_ms, metric) else "missed"
            fail_at = (summary["scenarios"][name].get("slo_capacity_interval") or {}).get("load_fail")
            if ok == "met" and isinstance(fail_at, (int, float)) and run.concurrency >= fail_at:
                ok = f"met in this run; not counted (the capacity under the SLO misses it from c={fail_at:g})"
            if side.suspect(run):
                ok = "SUSPECT (excluded)"
            pct = lambda v: "-" if v is None else f"{v:.1f}%"  # noqa: E731
            row = (f"| {run.concurrency} | {_n(run.req_s, 2)} | {_n(run.output_tok_s)} | {_n(run.ttft_p50_ms)} "
                   f"| {_n(run.ttft_p99_ms)} | {_n(run.itl_p50_ms)} | {_n(run.itl_p99_ms)} "
                   f"| {_n(run.tpot_p50_ms)} | {_n(run.tpot_p99_ms)} | {ok} "
                   f"| {pct(tele.get('prefix_cache_hit_pct'))} | {_n(tele.get('preemptions'), 0)} "
                   f"| {pct(tele.get('kv_cache_usage_max_pct'))} | {pct(tele.get('gpu_util_mean_pct'))} |")
            if has_spec:
                acc = run.spec_acceptance_rate_pct
                length = run.spec_acceptance_length
                by_pos = tele.get("spec_acceptance_by_position")
                where = f"; by position {' / '.join(f'{p:.0f}%' for p in by_pos)}" if by_pos else ""
                row += f" {_n(acc)}% (length {_n(length, 2)}{where}) |" if acc is not None else " - |"
            lines.append(row)

    lines += SPEC.report_sections(side.label, side.runs)

    bad = [(side.label, r) for r in side.invalid()] + ([(base.label, r) for r in base.invalid()] if base else [])
    lines += ["", "## Invalid runs", ""]
    if bad:
        lines += ["Excluded from every figure above and below.", "",
                  "| Sweep | Scenario | Concurrency | Completed | Failed | Reason |", "|---|---|---:|---:|---:|---|"]
        lines += [f"| {who} | {r.scenario} | {r.concurrency} | {r.completed if r.completed is not None else '-'} "
                  f"| {r.failed if r.failed is not None else '-'} | {r.reason} |" for who, r in bad]
    else:
        lines.append("No invalid run: every run completed all of its prompts without a failed request.")
    lines += answer.attempts_markdown(summary, {"candidate": side.label, "baseline": base.label if base else ""})

    doubtful = [(side.label, r, side.suspect(r)) for r in side.suspect_runs()]
    doubtful += [(base.label, r, base.suspect(r)) for r in base.suspect_runs()] if base else []
    if doubtful:
        lines += ["", "## Suspect runs", "", "Valid by vLLM's counts, but excluded from every figure:", "",
                  "| Sweep | Scenario | Concurrency | Why |", "|---|---|---:|---|"]
        lines += [f"| {who} | {r.scenario} | {r.concurrency} | {why} |" for who, r, why in doubtful]

    if base and summary["comparison"] is not None:
        lines += ["", f"## Comparison with {base.label}", "",
                  f"GPUs: {side.gpus} vs baseline {base.gpus}. Prices per hour: {_price(side)} vs baseline "
                  f"{_price(base)}.", "",
                  "| Scenario | Baseline peak tok/s | Peak tok/s | Peak ratio (per GPU) | = candidate peak per GPU "
                  "| / baseline peak per GPU | Cost-efficiency ratio (peak) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, c in summary["comparison"].items():
            per = c.get("peak_per_gpu_tok_s") or {}
            lines.append(f"| {name} | {_n(c['baseline_peak_tok_s'])} | {_n(c['peak_tok_s'])} "
                         f"| {_x(c['throughput_ratio'])} | {_n(per.get('candidate'))} | {_n(per.get('baseline'))} "
                         f"| {_x(c['cost_efficiency_ratio'])} |")
        lines += CR.comparison_markdown(summary, (side.label, base.label), getattr(side, "capacity", {}))
        if not side.price_per_hour or not base.price_per_hour:
            lines += ["", "No cost-efficiency ratio: it needs a price per hour on both sides "
                      "(--price-per-hour / --baseline-price-per-hour, or the sweeps' manifests)."]
        guessed = [s.label for s in (side, base) if s.price_per_hour and s.cost_price() is None]
        if guessed:
            lines += ["", f"No cost-efficiency ratio: the capacity type (Spot or on-demand) of {', '.join(guessed)} "
                      "is unknown, and its price was looked up by capacity type, so it may be the wrong one "
                      "(give --capacity-type / --baseline-capacity-type, or a price to use as given with "
                      "--price-per-hour / --baseline-price-per-hour)."]
        warnings = checks.like_for_like(side.manifest, base.manifest)[1]
        if side.manifest_error or base.manifest_error:
            warnings = [w for w in warnings if not w.startswith("a side has no manifest.json")]
        if warnings:
            lines += ["", "Warnings (not blocking):", ""] + [f"- {w}" for w in warnings]

    lines += answer.rehearsal_markdown(summary.get("rehearsal"))

    ignored = summary.get("ignored_files") or []
    if ignored:
        routine = [f for f in ignored if checks.is_routine(f)]
        other = [f for f in ignored if not checks.is_routine(f)]
        lines += ["", "## Files not used", ""]
        if other:
            lines += ["| File | Why |", "|---|---|"] + [f"| `{f['file']}` | {f['reason']} |" for f in other]
        if routine:
            lines += ["", f"Also {len(routine)} process logs and telemetry sample files under `logs/` "
                      "(listed in summary.json `ignored_files`)."]

    if charts or chart_note:
        lines += ["", "## Charts", ""]
        if chart_note:
            lines.append(chart_note)
        lines += [f"![{c}]({c})" for c in charts]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Command


def run(args: argparse.Namespace) -> int:
    path = Path(args.dir)
    if not path.is_dir():
        print(f"bench report: no such folder: {path}", file=sys.stderr)
        return 2
    side = load_side(path, label=args.label, gpus=args.gpus, price_per_hour=args.price_per_hour,
                     capacity_type=args.capacity_type)
    if not side.runs:
        print(f"bench report: no results or manifest in {path} (give a folder written by `bench sweep --out` "
              "or `bench fetch`)", file=sys.stderr)
        return 2
    base = None
    if args.baseline:
        bpath = Path(args.baseline)
        if not bpath.is_dir():
            print(f"bench report: --baseline: no such folder: {bpath}", file=sys.stderr)
            return 2
        base = load_side(bpath, label=args.baseline_label, gpus=args.baseline_gpus,
                         price_per_hour=args.baseline_price_per_hour, capacity_type=args.baseline_capacity_type)
    bad_vary = [v for v in args.vary or [] if v not in checks.VARIABLE]
    if bad_vary:
        print(f"bench report: --vary: unknown {', '.join(bad_vary)}; known: {', '.join(checks.VARIABLE)}",
              file=sys.stderr)
        return 2
    if args.current_replicas is not None and args.current_replicas < 1:
        print(f"bench report: --current-replicas must be 1 or more (the replicas of the baseline serving today), "
              f"got {args.current_replicas}", file=sys.stderr)
        return 2
    try:
        slo = choose_slo([(s.label, s.manifest) for s in (side, base) if s is not None], slo_given(args), SLO_FLAGS)
    except SloConflict as exc:
        print(f"bench report: {exc}", file=sys.stderr)
        return 2
    for note in slo.notes:
        print(f"bench report: SLO: {note}", file=sys.stderr)
    args.slo_ttft_p99_ms, args.slo_itl_p99_ms, args.slo_decode_metric = (slo.ttft_p99_ms, slo.decode_p99_ms,
                                                                         slo.decode_metric)
    try:
        rehearsed = load_rehearsal(args.rehearsal)
    except ValueError as exc:
        print(f"bench report: --rehearsal: {exc}", file=sys.stderr)
        return 2
    summary, issues = build_summary(side, base, ttft_ms=args.slo_ttft_p99_ms, itl_ms=args.slo_itl_p99_ms,
                                    threshold=args.threshold, decode_metric=args.slo_decode_metric,
                                    vary=tuple(args.vary or ()), basis=args.verdict_basis, slo_choice=slo,
                                    rehearsed=rehearsed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if base is not None:
        base.plan_link = write_plan(args, out)
        if summary["verdict"] is not None and args.current_replicas:
            summary["verdict"]["fleet"] = fleet(summary, current=args.current_replicas,
                                                threshold=args.threshold, candidate=side, baseline=base)
    charts: list[str] = []
    note = None
    if args.no_charts:
        note = None
    else:
        try:  # matplotlib is imported only when charts are drawn (bench/analysis/charts.py)
            from bench.analysis import charts as C  # local import: charts loads matplotlib

            charts = C.render(side, base, summary["slo"], out, summary["scenarios"], summary["extra_runs"])
        except ImportError:
            note = "Charts skipped: matplotlib is not installed (`pip install matplotlib`)."
            print(f"bench report: {note}", file=sys.stderr)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    locations.written(out / "summary.json")
    text = render_markdown(side, base, summary, issues, charts, note) + startup_report.markdown(path)
    (out / "report.md").write_text(text, encoding="utf-8")
    locations.written(out / "report.md")
    counts = summary["run_counts"]
    msg = (f"bench report: {side.label}: {answer.runs_words(counts['candidate'])}"
           + (f"; baseline {base.label}: {answer.runs_words(counts['baseline'])}" if base else "")
           + f" -> {locations.display(out / 'report.md')}, summary.json")
    if not args.no_html:
        pages.write_report(out, summary, side, base, issues, charts=not args.no_charts)
        locations.written(out / "report.html")
        msg += ", report.html"
    if charts:
        msg += f", {len(charts)} charts"
    v = summary["verdict"]
    if v:
        msg += f"; {answer.verdict_short(summary)}"
        if v["reasons"]:
            msg += f"; {len(v['reasons'])} reason{'s' if len(v['reasons']) != 1 else ''} in report.md"
    print(msg)
    if args.exit_code:
        if v is None:
            print("bench report: --exit-code: no verdict without --baseline; exit 3 (inconclusive)", file=sys.stderr)
            return D.EXIT_CODES[V.INCONCLUSIVE]
        return D.EXIT_CODES[v["state"]]
    return 0


def write_plan(args: argparse.Namespace, out: Path) -> str | None:
    """The replica plan next to the report (plan/plan.md), on the verdict's basis."""
    plan_args = argparse.Namespace(
        candidates=[args.dir], out=str(out / "plan"), baseline=args.baseline, current_replicas=args.current_replicas,
        current_gpus_per_replica=1, reference=None, load=None, mix=None, basis=args.verdict_basis, headroom=0.0,
        spares=0, price_per_hour=None, slo_ttft_p99_ms=args.slo_ttft_p99_ms, slo_decode_p99_ms=args.slo_itl_p99_ms,
        slo_decode_metric=getattr(args, "slo_decode_metric", "itl"), no_charts=args.no_charts,
        no_html=getattr(args, "no_html", False))
    try:
        P.make_plan(plan_args)
    except P.UsageError as exc:
        print(f"bench report: replica plan skipped: {exc}", file=sys.stderr)
        return None
    return "plan/plan.md"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", help="report.md, summary.json and charts from a sweep folder", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", help="sweep folder (from `sweep --out` or `fetch`), or its s3://bucket/prefix/")
    p.add_argument("--out", type=out_folder, required=True,
                   help="folder for report.md, summary.json and charts, or s3://bucket/prefix/ (each file is "
                        "uploaded as it is written)")
    p.add_argument("--label", help="name of this sweep (default: manifest label or folder name)")
    p.add_argument("--gpus", type=int, help="GPUs behind this sweep's server (default: manifest, else 1)")
    p.add_argument("--price-per-hour", type=float, help="hourly price of that hardware (default: manifest)")
    p.add_argument("--baseline", help="sweep folder (or s3://bucket/prefix/) to compare against")
    p.add_argument("--baseline-label", help="name of the baseline")
    p.add_argument("--baseline-gpus", type=int, help="GPUs behind the baseline (default: manifest, else 1)")
    p.add_argument("--baseline-price-per-hour", type=float, help="hourly price of the baseline hardware")
    add_slo_arguments(p)
    p.add_argument("--capacity-type", choices=("on-demand", "spot"),
                   help="capacity type of this sweep's node (default: manifest)")
    p.add_argument("--baseline-capacity-type", choices=("on-demand", "spot"),
                   help="capacity type of the baseline's node (default: its manifest)")
    p.add_argument("--vary", action="append", metavar="SETTING",
                   help="a setting the comparison tests, allowed to differ between the sides: "
                        + ", ".join(checks.VARIABLE) + " (repeatable)")
    p.add_argument("--threshold", type=float, default=1.5,
                   help="verdict threshold on the per-GPU throughput ratio (default: %(default)s)")
    p.add_argument("--verdict-basis", choices=("slo", "peak"), default="slo",
                   help="ratio the verdict uses: slo (capacity under the SLO, an interval per side; default) or "
                        "peak (peak output tok/s per GPU, the PoC report's method)")
    p.add_argument("--current-replicas", type=int, default=12,
                   help="replicas of the baseline serving today, for the replica plan (default: %(default)s)")
    p.add_argument("--rehearsal",
                   help="the folder `bench rehearse --out` wrote (or its rehearsal.json, or s3://bucket/prefix/): "
                        "its SLO attainment, replica-hours and cost against the plan become a section")
    p.add_argument("--no-charts", action="store_true", help="write no PNG charts")
    p.add_argument("--exit-code", action="store_true",
                   help="exit with the verdict's state once the report is written: 0 pass, 1 fail, 3 inconclusive "
                        "(no baseline counts as inconclusive); without it a written report exits 0")
    p.add_argument("--no-progress", action="store_true",
                   help="no download progress for s3:// folders (default: a bar on a terminal, else a line every 10 s)")
    p.add_argument("--no-html", action="store_true",
                   help="write no report.html (the self-contained page: verdict, ratios, charts, plan, manifests)")
    p.set_defaults(func=locations.remote_io(run, command="report", inputs=("dir", "baseline", "rehearsal")))
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "report", argv)
