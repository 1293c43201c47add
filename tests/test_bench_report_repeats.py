"""`bench report --repeat` / `--baseline-repeat`: a side measured more than once, each sweep from a fresh
server, pooled into its peak and its capacity under the SLO as `bench compare` pools a variant's repeats.

The pooled figures are compare's (`CR.sides_capacity` over the same folders) and the peak the mean of the
sweeps' runs at its concurrency, each run named with its folder; repeats that agree narrow the run-to-run
band so an interval across the threshold can decide, one far off widens it; the replica plan the report
writes divides the same pooled capacities; every bad repeat exits 2 in one line; report.md and report.html
list every run of the repeats, counted as summary.json counts them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from bench.analysis import capacity_report as CR
from bench.analysis import report as REP
from bench.analysis import side as SIDE
from tests.fixtures.bench_pages import make_sweep
from tests.fixtures.compare_sweeps import flags, sweep
from tests.test_bench_pages_figures import checked_paths
from tests.test_bench_report import write_result

SLO = ["--slo-ttft-p99-ms", "500", "--slo-itl-p99-ms", "50"]


def report(cand: Path, *argv: str, out: Path, html: bool = False) -> dict:
    rc = REP.main([str(cand), *map(str, argv), *SLO, "--out", str(out), "--no-charts",
                   *([] if html else ["--no-html"])])
    assert rc == 0
    return json.loads((out / "summary.json").read_text())


# ---------------------------------------------------------------------------------------------
# The pooled figures


def test_the_peak_and_capacity_pool_every_sweep_of_the_side(tmp_path, capsys):
    """Two sweeps of one setting (the second server 2 % faster): the capacity is compare's pooling of both
    folders, the peak the mean of both sweeps' runs at its concurrency, and every run is named with its folder."""
    cand = make_sweep(tmp_path, "seqs-16", 3.0, seqs=16)
    again = make_sweep(tmp_path, "seqs-16-again", 3.06, seqs=16)
    alone = report(cand, out=tmp_path / "alone")
    pooled = report(cand, "--repeat", again, out=tmp_path / "pooled")

    sides = [SIDE.load_side(cand), SIDE.load_side(again)]
    caps = CR.sides_capacity(sides, ttft_ms=500.0, decode_ms=50.0)
    for name, entry in pooled["scenarios"].items():
        assert entry["slo_capacity_interval"] == caps[name]["closed"].as_dict()
    s1 = pooled["scenarios"]["S1_chat"]["slo_capacity_interval"]
    assert s1["source_runs"] == ["seqs-16/search/S1_chat_c5.run1.json", "seqs-16-again/search/S1_chat_c5.run1.json"]
    assert s1["noise_source"] == "measured" and s1["repeats"] == 2
    assert alone["scenarios"]["S1_chat"]["slo_capacity_interval"]["noise_source"] == "assumed"

    # The fixture's S1_chat grid grows with concurrency (40 x scale x c^0.8 tok/s), so both sweeps peak at c=64,
    # 512 requests each: the pooled peak is their plain mean, named by folder.
    top = 40.0 * 64 ** 0.8
    assert alone["scenarios"]["S1_chat"]["peak"]["output_tok_s"] == pytest.approx(3.0 * top, abs=1e-3)
    assert pooled["scenarios"]["S1_chat"]["peak"] == {
        "concurrency": 64, "output_tok_s": pytest.approx((3.0 + 3.06) / 2 * top, abs=1e-3),
        "req_s": pytest.approx((3.0 + 3.06) / 2 * top / 128, abs=1e-4), "loop": "closed",
        "source_run": "seqs-16/S1_chat_c64.json", "source_runs": ["seqs-16/S1_chat_c64.json",
                                                                  "seqs-16-again/S1_chat_c64.json"]}
    assert pooled["sweeps"] == {"candidate": [str(cand), str(again)], "baseline": None}
    assert alone["sweeps"] == {"candidate": [str(cand)], "baseline": None}
    # the repeat's search runs are listed by folder, and its files are read, none left over
    assert [r["file"] for r in pooled["extra_runs"]] == [
        "seqs-16/search/S1_chat_c5.run1.json", "seqs-16/search/S1_chat_c6.run1.json",
        "seqs-16-again/search/S1_chat_c5.run1.json", "seqs-16-again/search/S1_chat_c6.run1.json"]
    assert pooled["ignored_files"] == []
    (again / "notes.txt").write_text("by hand")
    assert [f["file"] for f in report(cand, "--repeat", again, out=tmp_path / "p2")["ignored_files"]] == [
        "seqs-16-again/notes.txt"]
    assert "bench report: seqs-16 from 2 sweeps: 16 grid runs (16 usable), 4 capacity-search runs; from 1 repeat: " \
           "8 grid runs (8 usable), 2 capacity-search runs ->" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The verdict on the pooled band: S1_chat at c=8 and 16 meets the SLO, c=32 misses it on TTFT p99.


