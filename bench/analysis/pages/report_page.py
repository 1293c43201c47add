"""report.html: the answer first (the verdict, each scenario's ratio interval beside the capacities it
divides, the fleet), then the ratios, the curves with every run the report lists, the capacity
table, start-up, the replica plan, the rehearsal, invalid and suspect runs and attempts, and what each
side ran (bench/analysis/pages/__init__.py says what every page shares)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from bench.analysis import answer
from bench.analysis.markup import (capacity_html, cell, chart, credit_html, document, drawing, esc, facts_list, field,
                                   figure_html, fleet_html, interval_words, is_number, num, ratio_html, rehearsal_html,
                                   scenario_items, side_capacity_html, table, times)
from bench.analysis.pages.plan_page import plan_section
from bench.analysis.side import run_row
from bench.common import locations
from bench.startup import report as startup_report
from bench.startup import timeline

# ---------------------------------------------------------------------------------------------
# Report page


def side_facts(manifest: dict[str, Any] | None, *, label: str, path: str, gpus: int,
               capacity_type: str | None, price: float | None) -> dict[str, Any]:
    """What the page says about one sweep: where it ran, what served it, how it was measured."""
    m = manifest or {}
    server, config, hw = m.get("server") or {}, m.get("config") or {}, m.get("hardware") or {}
    flags = m.get("served_flags")
    return {
        "label": label, "results": path,
        "model": server.get("model") or config.get("model"),
        "vllm": server.get("vllm_version"),
        "image": m.get("image") or "none recorded",
        "flags": flags if isinstance(flags, str) else (" ".join(map(str, flags)) if flags else "none recorded"),
        "instance": m.get("instance_type") or "unknown",
        "gpus": gpus,
        "capacity_type": capacity_type or "unknown",
        "price": (f"${price:,.2f} per hour" if is_number(price) else "unknown")
        + (f" ({hw['price_source']})" if hw.get("price_source") else ""),
        "seed": config.get("seed"),
        "seed_scheme": config.get("seed_scheme"),
        "lengths": ", ".join(f"{k} {v.get('input_len')}/{v.get('output_len')}"
                             for k, v in (config.get("scenarios") or {}).items() if isinstance(v, dict)) or None,
        "concurrencies": ", ".join(map(str, config.get("concurrencies") or [])) or None,
        "sweep": _span(m.get("started_at"), m.get("finished_at")),
        "config_hash": m.get("config_hash"),
        "manifest": bool(m),
    }


def _span(start: Any, end: Any) -> str | None:
    """`2026-12-01 14:54 to 14:55 UTC` from two ISO 8601 times (the date once when it is the same)."""
    def parse(v: Any):
        try:
            t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        except ValueError:
            return None
        return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)

    a, b = parse(start) if start else None, parse(end) if end else None
    if a is None:
        return None
    if b is None:
        return f"{a:%Y-%m-%d %H:%M:%S} UTC, not finished"
    return f"{a:%Y-%m-%d %H:%M:%S} to {b:%H:%M:%S} UTC" if a.date() == b.date() else \
        f"{a:%Y-%m-%d %H:%M:%S} to {b:%Y-%m-%d %H:%M:%S} UTC"


def report_context(side, base, out: Path) -> dict[str, Any]:
    """The facts the report page needs beyond summary.json, from the loaded sides (bench.analysis.side.Side)."""

    def facts(s):
        # where the results live, as report.md names them (the S3 prefix the sweep uploaded to)
        return side_facts(s.manifest, label=s.label, path=locations.origin(s.path, s.manifest), gpus=s.gpus,
                          capacity_type=s.capacity_type,
                          price=s.price_per_hour)

    boots, _ = startup_report.load_records(side.path)
    if base is not None:
        boots += [{**b, "server": f"{b.get('server') or b.get('pod') or 'boot'} (baseline)"}
                  for b in startup_report.load_records(base.path)[0]]
    plan = None
    if base is not None and getattr(base, "plan_link", None):
        try:
            plan = json.loads((out / "plan" / "plan.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            plan = None
    return {
        "candidate": facts(side),
        "baseline": facts(base) if base else None,
        "baseline_runs": [run_row(r, base) for r in base.runs] if base else None,
        "lengths": {k: list(v) for k, v in side.lengths.items()},
        "startup": boots,
        "plan": plan,
        "plan_page": "plan/plan.html" if plan is not None else None,
    }


def verdict_state(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "none"
    state = verdict.get("state")
    if state in ("pass", "fail", "inconclusive"):
        return state
    return "pass" if verdict.get("pass") else "fail"


def _basis_ratio(summary: dict[str, Any]) -> tuple[str, str]:
    basis = (summary.get("verdict") or {}).get("basis") or "peak"
    if basis == "slo":
        return "slo_ratio", "ratio of the capacities under the SLO"
    return "throughput_ratio", "peak throughput ratio"


def verdict_section(summary: dict[str, Any], issues: Sequence[str], ctx: dict[str, Any]) -> str:
    v = summary.get("verdict")
    if not v:
        return ('<section class="verdict state-none"><div class="state">NO VERDICT</div>'
                "<p>This report has no baseline, so there is nothing to hold the threshold against. "
                "Give <code>--baseline DIR</code> to compare two sweeps.</p></section>")
    state = verdict_state(v)
    key, what = _basis_ratio(summary)
    base = (ctx.get("baseline") or {}).get("label", "the baseline")
    cand = (ctx.get("candidate") or {}).get("label", "the candidate")
    threshold = f"{v.get('threshold', 1.5):g}x"
    smallest = ""
    if is_number(v.get("min_ratio")):
        low = [n for n, c in (summary.get("comparison") or {}).items()
               if is_number(((c.get("slo_ratio_interval") if key == "slo_ratio" else [c.get(key)]) or [None])[0])
               and times(((c.get("slo_ratio_interval") if key == "slo_ratio" else [c.get(key)]))[0])
               == times(v["min_ratio"])]
        smallest = (f' The smallest low end is <strong data-field="{field(["verdict", "min_ratio"])}">'
                    f'{esc(times(v["min_ratio"]))}</strong>' + (f" ({esc(', '.join(low))})" if low else "") + ".")
    head = (f"{esc(cand)} against {esc(base)}: the {esc(what)}, per GPU, against the threshold "
            f'<strong data-field="{field(["verdict", "threshold"])}">{esc(threshold)}</strong>, on the '
            f'{esc(v.get("basis") or "peak")} basis.' + smallest)
    reasons = list(v.get("reasons") or [])
    if not reasons:
        reasons = [f"Blocks a pass: {i}" for i in issues]
    scen = scenario_items(summary)
    items = "".join(f"<li>{esc(r)}</li>" for r in reasons)
    return (f'<section class="verdict state-{state}" id="verdict"><div class="state" data-state="{state}">'
            f"{state.upper()}</div><p>{head}</p>"
            + (f'<ul class="scenarios">{"".join(scen)}</ul>' if scen else "")
            + fleet_html(v.get("fleet"))
            + (f"<p>What is missing or too uncertain, and what settles it:</p><ul>{items}</ul>" if items else "")
            + "</section>")


def ratio_section(summary: dict[str, Any]) -> str:
    comparison = summary.get("comparison")
    if not comparison:
        return ""
    v = summary.get("verdict") or {}
    key, what = _basis_ratio(summary)
    rows, chart_rows = [], []
    for name, c in comparison.items():
        at = ["comparison", name]
        per = c.get("slo_capacity_per_gpu") or {}
        peaks = c.get("peak_per_gpu_tok_s") or {}
        source = {"grid": "grid runs", "search": "capacity search", "open_loop": "open-loop rate capacity"}.get(
            c.get("slo_basis_source"), "not stated")
        slo_cells = (f'<td>{ratio_html(c.get("slo_ratio_interval"), [*at, "slo_ratio_interval"])}<br>'
                     f'{credit_html(c, [*at, "slo_ratio_band_credit"])}</td>'
                     + f"<td>{side_capacity_html(c, name, 'candidate')}</td>"
                     + f"<td>{side_capacity_html(c, name, 'baseline')}</td>"
                     + f"<td>{esc(answer.decides_words(c.get('slo_state'), v.get('threshold')) if key == 'slo_ratio' else 'not the basis')}"
                     f"<br><small>{esc(source)}</small></td>")
        peak_cells = (cell(times(c.get("throughput_ratio")), [*at, "throughput_ratio"])
                      + cell(num(peaks.get("candidate")), [*at, "peak_per_gpu_tok_s", "candidate"])
                      + cell(num(peaks.get("baseline")), [*at, "peak_per_gpu_tok_s", "baseline"]))
        rows.append(f"<td>{esc(name)}</td>"
                    + (slo_cells + peak_cells if key == "slo_ratio" else peak_cells + slo_cells)
                    + cell(times(c.get("cost_efficiency_ratio"), "unknown price or capacity type"),
                           [*at, "cost_efficiency_ratio"]))
        interval = (c.get("slo_ratio_interval") if key == "slo_ratio"
                    else ([c[key], c[key]] if is_number(c.get(key)) else None))
        state = c.get("slo_state") if key == "slo_ratio" else (
            None if not is_number(c.get(key)) else "pass" if c[key] >= (v.get("threshold") or 0) else "fail")
        chart_rows.append({"scenario": name, "interval": interval, "state": state,
                           "missing": "no capacity on one side" if interval is None else None})
    slo_head = ["SLO ratio per GPU" + (" (the verdict's interval)" if key == "slo_ratio" else ""),
                "= candidate capacity under the SLO, tok/s per GPU", "/ baseline capacity under the SLO, tok/s per GPU",
                "Scenario decides"]
    peak_head = ["Peak ratio per GPU" + (" (the verdict's)" if key != "slo_ratio" else ""),
                 "= candidate peak per GPU", "/ baseline peak per GPU"]
    head = ["Scenario", *(slo_head + peak_head if key == "slo_ratio" else peak_head + slo_head),
            "Cost-efficiency ratio"]
    threshold = v.get("threshold") if is_number(v.get("threshold")) else None
    img = chart(lambda C: C.ratio_figure(chart_rows, threshold, what), f"{what} per scenario against the threshold")
    return ("<h2>Ratio per scenario</h2><p class=\"note\">Per GPU: (candidate / its GPUs) / (baseline / its GPUs), "
            "each ratio beside the two capacities it divides. On the SLO basis the verdict uses the interval: its "
            "low end is the candidate's low end over the baseline's high end, its high end the candidate's high end "
            "over the baseline's low end; it passes when the low end clears the threshold and fails when the high "
            "end is below it. The chart draws each interval against the dashed threshold.</p>"
            + img + table(head, rows))


def curves_section(summary: dict[str, Any], ctx: dict[str, Any]) -> str:
    slo = summary["slo"]
    metric = slo.get("decode_metric", "itl")
    cand, base = ctx.get("candidate") or {}, ctx.get("baseline") or {}
    ttft, decode = f"{slo['ttft_p99_ms']:g}", f"{slo['itl_p99_ms']:g}"
    parts = [f"<h2>Concurrency curves</h2><p class=\"note\">SLO: TTFT p99 &le; {esc(ttft)} ms "
             f"and {esc(metric.upper())} p99 &le; {esc(decode)} ms (dotted red lines). "
             "A line joins each side's grid runs, crosses mark its capacity-search runs"
             + (", hollow diamonds its repeats' grid runs" if summary.get("repeat_runs") else "")
             + ". The circle marks the peak; the "
             "star marks the capacity under the SLO (its figure, the mean of the runs at its load, drawn at that "
             "load) and the green band its bracket [pass, fail): the same figure as every table. Only valid, "
             "non-suspect runs are drawn.</p>"]
    parts += [f'<p class="note slo-note">SLO: {esc(n)}</p>' for n in slo.get("notes") or []]
    runs = summary.get("runs") or []
    for name, entry in (summary.get("scenarios") or {}).items():
        lengths = (ctx.get("lengths") or {}).get(name)
        title = name + (f" ({lengths[0]}/{lengths[1]} tokens)" if lengths and None not in lengths else "")
        parts.append(f"<h3 id=\"curve-{esc(name)}\">{esc(title)}</h3>")
        parts.append(chart(lambda C, n=name, e=entry, ln=lengths: C.curves_figure(
            runs, ctx.get("baseline_runs"), slo, n, label=cand.get("label", "candidate"),
            base_label=base.get("label"), lengths=tuple(ln) if ln else None, entry=e, grid=True,
            extra=summary.get("extra_runs"), repeats=summary.get("repeat_runs")),
            f"{name}: output tok/s, TTFT p99, ITL p99 and TPOT p99 against concurrency"))
        peak = entry.get("peak") or {}
        cap = entry.get("slo_capacity_interval")
        at = ["scenarios", name, "slo_capacity_interval"]
        summary_line = (
            "<p>Peak "
            + (f'<span data-field="{field(["scenarios", name, "peak", "output_tok_s"])}">{esc(num(peak.get("output_tok_s")))}'
               f'</span> output tok/s at concurrency <span data-field="{field(["scenarios", name, "peak", "concurrency"])}">'
               f'{esc(peak.get("concurrency"))}</span>' if peak else "not measured (no valid run)")
            + ("; the highest concurrency tested, so the test set it, not the server" if entry.get("peak_at_edge") else "")
            + ". Capacity under the SLO: "
            + capacity_html(cap, (cap or {}).get("output_tok_s"), [*at, "output_tok_s"], " tok/s",
                            (cap or {}).get("point_tok_s"), [*at, "point_tok_s"]).replace("<br>", " ")
            + ".</p>")
        parts.append(summary_line)
        rows, classes = [], []
        listed = [(r.get("concurrency") or 0, 0, i, r, ["runs", i]) for i, r in enumerate(runs) if r["scenario"] == name]
        listed += [(r.get("concurrency") or 0 if r["kind"] == "search" else float("inf"), 1, i, r, ["extra_runs", i])
                   for i, r in enumerate(summary.get("extra_runs") or [])
                   if r["scenario"] == name and r.get("side") == "candidate"]
        for _, _, _, r, at_run in sorted(listed, key=lambda x: x[:3]):
            row, cls = run_cells(r, at_run, slo, (cap or {}).get("load_fail"))
            rows.append(row)
            classes.append(cls)
        parts.append(table(["Run", "Concurrency", "req/s", "Output tok/s", "TTFT p99 (ms)", "ITL p99 (ms)",
                            "TPOT p99 (ms)", "SLO"], rows, classes))
    return "".join(parts)


RUN_KINDS = {"search": "capacity search", "open_loop": "open loop"}


def run_cells(r: dict[str, Any], at: list[Any], slo: dict[str, Any], fail_at: Any) -> tuple[str, str]:
    """One listed run's cells (a grid run, or the capacity search's or the open loop's) and its row class."""
    kind = RUN_KINDS.get(r.get("kind"), "grid")
    what = f"<td>{esc(kind)}" + (f"<br><small>{esc(r['file'])}</small>" if r.get("file") else "") + "</td>"
    load = (cell(str(r["concurrency"]), [*at, "concurrency"]) if r.get("rate") is None
            else f'<td>offered <span data-field="{field([*at, "rate"])}">{esc(num(r["rate"], 2))}</span> req/s</td>')
    if not r.get("valid", True):
        return what + load + f'<td colspan="6">invalid: {esc(r.get("reason") or "no reason recorded")}</td>', "bad"
    met = _meets(r, slo)
    status = "suspect, excluded: " + str(r.get("reason")) if r.get("suspect") else ("met" if met else "missed")
    if met and not r.get("suspect") and r.get("rate") is None and is_number(fail_at) and r["concurrency"] >= fail_at:
        status = f"met in this run; not counted: the capacity under the SLO misses it from c={fail_at:g}"
    return (what + load + "".join(cell(num(r.get(k), d), [*at, k]) for k, d in (
        ("req_s", 2), ("output_tok_s", 1), ("ttft_p99_ms", 1), ("itl_p99_ms", 1), ("tpot_p99_ms", 1)))
        + f"<td>{esc(status)}</td>"), "warn" if r.get("suspect") else ""


