"""The report pages (report.html, plan.html, compare.html) on hand-made sweeps (fixture `made`,
tests/fixtures/bench_pages.py). Checked here without a browser: nothing external is
referenced (scanned attribute by attribute, inside the SVG charts too), values are words rather
than Python reprs, the verdict issue's keys (three states, reasons, intervals with open ends) are
shown when present, and `--no-html` skips the page. tests/test_bench_pages_browser.py opens them.
"""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from bench.analysis import compare as CMP
from bench.analysis import markup
from bench.analysis import pages
from bench.analysis import plan as P
from bench.analysis import report as REP
from bench.analysis import side as SIDE
from bench.analysis import summary as SUMMARY


def pages_of(made) -> dict[str, tuple[Path, Path]]:
    """page -> (html, the JSON its data-field paths point into)"""
    return {"report": (made["report"] / "report.html", made["report"] / "summary.json"),
            "report without baseline": (made["alone"] / "report.html", made["alone"] / "summary.json"),
            "report's plan": (made["report"] / "plan" / "plan.html", made["report"] / "plan" / "plan.json"),
            "plan": (made["plan"] / "plan.html", made["plan"] / "plan.json"),
            "compare": (made["compare"] / "compare.html", made["compare"] / "compare.json")}


class Scan(HTMLParser):
    """Every reference an element makes (attribute, value), the inline styles, the visible text."""

    LOADING = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href",
               "manifest", "codebase", "cite", "longdesc", "ping"}

    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []
        self._in = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in.append(tag)
        for name, value in attrs:
            if name in self.LOADING and value is not None:
                self.refs.append((tag, name, value))
            if name == "style" and value:
                self.styles.append(value)

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if self._in and self._in[-1] == "style":
            self.styles.append(data)
        elif not (self._in and self._in[-1] in ("script", "title")):
            self.text.append(data)


def scan(path: Path) -> Scan:
    s = Scan()
    s.feed(path.read_text(encoding="utf-8"))
    return s


EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:|//)", re.I)


def external_references(page: Path) -> list[str]:
    """References a browser would fetch from outside the file: any URL with a scheme other than data:
    (a relative link to a sibling page is navigation, not a load, and stays on disk), CSS url() and
    @import to anything but a fragment or data:, and the same inside every SVG data URI."""
    found = []
    s = scan(page)
    for tag, name, value in s.refs:
        if value.startswith("data:"):
            if value.startswith("data:image/svg+xml;base64,"):
                svg = base64.b64decode(value.split(",", 1)[1]).decode("utf-8")
                found += [f"in an SVG chart: {m}" for m in re.findall(r'(?:xlink:)?href="(?!#)([^"]*)"', svg)]
                found += [f"in an SVG chart: url({m})" for m in re.findall(r"url\((?!#)([^)]*)\)", svg)]
            continue
        if tag != "a" or EXTERNAL.match(value) or name != "href":
            found.append(f"<{tag} {name}={value!r}>")
    for style in s.styles:
        found += [f"style url({m})" for m in re.findall(r"url\(\s*['\"]?(?!#|data:)([^)'\"]*)", style)]
        found += [f"style @import {m}" for m in re.findall(r"@import\s+([^;]+)", style)]
    found += [f"<{t}> element" for t in s.tags if t in ("script", "link", "iframe", "object", "embed", "base")]
    return found


def test_every_page_is_written_beside_its_markdown(made):
    for name, (html_path, data) in pages_of(made).items():
        assert html_path.is_file(), name
        assert html_path.with_suffix(".md").is_file() and data.is_file(), name
        assert html_path.read_text().startswith("<!DOCTYPE html>"), name


def test_pages_reference_nothing_outside_themselves(made):
    for name, (page, _) in pages_of(made).items():
        assert external_references(page) == [], name
        text = page.read_text()
        assert markup.CSP in text  # and the browser is told to refuse anything else
        assert text.count("data:image/svg+xml;base64,") >= 1, f"{name}: no chart"