def _side(folder: Path, c8: float, c16: float, c32: float) -> Path:
    d = sweep(folder, {("S1_chat", 8): c8, ("S1_chat", 16): c16, ("S1_chat", 32): c32}, server_flags=flags())
    write_result(d, "S1_chat", 32, c32, ttft99=900.0, itl99=30.0)  # misses the 500 ms TTFT p99 limit
    return d


def _band(*ratios: float) -> float:
    """The output tok/s band (%, one run) pooled from pairs of comparable runs (their ratios) with the assumed
    11 % as one degree of freedom, rounded as summary.json states it (bench.analysis.capacity.stats)."""
    ss = sum(math.log(r) ** 2 / 2 for r in ratios)
    return round(100 * 1.96 * math.sqrt((ss + (0.11 / 1.96) ** 2) / (len(ratios) + 1)), 2)


def _low_end(cand_pass: float, base_top: float, band_a: float, band_b: float) -> float:
    """The SLO ratio's low end: the candidate's figure over the baseline's highest throughput below its failing
    load, over the two sides' bands of those means in quadrature (bench.analysis.verdict.ratio_interval)."""
    return cand_pass / base_top / (1 + math.hypot(band_a, band_b))


def test_repeats_that_agree_narrow_the_band_until_the_verdict_decides(tmp_path):
    """One sweep a side: 1,800 / 1,100 tok/s over the assumed 11 % on both sides spans 1.5x. A second server
    per side 0.3 % off at every load measures the band (5.5 %, the 11 % prior's weight left), halved again by
    the two runs behind each mean: the low end clears 1.5x and the verdict passes."""
    cand, base = _side(tmp_path / "cand", 1000.0, 1800.0, 2400.0), _side(tmp_path / "base", 500.0, 1000.0, 1100.0)
    one = report(cand, "--baseline", base, out=tmp_path / "one")
    lo = _low_end(1800.0, 1100.0, 0.11, 0.11)
    assert lo < 1.5 and one["comparison"]["S1_chat"]["slo_ratio_interval"][0] == pytest.approx(lo, abs=1e-4)
    assert one["verdict"]["state"] == "inconclusive"

    k = 1.003
    cand2 = _side(tmp_path / "cand-again", 1000.0 * k, 1800.0 * k, 2400.0 * k)
    base2 = _side(tmp_path / "base-again", 500.0 * k, 1000.0 * k, 1100.0 * k)
    two = report(cand, "--baseline", base, "--repeat", cand2, "--baseline-repeat", base2, out=tmp_path / "two")
    band = _band(k, k, k) / 100  # three loads, each run on two servers
    assert two["scenarios"]["S1_chat"]["slo_capacity_interval"]["noise_pct_by_figure"]["output_tok_s"] == band * 100
    each = band / math.sqrt(2)  # the band of a mean of two runs
    lo = _low_end(1800.0 * (1 + k) / 2, 1100.0 * (1 + k) / 2, each, each)
    assert lo > 1.5 and two["comparison"]["S1_chat"]["slo_ratio_interval"][0] == pytest.approx(lo, abs=1e-4)
    assert two["verdict"]["state"] == "pass" and two["verdict"]["reasons"] == []
    assert two["run_counts"]["candidate"]["repeats"] == {"sweeps": 1, "grid": 3, "grid_usable": 3, "grid_invalid": 0,
                                                         "grid_suspect": 0, "search": 0, "open_loop": 0,
                                                         "invalid_attempts": 0}