def _meets(row: dict[str, Any], slo: dict[str, Any]) -> bool:
    decode = row.get("tpot_p99_ms") if slo.get("decode_metric") == "tpot" else row.get("itl_p99_ms")
    return (is_number(row.get("ttft_p99_ms")) and is_number(decode) and row["ttft_p99_ms"] <= slo["ttft_p99_ms"]
            and decode <= slo["itl_p99_ms"])


def repeats_section(summary: dict[str, Any], ctx: dict[str, Any]) -> str:
    """Every grid run of each side's repeats (summary.json `repeat_runs`), which the pooled figures read too."""
    rows = summary.get("repeat_runs") or []
    if not rows:
        return ""
    metric = summary["slo"].get("decode_metric", "itl")
    decode = "tpot_p99_ms" if metric == "tpot" else "itl_p99_ms"
    labels = {role: (ctx.get(role) or {}).get("label", role) for role in ("candidate", "baseline")}
    cells, classes = [], []
    for i, r in enumerate(rows):
        at = ["repeat_runs", i]
        head = (f"<td>{esc(labels.get(r.get('side'), r.get('side')))}</td><td><code>{esc(r.get('sweep'))}</code></td>"
                f"<td>{esc(r['scenario'])}</td>" + cell(str(r["concurrency"]), [*at, "concurrency"])
                + cell(num(r.get("completed"), 0), [*at, "completed"]))
        if not r.get("valid"):
            cells.append(head + f'<td colspan="4">invalid: {esc(r.get("reason") or "no reason recorded")}</td>')
            classes.append("bad")
            continue
        state = f"suspect, excluded: {r.get('reason')}" if r.get("suspect") else "valid"
        cells.append(head + "".join(cell(num(r.get(k)), [*at, k]) for k in ("output_tok_s", "ttft_p99_ms", decode))
                     + f"<td>{esc(state)}</td>")
        classes.append("warn" if r.get("suspect") else "")
    return ("<h2>Repeats' runs</h2><p class=\"note\">Each repeat is another sweep of its side's server setting from "
            "a fresh server. Its runs are pooled with the first sweep's into the peak and the capacity under the SLO: "
            "runs at one concurrency with one number of requests are repeats of one point, so the run-to-run band "
            "holds the spread between servers. Invalid and suspect runs are left out of every figure, as the first "
            "sweep's are; the repeats' capacity-search runs are in the scenario tables above.</p>"
            + table(["Side", "Sweep", "Scenario", "Concurrency", "Requests completed", "Output tok/s", "TTFT p99 (ms)",
                     f"{metric.upper()} p99 (ms)", "Run"], cells, classes))


