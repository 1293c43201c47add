"""The HTML the report pages are made of: one inline style, words for values, table cells that name
their JSON field, charts as SVG data URIs, and the self-contained document around them.

Missing data is worded ("not measured", "no ratio"), never shown as zero, `None` or `nan`; an
interval with an open end reads "at least 3.20x". A cell's `data-field` is the JSON path (a list of
keys) of its value in the page's JSON file. The Content-Security-Policy forbids every fetch: the
page carries its styles and charts, and a stray reference is refused rather than loaded.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import json
import math
from typing import Any, Iterable, Sequence

from bench.analysis import answer, rehearsal_words
from bench.analysis.verdict import unbounded_ratio_text

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0;
       color: #1d1d1f; background: #fafafa; line-height: 1.45; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 1.7em; margin: 0.2em 0; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { margin-top: 1.4em; }
.sub { color: #555; margin: 0 0 1em; }
.verdict { border-radius: 10px; padding: 16px 22px; margin: 18px 0; border: 2px solid; background: #fff; }
.verdict .state { font-size: 2em; font-weight: 700; letter-spacing: 0.04em; }
.state-pass { border-color: #2e7d32; } .state-pass .state { color: #2e7d32; }
.state-fail { border-color: #c62828; } .state-fail .state { color: #c62828; }
.state-inconclusive, .state-incomplete { border-color: #b26a00; }
.state-inconclusive .state, .state-incomplete .state { color: #b26a00; }
.state-none { border-color: #888; } .state-none .state { color: #555; }
table { border-collapse: collapse; margin: 10px 0 6px; background: #fff; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #f0f0f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.bad td { background: #fdecea; } tr.warn td { background: #fff6e0; } td.win { font-weight: 700; }
img.chart { max-width: 100%; height: auto; background: #fff; border: 1px solid #e3e3e3; margin: 8px 0; }
.note { color: #555; font-size: 0.92em; } code { font-size: 0.92em; background: #f0f0f3; padding: 0 3px; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { color: #555; } dl.facts dd { margin: 0; word-break: break-word; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 8px 32px; }
footer { margin-top: 3em; color: #777; font-size: 0.85em; }
"""

# ---------------------------------------------------------------------------------------------
# Words for values


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num(value: Any, digits: int = 1, missing: str = "not measured") -> str:
    return f"{value:,.{digits}f}" if is_number(value) else missing


def times(value: Any, missing: str = "no ratio") -> str:
    return f"{value:.2f}x" if is_number(value) else missing


def interval_words(interval: Any, unit: str = "x", digits: int = 2) -> str | None:
    """`[lo, hi]` in words: "2.90x to 3.60x", "at least 2.90x", "at most 3.60x"; None when unknown.
    A bound that is null, infinite or beyond 1e9 is open."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None

    def bound(v: Any) -> float | None:
        return float(v) if is_number(v) and abs(v) < 1e9 else None

    lo, hi = bound(interval[0]), bound(interval[1])
    fmt = (lambda v: f"{v:.{digits}f}{unit}") if unit == "x" else (lambda v: f"{v:,.{digits}f}{unit}")
    if lo is not None and hi is not None:
        return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"
    if lo is not None:
        return f"at least {fmt(lo)}"
    if hi is not None:
        return f"at most {fmt(hi)}"
    return None


def ratio_interval_words(interval: Any) -> str | None:
    """A ratio's interval on a page: the verdict's words where a measured end does not close it
    (verdict.unbounded_ratio_text), interval_words otherwise; None when there is none."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None
    lo, hi = interval
    if not is_number(lo):
        return interval_words(interval)
    lo, hi = (float(v) if is_number(v) and abs(v) < 1e9 else math.inf for v in (lo, hi))
    return unbounded_ratio_text(lo, hi) or interval_words(interval)