def test_a_repeat_far_off_widens_the_band_and_a_pass_becomes_inconclusive(tmp_path):
    """2,000 / 1,100 clears 1.5x over the assumed bands; a second candidate server 15 % slower at every load
    measures a band near 20 % and lowers the mean: the low end falls under 1.5x."""
    cand, base = _side(tmp_path / "cand", 1000.0, 2000.0, 2600.0), _side(tmp_path / "base", 500.0, 1000.0, 1100.0)
    one = report(cand, "--baseline", base, out=tmp_path / "one")
    assert _low_end(2000.0, 1100.0, 0.11, 0.11) > 1.5 and one["verdict"]["state"] == "pass"

    slow = _side(tmp_path / "cand-again", 850.0, 1700.0, 2210.0)
    two = report(cand, "--baseline", base, "--repeat", slow, out=tmp_path / "two")
    band = _band(0.85, 0.85, 0.85) / 100
    assert band > 0.11 and two["scenarios"]["S1_chat"]["slo_capacity_interval"]["noise_pct"] == band * 100
    lo = _low_end(1850.0, 1100.0, band / math.sqrt(2), 0.11)
    assert lo < 1.5 and two["comparison"]["S1_chat"]["slo_ratio_interval"][0] == pytest.approx(lo, abs=1e-4)
    assert two["verdict"]["state"] == "inconclusive"


def test_a_repeats_invalid_run_blocks_a_pass_and_is_listed_with_its_sweep(tmp_path):
    k = 1.003
    cand, base = _side(tmp_path / "cand", 1000.0, 1800.0, 2400.0), _side(tmp_path / "base", 500.0, 1000.0, 1100.0)
    cand2 = _side(tmp_path / "cand-again", 1000.0 * k, 1800.0 * k, 2400.0 * k)
    base2 = _side(tmp_path / "base-again", 500.0 * k, 1000.0 * k, 1100.0 * k)
    write_result(cand2, "S1_chat", 8, 1000.0 * k, failed=2)
    got = report(cand, "--baseline", base, "--repeat", cand2, "--baseline-repeat", base2, out=tmp_path / "r")
    assert got["verdict"]["state"] == "inconclusive"
    assert any(r.startswith(f"the candidate's repeat {cand2} has 1 invalid or missing run (S1_chat c=8)")
               for r in got["verdict"]["reasons"]), got["verdict"]["reasons"]
    md = (tmp_path / "r" / "report.md").read_text()
    invalid = md[md.index("## Invalid runs"):]
    assert f"| cand, repeat {cand2} | S1_chat | 8 | 62 | 2 |" in invalid


# ---------------------------------------------------------------------------------------------
# The plan the report writes


def test_the_plan_divides_the_reports_pooled_capacities(tmp_path):
    base = make_sweep(tmp_path, "seqs-4", 1.0, seqs=4)
    base2 = make_sweep(tmp_path, "seqs-4-again", 1.02, seqs=4)
    cand = make_sweep(tmp_path, "seqs-16", 3.0, seqs=16)
    cand2 = make_sweep(tmp_path, "seqs-16-again", 3.06, seqs=16)
    out = tmp_path / "r"
    summary = report(cand, "--baseline", base, "--repeat", cand2, "--baseline-repeat", base2,
                     "--current-replicas", "12", out=out)
    plan = json.loads((out / "plan" / "plan.json").read_text())
    # the plan's replicas are the report's fleet (no headroom, no spares), both from the pooled intervals
    assert plan["configurations"][0]["replicas_range"] == summary["verdict"]["fleet"]["replicas_range"]
    (pool,) = plan["fleet"]["pools"].values()  # sized on the scenario that saturates first
    binding = summary["scenarios"][pool["capacity"]["scenario"]]["slo_capacity_interval"]
    assert pool["capacity"]["output_tok_s"] == binding["output_tok_s"] and binding["noise_source"] == "measured"
    s1 = summary["scenarios"]["S1_chat"]["slo_capacity_interval"]
    md = (out / "plan" / "plan.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| seqs-16 | S1_chat |"))
    assert f"{s1['point_tok_s']:,.1f}" in row and "seqs-16-again/search/S1_chat_c5.run1.json" not in row
    assert "seqs-16/search/S1_chat_c5.run1.json and 1 more" in row
    # the same plan without the repeats is another one: the pooled figure is what it divides
    alone = report(cand, "--baseline", base, "--current-replicas", "12", out=tmp_path / "alone")
    assert alone["scenarios"]["S1_chat"]["slo_capacity_interval"] != s1