def capacity_section(summary: dict[str, Any]) -> str:
    metric = summary["slo"].get("decode_metric", "itl").upper()
    rows = []
    for name, s in (summary.get("scenarios") or {}).items():
        cap, rate = s.get("slo_capacity"), s.get("rate_capacity")
        interval = s.get("slo_capacity_interval") or {}
        at = ["scenarios", name, "slo_capacity_interval", "output_tok_s"]
        if interval.get("state") == "meets_slo":
            figure = figure_html(interval.get("output_tok_s"), at, "", interval.get("point_tok_s"), [*at[:-1], "point_tok_s"])
            closed = [f'<td class="n">{figure}</td>',
                      f"<td>{esc(answer.from_words(interval))}</td>", f"<td>{esc(answer.bracket_words(interval))}</td>"]
        else:
            closed = [f'<td colspan="3">{esc(answer.capacity_words(interval))}</td>']
        if cap and "state" not in cap:
            cis = [f"<td>{esc(interval_words(cap.get('ttft_p99_ci_ms'), ' ms', 1) or 'not computed')}</td>",
                   f"<td>{esc(interval_words(cap.get('decode_p99_ci_ms'), ' ms', 1) or 'not computed')}</td>"]
        else:
            why = ("no pass end" if cap is not None else "the search did not confirm a pass end"
                   if interval.get("source") == "search" else "not searched (run the sweep with --capacity-search)")
            cis = [f'<td colspan="2">{esc(why)}</td>']
        rbase = ["scenarios", name, "rate_capacity"]
        opened = ([cell(num(rate.get("req_s"), 3), [*rbase, "req_s"]),
                   cell(num(rate.get("output_tok_s")), [*rbase, "output_tok_s"]),
                   cell(num(rate.get("goodput_req_s"), 3), [*rbase, "goodput_req_s"])] if rate
                  else ['<td colspan="3">no open-loop runs</td>'])
        rows.append(f"<td>{esc(name)}</td>" + "".join(closed + cis + opened))
    return ("<h2>Capacity under the SLO</h2><p class=\"note\">The one capacity figure of this report (the "
            "ratios, the verdict and the plan use it): output tok/s between the throughput of the run at the "
            "highest load meeting the SLO (named with its run) and that at the lowest load above it missing it. "
            "Closed loop: the grid, narrowed by the capacity search where it ran (its pass end passed with "
            "confidence: the upper end of each p99's 95 % bootstrap interval within its limit). Open loop: "
            "Poisson arrivals at offered rates around it; the rate capacity is the highest offered rate whose "
            "p99s meet the SLO. The two are never mixed.</p>"
            + table(["Scenario", "Capacity under the SLO, closed loop (tok/s)", "From the run", "Where the SLO holds",
                     "TTFT p99 95 % interval at the pass end", f"{metric} p99 95 % interval",
                     "Rate capacity (req/s)", "Output tok/s at it", "Goodput (req/s)"], rows))