def test_the_scan_finds_what_a_page_must_not_have(made, tmp_path):
    """The external-reference scan itself: each planted reference is caught."""
    page = (made["report"] / "report.html").read_text()
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"><image href="https://x.test/a.png"/></svg>')
    planted = {
        "script": '<script src="https://cdn.example/plotly.js"></script>',
        "style sheet": '<link rel="stylesheet" href="style.css">',
        "font": "<style>@font-face { font-family: x; src: url(https://fonts.example/x.woff2) }</style>",
        "import": "<style>@import 'theme.css';</style>",
        "image": '<img src="chart.png">',
        "svg inside": f'<img src="data:image/svg+xml;base64,{svg.decode()}">',
        "network link": '<a href="https://grafana.example/d/1">dashboard</a>',
    }
    for what, snippet in planted.items():
        bad = tmp_path / f"{what}.html"
        bad.write_text(page.replace("</main>", snippet + "</main>"))
        assert external_references(bad), what


def visible(page: Path) -> str:
    return " ".join(" ".join(scan(page).text).split())


# Python or JSON spellings a person should never read (a half-open bracket "[5, 6)" is notation).
REPR = re.compile(r"\b(?:None|nan|NaN|inf|Infinity|True|False|null)\b|\{'|\[[\d.]+, [\d.]+\]|\('")


def test_values_are_words_never_python_reprs(made):
    for name, (page, _) in pages_of(made).items():
        text = visible(page)
        assert not REPR.search(text), (name, REPR.search(text) and text[max(0, REPR.search(text).start() - 80):][:160])


def test_report_page_says_what_a_manager_reads_first(made):
    text = visible(made["report"] / "report.html")
    summary = json.loads((made["report"] / "summary.json").read_text())
    v = summary["verdict"]
    # The verdict comes first, with its state, basis, ratio and threshold, and why it is not decided.
    assert v["state"] == "inconclusive"
    first = text.index("INCONCLUSIVE")
    assert first < text.index("Ratio per scenario") < text.index("Concurrency curves")
    assert f"{v['min_ratio']:.2f}x" in text and "threshold 1.5x" in text
    for reason in v["reasons"]:  # every reason of summary.json, worded as it is there
        assert " ".join(reason.split()) in text, reason
    assert "invalid" in text and "suspect" in text
    # one SLO ratio per scenario, the verdict's, with its interval and source (no second SLO column)
    assert text.count("SLO ratio per GPU (the verdict's interval)") == 1 and "95 % interval 0" not in text
    for section in ("Capacity under the SLO", "Startup", "Replica plan", "Invalid and suspect runs",
                    "What was measured"):
        assert section in text, section
    # Manifest facts of both sides.
    for fact in ("vllm/vllm-openai:v0.26.0", "--max-num-seqs 16", "--max-num-seqs 4", "g6e.2xlarge", "on-demand",
                 "$2.76 per hour (price table for on-demand)", "7 (sha256 of the sweep seed and the run)",
                 "2026-08-05 10:00:00 to 10:40:00 UTC"):
        assert fact in text, fact
    assert "meets the SLO at c=5, misses it at c=6" in text  # the capacity search's bracket
    assert "prefix-cache hits 41.0%" in text and "3 failed requests" in text
    assert 'href="plan/plan.html"' in (made["report"] / "report.html").read_text()


def test_report_without_a_baseline_has_no_verdict_and_says_so(made):
    text = visible(made["alone"] / "report.html")
    assert "NO VERDICT" in text and "--baseline DIR" in text
    assert "Ratio per scenario" not in text and "Replica plan" not in text


