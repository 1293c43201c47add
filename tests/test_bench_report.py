"""Report math on hand-made result files: peaks, SLO selection, ratios, cost efficiency, verdict.

The g7e/L40S numbers are the PoC report's verdict run (peaks, $1.50 Spot vs $2.76 on-demand), so
the expected ratios are the report's own: 3.49x..4.83x throughput, 6.4x..8.9x cost efficiency.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.analysis import report as REP
from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis import summary as SUMMARY

LENGTHS = {"S1_chat": (256, 128), "S2_summary": (1024, 256), "S3_moderation": (512, 16), "S4_rag": (4096, 256)}
L40S_PEAK = {"S1_chat": 536.0, "S2_summary": 226.0, "S3_moderation": 81.7, "S4_rag": 98.6}
G7E_PEAK = {"S1_chat": 1871.0, "S2_summary": 910.0, "S3_moderation": 395.0, "S4_rag": 402.0}
TABLE8_RATIO = {"S1_chat": 3.49, "S2_summary": 4.03, "S3_moderation": 4.83, "S4_rag": 4.08}
TABLE8_COST = {"S1_chat": 6.4, "S2_summary": 7.4, "S3_moderation": 8.9, "S4_rag": 7.5}

SUMMARY_KEYS = {"slo", "runs", "scenarios", "comparison", "verdict", "ignored_files", "rehearsal", "extra_runs",
                "invalid_attempts", "run_counts", "sweeps"}
RUN_COUNT_KEYS = {"grid", "grid_usable", "grid_invalid", "grid_suspect", "search", "open_loop", "invalid_attempts"}
RUN_KEYS = {"scenario", "concurrency", "valid", "reason", "completed", "failed", "output_tok_s", "req_s",
            "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "spec_acceptance",
            "suspect", "tpot_p50_ms", "tpot_p99_ms", "prefix_cache_hit_pct", "preemptions",
            "kv_cache_usage_max_pct", "requests_waiting_max", "gpu_util_mean_pct", "gpu_mem_used_max_gib",
            "gpu_power_mean_w", "spec_acceptance_by_position"}
SLO_KEYS = {"ttft_p99_ms", "itl_p99_ms", "decode_metric", "source", "notes"}
SCENARIO_KEYS = {"peak", "slo", "peak_at_edge", "slo_capacity", "rate_capacity", "slo_capacity_interval",
                 "rate_capacity_interval"}
INTERVAL_KEYS = {"source", "state", "output_tok_s", "load_unit", "load_pass", "load_fail", "load_max", "confirmed",
                 "point_tok_s", "loop", "source_run", "source_runs", "fail_runs", "repeats", "noise_pct",
                 "noise_pct_by_figure", "noise_source", "noise_repeats", "width", "target_width", "reason"}


def write_result(folder: Path, scenario: str, conc: int, tok_s: float, *, ttft99=100.0, itl99=20.0,
                 failed=0, completed=None, n=None, spec=None, keep_out=False):
    n = n or max(32, 8 * conc)
    done = n - failed if completed is None else completed
    out_len = LENGTHS.get(scenario, (64, 16))[1]
    data = {
        "num_prompts": n, "completed": done, "failed": failed, "duration": 10.0,
        "max_concurrency": conc, "scenario": scenario, "concurrency": str(conc),
        R.META_INPUT_LEN: str(LENGTHS.get(scenario, (64, 16))[0]), R.META_OUTPUT_LEN: str(out_len),
        "total_output_tokens": done * out_len,
        "output_throughput": tok_s, "request_throughput": tok_s / out_len,
        "p50_ttft_ms": ttft99 / 2, "p99_ttft_ms": ttft99, "p50_itl_ms": itl99 / 2, "p99_itl_ms": itl99,
    }
    if spec is not None:
        data["spec_decode_acceptance_rate"] = spec
        data["spec_decode_acceptance_length"] = 1 + spec / 25
    folder.mkdir(parents=True, exist_ok=True)
    (folder / R.result_filename(scenario, conc)).write_text(json.dumps(data))
    return data


def write_curve(folder: Path, peaks: dict[str, float], concs=(1, 8, 32, 64)):
    """Each scenario's throughput grows with concurrency up to the given peak at the top."""
    for name, top in peaks.items():
        for i, c in enumerate(concs):
            write_result(folder, name, c, top * (i + 1) / len(concs), ttft99=100.0 * c, itl99=10 + c)


