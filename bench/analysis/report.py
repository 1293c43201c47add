"""`python -m bench report DIR [--baseline DIR] [--out DIR]`: tables, the verdict, summary.json, pages.

Reads a sweep folder (what `bench sweep --out` or `bench fetch` wrote, or its s3://bucket/prefix/)
and writes to --out: report.md, summary.json (stable keys that other tools read), report.html (one
self-contained page), a chart per scenario and, with a baseline, the replica plan under plan/.

Per scenario: the peak output tok/s, the concurrency curve, and the capacity under the SLO as an
interval (TTFT p99 and the decode p99 within their limits: the SLO the sweeps recorded unless an
SLO flag sets another). With --baseline: the per-GPU ratios, cost efficiency, and the verdict
against --threshold on the --basis figure: pass, fail, or inconclusive with the reasons and the
command that settles each (a missing or invalid run is never a fail).

    python -m bench report results/g7e --baseline results/l40s --out build/report/g7e

Repeats: --repeat DIR (and --baseline-repeat DIR) add another sweep of a side's server setting
from a fresh server, sharing every setting; its runs are pooled into that side's peak and capacity
under the SLO, so the run-to-run band holds the spread between servers; how and why,
docs/benchmark.md#repeats-from-fresh-servers.

Reference: the files and every key of summary.json, docs/files.md#report-summaryjson-and-the-reports-files;
how the verdict is decided, docs/benchmark.md#how-the-verdict-is-decided.

Exit codes: 0 report written (with --exit-code: pass); 1 with --exit-code: fail; 3 with
--exit-code: inconclusive (also without a baseline); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.analysis import answer, checks, pages, rehearsal_words
from bench.analysis import capacity_report as CR
from bench.analysis import compare as COMPARE
from bench.analysis import decision as D
from bench.analysis import plan as P
from bench.analysis import results as R
from bench.analysis import spec as SPEC
from bench.analysis import verdict as V
from bench.analysis.side import SLO_FLAGS, Side, SloConflict, choose_slo, give_prices, load_side, meets_slo, slo_given
from bench.analysis.summary import build_summary, fleet, load_rehearsal
from bench.common import locations
from bench.common import options as O
from bench.common.cli import Help, run_one
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
        ("Repeats", ", ".join(f"`{locations.origin(r.path, r.manifest)}`" for r in side.repeats)
         + " (the same server setting, each from a fresh server): pooled into the peak and the capacity under "
         "the SLO; the curve tables show the first sweep's runs, Repeats' runs lists theirs"
         if side.repeats else None),
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
    lines += repeats_markdown(summary, {"candidate": side.label, "baseline": base.label if base else ""})

    named = _sweeps_named(side) + (_sweeps_named(base) if base else [])
    bad = [(who, r) for who, s in named for r in s.invalid()]
    lines += ["", "## Invalid runs", ""]
    if bad:
        lines += ["Excluded from every figure above and below.", "",
                  "| Sweep | Scenario | Concurrency | Completed | Failed | Reason |", "|---|---|---:|---:|---:|---|"]
        lines += [f"| {who} | {r.scenario} | {r.concurrency} | {r.completed if r.completed is not None else '-'} "
                  f"| {r.failed if r.failed is not None else '-'} | {r.reason} |" for who, r in bad]
    else:
        lines.append("No invalid run: every run completed all of its prompts without a failed request.")
    lines += answer.attempts_markdown(summary, {"candidate": side.label, "baseline": base.label if base else ""})

    doubtful = [(who, r, s.suspect(r)) for who, s in named for r in s.suspect_runs()]
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

    lines += rehearsal_words.rehearsal_markdown(summary.get("rehearsal"))

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


def _sweeps_named(side: Side) -> list[tuple[str, Side]]:
    """A side's sweeps as the Invalid and Suspect tables name them: its label, then each repeat's folder."""
    return [(side.label, side)] + [(f"{side.label}, repeat {locations.origin(r.path, r.manifest)}", r)
                                  for r in side.repeats]


def repeats_markdown(summary: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """report.md's Repeats' runs (summary.json `repeat_runs`): every grid run of each repeat, per side and
    scenario, so that every run a pooled figure reads is listed (their capacity-search and open-loop runs are
    under Capacity under the SLO)."""
    rows = summary.get("repeat_runs") or []
    if not rows:
        return []
    metric = summary["slo"].get("decode_metric", "itl")
    decode = "tpot_p99_ms" if metric == "tpot" else "itl_p99_ms"
    lines = ["", "## Repeats' runs", "",
             "Each repeat is another sweep of its side's server setting from a fresh server. Its runs are pooled "
             "with the first sweep's into the peak and the capacity under the SLO: runs at one concurrency with one "
             "number of requests are repeats of one point, so the run-to-run band holds the spread between "
             "servers. Invalid and suspect runs are left out of every figure, as the first sweep's are.", "",
             f"| Side | Sweep | Scenario | Concurrency | Requests completed | Output tok/s | TTFT p99 (ms) "
             f"| {metric.upper()} p99 (ms) | Run |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        state = ("valid" if r["valid"] and not r["suspect"] else f"suspect, excluded: {r['reason']}" if r["valid"]
                 else f"invalid: {r['reason'] or 'no reason recorded'}")
        done = "-" if r["completed"] is None else f"{r['completed']:,}"
        lines.append(f"| {labels.get(r['side'], r['side'])} | `{r['sweep']}` | {r['scenario']} | {r['concurrency']} "
                     f"| {done} | {_n(r['output_tok_s'])} | {_n(r['ttft_p99_ms'])} | {_n(r[decode])} | {state} |")
    return lines


# ---------------------------------------------------------------------------------------------
# Command


def load_repeats(side: Side, dirs: list[str] | None, flag: str, seen: dict[Path, str], *,
                 gpus: int | None, capacity_type: str | None) -> None:
    """Each folder of `flag` as a repeat of `side` (`Side.repeats`), loaded as the side was (its label, GPUs and
    capacity type). ValueError, in one line naming `flag` and the fix, for a folder that is missing, has no runs,
    was given already (`seen`: resolved folder -> how it was given), or differs from the side's first sweep in a
    server or benchmark setting (bench.analysis.compare.setting_differences)."""
    first = locations.display(side.path)
    for d in dirs or []:
        path = Path(d)
        if not path.is_dir():
            raise ValueError(f"{flag}: no such folder: {path} (give another sweep of the server setting of "
                             f"{first}, a folder as `bench sweep --out` or `bench fetch` wrote it)")
        if path.resolve() in seen:
            raise ValueError(f"{flag} {path}: the same folder as {seen[path.resolve()]}; a repeat is another sweep "
                             "from a fresh server, so give each folder once")
        seen[path.resolve()] = f"{flag} {path}"
        repeat = load_side(path, label=side.label, gpus=gpus, capacity_type=capacity_type)
        if not repeat.runs:
            raise ValueError(f"{flag}: no results or manifest in {path} (give a folder written by `bench sweep "
                             "--out` or `bench fetch`)")
        differ = COMPARE.setting_differences(COMPARE.facts_of(side), COMPARE.facts_of(repeat))
        if differ:
            listed = "; ".join(f"the {kind} setting {k} ({first}: {a}, {path}: {b})" for kind, k, a, b in differ)
            raise ValueError(f"{flag} {path}: it differs from {first} in {listed}; a repeat must share every setting "
                             "with the sweep it repeats (only the server is fresh): give a sweep of the same "
                             "settings, or set different ones side by side with `bench compare`")
        side.repeats.append(repeat)


def run(args: argparse.Namespace) -> int:
    path = Path(args.dir)
    if not path.is_dir():
        print(f"bench report: no such folder: {path}", file=sys.stderr)
        return 2
    side = load_side(path, label=args.label, gpus=args.gpus, capacity_type=args.capacity_type)
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
                         capacity_type=args.baseline_capacity_type)
    if args.baseline_repeat and base is None:
        print("bench report: --baseline-repeat needs --baseline (the sweep it repeats): give --baseline DIR too, "
              "or leave --baseline-repeat out", file=sys.stderr)
        return 2
    seen = {path.resolve(): f"DIR {path}"}
    if base is not None:
        seen.setdefault(bpath.resolve(), f"--baseline {bpath}")
    try:
        load_repeats(side, args.repeat, "--repeat", seen, gpus=args.gpus, capacity_type=args.capacity_type)
        if base is not None:
            load_repeats(base, args.baseline_repeat, "--baseline-repeat", seen, gpus=args.baseline_gpus,
                         capacity_type=args.baseline_capacity_type)
    except ValueError as exc:
        print(f"bench report: {exc}", file=sys.stderr)
        return 2
    try:
        give_prices(side, base, args.price_per_hour or [], args.baseline_price_per_hour)
    except ValueError as exc:
        print(f"bench report: {exc}", file=sys.stderr)
        return 2
    bad_vary = [v for v in args.vary or [] if v not in checks.VARIABLE]
    if bad_vary:
        print(f"bench report: --vary: unknown {', '.join(bad_vary)}; known: {', '.join(checks.VARIABLE)}",
              file=sys.stderr)
        return 2
    args.current_replicas = O.current_replicas(args)
    try:
        recorded = [(who, s.manifest) for top in (side, base) if top is not None for who, s in _sweeps_named(top)]
        slo = choose_slo(recorded, slo_given(args), SLO_FLAGS)
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
                                    vary=tuple(args.vary or ()), basis=args.basis, slo_choice=slo,
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

            charts = C.render(side, base, summary["slo"], out, summary["scenarios"], summary["extra_runs"],
                              summary.get("repeat_runs"))
        except ImportError:
            note = "Charts skipped: matplotlib is not installed (`pip install matplotlib`)."
            print(f"bench report: {note}", file=sys.stderr)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    locations.written(out / "summary.json")
    text = render_markdown(side, base, summary, issues, charts, note) + startup_report.markdown(path)
    (out / "report.md").write_text(text, encoding="utf-8")
    locations.written(out / "report.md")
    counts = summary["run_counts"]

    def sweeps(s: Side) -> str:
        return f" from {len(s.sweeps)} sweeps" if s.repeats else ""

    msg = (f"bench report: {side.label}{sweeps(side)}: {answer.runs_words(counts['candidate'])}"
           + (f"; baseline {base.label}{sweeps(base)}: {answer.runs_words(counts['baseline'])}" if base else "")
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
        repeat=list(args.repeat or []), baseline_repeat=list(args.baseline_repeat or []),
        current_gpus_per_replica=1, reference=None, load=None, mix=None, basis=args.basis, headroom=0.0,
        spares=0, price_per_hour=None, slo_ttft_p99_ms=args.slo_ttft_p99_ms, slo_itl_p99_ms=args.slo_itl_p99_ms,
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
        "report", help="tables, the verdict, summary.json and report.html from a sweep folder", description=__doc__,
        formatter_class=Help,
    )
    p.add_argument("dir", metavar="DIR", help="sweep folder (from `sweep --out` or `fetch`), or its s3://bucket/prefix/")
    O.add_out(p, "report", "report.md, summary.json, report.html, charts and plan/")
    O.add_baseline(p, help="sweep folder (or s3://bucket/prefix/) to compare against")
    p.add_argument("--repeat", action="append", metavar="DIR",
                   help="another sweep of this side's server setting from a fresh server (or its s3://bucket/prefix/), "
                        "sharing every setting: pooled into the peak and the capacity under the SLO (repeatable)")
    p.add_argument("--baseline-repeat", action="append", metavar="DIR",
                   help="the same for the baseline (needs --baseline; repeatable)")
    p.add_argument("--label", help="name of this sweep (default: manifest label or folder name)")
    p.add_argument("--baseline-label", help="name of the baseline (default: its manifest label or folder name)")
    p.add_argument("--gpus", type=O.above_zero(int), help="GPUs behind this sweep's server (default: manifest, else 1)")
    p.add_argument("--baseline-gpus", type=O.above_zero(int), help="GPUs behind the baseline (default: manifest, else 1)")
    O.add_price(p, repeatable=True, prices="this sweep's hardware, or with LABEL= of the sweep so labelled "
                                          "(default: the manifest)")
    p.add_argument("--baseline-price-per-hour", type=O.price, metavar="OD[/SPOT]",
                   help="USD per hour of the baseline's hardware (default: its manifest)")
    O.add_capacity_type(p, of="this sweep's node (default: manifest)")
    O.add_capacity_type(p, "--baseline-capacity-type", of="the baseline's node (default: its manifest)")
    O.add_slo(p, recorded_by="the sweeps recorded")
    O.add_threshold(p)
    O.add_basis(p, "the verdict and the plan")
    O.add_current_replicas(p)
    p.add_argument("--vary", action="append", metavar="SETTING",
                   help="a setting the comparison tests, allowed to differ between the sides: "
                        + ", ".join(checks.VARIABLE) + " (repeatable)")
    p.add_argument("--rehearsal", metavar="DIR",
                   help="the folder `bench rehearse --out` wrote (or its rehearsal.json, or s3://bucket/prefix/): "
                        "its SLO attainment, replica-hours and cost against the plan become a section")
    p.add_argument("--exit-code", action="store_true",
                   help="exit with the verdict's state once the report is written: 0 pass, 1 fail, 3 inconclusive "
                        "(no baseline counts as inconclusive); without it a written report exits 0")
    p.add_argument("--no-charts", action="store_true", help="draw no charts")
    p.add_argument("--no-html", action="store_true", help="write no report.html")
    O.add_no_progress(p)
    p.set_defaults(func=locations.remote_io(run, command="report",
                                            inputs=("dir", "baseline", "rehearsal", "repeat", "baseline_repeat")))
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "report", argv)