def test_the_verdict_issue_keys_are_shown_when_present(made):
    """Three states, reasons and intervals (an open end in words); none of them exists on this branch's
    summary.json yet, so they are put in by hand."""
    side = SIDE.load_side(made["cand"])
    base = SIDE.load_side(made["base"])
    summary, issues = SUMMARY.build_summary(side, base, ttft_ms=500, itl_ms=50, threshold=1.5, basis="slo")
    summary["verdict"].update(state="inconclusive", reasons=["S1_chat: the interval straddles the threshold"],
                              min_ratio_interval=[1.2, None])
    summary["comparison"]["S1_chat"]["slo_ratio_interval"] = [3.2, float("inf")]
    summary["comparison"]["S2_summary"]["slo_ratio_interval"] = [None, 2.5]
    page = pages.report_page(summary, pages.report_context(side, base, made["report"]), issues)
    out = made["root"] / "verdict-keys.html"
    out.write_text(page)
    text = visible(out)
    assert "INCONCLUSIVE" in text and 'data-state="inconclusive"' in page
    assert "S1_chat: the interval straddles the threshold" in text
    assert "Blocks a pass" not in text  # the summary's own reasons replace the derived ones
    # each scenario's own interval, in the verdict box and the ratio table, an open end in words
    text = re.sub(r"\s+([:,.;)])", r"\1", text)  # the text of tagged figures is joined with spaces
    box = text[text.index("INCONCLUSIVE"):text.index("Ratio per scenario")]
    assert "S1_chat: 3.20x or more (no upper bound)" in box and "S2_summary: at most 2.50x" in box
    assert text.count("3.20x or more (no upper bound)") == 2 and text.count("at most 2.50x") == 2
    assert not REPR.search(text)

    plan = json.loads((made["plan"] / "plan.json").read_text())
    plan["configurations"][0].update(replicas=None, replicas_range=[4, None], reason="the baseline never meets the SLO")
    out.write_text(pages.plan_page(plan, [], "stated", []))
    text = visible(out)
    assert "the baseline never meets the SLO" in text and "at least 4" in text and not REPR.search(text)


def test_interval_words():
    assert markup.interval_words([2.9, 3.6]) == "2.90x to 3.60x"
    assert markup.interval_words([4.99, 4.99]) == "4.99x"  # both ends of the bracket at one figure
    assert markup.interval_words([2.9, None]) == "at least 2.90x"
    assert markup.interval_words([2.9, float("inf")]) == "at least 2.90x"
    assert markup.interval_words([2.9, 1e308]) == "at least 2.90x"
    assert markup.interval_words([None, 3.6]) == "at most 3.60x"
    assert markup.ratio_interval_words([0.0, None]) == "no bound either way (the capacities it is made of are open)"
    assert markup.ratio_interval_words([0.0, 8.0]) == "8.00x or less (no lower bound)"
    assert markup.ratio_interval_words([0.0, 0.0]) == "0x (only the baseline meets the SLO)"
    assert markup.ratio_interval_words([2.9, None]) == "at least 2.90x"
    assert markup.interval_words([float("nan"), None]) is None
    assert markup.interval_words(None) is None
    assert markup.interval_words([450.0, 512.5], " ms", 1) == "450.0 ms to 512.5 ms"


def test_no_html_writes_no_page(made, tmp_path):
    assert REP.main([str(made["cand"]), "--baseline", str(made["base"]), "--out", str(tmp_path / "r"),
                     "--no-html", "--no-charts"]) == 0
    assert P.main([str(made["cand"]), "--load", "S1_chat=1", "--out", str(tmp_path / "p"), "--no-html",
                   "--no-charts"]) == 0
    assert CMP.main([str(made["base"]), str(made["cand"]), "--out", str(tmp_path / "c"), "--no-html"]) == 0
    assert (tmp_path / "r" / "report.md").is_file() and (tmp_path / "r" / "plan" / "plan.md").is_file()
    assert not list(tmp_path.rglob("*.html"))


def test_plan_page_labels_every_bar_and_compare_page_names_the_setting(made):
    plan = json.loads((made["plan"] / "plan.json").read_text())
    text = visible(made["plan"] / "plan.html")
    row = plan["configurations"][0]
    lo, hi = row["replicas_range"]  # the grid alone: a range, and the reason says how to narrow it
    count = str(row["replicas"]) if row["replicas"] is not None else f"{lo}-{hi}"
    assert f"{count} replicas (today 12)" in text and (row["reason"] is None or row["reason"] in text)
    assert f"${row['usd_month_on_demand']:,.0f}" in text
    # plan.png and the page's chart carry the value on every bar
    from bench.analysis import charts

    fig = charts.plan_figure(plan)
    labels = {t.get_text() for ax in fig.axes for t in ax.texts}
    charts.close(fig)
    assert {"12", count, f"${row['usd_month_on_demand']:,.0f}", f"${row['usd_month_spot']:,.0f}",
            f"${plan['current']['usd_month']:,.0f}"} <= labels
    compare = visible(made["compare"] / "compare.html")
    assert "maxNumSeqs" in compare and "COMPARABLE" not in compare  # the invalid run makes it incomplete
    assert "INCOMPLETE" in compare and "no winner" in compare.lower()


