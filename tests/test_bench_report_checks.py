"""Report checks: every file accounted for, suspect runs, peaks at the edge, like-for-like sides,
the decode metric of the SLO, and no cost ratio without a known capacity type."""

from __future__ import annotations

import json
from pathlib import Path

from bench.analysis import checks
from bench.analysis import report as REP
from bench.analysis import side as SIDE
from bench.analysis import summary as SUMMARY
from tests.test_bench_report import write_curve, write_result

PEAKS = {"S1_chat": 500.0}


def manifest(folder: Path, *, seed=0, telemetry=None, capacity="on-demand", flags=None, version="0.26.0",
             max_model_len=8192, concs=(1, 8, 32, 64), warmups="auto", dataset="random", **config):
    runs = []
    for c in concs:
        rec = {"scenario": "S1_chat", "concurrency": c, "num_prompts": max(32, 8 * c), "output_len": 128,
               "run_hash": None, "status": "valid", "telemetry": (telemetry or {}).get(c)}
        runs.append(rec)
    data = {
        "config": {"scenarios": {"S1_chat": {"input_len": 256, "output_len": 128, "dataset": dataset,
                                             "prefix_cache_check": dataset == "random"}},
                   "seed": seed, "seed_scheme": "v1", "min_prompts": 32, "prompts_per_concurrency": 8,
                   "warmups": warmups, "warmup_mode": "separate", "bench_args": "", **config},
        "server": {"vllm_version": version, "max_model_len": max_model_len},
        "served_flags": json.dumps(flags or ["--max-model-len", "8192"]),
        "capacity_type": capacity, "gpus": 1, "price_per_hour": 2.0,
        "runs": runs,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(data))


def summarize(side, base=None, **kw):
    s = SIDE.load_side(side)
    b = SIDE.load_side(base) if base else None
    return SUMMARY.build_summary(s, b, ttft_ms=kw.pop("ttft", 1e9), itl_ms=kw.pop("itl", 1e9), threshold=0.5, **kw)


def test_every_file_not_used_is_listed_with_its_reason(tmp_path):
    d = tmp_path / "run"
    write_curve(d, PEAKS)
    manifest(d)
    misnamed = write_result(d, "S1_chat", 16, 999.0)
    (d / "S1_chat_c16.json").rename(d / "S1_chat-c16-final.json")
    (d / "logs").mkdir()
    (d / "logs" / "S1_chat_c1.attempt1.log").write_text("$ vllm bench serve\n")
    (d / "logs" / "S1_chat_c1.attempt1.telemetry.json").write_text("{}")
    (d / "S1_chat_c8.attempt1.suspect.json").write_text(json.dumps(misnamed))
    (d / "S1_chat_c8.stale1.json").write_text("{}")
    (d / "notes.txt").write_text("hand notes")
    summary, _ = summarize(d)
    reasons = {f["file"]: f["reason"] for f in summary["ignored_files"]}
    assert set(reasons) == {"S1_chat-c16-final.json", "logs/S1_chat_c1.attempt1.log",
                            "logs/S1_chat_c1.attempt1.telemetry.json", "S1_chat_c8.attempt1.suspect.json",
                            "S1_chat_c8.stale1.json", "notes.txt"}
    assert "does not follow <scenario>_c<N>.json" in reasons["S1_chat-c16-final.json"]
    assert "rename it to S1_chat_c16.json" in reasons["S1_chat-c16-final.json"]
    assert reasons["notes.txt"] == "not a file the report reads"
    assert "moved aside by `bench sweep --resume`" in reasons["S1_chat_c8.stale1.json"]
    # the misnamed file's numbers are not used: c=16 is no run, the peak stays at the planned runs
    assert {r["concurrency"] for r in summary["runs"]} == {1, 8, 32, 64}
    out = tmp_path / "rep"
    assert REP.main([str(d), "--out", str(out), "--no-charts"]) == 0
    md = (out / "report.md").read_text()
    assert "## Files not used" in md and "`S1_chat-c16-final.json`" in md and "Also 2 process logs" in md


def test_a_suspect_run_is_flagged_and_kept_out_of_peak_and_slo(tmp_path):
    d = tmp_path / "run"
    write_curve(d, PEAKS)  # c=64 has the highest throughput
    manifest(d, telemetry={64: {"prefix_cache_hit_pct": 48.0, "preemptions": 3, "kv_cache_usage_max_pct": 91.0},
                           1: {"prefix_cache_hit_pct": 0.4}})
    summary, _ = summarize(d)
    rows = {r["concurrency"]: r for r in summary["runs"]}
    assert rows[64]["suspect"] is True and rows[64]["valid"] is True and "48.0%" in rows[64]["reason"]
    assert rows[64]["preemptions"] == 3 and rows[64]["kv_cache_usage_max_pct"] == 91.0
    assert rows[1]["suspect"] is False and rows[1]["prefix_cache_hit_pct"] == 0.4
    assert summary["scenarios"]["S1_chat"]["peak"]["concurrency"] == 32
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 32
    out = tmp_path / "rep"
    assert REP.main([str(d), "--out", str(out), "--no-charts"]) == 0
    md = (out / "report.md").read_text()
    assert "## Suspect runs" in md and "| run | S1_chat | 64 | prefix-cache hits 48.0%" in md
    assert "| 64 | " in md and "SUSPECT (excluded) | 48.0% | 3 | 91.0% |" in md


