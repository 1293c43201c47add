"""`python -m bench plan`: replica math on hand-made sweep folders (the PoC's L40S and g7e peaks),
ranges on intervals, stated reasons, refused names and mixes, and a chart without made-up bars."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.analysis import capacity_report as CR
from bench.analysis import plan as P
from bench.analysis import results as R
from bench.analysis import side as SIDE

LENGTHS = {"S1_chat": (256, 128), "S2_summary": (1024, 256), "S3_moderation": (512, 16), "S4_rag": (4096, 256)}
# The PoC's measured peaks: L40S (output tok/s, concurrency at the peak) and g7e.
L40S = {"S1_chat": (536.0, 64), "S2_summary": (226.0, 32), "S3_moderation": (81.7, 8), "S4_rag": (98.6, 32)}
G7E = {"S1_chat": 1871.0, "S2_summary": 910.0, "S3_moderation": 395.0, "S4_rag": 402.0}


def result(scenario, c, tok_s, *, ttft=100.0, itl=20.0, n=None, detail=None, extra=None):
    out_len = LENGTHS.get(scenario, (32, 8))[1]
    n = n or max(32, 8 * c)
    data = {"num_prompts": n, "completed": n, "failed": 0, "duration": n * out_len / tok_s,
            "output_throughput": tok_s, "request_throughput": tok_s / out_len,
            "total_output_tokens": n * out_len, "max_concurrency": c,
            "p50_ttft_ms": ttft / 2, "p99_ttft_ms": ttft, "p50_itl_ms": itl / 2, "p99_itl_ms": itl,
            R.META_SCENARIO: scenario, R.META_OUTPUT_LEN: str(out_len)}
    if detail:
        ttfts = detail
        data.update(ttfts=[t / 1000 for t in ttfts], itls=[[itl / 1000] * (out_len - 1) for _ in ttfts],
                    output_lens=[out_len] * len(ttfts), errors=[""] * len(ttfts),
                    p99_ttft_ms=float(np.percentile(ttfts, 99)))
    data.update(extra or {})
    return data


def sweep_dir(root: Path, label: str, peaks: dict[str, float], *, instance_type=None, price=None,
              capacity_type=None, curve=None) -> Path:
    """A sweep folder whose every scenario peaks at `peaks[s]` tok/s (c=1..64 grid)."""
    d = root / label
    d.mkdir()
    for s, top in peaks.items():
        for c in (1, 2, 4, 8, 16, 32, 64):
            tok = top * c / 64 if curve is None else curve(s, c)[0]
            ttft = 90.0 * c if curve is None else curve(s, c)[1]
            (d / R.result_filename(s, c)).write_text(json.dumps(result(s, c, tok, ttft=ttft)))
    manifest = {"label": label, "gpus": 1, "instance_type": instance_type, "price_per_hour": price,
                "capacity_type": capacity_type,
                "config": {"scenarios": {s: {"input_len": LENGTHS[s][0], "output_len": LENGTHS[s][1]}
                                         for s in peaks}}, "runs": []}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def plan(*argv):
    return P.main([*map(str, argv)])


def read(out):
    return json.loads((out / "plan.json").read_text())


def test_poc_peaks_plan_twelve_to_four(tmp_path):
    base = sweep_dir(tmp_path, "l40s", {s: v for s, (v, _) in L40S.items()}, instance_type="g6e.2xlarge")
    cand = sweep_dir(tmp_path, "g7e", G7E, instance_type="g7e.2xlarge")
    out = tmp_path / "plan"
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--basis", "peak", "--out", out,
                "--no-charts") == 0
    got = read(out)
    assert set(got) == {"basis", "headroom", "spares", "configurations", "current", "slo", "fleet"}
    row = got["configurations"][0]
    assert set(row) == {"label", "instance_type", "gpus", "replicas", "replicas_range", "reason",
                        "usd_hour_on_demand", "usd_hour_spot", "usd_month_on_demand", "usd_month_spot",
                        "usd_per_million_output_tokens"}
    assert row["replicas_range"] == [4, 4] and row["reason"] is None  # the peak basis: a point
    # 12 / 3.49 (S1, the smallest ratio) = 3.44 -> 4
    assert row["replicas"] == 4 and got["basis"] == "peak" and got["headroom"] == 0 and got["spares"] == 0
    # Catalog prices: g7e $4.13 on demand, $1.50 Spot; L40S $2.76 for the current fleet.
    assert row["usd_hour_on_demand"] == pytest.approx(16.52) and row["usd_hour_spot"] == pytest.approx(6.0)
    assert row["usd_month_on_demand"] == pytest.approx(16.52 * 730, rel=1e-6)
    assert got["current"] == {"replicas": 12, "usd_month": pytest.approx(12 * 2.76 * 730)}
    # Cost per million output tokens at the load of the binding scenario (12 x 536 tok/s).
    assert row["usd_per_million_output_tokens"] == pytest.approx(16.52 / (12 * 536 * 3600 / 1e6), rel=1e-3)
    assert "binding scenario S1_chat" in (out / "plan.md").read_text()


def test_ratio_one_and_a_half_gives_eight_headroom_and_spares(tmp_path):
    base = sweep_dir(tmp_path, "base", {"S1_chat": 536.0})
    cand = sweep_dir(tmp_path, "cand", {"S1_chat": 536.0 * 1.5})
    out = tmp_path / "p"
    common = [cand, "--baseline", base, "--current-replicas", 12, "--basis", "peak", "--no-charts",
              "--price-per-hour", "cand=4.13/1.5"]
    assert plan(*common, "--out", out) == 0
    assert read(out)["configurations"][0]["replicas"] == 8
    assert plan(*common, "--headroom", 0.2, "--out", out) == 0
    assert read(out)["configurations"][0]["replicas"] == 10  # 8 / 0.8
    assert plan(*common, "--headroom", 0.2, "--spares", 1, "--out", out) == 0
    got = read(out)
    assert got["configurations"][0]["replicas"] == 11 and got["headroom"] == 0.2 and got["spares"] == 1
    assert got["configurations"][0]["usd_hour_spot"] == pytest.approx(11 * 1.5)


def test_current_replicas_defaults_to_twelve_as_in_report(tmp_path):
    base = sweep_dir(tmp_path, "base", {"S1_chat": 536.0})
    cand = sweep_dir(tmp_path, "cand", {"S1_chat": 536.0 * 1.5})
    assert plan(cand, "--baseline", base, "--basis", "peak", "--no-charts", "--out", tmp_path / "p") == 0
    got = read(tmp_path / "p")
    assert got["current"]["replicas"] == 12 and got["configurations"][0]["replicas"] == 8
    # A stated load has no fleet of today: none is assumed.
    assert plan(cand, "--load", "S1_chat=1", "--no-charts", "--out", tmp_path / "q") == 0
    assert read(tmp_path / "q")["current"] is None


def test_reference_is_the_denominator(tmp_path):
    cand = sweep_dir(tmp_path, "g7e", G7E, instance_type="g7e.2xlarge")
    out = tmp_path / "p"
    # Production serves 300 tok/s per GPU on S1 and 100 on S4; 12 replicas of 1 GPU.
    assert plan(cand, "--reference", "S1_chat=300,S4_rag=100", "--current-replicas", 12, "--basis", "peak",
                "--out", out, "--no-charts") == 0
    # S1: 3600/1871 = 1.92; S4: 1200/402 = 2.99 -> 3 replicas
    assert read(out)["configurations"][0]["replicas"] == 3
    assert plan(cand, "--reference", "S1_chat=300", "--current-replicas", 12, "--current-gpus-per-replica", 4,
                "--basis", "peak", "--out", out, "--no-charts") == 0
    assert read(out)["configurations"][0]["replicas"] == 8  # 14400 / 1871 = 7.7
    assert "production per-GPU throughput" in (out / "plan.md").read_text()


def test_stated_load_and_mix(tmp_path):
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 1280.0, "S2_summary": 512.0})  # 10 req/s and 2 req/s at peak
    out = tmp_path / "p"
    assert plan(cand, "--load", "S1_chat=25,S2_summary=3", "--basis", "peak", "--out", out, "--no-charts") == 0
    assert read(out)["configurations"][0]["replicas"] == 4  # 2.5 + 1.5 = 4.0
    assert read(out)["current"] is None
    assert plan(cand, "--load", "20", "--mix", "S1_chat=0.5,S2_summary=0.5", "--basis", "peak", "--out", out,
                "--no-charts") == 0
    assert read(out)["configurations"][0]["replicas"] == 6  # 10/10 + 10/2 = 6


def test_baseline_that_never_meets_the_slo(tmp_path):
    # Baseline: TTFT p99 = 900 ms already at c=1 in S1 -> no SLO load is known for S1.
    slow = lambda s, c: (100.0 * c, 900.0 + c)
    fine = lambda s, c: (300.0 * c, 50.0 * c)  # meets the SLO up to c=8 (400 ms)
    base = sweep_dir(tmp_path, "base", {"S1_chat": 1, "S2_summary": 1},
                     curve=lambda s, c: slow(s, c) if s == "S1_chat" else fine(s, c))
    cand = sweep_dir(tmp_path, "cand", {"S1_chat": 1, "S2_summary": 1}, curve=fine)
    side = SIDE.load_side(base)
    caps = CR.scenario_capacity(base, side.runs, ttft_ms=500, decode_ms=50)
    assert caps["S1_chat"]["slo_capacity"] == {"state": "never_meets_slo"}
    assert caps["S2_summary"]["slo_capacity"] is None  # grid passes, but no search confirmed it
    out = tmp_path / "p"
    rc = plan(cand, "--baseline", base, "--current-replicas", 12, "--out", out, "--no-charts")
    text = (out / "plan.md").read_text()
    assert "S1_chat: the baseline never meets the SLO at the loads tested" in text
    # S2 from the grids alone: both sides meet the SLO at c=8 (2,400 tok/s) and miss it at c=16
    # (4,800): 12 x [2,400, 4,800) over [2,400, 4,800) is 6 to 24 replica-loads before the assumed
    # run-to-run band (11 %) widens each end of both capacities: 12 x 2,400 / 1.11 / (4,800 x 1.11)
    # = 4.87 ... 29.6; the two sides' bands combine in quadrature as in the verdict's ratio, which
    # takes 1.11 x 1.11 / (1 + 0.11 x sqrt 2) = 1.066 back: 5.19 to 27.7, so 6 to 28.
    row = read(out)["configurations"][0]
    assert rc == 0 and row["replicas"] is None and row["replicas_range"] == [6, 28]
    assert "run the capacity search to narrow it" in row["reason"]
    # Confirm S2 on both sides (search runs with detail) and bracket it: c=8 passes, c=9 misses.
    for d, tok in ((base, 300.0), (cand, 900.0)):
        for c in (1, 2, 4, 8, 16, 32, 64):  # the candidate's S2 grid at 3x the baseline's, like its search
            (d / R.result_filename("S2_summary", c)).write_text(json.dumps(result("S2_summary", c, tok * c,
                                                                                   ttft=50.0 * c)))
        (d / "search").mkdir(exist_ok=True)
        data = result("S2_summary", 8, tok * 8, ttft=400.0, n=200, detail=[400.0] * 200)
        (d / "search" / CR.search_filename("S2_summary", 8, 1)).write_text(json.dumps(data))
        data = result("S2_summary", 9, tok * 9, ttft=600.0, n=200, detail=[600.0] * 200)
        (d / "search" / CR.search_filename("S2_summary", 9, 1)).write_text(json.dumps(data))
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--out", out, "--no-charts") == 0
    # [8, 9) on both sides: each capacity lies between c=8's and c=9's throughputs, 12 x [2,400, 2,700]
    # over [7,200, 8,100] is 3.6 to 4.5 replica-loads, widened by the run-to-run bands: 4 to 6
    row = read(out)["configurations"][0]
    assert row["replicas_range"] == [4, 6] and row["replicas"] is None
    assert "narrow the capacity search" in row["reason"] or "neighbouring concurrencies" in row["reason"]
    assert "never meets the SLO" in (out / "plan.md").read_text()


def test_mix_of_a_fleet_load(tmp_path):
    # Baseline per replica: S1 10 req/s, S2 2 req/s at peak; candidate twice that in S1, same in S2.
    base = sweep_dir(tmp_path, "b", {"S1_chat": 1280.0, "S2_summary": 512.0})
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 2560.0, "S2_summary": 512.0})
    out = tmp_path / "p"
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--basis", "peak", "--no-charts",
                "--mix", "S1_chat=0.5,S2_summary=0.5", "--out", out) == 0
    # 12 replicas at a 50/50 mix carry L with L/2/10 + L/2/2 = 12 -> L = 40 req/s; the candidate
    # needs 20/20 + 20/2 = 11 replicas.
    assert read(out)["configurations"][0]["replicas"] == 11
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--basis", "peak", "--no-charts",
                "--out", out) == 0
    assert read(out)["configurations"][0]["replicas"] == 12  # no mix: the binding scenario (S2, ratio 1)


def test_candidate_slo_capacity_from_search_runs(tmp_path):
    fine = lambda s, c: (300.0 * c, 90.0 * c)
    base = sweep_dir(tmp_path, "base", {"S1_chat": 1}, curve=lambda s, c: (100.0 * c, 90.0 * c))
    cand = sweep_dir(tmp_path, "cand", {"S1_chat": 1}, curve=fine)
    for d, tok in ((base, 100.0), (cand, 300.0)):
        (d / "search").mkdir()
        for c, ttft in ((6, 640.0), (5, 400.0)):  # a miss and a pass for sure, run-to-run band included
            data = result("S1_chat", c, tok * c, n=200, detail=[ttft] * 200)
            (d / "search" / CR.search_filename("S1_chat", c, 1)).write_text(json.dumps(data))
    side = SIDE.load_side(cand)
    cap = CR.scenario_capacity(cand, side.runs, ttft_ms=500, decode_ms=50)["S1_chat"]["slo_capacity"]
    assert cap["concurrency_pass"] == 5 and cap["concurrency_fail"] == 6
    # the p99's interval: one run's bootstrap interval (400 ms flat) widened by the assumed 11 % band
    assert cap["output_tok_s"] == 1500.0 and cap["ttft_p99_ci_ms"] == [round(400 / 1.11, 3), 444.0]
    assert cap["source_run"] == "search/S1_chat_c5.run1.json" and cap["repeats"] == 1
    out = tmp_path / "p"
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--out", out, "--no-charts") == 0
    # Both sides bracketed at [5, 6): each capacity lies between c=5's and c=6's throughputs, 12 x
    # [500, 600] over [1,500, 1,800] is 3.3 to 4.8 replica-loads, widened at each end by the assumed
    # run-to-run band (11 %, each point ran once): 3 to 6.
    row = read(out)["configurations"][0]
    assert row["replicas_range"] == [3, 6] and row["replicas"] is None
    assert "| cand | S1_chat | 1,500.0, 95 % interval 1,351.4 to 1,998.0 | " in (out / "plan.md").read_text()
    assert "capacity search |" in (out / "plan.md").read_text()
    # neighbouring concurrencies on both sides: a smaller search bracket would add no run
    assert "--search-bracket" not in row["reason"] and "--open-loop always" in row["reason"]


@pytest.mark.parametrize("argv, needle", [
    (["--current-replicas", "12"], "exactly one load"),
    (["--baseline", "X"], "no such sweep folder: X"),
    (["--load", "S1_chat=-1"], "--load"),
    (["--load", "S1_chat=1", "--headroom", "1"], "--headroom"),
    (["--load", "S1_chat=1", "--price-per-hour", "x=cheap"], "--price-per-hour"),
])
def test_bad_input_exit_2(tmp_path, capsys, argv, needle):
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 100.0})
    assert plan(cand, "--out", tmp_path / "p", *argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_prices_from_the_manifest_hardware_record(tmp_path):
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 1280.0})
    m = json.loads((cand / "manifest.json").read_text())
    m.update(capacity_type="spot", price_per_hour=1.2, hardware={"prices": {"spot": 1.2, "on-demand": 3.5}})
    (cand / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "p"
    assert plan(cand, "--load", "S1_chat=25", "--basis", "peak", "--spares", 1, "--out", out, "--no-charts") == 0
    row = read(out)["configurations"][0]
    assert row["replicas"] == 4 and row["usd_hour_on_demand"] == pytest.approx(14.0)
    assert row["usd_hour_spot"] == pytest.approx(4.8)


def test_chart_written(tmp_path):
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 1280.0}, instance_type="g7e.2xlarge")
    out = tmp_path / "p"
    assert plan(cand, "--load", "S1_chat=25", "--basis", "peak", "--out", out) == 0
    assert (out / "plan.png").stat().st_size > 1000 and "plan.png" in (out / "plan.md").read_text()


def test_default_slo_plan_on_grids_is_a_range_not_a_hardware_limit(tmp_path, capsys):
    """The plan command docs/benchmark.md shows on two default sweeps (no capacity search): a range with its reason."""
    base = sweep_dir(tmp_path, "l40s", {s: v for s, (v, _) in L40S.items()}, instance_type="g6e.2xlarge")
    cand = sweep_dir(tmp_path, "g7e", G7E, instance_type="g7e.2xlarge")
    out = tmp_path / "p"
    assert plan(cand, "--baseline", base, "--current-replicas", 12, "--out", out) == 0
    row = read(out)["configurations"][0]
    lo, hi = row["replicas_range"]
    assert row["replicas"] is None and 1 <= lo < hi <= 12
    assert row["usd_hour_on_demand"] == pytest.approx(hi * 4.13)  # priced at the high end
    printed = capsys.readouterr().out
    assert f"g7e: {lo}-{hi} replicas (slo basis); " in printed and "--capacity-search --resume" in printed
    assert "cannot meet" not in printed and "cannot meet" not in (out / "plan.md").read_text()


def test_missing_scenario_is_a_reason_and_never_meeting_the_slo_is_a_limit(tmp_path, capsys):
    base = sweep_dir(tmp_path, "base", {"S1_chat": 536.0, "S4_rag": 98.6})
    gap = sweep_dir(tmp_path, "gap", {"S1_chat": 1871.0})  # S4_rag never ran
    slow = sweep_dir(tmp_path, "slow", {"S1_chat": 1, "S4_rag": 1},
                     curve=lambda s, c: (100.0 * c, 900.0 * c))  # misses the TTFT limit from c=1
    out = tmp_path / "p"
    rc = plan(gap, slow, "--baseline", base, "--current-replicas", 12, "--out", out, "--no-charts")
    rows = {r["label"]: r for r in read(out)["configurations"]}
    assert rows["gap"]["replicas"] is None and rows["gap"]["replicas_range"] is None
    assert rows["gap"]["reason"].startswith("S4_rag has no usable run in gap")
    assert rows["gap"]["usd_month_on_demand"] is None  # nothing priced at 0 replicas
    assert "never meets the SLO in S1_chat" in rows["slow"]["reason"]
    assert rc == 1  # a measured limit: slow cannot serve the load within the SLO
    printed = capsys.readouterr().out
    assert "bench plan: gap: unknown (slo basis); S4_rag has no usable run" in printed
    assert "bench plan: slow: cannot meet the load (slo basis); slow never meets the SLO" in printed
    text = (out / "plan.md").read_text()
    assert "| gap | unknown | 1 | unknown |" in text and "None" not in text


@pytest.mark.parametrize("argv, needle", [
    (["--reference", "S1_caht=420", "--current-replicas", "12"], "--reference: no scenario named S1_caht in the "
                                                                  "sweeps (did you mean S1_chat?)"),
    (["--load", "S4_ragg=2"], "--load: no scenario named S4_ragg in the sweeps (did you mean S4_rag?)"),
    (["--load", "10", "--mix", "S1_chat=0.5,S2_sumary=0.5"], "--mix: no scenario named S2_sumary"),
    (["--load", "10", "--mix", "S1_chat=0.8,S4_rag=0.6"], "--mix: the shares add up to 1.4, not 1"),
])
def test_scenario_names_and_mix_shares_are_checked(tmp_path, capsys, argv, needle):
    cand = sweep_dir(tmp_path, "c", {"S1_chat": 1280.0, "S2_summary": 512.0, "S4_rag": 402.0})
    out = tmp_path / "p"
    assert plan(cand, "--basis", "peak", "--out", out, "--no-charts", *argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (out / "plan.json").exists()


def test_chart_draws_no_bar_for_an_unknown_count(tmp_path):
    base = sweep_dir(tmp_path, "base", {"S1_chat": 536.0, "S4_rag": 98.6})
    known = sweep_dir(tmp_path, "known", {"S1_chat": 1871.0, "S4_rag": 402.0})
    gap = sweep_dir(tmp_path, "gap", {"S1_chat": 1871.0})
    out = tmp_path / "p"
    assert plan(known, gap, "--baseline", base, "--current-replicas", 12, "--basis", "peak", "--out", out,
                "--price-per-hour", "known=4.13/1.5", "--price-per-hour", "gap=4.13/1.5") == 0
    got = read(out)
    from bench.analysis import charts

    fig = charts.plan_figure(got)
    replicas, costs = fig.axes
    try:
        # x = 0 current, 1 known, 2 gap: bars only where a count (and a cost) is known
        assert sorted(round(b.get_x() + b.get_width() / 2) for b in replicas.patches) == [0, 1]
        assert [round(b.get_height()) for b in replicas.patches] == [12, 4]
        assert all(abs(b.get_x() + b.get_width() / 2 - 2) > 0.5 for b in costs.patches)
        assert "unknown" in [t.get_text() for t in replicas.texts]
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    assert (out / "plan.png").stat().st_size > 1000


def test_plan_pairs_capacities_as_the_report_does(tmp_path):
    """An open loop whose every offered rate met the SLO says only "at least": like the report, the
    plan then takes the capacity search's bracket, on every configuration alike."""
    from tests.test_bench_verdict import _searched_folder

    _searched_folder(tmp_path / "cand", 400.0, budget_stopped=False)
    _searched_folder(tmp_path / "base", 100.0, budget_stopped=True)
    out = tmp_path / "p"
    assert plan(tmp_path / "cand", "--baseline", tmp_path / "base", "--current-replicas", 12, "--out", out,
                "--no-charts") == 0
    text = (out / "plan.md").read_text()
    assert "| cand | S1_chat | 4,000.0, 95 % interval 3,603.6 to 4,884.0 | " in text and "| capacity search |" in text
    # S1: bracketed [10, 11) on both sides, so each capacity lies between c=10's and c=11's throughputs
    # (1,000-1,100 and 4,000-4,400): about 3; S2: 12 x [800, 1,600) over [3,200, 6,400) = 1.5 to 6; each
    # end widened by the assumed run-to-run band (11 %), the two sides' bands in quadrature (as the
    # verdict's ratio); the busiest scenario binds each end.
    assert read(out)["configurations"][0]["replicas_range"] == [3, 7]