def startup_section(records: Sequence[dict[str, Any]]) -> str:
    if not records:
        return ""
    rows = []
    for r in records:
        phases = r.get("phases") or {}
        rows.append(f"<td>{esc(r.get('server') or r.get('pod') or 'boot')}</td>"
                    + cell(num(r.get("total_s")) + " s" if is_number(r.get("total_s")) else "not measured")
                    + "".join(cell(f"{num(phases.get(k))} s" if is_number(phases.get(k)) else "none")
                              for k, _ in timeline.PHASES))
    img = chart(lambda C: C.startup_figure(records, timeline.PHASES), "start-up phases per boot")
    warned = timeline.boot_warnings(records)
    return ("<h2>Startup</h2><p class=\"note\">From start (pod created) to <code>/health</code> OK, each phase "
            "stacked in order; the log phases come from the server's own log.</p>" + img
            + table(["Boot", "Total", *[label for _, label in timeline.PHASES]], rows)
            + ("<p>Warnings:</p><ul>" + "".join(f"<li>{esc(w)}</li>" for w in warned) + "</ul>"
               if warned else ""))


def problems_section(summary: dict[str, Any], base_runs: Sequence[dict[str, Any]] | None, ctx: dict[str, Any]) -> str:
    cand = (ctx.get("candidate") or {}).get("label", "candidate")
    base = (ctx.get("baseline") or {}).get("label", "baseline")
    rows, classes = [], []
    listed = [(cand, r, ["runs", i]) for i, r in enumerate(summary.get("runs") or [])]
    listed += [(base, r, None) for r in base_runs or []]
    listed += [(f"{cand if r.get('side') == 'candidate' else base}, repeat {r.get('sweep')}", r, ["repeat_runs", i])
               for i, r in enumerate(summary.get("repeat_runs") or [])]
    for who, r, at in listed:
        if r.get("valid") and not r.get("suspect"):
            continue
        kind = "invalid" if not r.get("valid") else "suspect"
        rows.append(f"<td>{esc(who)}</td><td>{esc(r['scenario'])}</td>"
                    + cell(str(r["concurrency"]), [*at, "concurrency"] if at else None)
                    + f"<td>{kind}</td><td>{esc(r.get('reason') or 'no reason recorded')}</td>")
        classes.append("bad" if kind == "invalid" else "warn")
    for i, a in enumerate(summary.get("invalid_attempts") or []):
        then = "run again: valid" if a.get("then") == "valid" else "the run stayed invalid"
        load = (cell(str(a["concurrency"]), ["invalid_attempts", i, "concurrency"]) if a.get("rate") is None
                else f'<td>offered <span data-field="{field(["invalid_attempts", i, "rate"])}">{esc(num(a["rate"], 2))}'
                     "</span> req/s</td>")
        rows.append(f"<td>{esc(cand if a.get('side') == 'candidate' else base)}</td><td>{esc(a.get('scenario'))}</td>"
                    + load + f"<td>invalid attempt {esc(a.get('attempt') or '')} of a "
                    f"{esc(RUN_KINDS.get(a.get('kind'), 'grid'))} run ({esc(then)})</td>"
                    f"<td>{esc(a.get('reason') or 'no reason recorded')}</td>")
        classes.append("warn" if a.get("then") == "valid" else "bad")
    if not rows:
        return ("<h2>Invalid and suspect runs</h2><p>There are none: every run completed all of its prompts without "
                "a failed request, and none was suspect (served from the prefix cache, a collapsed speculative "
                "draft, or answers in one chunk).</p>")
    return ("<h2>Invalid and suspect runs</h2><p class=\"note\">Excluded from every figure, ratio and chart; "
            "a comparison with an invalid or suspect run cannot pass. An invalid attempt that was run again and "
            "came back valid is kept for the record only.</p>"
            + table(["Sweep", "Scenario", "Concurrency", "Kind", "Why"], rows, classes))