def test_a_shared_prefix_scenario_is_not_suspect(tmp_path):
    d = tmp_path / "run"
    write_curve(d, PEAKS)
    manifest(d, dataset="prefix_repetition", telemetry={64: {"prefix_cache_hit_pct": 80.0}})
    summary, _ = summarize(d)
    assert not any(r["suspect"] for r in summary["runs"])
    assert summary["scenarios"]["S1_chat"]["peak"]["concurrency"] == 64


def test_peak_at_the_edge(tmp_path):
    write_curve(tmp_path / "edge", PEAKS)
    summary, _ = summarize(tmp_path / "edge")
    assert summary["scenarios"]["S1_chat"]["peak_at_edge"] is True
    inner = tmp_path / "inner"
    for c, tok in ((1, 100.0), (8, 400.0), (32, 500.0), (64, 450.0)):
        write_result(inner, "S1_chat", c, tok)
    summary, _ = summarize(inner)
    assert summary["scenarios"]["S1_chat"]["peak_at_edge"] is False
    out = tmp_path / "rep"
    assert REP.main([str(tmp_path / "edge"), "--out", str(out), "--no-charts"]) == 0
    assert "the test, not the server, set it" in (out / "report.md").read_text()


def test_mismatched_seeds_and_settings_make_the_comparison_incomplete(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_curve(a, {"S1_chat": 900.0})
    write_curve(b, PEAKS)
    manifest(a, seed=0)
    manifest(b, seed=1)
    summary, issues = summarize(a, b)
    assert any(i.startswith("seed differs") for i in issues) and summary["verdict"]["pass"] is False
    manifest(b, seed=0, version="0.32.0")
    summary, issues = summarize(a, b)
    assert issues == [] and summary["verdict"]["pass"] is True
    assert checks.like_for_like(SIDE.load_side(a).manifest, SIDE.load_side(b).manifest)[1] == [
        "vLLM versions differ: 0.26.0 vs baseline 0.32.0"]
    manifest(b, flags=["--no-enable-prefix-caching"], max_model_len=4096, warmups="0")
    _, issues = summarize(a, b)
    assert {i.split(" ", 1)[0] for i in issues} == {"prefix_caching", "max_model_len", "warmups"}
    manifest(b, flags=["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}'])
    _, issues = summarize(a, b)
    assert [i.split(" ", 1)[0] for i in issues] == ["speculative"]
    _, issues = summarize(a, b, vary=("speculative",))  # the setting under test may differ
    assert issues == []


def test_no_cost_ratio_with_an_unknown_capacity_type(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_curve(a, {"S1_chat": 900.0})
    write_curve(b, PEAKS)
    manifest(a, capacity=None)
    manifest(b)
    summary, _ = summarize(a, b)
    assert summary["comparison"]["S1_chat"]["cost_efficiency_ratio"] is None
    assert summary["comparison"]["S1_chat"]["throughput_ratio"] == 1.8
    out = tmp_path / "rep"
    assert REP.main([str(a), "--baseline", str(b), "--out", str(out), "--no-charts"]) == 0
    assert "capacity type (Spot or on-demand) of a is unknown" in (out / "report.md").read_text()
    assert REP.main([str(a), "--baseline", str(b), "--capacity-type", "spot", "--out", str(out),
                     "--no-charts"]) == 0
    assert json.loads((out / "summary.json").read_text())["comparison"]["S1_chat"]["cost_efficiency_ratio"] == 1.8


def test_the_slo_decode_limit_applies_to_the_chosen_metric(tmp_path):
    d = tmp_path / "run"
    for c, itl, tpot in ((1, 30.0, 10.0), (8, 60.0, 20.0), (32, 90.0, 45.0), (64, 120.0, 70.0)):
        data = write_result(d, "S1_chat", c, 100.0 * c, itl99=itl)
        data.update(p50_tpot_ms=tpot / 2, p99_tpot_ms=tpot)
        (d / f"S1_chat_c{c}.json").write_text(json.dumps(data))
    itl, _ = summarize(d, ttft=1e9, itl=50.0)
    tpot, _ = summarize(d, ttft=1e9, itl=50.0, decode_metric="tpot")
    assert itl["slo"]["decode_metric"] == "itl" and itl["scenarios"]["S1_chat"]["slo"]["concurrency"] == 1
    assert tpot["slo"]["decode_metric"] == "tpot" and tpot["scenarios"]["S1_chat"]["slo"]["concurrency"] == 32
    assert tpot["runs"][3]["tpot_p99_ms"] == 70.0 and tpot["runs"][3]["tpot_p50_ms"] == 35.0
    out = tmp_path / "rep"
    assert REP.main([str(d), "--out", str(out), "--slo-decode-metric", "tpot", "--no-charts"]) == 0
    md = (out / "report.md").read_text()
    assert "TPOT p99 <= 50 ms" in md and "| TPOT p50 (ms) | TPOT p99 (ms) |" in md