def test_a_page_is_the_same_bytes_for_the_same_data(made, tmp_path):
    """Chart ids and metadata are fixed, so a page diffs like the Markdown does."""
    before = (made["compare"] / "compare.html").read_bytes()
    assert CMP.main([str(made["base"]), str(made["cand"]), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "compare.html").read_bytes() == before


def test_no_charts_leaves_the_charts_out_of_the_page_too(made, tmp_path):
    assert REP.main([str(made["cand"]), "--baseline", str(made["base"]), "--out", str(tmp_path / "r"),
                     "--no-charts"]) == 0
    for page in (tmp_path / "r" / "report.html", tmp_path / "r" / "plan" / "plan.html"):
        text = page.read_text()
        assert "data:image" not in text and "Charts left out (--no-charts)" in text
        assert 'data-field="[&quot;verdict&quot;, &quot;min_ratio&quot;]"' in text or "plan" in page.name


def test_compare_headline_says_who_wins_how_many_cells(made):
    data = json.loads((made["compare"] / "compare.json").read_text())
    text = visible(made["compare"] / "compare.html")
    labels = [v["label"] for v in data["variants"]]
    wins = {k: sum(1 for c in data["cells"] if c["winner"] == k) for k in labels}
    if any(wins.values()):
        top = max(labels, key=lambda k: wins[k])
        assert f"{top} wins {wins[top]} cell" in text
    assert pages.wins_words([{"winner": "max-num-seqs 16"}] * 8 + [{"winner": "max-num-seqs 1"}],
                            ["max-num-seqs 1", "max-num-seqs 16"]) == \
        ": max-num-seqs 16 wins 8 cells, max-num-seqs 1 wins 1 cell"
    assert pages.wins_words([{"winner": None}], ["a", "b"]) == ""


def test_one_colour_per_side_on_every_chart(made):
    from bench.analysis import charts
    summary = json.loads((made["report"] / "summary.json").read_text())
    side = SIDE.load_side(made["base"])
    fig = charts.curves_figure(summary["runs"], [SIDE.run_row(r, side) for r in side.runs], summary["slo"],
                               "S1_chat", label="seqs-16", base_label="seqs-4")
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    charts.close(fig)
    assert colours["seqs-16"] == charts.CANDIDATE and colours["seqs-4 (baseline)"] == charts.BASELINE
    data = json.loads((made["compare"] / "compare.json").read_text())
    labels = [v["label"] for v in data["variants"]]  # the baseline listed first, as the fixture does
    fig = charts.compare_figure(data["cells"], labels)
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    charts.close(fig)
    assert colours[labels[0]] == charts.BASELINE and colours[labels[1]] == charts.CANDIDATE


def test_the_plan_chart_keeps_unknown_inside_its_axes():
    from bench.analysis import charts
    plan = {"basis": "slo", "headroom": 0.0, "spares": 0, "current": {"replicas": 12, "usd_month": None},
            "configurations": [{"label": "g7e", "replicas": None, "replicas_range": None, "usd_month_on_demand": None,
                                "usd_month_spot": None}]}
    fig = charts.plan_figure(plan)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    unknown = [(ax, t) for ax in fig.axes for t in ax.texts if t.get_text() == "unknown"]
    assert unknown
    for ax, t in unknown:
        box, frame = t.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert t.get_rotation() == 0
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    charts.close(fig)


def test_the_startup_records_a_report_reads_are_not_listed_as_unused(made):
    summary = json.loads((made["report"] / "summary.json").read_text())
    assert (made["cand"] / "startup").is_dir()
    assert not [f for f in summary["ignored_files"] if "startup/" in f["file"]]
