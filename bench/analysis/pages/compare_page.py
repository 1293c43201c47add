"""compare.md and compare.html (bench/analysis/pages/__init__.py says what every page shares)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.analysis import spec as SPEC
from bench.analysis.capacity import DEFAULT_NOISE_PCT
from bench.analysis.answer import capacity_words, lead_interval_words, lead_outcome, lead_words, ranks_shown
from bench.analysis.markup import capacity_html, cell, chart, document, esc, field, is_number, num, table, wins_words
from bench.analysis.side import Side


# ---------------------------------------------------------------------------------------------
# compare.md


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def compare_markdown(sides: list[Side], data: dict[str, Any], extra: dict[str, Any],
                     ttft_ms: float, itl_ms: float) -> str:
    """compare.md, from compare.json's dictionary and the sweeps (their spec-decode and Korean rows)."""
    labels = [v["label"] for v in data["variants"]]
    lines = ["# Variant comparison: " + " vs ".join(labels), ""]
    lines += ["| Variant | Sweep | " + " | ".join(extra["settings"] or ["(no server setting differs)"]) + " |",
              "|---|---|" + "---|" * max(1, len(extra["settings"]))]
    for v in data["variants"]:
        cols = [v["differs"].get(k, "-") for k in extra["settings"]] or ["-"]
        sweeps = ", ".join(f"`{d}`" for d in v.get("sweeps") or [v["dir"]])
        lines.append(f"| {v['label']} | {sweeps} | " + " | ".join(f"`{c}`" for c in cols) + " |")
    owned = [k for k in data["variants"][0]["differs"] if k not in extra["settings"]] if data["variants"] else []
    if owned:
        lines += ["", "Follows from the setting above: " + ", ".join(
            f"{k} ({', '.join(v['label'] + ' ' + v['differs'][k] for v in data['variants'])})" for k in owned)]
    if data["incomplete"]:
        lines += ["", "## Incomplete: no winner is named", ""]
        lines += [f"- {reason}" for reason in data["incomplete"]]
    if extra["gated"]:
        lines += ["", "## Configuration problems (never a winner)", ""]
        for label, problems in extra["gated"].items():
            lines += [f"- **{label}**: {p}" for p in problems]

    ranks = int(ranks_shown(len(labels)))
    lines += ["", "## Output tok/s per scenario and concurrency", "",
              "A cell names a winner only when the first variant leads the second by more than the noise: the "
              "widest run-to-run band of output tok/s among the variants, each as `bench report` states it for its "
              "sweep (measured from repeated points, pooled with the band the sweep assumed; else that band, "
              f"{DEFAULT_NOISE_PCT:g} % unless the sweep set another)."
              + (" A variant is behind the best only where the best leads it by more than the same noise; how much "
                 "less it serves is in % of the best." if ranks else ""), "",
              "| Scenario / concurrency | " + " | ".join(labels) + " | Winner | Margin (noise band) |"
              + (" Behind the best, beyond the noise |" if ranks else ""),
              "|---|" + "---|" * (len(labels) + 2 + ranks)]
    for cell in data["cells"]:
        vals = [_n(cell["output_tok_s"][label]) for label in labels]
        if cell["winner"]:
            vals = [f"**{v}**" if label == cell["winner"] else v for v, label in zip(vals, labels)]
        lines.append(f"| {cell['scenario']} / {cell['concurrency']} | " + " | ".join(vals)
                     + f" | {_winner_text(cell, bool(data['incomplete']))} | {_margin_text(cell)} |"
                     + (f" {_behind_text(cell)} |" if ranks else ""))
    lines += repeat_lines(data)

    slo = data.get("slo") or {}
    lines += ["", f"## SLO capacity (output tok/s; TTFT p99 <= {ttft_ms:g} ms and "
              f"{str(slo.get('decode_metric', 'itl')).upper()} p99 <= {itl_ms:g} ms; "
              "grid, or the capacity search's bracket where it ran)", ""]
    lines += [f"SLO: {n}." for n in slo.get("notes") or []] + ([""] if slo.get("notes") else [])
    lines += ["| Scenario | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for scenario in data["slo_capacity"]:
        per = extra.get("intervals", {}).get(scenario, {})
        lines.append(f"| {scenario} | " + " | ".join(
            capacity_words(per[label].as_dict()) if label in per else "-" for label in labels) + " |")
    leads = data.get("slo_capacity_winner") or {}
    if leads:
        lines += ["", "A winner under the SLO is named only where the ratio of the two highest capacities per GPU "
                  "has a 95 % interval wholly above 1x (each side's run-to-run band included, in quadrature):", ""]
        lines += [f"- {scenario}: {lead_words(lead)}" for scenario, lead in leads.items()]

    spec_rows = []
    for s in sides:
        for r in s.runs:
            if r.valid and r.spec_acceptance_rate_pct is not None:
                spec_rows.append((s.label, r))
    if spec_rows:
        lines += ["", "## Speculative decoding acceptance", "",
                  "| Variant | Scenario / concurrency | Acceptance | Per position | Mean acceptance length |",
                  "|---|---|---|---|---|"]
        for label, r in spec_rows:
            pos = SPEC.per_position(r)
            lines.append(f"| {label} | {r.scenario} / {r.concurrency} | {r.spec_acceptance_rate_pct:.1f}% | "
                         f"{' / '.join(f'{p:.2f}' for p in pos) if pos else '-'} | "
                         f"{f'{r.spec_acceptance_length:.2f}' if r.spec_acceptance_length is not None else '-'} |")
        lines += ["", "Acceptance on random-token scenarios (S1-S5) says nothing about real text; judge "
                  "speculative decoding on K_korean."]
    if any(r.scenario == "K_korean" for s in sides for r in s.runs):
        lines += ["", "## Korean prompt set (acceptance, c1 tok/s, c1 E2E p50, c8 tok/s)", ""]
        lines += SPEC.table7_markdown([(s.label, SPEC.table7_row(s.runs)) for s in sides])
    return "\n".join(lines) + "\n"


def repeat_lines(data: dict[str, Any]) -> list[str]:
    """Each sweep's output tok/s of a variant swept more than once, under the cells that show their mean."""
    repeated = [v["label"] for v in data["variants"] if len(v.get("sweeps") or []) > 1]
    if not repeated:
        return []
    lines = ["", "Swept more than once, each from a fresh server (a cell above is their mean, weighted by "
             "requests; their runs at one concurrency with one number of requests are the variant's repeats):", ""]
    for label in repeated:
        per_cell = [f"{c['scenario']} / {c['concurrency']}: "
                    + " and ".join(_n(x) for x in (c.get("output_tok_s_sweeps") or {}).get(label) or [])
                    for c in data["cells"]]
        lines.append(f"- {label}: " + "; ".join(per_cell))
    return lines


def _winner_text(cell: dict[str, Any], incomplete: bool) -> str:
    if cell["winner"]:
        return cell["winner"]
    if incomplete:
        return "none (incomplete)"
    if cell["winner_margin_pct"] is not None:
        return "no clear winner"
    return "-"


def _behind_text(cell: dict[str, Any]) -> str:
    behind = cell.get("behind") or {}
    if behind:
        return ", ".join(f"{label} {pct:.1f} % less" for label, pct in behind.items())
    return "none" if cell.get("leaders") else "not ranked"


def _margin_text(cell: dict[str, Any]) -> str:
    band = f"{cell['noise_pct']:g} % {'measured' if cell['noise_source'] == 'repeats' else 'default'}"
    if cell["winner_margin_pct"] is None:
        return f"- ({band})"
    within = "" if cell["winner_margin_pct"] > cell["noise_pct"] else ", within it"
    return f"{cell['winner_margin_pct']:.1f} % ({band}{within})"


# ---------------------------------------------------------------------------------------------
# Compare page


def compare_page(data: dict[str, Any], extra: dict[str, Any], *, ttft_ms: float, itl_ms: float) -> str:
    labels = [v["label"] for v in data.get("variants") or []]
    settings = extra.get("settings") or []
    title = "Variant comparison: " + " vs ".join(labels)
    incomplete = data.get("incomplete") or []
    winners = sum(1 for c in data.get("cells") or [] if c.get("winner"))
    if incomplete:
        state = ('<section class="verdict state-incomplete"><div class="state">INCOMPLETE</div><p>No winner is '
                 "named: the sweeps are not like for like.</p><ul>"
                 + "".join(f"<li>{esc(r)}</li>" for r in incomplete) + "</ul></section>")
    else:
        state = ('<section class="verdict state-none"><div class="state">COMPARABLE</div><p>The sweeps differ in '
                 + esc(", ".join(settings) or "no server setting") + f"; {winners} of {len(data['cells'])} cells have "
                 "a clear winner" + esc(wins_words(data.get("cells") or [], labels)) + ".</p></section>")
    variant_rows = [f"<td>{esc(v['label'])}</td><td>"
                    + "<br>".join(f"<code>{esc(d)}</code>" for d in v.get("sweeps") or [v["dir"]]) + "</td>"
                    + "".join(f"<td><code>{esc(v['differs'].get(k, 'not set'))}</code></td>" for k in settings)
                    for v in data.get("variants") or []]
    body = [f"<h1>{esc(title)}</h1>", state,
            "<h2>Variants</h2>" + table(["Variant", "Sweep", *(settings or [])], variant_rows)]
    if extra.get("gated"):
        body.append("<h2>Configuration problems (never a winner)</h2><ul>" + "".join(
            f"<li><strong>{esc(label)}</strong>: {esc(p)}</li>" for label, ps in extra["gated"].items() for p in ps)
            + "</ul>")
    body.append("<h2>Output tok/s per scenario and concurrency</h2>"
                + chart(lambda C: C.compare_figure(data.get("cells") or [], labels),
                        "output tok/s per variant against concurrency"))
    has_margin = any("winner_margin_pct" in c for c in data.get("cells") or [])
    ranks = ranks_shown(len(labels))
    rows, classes = [], []
    for i, c in enumerate(data.get("cells") or []):
        row = f"<td>{esc(c['scenario'])}</td>" + cell(str(c["concurrency"]), ["cells", i, "concurrency"])
        for label in labels:
            value = c["output_tok_s"].get(label)
            row += cell(num(value, 1, "no usable run"), ["cells", i, "output_tok_s", label],
                        cls="win" if c.get("winner") == label else "")
        row += f"<td>{esc(c.get('winner') or 'none')}</td>"
        if has_margin:
            margin, noise = c.get("winner_margin_pct"), c.get("noise_pct")
            row += (cell(f"{margin:.1f}%" if is_number(margin) else "none", ["cells", i, "winner_margin_pct"]
                         if is_number(margin) else None)
                    + cell(f"{noise:.1f}%" if is_number(noise) else "unknown", ["cells", i, "noise_pct"]
                           if is_number(noise) else None))
        if ranks:
            behind = ", ".join(
                f'{esc(label)} <span data-field="{field(["cells", i, "behind", label])}">{pct:.1f}</span> % less'
                for label, pct in (c.get("behind") or {}).items())
            row += f"<td>{behind or ('none' if c.get('leaders') else 'not ranked')}</td>"
        rows.append(row)
        classes.append("")
    head = (["Scenario", "Concurrency", *labels, "Winner"] + (["Winner's margin", "Noise band"] if has_margin else [])
            + (["Behind the best, beyond the noise"] if ranks else []))
    body.append(table(head, rows, classes) + _repeats_html(data))
    intervals = data.get("slo_capacity_interval") or {}
    cap_rows = [f"<td>{esc(s)}</td>" + "".join(
        "<td>" + capacity_html((intervals.get(s) or {}).get(label), ((intervals.get(s) or {}).get(label) or {}).get(
            "output_tok_s"), ["slo_capacity_interval", s, label, "output_tok_s"], " tok/s", per.get(label),
            ["slo_capacity", s, label]) + "</td>" for label in labels)
                for s, per in (data.get("slo_capacity") or {}).items()]
    body.append(f"<h2>Capacity under the SLO (output tok/s)</h2><p class=\"note\">Each variant's capacity under "
                f"the SLO (TTFT p99 &le; {esc(f'{ttft_ms:g}')} ms and ITL p99 &le; "
                f"{esc(f'{itl_ms:g}')} ms), the same figure and 95 % interval <code>bench report</code> shows: the "
                "throughput at the highest load meeting the SLO (the mean of that load's runs, from the grid and the "
                "capacity search's), named with its run. Colours: "
                "the first variant (the baseline, if you list it first) blue, the second orange, as in the "
                "report's charts.</p>" + table(["Scenario", *labels], cap_rows))
    leads = data.get("slo_capacity_winner") or {}
    if leads:
        body.append("<p class=\"note\">A winner under the SLO is named only where the ratio of the two highest "
                    "capacities per GPU has a 95 % interval wholly above 1x (each side's run-to-run band included, in "
                    "quadrature).</p>" + table(["Scenario", "Ahead", "Next", "Ratio per GPU", "95 % interval",
                                                "Winner"], [_lead_row(s, lead) for s, lead in leads.items()]))
    return document(title, "\n".join(body), source="bench compare")


def _lead_row(scenario: str, lead: dict[str, Any]) -> str:
    at = ["slo_capacity_winner", scenario]
    ratio, interval = lead.get("ratio"), lead.get("ratio_interval")
    if interval is not None and all(is_number(v) and v > 0 for v in interval):
        ends = " to ".join(f'<span data-field="{field([*at, "ratio_interval", k])}">{v:.2f}x</span>'
                           for k, v in enumerate(interval))
    else:  # an end without a bound, in bench compare's words
        ends = esc(lead_interval_words(lead))
    winner = lead.get("winner") or lead_outcome(lead)
    return (f"<td>{esc(scenario)}</td><td>{esc(lead['first'])}</td><td>{esc(lead['second'])}</td>"
            + cell(f"{ratio:.2f}x" if is_number(ratio) else "unknown", [*at, "ratio"] if is_number(ratio) else None)
            + f"<td>{ends}</td><td>{esc(winner)}</td>")


def write_compare(out: Path, data: dict[str, Any], extra: dict[str, Any], *, ttft_ms: float, itl_ms: float) -> Path:
    path = out / "compare.html"
    path.write_text(compare_page(data, extra, ttft_ms=ttft_ms, itl_ms=itl_ms), encoding="utf-8")
    return path


def _repeats_html(data: dict[str, Any]) -> str:
    """compare.md's repeat lines (`repeat_lines`) on the page, each figure tagged with its place in compare.json."""
    cells = data.get("cells") or []
    items = []
    for v in data.get("variants") or []:
        if len(v.get("sweeps") or []) < 2:
            continue
        label = v["label"]
        per_cell = []
        for i, c in enumerate(cells):
            each = (c.get("output_tok_s_sweeps") or {}).get(label) or []
            per_cell.append(f"{esc(c['scenario'])} / {esc(str(c['concurrency']))}: " + " and ".join(
                f'<span data-field="{field(["cells", i, "output_tok_s_sweeps", label, j])}">{num(x, 1)}</span>'
                if is_number(x) else "no usable run" for j, x in enumerate(each)))
        items.append(f"<li>{esc(label)}: {'; '.join(per_cell)}</li>")
    if not items:
        return ""
    return ('<p class="note">Swept more than once, each from a fresh server (a cell above is their mean, weighted by '
            "requests; their runs at one concurrency with one number of requests are the variant's repeats):</p><ul>"
            + "".join(items) + "</ul>")