def summarize(side_dir, base_dir=None, *, threshold=1.5, gpus=None, base_gpus=None, price=None,
              base_price=None, ttft=500.0, itl=50.0, capacity="spot", base_capacity="on-demand", **kw):
    side = SIDE.load_side(side_dir, gpus=gpus, price_per_hour=price, capacity_type=capacity)
    base = (SIDE.load_side(base_dir, gpus=base_gpus, price_per_hour=base_price, capacity_type=base_capacity)
            if base_dir else None)
    return SUMMARY.build_summary(side, base, ttft_ms=ttft, itl_ms=itl, threshold=threshold, **kw)


def test_table8_ratios_cost_efficiency_and_verdict(tmp_path):
    write_curve(tmp_path / "l40s", L40S_PEAK)
    write_curve(tmp_path / "g7e", G7E_PEAK)
    summary, issues = summarize(tmp_path / "g7e", tmp_path / "l40s", price=1.50, base_price=2.76)
    assert issues == []
    for name, c in summary["comparison"].items():
        assert c["peak_tok_s"] == G7E_PEAK[name] and c["baseline_peak_tok_s"] == L40S_PEAK[name]
        assert round(c["throughput_ratio"], 2) == TABLE8_RATIO[name]
        assert round(c["cost_efficiency_ratio"], 1) == TABLE8_COST[name]
    assert summary["verdict"] == {"threshold": 1.5, "min_ratio": pytest.approx(3.4907, abs=1e-4), "pass": True,
                                  "basis": "peak", "state": "pass", "reasons": [],
                                  "min_ratio_interval": [pytest.approx(3.4907, abs=1e-4)] * 2,
                                  "min_ratio_scenario": "S1_chat"}
    # The same data against a threshold above the weakest scenario fails.
    summary, _ = summarize(tmp_path / "g7e", tmp_path / "l40s", threshold=3.5)
    assert summary["verdict"]["pass"] is False
    assert summary["comparison"]["S1_chat"]["cost_efficiency_ratio"] is None  # no prices given


def test_ratios_are_per_gpu(tmp_path):
    write_curve(tmp_path / "base", {"S1_chat": 100.0})
    write_curve(tmp_path / "node4", {"S1_chat": 500.0})
    summary, _ = summarize(tmp_path / "node4", tmp_path / "base", gpus=4, base_gpus=1)
    assert summary["comparison"]["S1_chat"]["throughput_ratio"] == pytest.approx(1.25)
    assert summary["verdict"]["pass"] is False  # 5x the node, 1.25x per GPU
    # GPUs from the manifest when not given on the command line
    (tmp_path / "node4" / "manifest.json").write_text(json.dumps({"gpus": 4, "label": "4xL40S"}))
    summary, _ = summarize(tmp_path / "node4", tmp_path / "base")
    assert summary["comparison"]["S1_chat"]["throughput_ratio"] == pytest.approx(1.25)


def test_peak_and_slo_selection(tmp_path):
    d = tmp_path / "run"
    # The PoC's L40S S1_chat curve: throughput climbs to c=64 while TTFT explodes past c=16.
    write_result(d, "S1_chat", 1, 21.6, ttft99=120, itl99=46)
    write_result(d, "S1_chat", 8, 155.8, ttft99=200, itl99=49)
    write_result(d, "S1_chat", 16, 284.2, ttft99=500, itl99=50)    # exactly at both limits: meets
    write_result(d, "S1_chat", 32, 405.7, ttft99=2100, itl99=56)
    write_result(d, "S1_chat", 64, 536.0, ttft99=3000, itl99=67)
    # Non-monotonic: c=4 misses on ITL only, c=8 meets; the SLO pick is not "first miss stops".
    write_result(d, "S2_summary", 2, 50.0, ttft99=300, itl99=40)
    write_result(d, "S2_summary", 4, 90.0, ttft99=300, itl99=50.1)
    write_result(d, "S2_summary", 8, 120.0, ttft99=450, itl99=45)
    # Nothing meets the SLO
    write_result(d, "S4_rag", 1, 20.0, ttft99=900, itl99=30)
    summary, _ = summarize(d)
    sc = summary["scenarios"]
    assert sc["S1_chat"]["peak"] == {"concurrency": 64, "output_tok_s": 536.0, "req_s": round(536.0 / 128, 4),
                                     "loop": "closed", "source_run": "S1_chat_c64.json",
                                     "source_runs": ["S1_chat_c64.json"]}
    # the capacity under the SLO: the highest load meeting it (the PoC's definition), with its run
    assert sc["S1_chat"]["slo"] == {"concurrency": 16, "output_tok_s": 284.2, "loop": "closed",
                                    "source_run": "S1_chat_c16.json"}
    assert sc["S2_summary"]["slo"]["concurrency"] == 8 and sc["S2_summary"]["slo"]["output_tok_s"] == 120.0
    assert sc["S4_rag"]["slo"] is None and sc["S4_rag"]["peak"]["concurrency"] == 1
    assert summary["comparison"] is None and summary["verdict"] is None
    # Tighter limits move the pick.
    summary, _ = summarize(d, ttft=150)
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 1
    assert summary["scenarios"]["S1_chat"]["slo"]["output_tok_s"] == 21.6