def test_the_peak_basis_plans_on_the_reports_peak_search_runs_included(tmp_path):
    """On the peak basis the plan divides the peak `bench report` gives: every closed-loop run, the capacity
    search's too, the runs of one concurrency averaged (a search run at c=64 beside the grid's)."""
    from bench.analysis import report as REP

    base = sweep_dir(tmp_path, "l40s", {s: v for s, (v, _) in L40S.items()}, instance_type="g6e.2xlarge")
    cand = sweep_dir(tmp_path, "g7e", G7E, instance_type="g7e.2xlarge")
    (cand / "search").mkdir()
    (cand / "search" / CR.search_filename("S1_chat", 64, 1)).write_text(json.dumps(result("S1_chat", 64, 1971.0)))
    out = tmp_path / "r"
    assert REP.main([str(cand), "--baseline", str(base), "--basis", "peak", "--out", str(out), "--no-charts",
                     "--no-html"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    top = summary["scenarios"]["S1_chat"]["peak"]
    # two runs of 512 requests at c=64, the grid's 1,871 and the search's 1,971 tok/s: their mean
    assert top["output_tok_s"] == pytest.approx(1921.0) and top["source_runs"] == [
        "S1_chat_c64.json", "search/S1_chat_c64.run1.json"]
    rows = [line for line in (out / "plan" / "plan.md").read_text().splitlines() if "| g7e | S1_chat |" in line]
    assert rows and all("1,921.0" in line for line in rows), rows
    alone = tmp_path / "p"
    assert plan(cand, "--baseline", base, "--basis", "peak", "--out", alone, "--no-charts") == 0
    assert (alone / "plan.md").read_text().count("1,921.0") == (out / "plan" / "plan.md").read_text().count("1,921.0")


def test_a_repeat_pools_into_the_candidate_whose_settings_it_shares(tmp_path, capsys):
    """`--repeat` goes to the one candidate with its every setting (another server of that configuration) and
    pools into its capacities as `bench report --repeat` does; one that matches no candidate exits 2."""
    from tests.fixtures.bench_pages import make_sweep

    base = make_sweep(tmp_path, "seqs-4", 1.0, seqs=4)
    low = make_sweep(tmp_path, "seqs-16", 3.0, seqs=16)
    high = make_sweep(tmp_path, "seqs-64", 3.3, seqs=64)
    again = make_sweep(tmp_path, "seqs-64-again", 3.4, seqs=64)
    out = tmp_path / "p"
    slo = ["--slo-ttft-p99-ms", "500", "--slo-itl-p99-ms", "50"]
    assert plan(low, high, "--baseline", base, "--repeat", again, *slo, "--out", out, "--no-charts") == 0
    caps = CR.sides_capacity([SIDE.load_side(high), SIDE.load_side(again)], ttft_ms=500.0, decode_ms=50.0)
    alone = CR.sides_capacity([SIDE.load_side(low)], ttft_ms=500.0, decode_ms=50.0)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in (out / "plan.md").read_text().splitlines()
            if " | S1_chat | " in line}
    pooled, single = caps["S1_chat"]["closed"], alone["S1_chat"]["closed"]
    assert f"{pooled.point:,.1f}" in rows["seqs-64"] and "mean of 2 runs" in rows["seqs-64"]
    assert f"{single.point:,.1f}" in rows["seqs-16"] and "mean of 2 runs" not in rows["seqs-16"]
    other = make_sweep(tmp_path, "seqs-32", 3.2, seqs=32)
    assert plan(low, high, "--baseline", base, "--repeat", other, *slo, "--out", tmp_path / "q", "--no-charts") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--repeat {other}: its server and benchmark settings match none of" in err[0]
    assert plan(low, "--baseline-repeat", again, "--load", "S1_chat=1", *slo, "--out", tmp_path / "r") == 2
    assert "--baseline-repeat needs --baseline" in capsys.readouterr().err
