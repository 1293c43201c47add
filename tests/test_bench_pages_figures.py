"""One capacity figure on every page, and ratios a reader can rebuild (fixture `figures`,
tests/fixtures/bench_pages.py: the best run under the SLO below the highest load meeting it, and a
grid point the capacity search ran again and saw miss).

Without a browser: every figure report.html tags with its summary.json path equals that value;
report.md's verdict, capacity and ratio tables show summary.json's capacities and ratio intervals;
each ratio interval shown equals the capacities per GPU shown beside it (low end = candidate low /
baseline high, high end = candidate high / baseline low, computed from the digits on the page); the
curves' star and green band come from the same interval. tests/test_bench_pages_browser.py does the
page part again in Chromium.
"""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bench.analysis import charts

NUMBER = re.compile(r"(?P<n>[0-9][0-9,]*(?:\.(?P<d>[0-9]+))?)")


class Tagged(HTMLParser):
    """(data-field JSON path, text) of every element carrying data-field, nested text included."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._open: list[tuple[str, str | None, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "meta"):
            return
        self._open.append((tag, dict(attrs).get("data-field"), []))

    def handle_endtag(self, tag):
        while self._open:
            name, path, text = self._open.pop()
            if path is not None:
                self.fields.append((path, "".join(text)))
            if name == tag:
                break

    def handle_data(self, data):
        for _, _, text in self._open:
            text.append(data)


def page_fields(page: Path) -> list[tuple[str, str]]:
    parser = Tagged()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.fields


def lookup(data: Any, path: list[Any]) -> Any:
    for key in path:
        data = data[key]
    return data


def checked_paths(page: Path, summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The summary.json paths of a page's tagged figures, each number checked against its value there."""
    paths = []
    for raw, text in page_fields(page):
        path = json.loads(raw)
        value = lookup(summary, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert close(value, text), f"{path}: page {text!r}, summary.json {value}"
        paths.append(tuple(path))
    return paths


def shown(text: str) -> tuple[float, int]:
    m = NUMBER.search(text)
    assert m, f"no number in {text!r}"
    return float(m["n"].replace(",", "")), len(m["d"] or "")


def close(value: float, text: str) -> bool:
    number, decimals = shown(text)
    return abs(number - value) <= 0.5 * 10 ** -decimals + 1e-9


def rebuilt(ratio: tuple[float, int], num: tuple[float, int], den: tuple[float, int],
            credit: tuple[float, int] | None = None, over: bool = False) -> bool:
    """The ratio shown equals the quotient of the two figures shown, to the precision shown; times
    the band credit shown beside it (`over`: divided by it, the high end)."""
    (r, rd), (a, ad), (b, bd) = ratio, num, den
    # each figure is rounded on the page: the quotient's own rounding span, plus the ratio's
    lo = (a - 0.5 * 10 ** -ad) / (b + 0.5 * 10 ** -bd)
    hi = (a + 0.5 * 10 ** -ad) / (b - 0.5 * 10 ** -bd)
    if credit is not None:
        k, kd = credit
        k_lo, k_hi = k - 0.5 * 10 ** -kd, k + 0.5 * 10 ** -kd
        lo, hi = (lo / k_hi, hi / k_lo) if over else (lo * k_lo, hi * k_hi)
    return lo - 0.5 * 10 ** -rd - 1e-9 <= r <= hi + 0.5 * 10 ** -rd + 1e-9


def check_ratios_rebuild(fields: dict[tuple, str], summary: dict[str, Any]) -> int:
    """Every shown SLO ratio end equals the shown capacities per GPU it divides, times (low end) or
    over (high end) the band credit shown beside it wherever summary.json has one; returns how many."""
    checked = 0
    for name, comp in summary["comparison"].items():
        at = ("comparison", name)
        per = ("comparison", name, "slo_capacity_per_gpu")
        for end, (num, den) in ((0, ((*per, "candidate", 0), (*per, "baseline", 1))),
                                (1, ((*per, "candidate", 1), (*per, "baseline", 0)))):
            ratio = fields.get((*at, "slo_ratio_interval", end))
            if ratio is None and end == 1 and comp["slo_ratio_interval"] and \
                    comp["slo_ratio_interval"][0] == comp["slo_ratio_interval"][1]:
                ratio = fields.get((*at, "slo_ratio_interval", 0))  # one value shown once
            if ratio is None:
                continue
            a = fields.get(num) or fields.get((*num[:-1], 0))  # a point capacity is shown once
            b = fields.get(den) or fields.get((*den[:-1], 0))
            assert a is not None and b is not None, f"{name}: ratio {ratio!r} shown without its capacities"
            credit = None
            if (comp.get("slo_ratio_band_credit") or [None, None])[end] is not None:
                credit = fields.get((*at, "slo_ratio_band_credit", end))
                assert credit is not None, f"{name}: ratio {ratio!r} shown without its band credit"
                credit = shown(credit)
            assert rebuilt(shown(ratio), shown(a), shown(b), credit, over=end == 1), \
                f"{name}: {ratio} is not {a} / {b} with credit {credit}"
            checked += 1
    return checked


def test_every_tagged_figure_on_report_html_is_summary_json(figures):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    paths = checked_paths(figures["report"] / "report.html", summary)
    for name, entry in summary["scenarios"].items():
        assert ("scenarios", name, "slo_capacity_interval", "output_tok_s", 0) in paths
    for name in summary["comparison"]:
        assert ("comparison", name, "slo_ratio_interval", 0) in paths
        for who in ("candidate", "baseline"):
            assert ("comparison", name, "slo_capacity_per_gpu", who, 0) in paths
    assert ("verdict", "fleet", "current") in paths and ("verdict", "fleet", "replicas_range", 0) in paths


def test_each_ratio_on_report_html_is_the_capacities_beside_it(figures):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    html = (figures["report"] / "report.html").read_text()
    # the verdict box and the ratio table each show every scenario's interval with its capacities
    box = html[html.index('id="verdict"'):html.index("<h2>Ratio per scenario")]
    table = html[html.index("<h2>Ratio per scenario"):html.index("<h2>Concurrency curves")]
    for part in (box, table):
        fields = {tuple(json.loads(p)): t for p, t in Tagged_fields(part)}
        assert check_ratios_rebuild(fields, summary) >= 2 * len(summary["comparison"]) - 1
    # only the verdict's interval: the point ratio (neither end here) is not shown as a ratio
    s2 = summary["comparison"]["S2_summary"]
    assert s2["slo_ratio"] not in s2["slo_ratio_interval"]
    line = box[box.index("<strong>S2_summary</strong>"):]
    assert f"{s2['slo_ratio']:.2f}x" not in line[:line.index("</li>")]


def Tagged_fields(fragment: str) -> list[tuple[str, str]]:  # noqa: N802 - a parser over a page fragment
    parser = Tagged()
    parser.feed(fragment)
    return parser.fields


# a capacity beside a ratio: its figure per GPU, then its 95 % interval per GPU
SIDE = r"(?P<f{0}>[0-9.,]+) tok/s per GPU, 95 % interval (?P<{0}>[0-9.,]+(?: to [0-9.,]+)?) \("
VERDICT_LINE = re.compile(r"^- (?P<name>\S+): (?P<ratio>[0-9.]+x(?: to [0-9.]+x)?), .*?Candidate "
                          + SIDE.format("a") + r".*?\); baseline " + SIDE.format("b"))
CELL = re.compile(SIDE.format("a"))


REBUILT = re.compile(r"low end (?P<a>[0-9.,]+) / (?P<b>[0-9.,]+)(?: × (?P<k>[0-9.]+))?, high end "
                     r"(?P<c>[0-9.,]+) / (?P<d>[0-9.,]+)(?: ÷ (?P<m>[0-9.]+))?")


def ends(text: str) -> list[str]:
    parts = text.split(" to ")
    return parts if len(parts) == 2 else [parts[0], parts[0]]


def check_rebuilt_words(text: str, r: list[str], a: list[str], b: list[str], comp: dict[str, Any]) -> None:
    """The "Rebuilt" words name the capacities shown and the credit, and the ratio rebuilds from them."""
    m = REBUILT.search(text)
    assert m, f"no rebuild in {text!r}"
    assert (m["a"], m["b"], m["c"], m["d"]) == (a[0], b[1], a[1], b[0])
    credit = comp.get("slo_ratio_band_credit") or [None, None]
    for key, value in (("k", credit[0]), ("m", credit[1])):
        assert (m[key] is None) == (value is None) and (value is None or close(value, m[key]))
    k = shown(m["k"]) if m["k"] else None
    kk = shown(m["m"]) if m["m"] else None
    assert rebuilt(shown(r[0]), shown(a[0]), shown(b[1]), k) and rebuilt(shown(r[1]), shown(a[1]), shown(b[0]), kk,
                                                                            over=True)


def test_report_md_shows_the_same_capacities_and_ratios_that_rebuild(figures):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    md = (figures["report"] / "report.md").read_text()
    seen = set()
    for line in md.splitlines():
        m = VERDICT_LINE.match(line)
        if not m:
            continue
        comp = summary["comparison"][m["name"]]
        r, a, b = ends(m["ratio"]), ends(m["a"]), ends(m["b"])
        for shown_text, value in zip(r, comp["slo_ratio_interval"]):
            assert close(value, shown_text), (m["name"], shown_text, value)
        for who, pair, fig in (("candidate", a, m["fa"]), ("baseline", b, m["fb"])):
            for shown_text, value in zip(pair, comp["slo_capacity_per_gpu"][who]):
                assert close(value, shown_text), (m["name"], who, shown_text, value)
            assert close(comp["slo_figure_per_gpu"][who], fig), (m["name"], who, fig)
        check_rebuilt_words(line[line.index("Rebuilt: "):], r, a, b, comp)
        seen.add(m["name"])
    assert seen == set(summary["comparison"])
    # the capacity table, the peak table's capacity column and the ratio table: summary.json's figures
    for name, entry in summary["scenarios"].items():
        lo, hi = entry["slo_capacity_interval"]["output_tok_s"]
        figure = (f"{entry['slo_capacity_interval']['point_tok_s']:,.1f} tok/s, 95 % interval {lo:,.1f}"
                  + ("" if f"{lo:,.1f}" == f"{hi:,.1f}" else f" to {hi:,.1f}"))
        rows = [row for row in md.splitlines() if row.startswith(f"| {name} |")]
        assert sum(figure in row for row in rows) >= 2, (name, figure)
        per = summary["comparison"][name]["slo_capacity_per_gpu"]
        table_row = next(row for row in rows if "tok/s per GPU" in row)
        cells = [c.strip() for c in table_row.strip("|").split("|")]
        r = ends(cells[1])
        a, b = (ends(CELL.search(cell)["a"]) for cell in cells[2:4])
        for shown_text, value in zip(a, per["candidate"]):
            assert close(value, shown_text)
        check_rebuilt_words(cells[4], r, a, b, summary["comparison"][name])
    # the grid said "met" at S2_summary c=16, the search's re-run missed: the capacity is below it
    s2 = summary["scenarios"]["S2_summary"]["slo_capacity_interval"]
    assert s2["load_pass"] == 8 and s2["load_fail"] == 16
    assert "meets the SLO at c=8, misses it at c=16" in md


@pytest.mark.parametrize("name", ["S1_chat", "S2_summary"])
def test_the_curves_star_and_band_are_one_figure(figures, name):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    entry = summary["scenarios"][name]
    interval = entry["slo_capacity_interval"]
    mark = charts.capacity_mark(entry)
    assert (mark["pass"], mark["fail"]) == (interval["load_pass"], interval["load_fail"])
    assert mark["tok_s"] == interval["point_tok_s"]  # the figure itself, not the low end of its interval
    assert mark["pass"] <= mark["load"] < mark["fail"]  # the star sits in its own band
    fig = charts.curves_figure(summary["runs"], None, summary["slo"], name, label="candidate", entry=entry)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    charts.close(fig)
    assert f"SLO capacity bracket [c={interval['load_pass']}, c={interval['load_fail']})" in labels
    assert f"capacity under the SLO {interval['point_tok_s']:,.1f} (c={mark['load']:g})" in labels
    assert not any(label.startswith("best under SLO") for label in labels)


# ---------------------------------------------------------------------------------------------
# The answer first: the fleet in the verdict (summary.json `verdict.fleet`)


def test_the_verdict_says_what_it_means_for_the_fleet(figures):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    plan = json.loads((figures["report"] / "plan" / "plan.json").read_text())
    fleet, verdict = summary["verdict"]["fleet"], summary["verdict"]
    # today's 12 replicas over the ratio intervals the page shows, per replica (the candidate has 2 GPUs
    # a replica, the baseline 1), rounded up: the smallest high end gives the low count, the verdict's
    # own interval (the smallest low end) the high count
    per_replica = {n: [v * 2 for v in c["slo_ratio_interval"]] for n, c in summary["comparison"].items()}
    low = min(per_replica, key=lambda n: per_replica[n][1])
    expected = [math.ceil(12 / per_replica[low][1]), math.ceil(12 / (verdict["min_ratio_interval"][0] * 2))]
    assert fleet["current"] == 12 and fleet["replicas_range"] == expected == [3, 6]
    assert fleet["divided_by"][1]["scenario"] == verdict["min_ratio_scenario"] == "S2_summary"
    assert fleet["divided_by"][0]["scenario"] == low == "S1_chat"
    # the replica plan beside the report (no headroom, no spares) sizes the same load the same way
    row = plan["configurations"][0]
    assert (plan["headroom"], plan["spares"]) == (0.0, 0) and row["replicas_range"] == fleet["replicas_range"]
    # 12 replicas of 1 GPU -> 8 and 4 replicas of 2 GPUs: the per-GPU ratio each needs
    assert fleet["targets"] == [{"replicas": 8, "needs_ratio_per_gpu": 0.75}, {"replicas": 4, "needs_ratio_per_gpu": 1.5}]
    assert fleet["baseline"]["label"] == "today" and "--max-num-seqs 4" in fleet["baseline"]["served_flags"]
    md = (figures["report"] / "report.md").read_text()
    text = md[md.index("## Verdict"):md.index("## Definitions")]
    r = {k: f"{fleet['divided_by'][k]['ratio_per_replica']:.2f}x" for k in (0, 1)}
    assert (f"Today 12 replicas: 3 to 6 on candidate carry the same load (12 / {r[0]}, the high end of S1_chat's "
            f"ratio interval, and 12 / {r[1]}, the low end of S2_summary's, per replica (per GPU x 2 GPUs / 1 GPU), "
            "rounded up") in text and "None" not in text
    assert "8 need 0.75x, 4 need 1.5x" in text and "what the baseline today ran (g6e.2xlarge" in text
    from bench.analysis import answer
    line = answer.verdict_line(summary, {"candidate": "candidate", "baseline": "today"})
    lo, hi = verdict["min_ratio_interval"]
    assert f"smallest per-GPU ratio {lo:.2f}x to {hi:.2f}x" in line and "Today 12 replicas: 3 to 6" in line
    assert "None" not in line


@pytest.mark.parametrize("command", ["report", "plan"])
def test_zero_current_replicas_is_refused_by_name(figures, tmp_path, capsys, command):
    from bench.analysis import plan as P
    from bench.analysis import report as REP
    main = REP.main if command == "report" else P.main
    rc = main([str(figures["cand"]), "--baseline", str(figures["base"]), "--current-replicas", "0",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "argument --current-replicas: 0 cannot be right: give a whole number above 0" in err
    assert "need --current-replicas" not in err and "Traceback" not in err


def test_the_search_budget_and_why_a_search_stopped_are_said():
    from bench.analysis import capacity_report as CR
    ext = {"settings": {"budget_minutes": 60},
           "totals": {"runs": 5, "search_runs": 3, "open_loop_runs": 2, "gpu_s": 171.0, "grid_gpu_s": 900.0,
                      "total_gpu_s": 1071.0, "budget_s": 3600.0},
           "scenarios": {"S1_chat": {"closed": {"stopped": "the GPU budget stopped it before c=26 (about 40 s; 880 "
                                                           "of 900 s spent): the capacity is known to 1.41x"}},
                         "S4_rag": {"closed": {"stopped": None}, "open_loop": "not run: the budget ended first"}}}
    lines = CR.markdown({"scenarios": {}}, {}, {"extra": ext}, "itl")
    line = next(x for x in lines if x.startswith("GPU time"))
    assert line == ("GPU time of the last invocation: 17.9 min of its 60.0 min budget (grid 15.0 min, capacity "
                    "search 2.9 min in 5 runs: 3 closed loop, 2 open loop).")
    assert "- S1_chat, closed loop: the GPU budget stopped it before c=26" in "\n".join(lines)
    assert "- S4_rag, open loop: not run: the budget ended first" in lines


def test_a_grid_run_the_search_overruled_says_so_where_it_is_listed(figures):
    """S2_summary c=16 met the SLO in the grid, the search's re-run missed: its row says it is not counted."""
    md = (figures["report"] / "report.md").read_text()
    row = next(r for r in md.splitlines() if r.startswith("| 16 |") and "1,837.9" in r)
    assert "met in this run; not counted (the capacity under the SLO misses it from c=16)" in row
    text = " ".join((figures["report"] / "report.html").read_text().split())
    assert "met in this run; not counted: the capacity under the SLO misses it from c=16" in text