def test_invalid_runs_are_listed_and_excluded_everywhere(tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_curve(base, {"S1_chat": 100.0}, concs=(1, 8))
    write_result(cand, "S1_chat", 1, 300.0)
    write_result(cand, "S1_chat", 8, 9999.0, failed=3)           # best number, but 3 requests failed
    write_result(base, "S3_moderation", 4, 40.0)
    write_result(cand, "S3_moderation", 4, 0.0, completed=0, failed=32)  # vLLM's all-failed file
    summary, issues = summarize(cand, base)
    rows = {(r["scenario"], r["concurrency"]): r for r in summary["runs"]}
    bad = rows[("S1_chat", 8)]
    assert bad["valid"] is False and "3 failed requests" in bad["reason"]
    assert bad["output_tok_s"] is None and bad["ttft_p99_ms"] is None and bad["failed"] == 3
    assert rows[("S3_moderation", 4)]["valid"] is False
    assert summary["scenarios"]["S1_chat"]["peak"]["output_tok_s"] == 300.0
    assert summary["scenarios"]["S1_chat"]["slo"]["output_tok_s"] == 300.0
    s3 = summary["scenarios"]["S3_moderation"]
    assert {k: s3[k] for k in ("peak", "slo", "peak_at_edge", "slo_capacity", "rate_capacity")} == {
        "peak": None, "slo": None, "peak_at_edge": None, "slo_capacity": None, "rate_capacity": None}
    assert s3["slo_capacity_interval"]["state"] == "no_data" and s3["slo_capacity_interval"]["output_tok_s"] is None
    assert summary["comparison"]["S1_chat"]["throughput_ratio"] == pytest.approx(3.0)
    assert summary["comparison"]["S3_moderation"]["throughput_ratio"] is None
    # 3x clears 1.5x, but with invalid runs and a scenario without data the verdict cannot pass.
    assert summary["verdict"]["min_ratio"] == pytest.approx(3.0)
    assert summary["verdict"]["pass"] is False
    assert any("invalid" in i for i in issues) and any("S3_moderation" in i for i in issues)
    # Charts draw valid runs only.
    side = SIDE.load_side(cand)
    from bench.analysis import charts
    rows = [SIDE.run_row(r, side) for r in side.runs]
    assert charts._series(rows, "S1_chat", "output_tok_s") == ([1], [300.0])


def test_missing_scenario_or_mismatched_sweep_blocks_pass(tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_curve(base, L40S_PEAK, concs=(1, 8))
    write_curve(cand, {k: v for k, v in G7E_PEAK.items() if k != "S4_rag"}, concs=(1, 8))
    summary, issues = summarize(cand, base)
    s4 = summary["comparison"]["S4_rag"]
    assert {k: v for k, v in s4.items() if k in COMPARISON_KEYS} == {
        "baseline_peak_tok_s": 98.6, "peak_tok_s": None, "throughput_ratio": None, "cost_efficiency_ratio": None,
        "slo_ratio": None, "slo_cost_efficiency_ratio": None, "baseline_state": "meets_slo",
        "slo_ratio_interval": None, "slo_basis_source": "grid", "slo_state": "inconclusive"}
    # what the ratio would divide: the candidate has nothing, the baseline its capacity, per GPU too
    assert s4["candidate_slo_capacity"]["state"] == "no_data" and s4["slo_capacity_per_gpu"]["candidate"] is None
    assert s4["slo_capacity_per_gpu"]["baseline"] == s4["baseline_slo_capacity"]["output_tok_s"]
    assert s4["peak_per_gpu_tok_s"] == {"candidate": None, "baseline": 98.6} and s4["gpus"] == {"candidate": 1,
                                                                                               "baseline": 1}
    v = summary["verdict"]
    assert v["pass"] is False and v["min_ratio"] > 1.5 and v["state"] == "inconclusive"  # missing is not a fail
    assert issues == ["scenario S4_rag: no usable run in the candidate (cand): run it (`bench sweep --scenarios "
                      "S4_rag --resume` against the candidate)"]
    assert v["reasons"] == issues  # said once, with the command that completes it
    write_curve(cand, {"S4_rag": 402.0}, concs=(1, 16))  # now present, but other concurrencies
    summary, issues = summarize(cand, base)
    assert summary["verdict"]["pass"] is False
    assert any("concurrencies differ" in i for i in issues)


def test_manifest_plan_reports_missing_runs_and_lengths(tmp_path):
    d = tmp_path / "run"
    write_result(d, "S1_chat", 1, 50.0)
    (d / "manifest.json").write_text(json.dumps({
        "config": {"scenarios": {"S1_chat": {"input_len": 256, "output_len": 128}}},
        "runs": [
            {"scenario": "S1_chat", "concurrency": 1, "num_prompts": 32, "output_len": 128, "status": "valid"},
            {"scenario": "S1_chat", "concurrency": 2, "num_prompts": 32, "status": "invalid",
             "reason": "32 failed requests"},
            {"scenario": "S1_chat", "concurrency": 4, "num_prompts": 32, "status": "pending"},
        ],
    }))
    summary, _ = summarize(d)
    rows = {r["concurrency"]: r for r in summary["runs"]}
    assert rows[1]["valid"] is True
    assert rows[2] == {**rows[2], "valid": False, "reason": "32 failed requests"}
    assert rows[4]["valid"] is False and "not run" in rows[4]["reason"]


COMPARISON_KEYS = {"baseline_peak_tok_s", "peak_tok_s", "throughput_ratio", "cost_efficiency_ratio", "slo_ratio",
                   "slo_cost_efficiency_ratio", "baseline_state", "slo_ratio_interval", "slo_basis_source",
                   "slo_state"}


def test_summary_keys_are_exact(tmp_path):
    write_curve(tmp_path / "a", {"S1_chat": 100.0}, concs=(1, 2))
    write_result(tmp_path / "a", "S1_chat", 4, 10.0, failed=1)
    write_curve(tmp_path / "b", {"S1_chat": 50.0}, concs=(1, 2))
    summary, _ = summarize(tmp_path / "a", tmp_path / "b", price=1.0, base_price=2.0)
    assert set(summary) == SUMMARY_KEYS
    assert set(summary["slo"]) == SLO_KEYS
    assert all(set(r) == RUN_KEYS for r in summary["runs"]) and len(summary["runs"]) == 3
    sc = summary["scenarios"]["S1_chat"]
    assert set(sc) == SCENARIO_KEYS
    assert set(sc["peak"]) == {"concurrency", "output_tok_s", "req_s", "loop", "source_run", "source_runs"}
    assert set(sc["slo"]) == {"concurrency", "output_tok_s", "loop", "source_run"}
    assert set(sc["slo_capacity_interval"]) == INTERVAL_KEYS and sc["rate_capacity_interval"] is None
    assert set(summary["comparison"]["S1_chat"]) == COMPARISON_KEYS | {
        "gpus", "peak_per_gpu_tok_s", "candidate_slo_capacity", "baseline_slo_capacity", "slo_capacity_per_gpu",
        "slo_ratio_band_credit", "slo_figure_per_gpu"}
    assert set(summary["comparison"]["S1_chat"]["candidate_slo_capacity"]) >= INTERVAL_KEYS
    assert set(summary["verdict"]) == {"threshold", "min_ratio", "pass", "basis", "state", "reasons",
                                       "min_ratio_interval", "min_ratio_scenario"}
    assert set(summary["run_counts"]) == {"candidate", "baseline"}
    assert all(set(summary["run_counts"][who]) == RUN_COUNT_KEYS for who in ("candidate", "baseline"))
    assert summary["run_counts"]["candidate"]["grid_invalid"] == 1
    assert summary["extra_runs"] == [] and summary["invalid_attempts"] == []
    # one sweep per side: each side's list names its folder alone
    assert summary["sweeps"] == {"candidate": [str(tmp_path / "a")], "baseline": [str(tmp_path / "b")]}


def test_cli_writes_report_summary_and_charts(tmp_path, capsys):
    write_curve(tmp_path / "l40s", L40S_PEAK)
    write_curve(tmp_path / "g7e", G7E_PEAK)
    write_result(tmp_path / "g7e", "S1_chat", 128, 1.0, failed=5)
    for c in (1, 8, 32, 64):
        write_result(tmp_path / "g7e", "S2_summary", c, G7E_PEAK["S2_summary"] * c / 64, spec=56.0)
    out = tmp_path / "rep"
    rc = REP.main([str(tmp_path / "g7e"), "--baseline", str(tmp_path / "l40s"), "--price-per-hour", "1.5",
                   "--baseline-price-per-hour", "2.76", "--capacity-type", "spot",
                       "--baseline-capacity-type", "on-demand", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS
    # S1_chat c=128 is invalid and missing in the baseline: the comparison is incomplete, not failed
    assert summary["verdict"]["pass"] is False and summary["verdict"]["state"] == "inconclusive"
    md = (out / "report.md").read_text()
    assert "| S1_chat | 256/128 | 1,871.0 | 14.62 | 64 |" in md
    assert "3.49x" in md and "6.42x" in md and "**INCONCLUSIVE**" in md
    assert "S1_chat | 128 |" in md and "5 failed requests" in md
    assert "56.0% (length 3.24)" in md  # spec-decode acceptance shown where present
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [f"chart_{s}.png" for s in sorted(G7E_PEAK)]
    assert all((out / p).stat().st_size > 10_000 for p in pngs)
    assert "verdict INCONCLUSIVE on the slo basis" in capsys.readouterr().out


def test_prices_take_the_plan_s_form_a_label_picks_the_side(tmp_path, capsys):
    """`--price-per-hour [LABEL=]ON_DEMAND[/SPOT]` as in `bench plan`: a label prices the sweep of that label,
    a Spot node pays the Spot price; an unknown label exits 2 naming the labels."""
    write_curve(tmp_path / "l40s", L40S_PEAK)
    write_curve(tmp_path / "g7e", G7E_PEAK)
    base = [str(tmp_path / "g7e"), "--baseline", str(tmp_path / "l40s"), "--capacity-type", "spot",
            "--baseline-capacity-type", "on-demand", "--no-charts", "--no-html"]
    assert REP.main([*base, "--price-per-hour", "4.13/1.5", "--price-per-hour", "l40s=2.76", "--out",
                     str(tmp_path / "a")]) == 0
    assert REP.main([*base, "--price-per-hour", "1.5", "--baseline-price-per-hour", "2.76", "--out",
                     str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert a["comparison"] == b["comparison"]  # the same prices, said two ways
    assert a["comparison"]["S1_chat"]["cost_efficiency_ratio"] is not None
    capsys.readouterr()
    assert REP.main([*base, "--price-per-hour", "h100=2", "--out", str(tmp_path / "c")]) == 2
    assert "no sweep here is labelled h100 (the labels are g7e and l40s" in capsys.readouterr().err


def test_report_without_matplotlib_still_writes_tables(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mpl(name, *args, **kwargs):
        if name.startswith("matplotlib") or name == "bench.analysis.charts" or (
                name == "bench.analysis" and args and "charts" in (args[2] or ())):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    write_curve(tmp_path / "a", {"S1_chat": 10.0}, concs=(1,))
    monkeypatch.delitem(__import__("sys").modules, "bench.analysis.charts", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert REP.main([str(tmp_path / "a"), "--out", str(tmp_path / "r")]) == 0
    assert "Charts skipped" in (tmp_path / "r" / "report.md").read_text()
    assert not list((tmp_path / "r").glob("*.png"))
