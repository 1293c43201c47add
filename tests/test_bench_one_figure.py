"""One figure everywhere: report, plan, compare, pages, charts and printed lines show the same capacity,
the same ratio interval and the same fleet (issue 34, item 4).

Rule by rule: the fleet range is today's replicas over the verdict's ratio intervals, per replica,
rounded up, with open ends worded and never a zero; a report and a compare of the same folders carry
the same capacity; the report's header counts the runs its page lists; an invalid run's reason names
the exception its traceback ends with; the curves' star sits on the run it names; advice never asks
for a load already run; `slo_ratio` is the ratio of the two figures the page shows; and the printed
lines carry the numbers of the pages.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.analysis import answer, charts
from bench.analysis import capacity_report as CR
from bench.analysis import report as REP
from bench.analysis import results as R
from bench.analysis import sizing
from bench.analysis import summary as SUMMARY
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP
from bench.demo import command as demo
from bench.run import runner
from tests.fixtures.bench_pages import make_sweep
from tests.test_bench_pages_figures import Tagged_fields, page_fields
from tests.test_bench_plan import result

TRACEBACK_LOG = """Starting main benchmark run...
Failed requests during benchmark run detected (capping to 10):
Error 0: Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/aiohttp/connector.py", line 1268, in _wrap_create_connection
    sock = await aiohappyeyeballs.start_connection(
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ConnectionRefusedError: [Errno 111] Connection refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/vllm/benchmarks/lib/endpoint_request_func.py", line 150, in f
    async with session.post(url=api_url, json=payload, headers=headers) as response:
aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:8000 ssl:default [Connection refused]

Error 1: Not Found
============ Serving Benchmark Result ============
"""


# ---------------------------------------------------------------------------------------------
# The fleet range: today's replicas over the verdict's ratio intervals, rounded up


def fleet_of(intervals, per_replica=1.0, current=12):
    span, divided, reason = SUMMARY.fleet_range(current, intervals, per_replica)
    fleet = {"current": current, "replicas_range": span, "divided_by": divided, "reason": reason,
             "candidate": "g7e", "gpus": {"candidate": round(per_replica), "baseline": 1}}
    return fleet, answer.fleet_words(fleet)[0]


def test_the_issues_example_12_over_1_21x_to_3_71x_is_4_to_10():
    fleet, words = fleet_of({"S1_chat": [1.21, 3.71]})
    assert fleet["replicas_range"] == [math.ceil(12 / 3.71), math.ceil(12 / 1.21)] == [4, 10]
    assert words == ("Today 12 replicas: 4 to 10 on g7e carry the same load (12 / 3.71x and 12 / 1.21x, S1_chat's "
                     "ratio interval per replica, rounded up).")


def test_every_scenario_binds_its_end_and_per_gpu_becomes_per_replica():
    # 2 GPUs a replica against 1: a per-GPU ratio of 1.06x is 2.12x per replica
    fleet, words = fleet_of({"S1_chat": [1.7308, 2.3111], "S2_summary": [1.061, 3.7701]}, per_replica=2.0)
    assert fleet["replicas_range"] == [math.ceil(12 / 4.6222), math.ceil(12 / 2.122)] == [3, 6]
    assert [d["scenario"] for d in fleet["divided_by"]] == ["S1_chat", "S2_summary"]
    assert "12 / 4.62x, the high end of S1_chat's ratio interval, and 12 / 2.12x, the low end of S2_summary's" in words
    assert "(per GPU x 2 GPUs / 1 GPU)" in words


@pytest.mark.parametrize("interval, span, said", [
    ([1.5, None], [None, 8], "Today 12 replicas: at most 8 on g7e"),  # no upper ratio end: no smaller count ruled out
    ([0.0, 4.0], [3, None], "Today 12 replicas: at least 3 on g7e"),  # no lower ratio end: no larger count ruled out
    ([3.0, 3.0], [4, 4], "Today 12 replicas: 4 on g7e carry the same load (12 / 3.00x, S1_chat's"),  # the peak basis
])
def test_an_open_end_is_worded_never_a_zero(interval, span, said):
    fleet, words = fleet_of({"S1_chat": interval})
    assert fleet["replicas_range"] == span and words.startswith(said)
    assert "ruled out" in words or span[0] == span[1]
    assert " 0 on" not in words and "None" not in words


@pytest.mark.parametrize("intervals, why", [
    ({"S1_chat": None}, "no ratio interval in S1_chat"),
    ({"S1_chat": [0.0, 0.0]}, "the candidate meets the SLO at no load tested in S1_chat"),
    ({"S1_chat": [None, None]}, "only the candidate meets the SLO"),
    ({"S1_chat": [0.0, None]}, "no bound either way"),
    ({}, "no ratio interval in any scenario"),
])
def test_no_range_where_the_interval_gives_none(intervals, why):
    fleet, words = fleet_of(intervals)
    assert fleet["replicas_range"] is None and why in fleet["reason"]
    assert words.startswith("Today 12 replicas: no count on g7e follows from the verdict: ") and why in words
    assert re.search(r"\b0 (on|to|replicas)\b", words) is None


# ---------------------------------------------------------------------------------------------
# A report and a compare of the same folders: one capacity


def test_report_and_compare_of_the_same_folders_agree(made):
    summary = json.loads((made["report"] / "summary.json").read_text())
    data = json.loads((made["compare"] / "compare.json").read_text())
    cand, base = "seqs-16", "seqs-4"
    for name, entry in summary["scenarios"].items():
        mine = entry["slo_capacity_interval"]
        assert data["slo_capacity_interval"][name][cand] == mine
        assert data["slo_capacity"][name][cand] == pytest.approx(mine["point_tok_s"], abs=1e-3)
        assert entry["slo"]["output_tok_s"] == pytest.approx(mine["point_tok_s"], abs=1e-3)
        comp = summary["comparison"][name]
        assert comp["slo_basis_source"] != "open_loop"  # both sides closed loop, as compare reads them
        assert data["slo_capacity_interval"][name][base] == comp["baseline_slo_capacity"]
        assert data["slo_capacity"][name][base] == pytest.approx(comp["baseline_slo_capacity"]["point_tok_s"], abs=1e-3)
    # compare's noise band is the widest of the two sides' output tok/s bands as the report states them
    for cell in data["cells"]:
        bands = [summary["scenarios"][cell["scenario"]]["slo_capacity_interval"]["noise_pct_by_figure"]["output_tok_s"],
                 summary["comparison"][cell["scenario"]]["baseline_slo_capacity"]["noise_pct_by_figure"]["output_tok_s"]]
        assert cell["noise_pct"] == pytest.approx(max(bands), abs=0.01)
    # and both pages word them alike: the figure, then its 95 % interval
    report_md, compare_md = ((made[k] / f"{k}.md").read_text() for k in ("report", "compare"))
    for name, entry in summary["scenarios"].items():
        words = answer.figure_words(entry["slo_capacity_interval"])
        assert ", 95 % interval " in words and words in report_md and words in compare_md
    fields = {tuple(json.loads(p)): t for p, t in page_fields(made["compare"] / "compare.html")}
    for name, per in data["slo_capacity"].items():
        for label, value in per.items():
            if value is not None:
                assert fields[("slo_capacity", name, label)] == f"{value:,.1f}"
                assert fields[("slo_capacity_interval", name, label, "output_tok_s", 0)] == \
                    f"{data['slo_capacity_interval'][name][label]['output_tok_s'][0]:,.1f}"


# ---------------------------------------------------------------------------------------------
# What the header counts is what the page lists; reasons are whole


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    """A candidate with an invalid grid run, a grid run whose first attempt failed on a refused
    connection (its reason cut to the traceback's first line, as sweeps wrote it, its log beside it),
    two capacity-search runs and a search run that stayed invalid."""
    root = tmp_path_factory.mktemp("listed")
    base = make_sweep(root, "seqs-4", 1.0, seqs=4)
    cand = make_sweep(root, "seqs-16", 3.0, seqs=16, invalid=("S2_summary", 64))
    manifest = json.loads((cand / "manifest.json").read_text())
    for rec in manifest["runs"]:
        if (rec["scenario"], rec["concurrency"]) == ("S1_chat", 4):
            rec["attempts"] = [{"n": 1, "valid": False, "file": "S1_chat_c4.attempt1.invalid.json",
                                "log": "logs/S1_chat_c4.attempt1.log",
                                "reason": f"vllm bench serve exited 1; request errors: {R.TRACEBACK_HEAD}"},
                               {"n": 2, "valid": True, "file": "S1_chat_c4.json", "log": "logs/S1_chat_c4.attempt2.log"}]
    manifest["extra"] = {"runs": [{"kind": "search", "scenario": "S1_chat", "concurrency": 7, "rate": None,
                                   "file": None, "valid": False, "attempt": 1,
                                   "reason": "timed out after 600 s"}]}
    (cand / "manifest.json").write_text(json.dumps(manifest))
    (cand / "logs").mkdir()
    (cand / "logs" / "S1_chat_c4.attempt1.log").write_text(TRACEBACK_LOG)
    out = root / "report"
    assert REP.main([str(cand), "--baseline", str(base), "--out", str(out), "--current-replicas", "12"]) == 0
    return {"cand": cand, "base": base, "report": out, "summary": json.loads((out / "summary.json").read_text()),
            "html": (out / "report.html").read_text()}


def test_the_header_counts_what_the_page_lists(listed):
    summary, page = listed["summary"], listed["html"]
    counts = summary["run_counts"]
    assert counts["candidate"] == {"grid": 8, "grid_usable": 7, "grid_invalid": 1, "grid_suspect": 0, "search": 2,
                                   "open_loop": 0, "invalid_attempts": 2}
    header = page[page.index('<p class="sub">'):page.index("</p>", page.index('<p class="sub">'))]
    shown = {tuple(json.loads(p)): int(t) for p, t in Tagged_fields(header)}
    for who in ("candidate", "baseline"):
        for key, value in counts[who].items():
            if value:
                assert shown[("run_counts", who, key)] == value
    text = re.sub(r"<[^>]+>", "", header)
    assert "seqs-16 (candidate): 8 grid runs (7 usable, 1 invalid), 2 capacity-search runs, 2 invalid attempts" in text
    # the runs the scenario tables list, by kind, and the attempts listed beside invalid runs
    curves = page[page.index("<h2>Concurrency curves"):page.index("<h2>Capacity under the SLO")]
    rows = re.findall(r"<tr[^>]*><td>(grid|capacity search|open loop)<", curves)
    assert rows.count("grid") == counts["candidate"]["grid"] and rows.count("capacity search") == 2
    assert curves.count("invalid: ") == counts["candidate"]["grid_invalid"]
    # the baseline's are drawn: its capacity-search runs as crosses on its scenarios' curves
    svgs = curve_svgs(listed["report"] / "report.html")
    crosses = [p for svg in svgs.values() if "baseline-search-output_tok_s" in svg
               for p in svg_points(svg, "baseline-search-output_tok_s")]
    assert len(crosses) == counts["baseline"]["search"] == 2
    problems = page[page.index("<h2>Invalid and suspect runs"):]
    assert problems.count("<td>invalid attempt ") == counts["candidate"]["invalid_attempts"]
    # the printed line counts the same
    assert answer.runs_words(counts["candidate"]) == ("8 grid runs (7 usable, 1 invalid), 2 capacity-search runs, "
                                                      "2 invalid attempts kept for the record")


def test_an_invalid_reason_names_the_exception_not_the_traceback_head(listed, tmp_path):
    attempts = listed["summary"]["invalid_attempts"]
    grid = next(a for a in attempts if a["kind"] == "grid")
    assert grid["then"] == "valid" and R.TRACEBACK_HEAD not in grid["reason"]
    assert grid["reason"] == ("vllm bench serve exited 1; request errors: aiohttp.client_exceptions.ClientConnectorError: "
                              "Cannot connect to host 127.0.0.1:8000 ssl:default [Connection refused] (the last line of "
                              "its Python traceback; all of it in logs/S1_chat_c4.attempt1.log) / Not Found")
    assert grid["reason"] in html.unescape(listed["html"])
    searched = next(a for a in attempts if a["kind"] == "search")
    assert searched["then"] == "invalid" and searched["reason"] == "timed out after 600 s"
    # the sweep's own reader: a traceback is named by its last line, and the log it is in
    log = tmp_path / "S1_chat_c8.attempt1.log"
    log.write_text(TRACEBACK_LOG.split("Error 1")[0].split("During handling")[0] + "Error 1: Not Found\n")
    assert runner.log_errors(log) == ["ConnectionRefusedError: [Errno 111] Connection refused (the last line of its "
                                      "Python traceback; all of it in logs/S1_chat_c8.attempt1.log)", "Not Found"]
    crash = tmp_path / "crash.log"
    crash.write_text("INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                     "    main()\nValueError: --tokenizer: no such folder\n")
    assert runner.log_tail(crash) == ("ValueError: --tokenizer: no such folder (the last line of its Python traceback; "
                                      "all of it in logs/crash.log)")
    # a recorded reason cut by an older sweep whose log is gone says so, without the traceback's head
    cut = R.whole_reason(f"vllm bench serve exited 1; request errors: {R.TRACEBACK_HEAD}", None, None)
    assert R.TRACEBACK_HEAD not in cut and "the run's log is not in this folder" in cut


# ---------------------------------------------------------------------------------------------
# The star sits on the run it names


def svg_points(svg: str, gid: str) -> list[tuple[float, float]]:
    """The (x, y) of every marker drawn by the artist with this SVG id."""
    ns = {"svg": "http://www.w3.org/2000/svg"}
    root = ET.fromstring(svg)
    group = root.find(f".//svg:g[@id='{gid}']", ns)
    assert group is not None, f"no {gid} in the chart"
    return [(float(u.get("x")), float(u.get("y"))) for u in group.iter("{http://www.w3.org/2000/svg}use")]


def curve_svgs(page: Path) -> dict[str, str]:
    """Each scenario's curves chart on a report page, as SVG text."""
    out = {}
    for m in re.finditer(r'<img class="chart" alt="(?P<name>[A-Za-z0-9_]+): output tok/s[^"]*" '
                         r'src="data:image/svg\+xml;base64,(?P<data>[^"]+)"', page.read_text()):
        out[m["name"]] = base64.b64decode(m["data"]).decode()
    return out


def test_the_star_sits_on_the_run_it_names_on_the_page(figures, made):
    for fixture in (figures, made):
        summary = json.loads((fixture["report"] / "summary.json").read_text())
        svgs = curve_svgs(fixture["report"] / "report.html")
        assert set(svgs) == set(summary["scenarios"])
        for name, svg in svgs.items():
            interval = summary["scenarios"][name]["slo_capacity_interval"]
            (star,) = svg_points(svg, "capacity-star")
            runs = svg_points(svg, "candidate-output_tok_s")
            runs += svg_points(svg, "candidate-search-output_tok_s") if "candidate-search-output_tok_s" in svg else []
            under = [p for p in runs if abs(p[0] - star[0]) < 0.01]
            # one run at the capacity's load (a grid run, or in `made` the search's c=5): the star is on it
            assert interval["repeats"] == 1 and len(under) == 1, (name, under)
            assert abs(under[0][1] - star[1]) < 0.01, (name, star, under)


def test_the_star_of_repeated_runs_sits_at_their_mean(tmp_path):
    """Two capacity-search runs at the capacity's load (c=5): the figure is their mean, and so is the star."""
    d = make_sweep(tmp_path, "c", 1.0, seqs=16)
    second = result("S1_chat", 5, 40.0 * 5 ** 0.8 * 1.2, n=200, detail=[380.0] * 200)
    (d / "search" / CR.search_filename("S1_chat", 5, 2)).write_text(json.dumps(second))
    out = tmp_path / "r"
    assert REP.main([str(d), "--out", str(out), "--no-charts"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["scenarios"]["S1_chat"]
    assert (entry["slo_capacity_interval"]["load_pass"], entry["slo_capacity_interval"]["repeats"]) == (5, 2)
    fig = charts.curves_figure(summary["runs"], None, summary["slo"], "S1_chat", label="c", entry=entry,
                               extra=summary["extra_runs"])
    buf = io.BytesIO()
    fig.savefig(buf, format="svg")
    charts.close(fig)
    svg = buf.getvalue().decode()
    (star,) = svg_points(svg, "capacity-star")
    a, b = [p for p in svg_points(svg, "candidate-search-output_tok_s") if abs(p[0] - star[0]) < 0.01]
    assert abs(star[1] - (a[1] + b[1]) / 2) < 0.01  # equal request counts: the mean is midway, on a linear axis
    assert "mean of 2 runs" in " ".join(charts.curves_figure(
        summary["runs"], None, summary["slo"], "S1_chat", label="c", entry=entry).axes[0].get_legend_handles_labels()[1])


# ---------------------------------------------------------------------------------------------
# Advice never asks for a load already run


def asked_concurrencies(text: str) -> list[int]:
    return [int(x) for m in re.finditer(r"--concurrencies ([0-9.,]+)", text) for x in m[1].split(",")
            if x.strip(".").isdigit()]


def test_advice_asks_only_for_loads_above_those_run():
    open_top = CAP.Capacity(CAP.SEARCH, CAP.MEETS, 900.0, CAP.INF, CAP.CONCURRENCY, 128, None, 128, point=1000.0)
    closed = CAP.Capacity(CAP.SEARCH, CAP.MEETS, 300.0, 500.0, CAP.CONCURRENCY, 10, 11, 64, point=330.0)
    words = V.narrowing_advice(CAP.SEARCH, open_top, closed, ("g7e", "l40s"))
    # the search goes above the grid by itself: the same folder, a higher ceiling, --resume
    assert "above c=128, the highest it ran" in words and "--search-max-concurrency" in words and "--resume" in words
    assert asked_concurrencies(words) == []  # no grid to run again: nothing below c=128 is asked for
    # both intervals' ends already neighbouring concurrencies: only the open loop narrows them
    adjacent = V.narrowing_advice(CAP.SEARCH, CAP.Capacity(CAP.SEARCH, CAP.MEETS, 300.0, 500.0, CAP.CONCURRENCY, 10, 11, 64),
                                  closed, ("g7e", "l40s"))
    assert "already neighbouring" in adjacent and "--open-loop always" in adjacent
    assert "--search-bracket" not in adjacent and "--extra-budget" not in adjacent
    wide = V.narrowing_advice(CAP.SEARCH, CAP.Capacity(CAP.SEARCH, CAP.MEETS, 1.0, 2.0, CAP.CONCURRENCY, 8, 12, 64),
                              closed, ("a", "b"))
    assert "narrow a (2.00x)" in wide and "--budget-minutes" in wide
    # the plan's reason for an open baseline names the same
    need = sizing.Need(low=1.0, high=sizing.INF, open_baseline={"S1_chat": V.higher_load_advice(open_top)},
                       sources={CAP.SEARCH})
    assert "above c=128" in sizing.range_reason(need, "g7e")
    assert V.higher_load_advice(closed) == ""


def test_a_report_whose_sides_still_meet_the_slo_at_the_top_asks_for_more_than_it_ran(tmp_path):
    from tests.test_bench_report import write_curve
    write_curve(tmp_path / "a", {"S1_chat": 800.0}, concs=(1, 2, 4))  # TTFT 100 ms x c: all meet 500 ms
    write_curve(tmp_path / "b", {"S1_chat": 600.0}, concs=(1, 2, 4))
    out = tmp_path / "r"
    assert REP.main([str(tmp_path / "a"), "--baseline", str(tmp_path / "b"), "--out", str(out), "--no-charts",
                     "--no-html"]) == 0
    reasons = " ".join(json.loads((out / "summary.json").read_text())["verdict"]["reasons"])
    assert "still meets the SLO at its highest load (c=4)" in reasons
    assert "above c=4, the highest it ran" in reasons


# ---------------------------------------------------------------------------------------------
# slo_ratio: the two figures the page shows, divided


def test_slo_ratio_is_the_ratio_of_the_two_figures_shown(figures):
    summary = json.loads((figures["report"] / "summary.json").read_text())
    fields = {tuple(json.loads(p)): t for p, t in page_fields(figures["report"] / "report.html")}
    for name, comp in summary["comparison"].items():
        fig = comp["slo_figure_per_gpu"]
        a, b = (float(fields[("comparison", name, "slo_figure_per_gpu", who)].replace(",", ""))
                for who in ("candidate", "baseline"))
        assert comp["slo_ratio"] == pytest.approx(a / b, rel=2e-3)  # the digits on the page
        assert comp["slo_ratio"] == pytest.approx(fig["candidate"] / fig["baseline"], abs=1e-3)
        # each figure per GPU is the capacity's figure (the mean of its load's runs) over its side's GPUs
        assert fig["candidate"] == pytest.approx(comp["candidate_slo_capacity"]["point_tok_s"] / 2, abs=1e-3)
        assert fig["baseline"] == pytest.approx(comp["baseline_slo_capacity"]["point_tok_s"] / 1, abs=1e-3)
    files = " ".join((Path(__file__).parents[1] / "docs" / "files.md").read_text().split())
    assert "`slo_ratio` = candidate low / baseline low" not in files
    assert "`slo_ratio` = `slo_figure_per_gpu` candidate / baseline" in files
    docs = " ".join((Path(__file__).parents[1] / "docs" / "benchmark.md").read_text().split())
    assert "`slo_ratio` divides the two capacity figures per GPU (`slo_figure_per_gpu`" in docs


# ---------------------------------------------------------------------------------------------
# The printed lines carry the pages' numbers


def test_printed_lines_word_the_interval_and_fleet_of_the_pages(figures, tmp_path, capsys):
    out = tmp_path / "again"
    assert REP.main([str(figures["cand"]), "--baseline", str(figures["base"]), "--out", str(out),
                     "--current-replicas", "12"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    v, fleet = summary["verdict"], summary["verdict"]["fleet"]
    interval = V.interval_text(v["min_ratio_interval"])
    count = answer.fleet_count(fleet)
    division = answer.fleet_division(fleet)
    assert count == "3 to 6"
    md = (out / "report.md").read_text()
    html_text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", (out / "report.html").read_text())).split())
    plan = json.loads((out / "plan" / "plan.json").read_text())
    demo_line = demo.verdict_line(summary)
    open_line = answer.verdict_line(summary)
    for where, text in (("printed", printed), ("demo", demo_line), ("report.md", md), ("report.html", html_text),
                        ("bench open", open_line)):
        assert f"12 replicas: {count} on candidate carry the same load ({division})" in text, where
    for where, text in (("printed", printed), ("demo", demo_line)):
        assert f"smallest ratio per GPU {interval} ({v['min_ratio_scenario']}), threshold 1.5x" in text, where
    # the verdict's interval is on both pages, the plan beside the report has the same count
    lo, hi = v["min_ratio_interval"]
    assert f"{lo:.2f}x to {hi:.2f}x" in md and f"{lo:.2f}x to {hi:.2f}x" in html_text
    assert plan["configurations"][0]["replicas_range"] == fleet["replicas_range"]
    line = answer.plan_line(plan)
    assert line.startswith("Plan on the slo basis: candidate 3-6 replicas (") and line.endswith(" (today 12).")