def manifest_section(ctx: dict[str, Any], sweeps: dict[str, Any] | None = None) -> str:
    cols = []
    for role in ("candidate", "baseline"):
        f = ctx.get(role)
        if not f:
            continue
        repeats = ((sweeps or {}).get(role) or [])[1:]
        pairs = [("Results", f["results"]), *([("Repeats, pooled", ", ".join(repeats))] if repeats else []),
                 ("Model", f["model"]), ("vLLM", f["vllm"]), ("Image", f["image"]),
                 ("Served flags", f["flags"]), ("Instance type", f["instance"]), ("GPUs", f["gpus"]),
                 ("Capacity type", f["capacity_type"]), ("Price", f["price"]),
                 ("Seed", f"{f['seed']} ({f['seed_scheme']})" if f.get("seed_scheme") else f.get("seed")),
                 ("Scenario lengths (in/out)", f["lengths"]), ("Concurrencies", f["concurrencies"]),
                 ("Sweep", f["sweep"]), ("Config hash", f["config_hash"])]
        if not f.get("manifest"):
            pairs.append(("Manifest", "none (hand-collected results: server facts unknown)"))
        cols.append(f"<div><h3>{esc(role.capitalize())}: {esc(f['label'])}</h3>{facts_list(pairs)}</div>")
    return "<h2>What was measured</h2><div class=\"cols\">" + "".join(cols) + "</div>"