# ---------------------------------------------------------------------------------------------
# Bad input


def test_bad_repeats_exit_2_in_one_line(tmp_path, capsys):
    cand = _side(tmp_path / "cand", 1000.0, 1800.0, 2400.0)
    base = _side(tmp_path / "base", 500.0, 1000.0, 1100.0)
    again = _side(tmp_path / "cand-again", 1001.0, 1801.0, 2401.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    seqs = sweep(tmp_path / "seqs", {("S1_chat", 8): 1.0, ("S1_chat", 16): 2.0, ("S1_chat", 32): 3.0},
                 server_flags=flags(max_num_seqs="128"))
    seed = sweep(tmp_path / "seed", {("S1_chat", 8): 1.0, ("S1_chat", 16): 2.0, ("S1_chat", 32): 3.0},
                 server_flags=flags(), seed=7)
    cases = [
        (["--repeat", tmp_path / "nowhere"], f"--repeat: no such folder: {tmp_path / 'nowhere'} (give another sweep "),
        (["--repeat", empty], f"--repeat: no results or manifest in {empty}"),
        (["--repeat", cand], f"--repeat {cand}: the same folder as DIR {cand}; a repeat is another sweep from a "
                             "fresh server, so give each folder once"),
        (["--repeat", again, "--repeat", again], f"--repeat {again}: the same folder as --repeat {again};"),
        (["--baseline", base, "--repeat", base], f"--repeat {base}: the same folder as --baseline {base};"),
        (["--baseline", base, "--baseline-repeat", again, "--repeat", again],
         f"--baseline-repeat {again}: the same folder as --repeat {again};"),
        (["--repeat", seqs], f"--repeat {seqs}: it differs from {cand} in the server setting maxNumSeqs ({cand}: 64, "
                             f"{seqs}: 128); a repeat must share every setting with the sweep it repeats"),
        (["--baseline", base, "--baseline-repeat", seed],
         f"--baseline-repeat {seed}: it differs from {base} in the benchmark setting seed ({base}: 0, {seed}: 7);"),
        (["--baseline-repeat", again], "--baseline-repeat needs --baseline (the sweep it repeats)"),
    ]
    capsys.readouterr()
    for argv, words in cases:
        assert REP.main([str(cand), *map(str, argv), "--out", str(tmp_path / "out"), "--no-charts"]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("bench report: ") and words in err, (argv, err)
        assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# What a reader sees


def test_report_md_and_html_list_every_repeat_run_as_summary_json_counts_them(tmp_path):
    base = make_sweep(tmp_path, "seqs-4", 1.0, seqs=4)
    cand = make_sweep(tmp_path, "seqs-16", 3.0, seqs=16)
    again = make_sweep(tmp_path, "seqs-16-again", 3.06, seqs=16, invalid=("S2_summary", 64),
                       suspect=("S1_chat", 16))
    out = tmp_path / "r"
    summary = report(cand, "--baseline", base, "--repeat", again, out=out, html=True)
    rows = summary["repeat_runs"]
    counts = summary["run_counts"]["candidate"]
    assert counts["repeats"] == {"sweeps": 1, "grid": 8, "grid_usable": 6, "grid_invalid": 1, "grid_suspect": 1,
                                 "search": 2, "open_loop": 0, "invalid_attempts": 0}
    assert counts["grid"] == len(summary["runs"]) + len(rows) == 16 and summary["run_counts"]["baseline"].get(
        "repeats") is None
    assert {(r["side"], r["sweep"]) for r in rows} == {("candidate", str(again))}

    md = (out / "report.md").read_text()
    assert f"- Repeats: `{again}` (the same server setting" in md
    assert md.count(f"| seqs-16 | `{again}` |") == len(rows) == 8
    for r in rows:
        line = f"| seqs-16 | `{again}` | {r['scenario']} | {r['concurrency']} | {r['completed']:,} |"
        assert line in md
    assert f"| seqs-16 | `{again}` | S2_summary | 64 | 509 | - | - | - | invalid: 3 failed requests" in md
    assert f"| seqs-16 | `{again}` | S1_chat | 16 | 128 | {rows[2]['output_tok_s']:,.1f} |" in md
    assert "| suspect, excluded: prefix-cache hits 41.0%" in md
    assert f"| seqs-16, repeat {again} | S1_chat | 16 | prefix-cache hits" in md[md.index("## Suspect runs"):]
    assert ("Runs: seqs-16: 16 grid runs (14 usable, 1 invalid, 1 suspect), 4 capacity-search runs; from 1 repeat: "
            "8 grid runs (6 usable, 1 invalid, 1 suspect), 2 capacity-search runs; baseline seqs-4:") in md

    page = (out / "report.html").read_text()
    paths = set(checked_paths(out / "report.html", summary))
    for i, r in enumerate(rows):
        assert ("repeat_runs", i, "concurrency") in paths and ("repeat_runs", i, "completed") in paths
        if r["valid"]:
            assert ("repeat_runs", i, "output_tok_s") in paths
    for key, value in counts["repeats"].items():
        if value:
            assert ("run_counts", "candidate", "repeats", key) in paths
    # the scenario tables list the first sweep's grid runs and every sweep's search runs, the section the rest
    curves = page[page.index("<h2>Concurrency curves"):page.index("<h2>Repeats' runs")]
    kinds = re.findall(r"<tr[^>]*><td>(grid|capacity search|open loop)<", curves)
    assert kinds.count("grid") == counts["grid"] - counts["repeats"]["grid"] == len(summary["runs"])
    assert kinds.count("capacity search") == counts["search"] == 4
    section = page[page.index("<h2>Repeats' runs"):page.index("<h2>Capacity under the SLO")]
    assert len(re.findall(r"<tr[^>]*><td>seqs-16</td>", section)) == len(rows)
    problems = page[page.index("<h2>Invalid and suspect runs"):]
    assert problems.count(f"seqs-16, repeat {again}") == 2
    assert f"<dt>Repeats, pooled</dt><dd>{again}</dd>" in page


def test_the_charts_draw_the_repeats_grid_runs(tmp_path):
    """Each scenario's chart on the page draws the repeat's usable grid runs (hollow diamonds) beside the first
    sweep's curve; a report without repeats draws none and says nothing of them."""
    from tests.test_bench_one_figure import curve_svgs, svg_points

    def charted(*argv: str | Path, out: Path) -> dict:
        assert REP.main([*map(str, argv), *SLO, "--out", str(out)]) == 0
        return json.loads((out / "summary.json").read_text())

    cand = make_sweep(tmp_path, "seqs-16", 3.0, seqs=16)
    again = make_sweep(tmp_path, "seqs-16-again", 3.3, seqs=16, invalid=("S2_summary", 64))
    out = tmp_path / "r"
    summary = charted(cand, "--repeat", again, out=out)
    svgs = curve_svgs(out / "report.html")
    assert set(svgs) == set(summary["scenarios"])
    for name, svg in svgs.items():
        usable = [r for r in summary["repeat_runs"] if r["scenario"] == name and r["valid"] and not r["suspect"]]
        assert usable and len(svg_points(svg, "candidate-repeats-output_tok_s")) == len(usable), name
    first = max(svg_points(svgs["S1_chat"], "candidate-output_tok_s"))
    second = max(svg_points(svgs["S1_chat"], "candidate-repeats-output_tok_s"))
    # c=64 from both servers: one load, two heights (the second server 10 % faster)
    assert abs(first[0] - second[0]) < 0.01 and abs(first[1] - second[1]) > 1
    assert "hollow diamonds its repeats' grid runs" in (out / "report.html").read_text()
    assert (out / "chart_S1_chat.png").exists()
    alone = tmp_path / "alone"
    charted(cand, out=alone)
    assert "hollow diamonds" not in (alone / "report.html").read_text()
    assert all("candidate-repeats-" not in svg for svg in curve_svgs(alone / "report.html").values())