def _f(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def pair_html(pair: Any, path: list[Any], unit: str = "", digits: int = 1) -> str:
    """[lo, hi] with each finite end tagged with its JSON path; an open high end reads "or more"."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not is_number(pair[0]):
        return "unknown"
    lo, hi = pair
    low = f'<span data-field="{field([*path, 0])}">{esc(_f(lo, digits))}</span>'
    if not is_number(hi):
        return f"{low}{esc(unit)} or more"
    if _f(lo, digits) == _f(hi, digits):
        return f"{low}{esc(unit)}"
    return f'{low} to <span data-field="{field([*path, 1])}">{esc(_f(hi, digits))}</span>{esc(unit)}'


def ratio_html(interval: Any, path: list[Any]) -> str:
    """A ratio interval: both ends tagged where finite, the verdict's words where an end is open."""
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and is_number(interval[0]) and interval[0] > 0:
        lo, hi = interval
        low = f'<span data-field="{field([*path, 0])}">{esc(times(lo))}</span>'
        if not is_number(hi):
            return f"{low} or more (no upper bound)"
        if times(lo) == times(hi):
            return low
        return f'{low} to <span data-field="{field([*path, 1])}">{esc(times(hi))}</span>'
    return esc(ratio_interval_words(interval) or "no interval")


def credit_html(comparison: dict[str, Any], path: list[Any]) -> str:
    """How a ratio's ends rebuild from the two capacities beside it: candidate / baseline times the
    band credit at the low end, over it at the high end (each credit tagged with its JSON path)."""
    credit = comparison.get("slo_ratio_band_credit") or [None, None]
    parts = [f"{where} end: candidate {where} / baseline {other} {sign} "
             f'<span data-field="{field([*path, k])}">{esc(answer.credit_words(credit[k]))}</span>'
             for k, (where, other, sign) in enumerate((("low", "high", "×"), ("high", "low", "÷")))
             if answer.credit_words(credit[k])]
    if not parts:
        return ""
    return f"<small>Rebuilt, per GPU: {'; '.join(parts)} ({esc(answer.CREDIT_WHY)}).</small>"


def capacity_html(interval: dict[str, Any] | None, pair: Any, path: list[Any], unit: str = " tok/s",
                  figure: Any = None, figure_path: list[Any] | None = None) -> str:
    """A capacity: its figure (tagged with `figure_path`) and 95 % interval (ends tagged), the run it came
    from, where the SLO holds; the words of bench.analysis.answer.capacity_words, tagged."""
    if not interval or interval.get("state") in (None, "no_data"):
        return "unknown (no usable run)"
    if interval.get("state") in ("never_meets_slo", "broken_measurement"):
        return esc(answer.capacity_words(interval, pair))
    return (figure_html(pair, path, unit, figure, figure_path) + f"<br><small>from {esc(answer.from_words(interval))}; "
            f"{esc(answer.bracket_words(interval))}</small>")


def figure_html(pair: Any, path: list[Any], unit: str = " tok/s", figure: Any = None,
                figure_path: list[Any] | None = None) -> str:
    """A capacity's figure and its 95 % interval (bench.analysis.answer.figure_span), each number tagged;
    the interval alone without a figure."""
    if not is_number(figure) or figure_path is None:
        return pair_html(pair, path, unit)
    return (f'<span data-field="{field(figure_path)}">{esc(_f(figure))}</span>{esc(unit)}, 95 % interval '
            + pair_html(pair, path))


def cell_text(text: str, path: list[Any] | None) -> str:
    if path is None or not any(ch.isdigit() for ch in text):
        return esc(text)
    return f'<span data-field="{field(path)}">{esc(text)}</span>'


def fleet_html(fleet: dict[str, Any] | None) -> str:
    """The fleet answer (summary.json verdict.fleet) in words, its counts and the ratios they divide by tagged."""
    words = answer.fleet_words(fleet)
    if not words:
        return ""
    at = ["verdict", "fleet"]
    now = fleet["current"]
    head = esc(words[0]).replace(f"Today {now} replicas",
                                 f'Today <span data-field="{field([*at, "current"])}">{now}</span> replicas', 1)
    count = answer.fleet_count(fleet)
    if count is not None:
        lo, hi = fleet["replicas_range"]
        tags = [f'<span data-field="{field([*at, "replicas_range", k])}">{v}</span>' for k, v in enumerate((lo, hi))]
        tagged = (f"at most {tags[1]}" if lo is None else f"at least {tags[0]}" if hi is None
                  else tags[0] if lo == hi else f"{tags[0]} to {tags[1]}")
        head = head.replace(f": {esc(count)} on", f": <strong>{tagged}</strong> on", 1)
        for k, d in enumerate(fleet.get("divided_by") or []):
            if isinstance(d, dict) and is_number(d.get("ratio_per_replica")):
                r = times(d["ratio_per_replica"])
                head = head.replace(f"/ {r}", f'/ <span data-field="{field([*at, "divided_by", k, "ratio_per_replica"])}">'
                                    f"{r}</span>", 1)
    return f'<p class="fleet"><strong>Fleet</strong>: {head} ' + " ".join(esc(w) for w in words[1:]) + "</p>"


def side_capacity_html(comparison: dict[str, Any], name: str, who: str) -> str:
    """One side's capacity per GPU beside a ratio: its figure (`slo_figure_per_gpu`, what `slo_ratio`
    divides) and its interval (`slo_capacity_per_gpu`, what the ratio's interval divides), tagged."""
    at = ["comparison", name]
    return capacity_html(comparison.get(f"{who}_slo_capacity"), (comparison.get("slo_capacity_per_gpu") or {}).get(who),
                         [*at, "slo_capacity_per_gpu", who], " tok/s per GPU",
                         (comparison.get("slo_figure_per_gpu") or {}).get(who), [*at, "slo_figure_per_gpu", who])


def scenario_items(summary: dict[str, Any]) -> list[str]:
    """Per scenario, the verdict's own interval and the two capacities per GPU it divides."""
    v = summary.get("verdict") or {}
    items = []
    for name, c in (summary.get("comparison") or {}).items():
        at = ["comparison", name]
        if v.get("basis") == "slo":
            items.append(
                f"<li><strong>{esc(name)}</strong>: {ratio_html(c.get('slo_ratio_interval'), [*at, 'slo_ratio_interval'])}"
                f", {esc(answer.decides_words(c.get('slo_state'), v.get('threshold')))}. Candidate "
                + side_capacity_html(c, name, "candidate") + "; baseline " + side_capacity_html(c, name, "baseline")
                + ". " + credit_html(c, [*at, "slo_ratio_band_credit"]) + "</li>")
        else:
            per = c.get("peak_per_gpu_tok_s") or {}
            items.append(f"<li><strong>{esc(name)}</strong>: "
                         + cell_text(times(c.get("throughput_ratio")), [*at, "throughput_ratio"])
                         + ": candidate peak " + cell_text(num(per.get("candidate")), [*at, "peak_per_gpu_tok_s", "candidate"])
                         + " tok/s per GPU, baseline " + cell_text(num(per.get("baseline")), [*at, "peak_per_gpu_tok_s", "baseline"])
                         + " tok/s per GPU.</li>")
    return items


def wins_words(cells: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """": max-num-seqs 16 wins 8 cells, max-num-seqs 1 wins 1 cell" (most wins first; none said so)."""
    by = {label: sum(1 for c in cells if c.get("winner") == label) for label in labels}
    if not any(by.values()):
        return ""
    order = sorted(labels, key=lambda k: -by[k])
    return ": " + ", ".join(f"{k} wins {by[k]} cell{'s' if by[k] != 1 else ''}" if by[k] else f"{k} wins none"
                            for k in order)


def field(path: Sequence[Any]) -> str:
    return esc(json.dumps(list(path), ensure_ascii=False))


def cell(text: str, path: Sequence[Any] | None = None, *, numeric: bool = True, cls: str = "") -> str:
    classes = " ".join(c for c in ("n" if numeric else "", cls) if c)
    attrs = (f' class="{classes}"' if classes else "") + (f' data-field="{field(path)}"' if path is not None else "")
    return f"<td{attrs}>{esc(text)}</td>"


def table(head: Sequence[str], rows: Iterable[str], row_classes: Sequence[str] | None = None) -> str:
    body = []
    for i, row in enumerate(rows):
        cls = (row_classes or [""] * (i + 1))[i] if row_classes and i < len(row_classes) else ""
        body.append(f"<tr{f' class={chr(34)}{cls}{chr(34)}' if cls else ''}>{row}</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


def facts_list(pairs: Iterable[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs if v not in (None, ""))
    return f'<dl class="facts">{items}</dl>'


# False while a page is written for a command run with --no-charts: tables only.
_DRAW = contextvars.ContextVar("vllm_poc_pages_draw", default=True)


@contextlib.contextmanager
def drawing(draw: bool):
    """Charts on or off (--no-charts) while a page is written."""
    token = _DRAW.set(draw)
    try:
        yield
    finally:
        _DRAW.reset(token)


def chart(make, alt: str) -> str:
    """An <img> of a matplotlib figure (SVG data URI); '' when matplotlib is missing or charts are off."""
    if not _DRAW.get():
        return ""
    try:
        from bench.analysis import charts as C  # local import: charts loads matplotlib
    except ImportError:
        return ""
    return f'<img class="chart" alt="{esc(alt)}" src="{C.svg_data_uri(make(C))}">'


def charts_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def document(title: str, body: str, *, source: str) -> str:
    note = "" if charts_available() else (
        '<p class="note">Charts left out: matplotlib is not installed where this page was written.</p>')
    if not _DRAW.get():
        note = '<p class="note">Charts left out (--no-charts): tables only.</p>'
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body><main>\n{note}{body}\n"
            f"<footer>Written by vllm-poc ({esc(source)}); self-contained: it loads nothing from anywhere. "
            f"Every figure in a table is the value of the JSON file beside this page.</footer>\n"
            "</main></body></html>\n")



def rehearsal_html(r: dict[str, Any] | None, *, tagged: bool = True) -> str:
    """The rehearsal's section (summary.json `rehearsal`, worded by bench.analysis.answer); `tagged`:
    its figures carry their summary.json paths (not on rehearse's own page, which has no summary.json)."""
    if r is None:
        return f'<section id="rehearsal"><h2>Rehearsal</h2><p>{esc(rehearsal_words.NO_REHEARSAL)}</p></section>'

    def words(parts: Sequence[Any]) -> str:
        return "".join(esc(p) if isinstance(p, str) else cell_text(p[0], ["rehearsal", *p[1]] if tagged else None)
                       for p in parts)

    rows = "".join(f"<tr><th>{esc(label)}</th><td>{words(parts)}</td></tr>"
                   for label, parts in rehearsal_words.rehearsal_rows(r))
    decisions = rehearsal_words.decision_rows(r)
    more = rehearsal_words.decisions_more(r)
    return (f'<section id="rehearsal"><h2>Rehearsal: the {esc(r["pool"])} pool '
            f'({esc(r.get("configuration") or "unnamed")})</h2><table>{rows}</table>'
            f'<p class="note">{esc(rehearsal_words.REHEARSAL_NOTE)}</p><h3>The autoscaler\'s decisions</h3>'
            + (table(rehearsal_words.DECISION_HEAD, ["".join(f'<td class="n">{words([c])}</td>' for c in row)
                                            for row in decisions]) if decisions
               else "<p>None: no metrics were read during the trace.</p>")
            + (f'<p class="note">{esc(more)}</p>' if more else "") + "</section>\n")