PLAN_NOTE = ("The load today's replicas carry, sized on every scenario's capacities the way the fleet line of the "
             "verdict divides by its ratio intervals (the two sides' run-to-run bands in quadrature), with no headroom "
             "or spares: the same count. `bench plan --headroom --spares` adds replicas on top of it.")


def runs_header(summary: dict[str, Any], cand: str, base: str | None) -> str:
    """What the page lists, counted (summary.json `run_counts`, each number tagged) and where."""
    counts = summary.get("run_counts") or {}

    def side(who: str, label: str, where: str) -> str:
        def mark(key: str | tuple[str, ...], number: Any) -> str:
            path = ["run_counts", who, *((key,) if isinstance(key, str) else key)]
            return f'<span data-field="{field(path)}">{esc(number)}</span>'
        return f"{esc(label)} ({who}): {answer.runs_words(counts.get(who), mark)}, {where}"

    pooled = (counts.get("candidate") or {}).get("repeats")
    parts = [side("candidate", cand, "each in its scenario's table below" if not pooled else
                  "the first sweep's grid runs and every sweep's capacity-search runs in the scenario tables "
                  "below, the repeats' grid runs under Repeats' runs")]
    if base and counts.get("baseline"):
        parts.append(side("baseline", base, "drawn on the curves in blue (its grid runs dashed, its capacity-search "
                                            "runs as crosses)" + (", its repeats' grid runs under Repeats' runs"
                                                                  if counts["baseline"].get("repeats") else "")))
    return (f'<p class="sub">{"; ".join(parts)}. Invalid and suspect runs and invalid attempts are listed under '
            "Invalid and suspect runs. The numbers are those of <code>summary.json</code> beside this page "
            "(<code>report.md</code> has every table).</p>")


