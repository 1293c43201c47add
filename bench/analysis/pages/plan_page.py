"""plan.html, and the replica plan's section the report page shows too (bench/analysis/pages/__init__.py
says what every page shares)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from bench.analysis import answer
from bench.analysis.markup import cell, chart, document, drawing, esc, facts_list, field, interval_words, is_number, num, table


def plan_section(plan: dict[str, Any] | None, link: str | None, *, tagged: bool = True,
                 heading: str = "Replica plan", note: str = "") -> str:
    """The plan's table and chart; `tagged`: its cells carry their plan.json paths (not on the report
    page, whose paths point into summary.json); `note` says what the count is beside other figures."""
    if not plan:
        return ""

    def at(*path: Any) -> list[Any] | None:
        return list(path) if tagged else None

    def span(path: list[Any] | None, text: str, tag: str = "span") -> str:
        attr = f' data-field="{field(path)}"' if path is not None else ""
        return f"<{tag}{attr}>{esc(text)}</{tag}>"

    rows = []
    has_range = any("replicas_range" in row for row in plan.get("configurations") or [])
    for i, row in enumerate(plan.get("configurations") or []):
        rng = interval_words(row.get("replicas_range"), "", 0)
        pair = row.get("replicas_range") or [None, None]
        if row.get("replicas") is not None:
            replicas = cell(str(row["replicas"]), at("configurations", i, "replicas"))
        elif pair[0] is not None:  # a range: each end tagged with its place in plan.json
            high = (span(at("configurations", i, "replicas_range", 1), str(pair[1])) if pair[1] is not None
                    else esc("no upper bound"))
            replicas = (f'<td>{span(at("configurations", i, "replicas_range", 0), str(pair[0]))} to {high}'
                        f'<br><small>{esc(row.get("reason") or "")}</small></td>')
        else:
            replicas = f'<td>{esc(row.get("reason") or "cannot meet the load")}</td>'
        rows.append(f"<td>{esc(row['label'])}</td><td>{esc(row.get('instance_type') or 'unknown')}</td>"
                    + replicas + (f"<td>{esc(rng or 'unknown')}</td>" if has_range else "")
                    + "".join(cell(_money(row.get(key), digits), at("configurations", i, key))
                              for key, digits in (("usd_hour_on_demand", 2), ("usd_month_on_demand", 0),
                                                  ("usd_month_spot", 0), ("usd_per_million_output_tokens", 3))))
    current = plan.get("current")
    lead = ""
    if current:
        cost = (", " + span(at("current", "usd_month"), _money(current["usd_month"])) + " a month"
                if is_number(current.get("usd_month")) else ", cost unknown")
        lead = f"<p>Today: {span(at('current', 'replicas'), str(current['replicas']), 'strong')} replicas{cost}.</p>"
    img = chart(lambda C: C.plan_figure(plan), "replicas and monthly cost per configuration")
    more = f' Details: <a href="{esc(link)}">{esc(link)}</a>.' if link else ""
    headroom = f"{plan.get('headroom', 0):.0%}"
    return (f"<h2>{esc(heading)}</h2><p class=\"note\">{esc(plan.get('basis'))} basis, headroom "
            f"{esc(headroom)}, spares {esc(plan.get('spares'))}; a month is 730 hours.{more}"
            + (f" {esc(note)}" if note else "") + "</p>"
            + lead + img
            + table(["Configuration", "Instance type", "Replicas", *(["Replica range"] if has_range else []),
                     "On-demand $/h", "On-demand $/month", "Spot $/month", "$ per million output tokens"], rows))


def _money(value: Any, digits: int = 0) -> str:
    return f"${value:,.{digits}f}" if is_number(value) else "unknown"


# ---------------------------------------------------------------------------------------------
# Plan page


def plan_page(plan: dict[str, Any], notes: Sequence[str], load_desc: str,
              capacities: Sequence[tuple[str, str, Any, Any, str]]) -> str:
    """capacities: (configuration, scenario, output tok/s low end, req/s, basis, output tok/s high end, run,
    the figure) per replica."""
    headline = []
    current = plan.get("current")
    for row in plan.get("configurations") or []:
        span = row.get("replicas_range")
        if row.get("replicas") is not None:
            count = str(row["replicas"])
        elif span and span[0] is not None:
            count = f"{span[0]}-{span[1]}" if span[1] is not None else f"{span[0]} or more"
        else:
            headline.append(f"{row['label']}: {row.get('reason') or 'cannot meet the load at the SLO'}")
            continue
        cost = f", {_money(row.get('usd_month_on_demand'))} a month on demand" if is_number(
            row.get("usd_month_on_demand")) else ""
        if cost and row.get("replicas") is None:
            cost += " at the high end"
        now = f" (today {current['replicas']})" if current else ""
        if current and is_number(current.get("usd_month")) and cost:
            cost += f" against {_money(current['usd_month'])} today"
        why = f"; {row['reason']}" if row.get("reason") else ""
        headline.append(f"{row['label']}: {count} replicas{now}{cost}{why}")
    rows = [f"<td>{esc(c)}</td><td>{esc(s)}</td>" + cell(_span_words(t, hi, point), None) + cell(num(q, 3), None)
            + f"<td>{esc(_capacity_basis(b))}</td><td>{esc(run or 'not recorded')}</td>"
            for c, s, t, q, b, hi, run, point in capacities]
    body = ["<h1>Replica plan</h1>",
            f'<section class="verdict state-none"><ul>{"".join(f"<li>{esc(h)}</li>" for h in headline)}</ul></section>',
            facts_list([("Load", load_desc),
                        ("Replicas", "ceil(needed replica-loads / (1 - headroom)) + spares"),
                        ("Cost per million output tokens", "at the planned load, on-demand price (Spot where "
                         "on-demand is unknown)")]),
            plan_section(plan, None, heading="Replicas and cost"),
            "<h2>Capacity per replica</h2><p class=\"note\">The capacity under the SLO <code>bench report</code> "
            "shows (the same figure with its 95 % interval, from the same runs), per replica; req/s at its low "
            "end.</p>"
            + table(["Configuration", "Scenario", "Output tok/s", "req/s", "Basis", "From the run"], rows)]
    if notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return document("Replica plan", "\n".join(body), source="bench plan")


def _span_words(lo: Any, hi: Any, point: Any = None) -> str:
    if not is_number(lo):
        return "not measured"
    return answer.figure_span(point, [lo, hi if is_number(hi) else None], "")


def _capacity_basis(basis: str) -> str:
    return {"rate_capacity": "open-loop rate capacity", "slo_capacity": "closed-loop SLO capacity",
            "peak": "peak throughput", "never_meets_slo": "never meets the SLO", "unknown": "not measured",
            "reference": "production reference", "stated": "stated load", "grid": "grid",
            "search": "capacity search", "open_loop": "open loop"}.get(basis, basis)


def write_plan(out: Path, plan: dict[str, Any], notes: Sequence[str], load_desc: str, candidates, *,
               charts: bool = True) -> Path:
    caps = [(cfg.label, s, c.tok_s, c.req_s, c.basis, c.tok_hi, c.run, c.point)
            for cfg in candidates for s, c in cfg.capacities.items()]
    path = out / "plan.html"
    with drawing(charts):
        path.write_text(plan_page(plan, notes, load_desc, caps), encoding="utf-8")
    return path