def report_page(summary: dict[str, Any], ctx: dict[str, Any], issues: Sequence[str] = ()) -> str:
    cand = (ctx.get("candidate") or {}).get("label", "candidate")
    base = (ctx.get("baseline") or {}).get("label")
    title = f"Benchmark report: {cand}" + (f" against {base}" if base else "")
    body = [f"<h1>{esc(title)}</h1>", runs_header(summary, cand, base),
            verdict_section(summary, issues, ctx),
            ratio_section(summary),
            curves_section(summary, ctx),
            repeats_section(summary, ctx),
            capacity_section(summary),
            startup_section(ctx.get("startup") or []),
            plan_section(ctx.get("plan"), ctx.get("plan_page"), tagged=False, note=PLAN_NOTE),
            rehearsal_html(summary.get("rehearsal")),
            problems_section(summary, ctx.get("baseline_runs"), ctx),
            manifest_section(ctx, summary.get("sweeps"))]
    return document(title, "\n".join(b for b in body if b), source="bench report")


def write_report(out: Path, summary: dict[str, Any], side, base, issues: Sequence[str], *,
                 charts: bool = True) -> Path:
    path = out / "report.html"
    with drawing(charts):
        path.write_text(report_page(summary, report_context(side, base, out), issues), encoding="utf-8")
    return path
