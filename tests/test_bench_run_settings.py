"""What a sweep recorded is what the analysis judges with, and runs that cannot show what they claim
are flagged: the SLO carried from the manifests into `bench report`, `plan` and `compare` (a flag
that differs is used and said with both values; sweeps of different SLOs exit 2 unless the flags set
one), a run whose answers came in one chunk (decode latency not measured) and a run whose
speculative decoding collapsed, each suspect with its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis import summary as SUMMARY
from tests.test_bench_report import write_curve, write_result

REPO = Path(__file__).resolve().parents[1]


def sweep(folder: Path, peak: float, *, slo=(1000.0, 100.0, "itl"), where="config") -> Path:
    """A swept folder (S1_chat at 1, 8, 32, 64) whose manifest recorded an SLO (or none)."""
    write_curve(folder, {"S1_chat": peak})
    manifest = {"label": folder.name, "gpus": 1, "config": {}}
    if slo:
        record = {"ttft_p99_ms": slo[0], "decode_p99_ms": slo[1], "decode_metric": slo[2]}
        if where == "config":
            manifest["config"]["slo"] = record
        else:  # a sweep of an earlier version: only its capacity record says
            manifest["capacity"] = {"slo": record, "scenarios": {}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def bench(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *map(str, argv)], cwd=REPO, text=True,
                          capture_output=True, timeout=300)


# -- the SLO, carried ----------------------------------------------------------------------------


def test_the_slo_the_sweeps_recorded_is_the_default_and_a_differing_flag_is_said(tmp_path):
    # write_curve: TTFT p99 100 x c, ITL p99 10 + c -> at 1000/100 c=1 and 8 meet the SLO (c=32 misses
    # TTFT); at 1000/15 only c=1 does (c=8 has ITL 18); the default 500/50 would take c=1 only
    cand, base = sweep(tmp_path / "cand", 800.0), sweep(tmp_path / "base", 200.0, where="capacity")
    out = tmp_path / "rep"
    proc = bench("report", cand, "--baseline", base, "--out", out, "--no-charts", "--no-html")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["slo"]["ttft_p99_ms"], summary["slo"]["itl_p99_ms"]) == (1000.0, 100.0)
    assert summary["slo"]["source"] == "recorded" and summary["slo"]["notes"] == []
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 8
    assert "SLO: TTFT p99 <= 1000 ms and ITL p99 <= 100 ms, as the sweeps recorded it." in (out / "report.md").read_text()
    assert "SLO:" not in proc.stderr

    proc = bench("report", cand, "--baseline", base, "--out", out, "--no-charts", "--slo-itl-p99-ms", 15)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["slo"]["itl_p99_ms"] == 15.0 and summary["slo"]["source"] == "flags"
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 1  # the flag is used
    said = [f"--slo-itl-p99-ms 15 given: used instead of the 100 ms the sweep {name} recorded" for name in ("cand", "base")]
    assert summary["slo"]["notes"] == said
    assert all(f"bench report: SLO: {line}" in proc.stderr for line in said)
    assert all(line in (out / "report.md").read_text() for line in said)
    assert said[0] in (out / "report.html").read_text()
    assert all(f"SLO: {line}" in (out / "plan" / "plan.md").read_text() for line in said)  # the plan beside it


def test_sweeps_of_different_slos_are_refused_unless_the_flags_set_one(tmp_path):
    cand = sweep(tmp_path / "cand", 800.0, slo=(500.0, 100.0, "itl"))
    base = sweep(tmp_path / "base", 200.0, slo=(500.0, 50.0, "itl"))
    for argv in (["report", cand, "--baseline", base, "--out", tmp_path / "r", "--no-charts", "--no-html"],
                 ["plan", cand, "--baseline", base, "--current-replicas", 12, "--out", tmp_path / "p", "--no-charts"],
                 ["compare", cand, base, "--out", tmp_path / "c", "--no-html"]):
        proc = bench(*argv)
        assert proc.returncode == 2, (argv[0], proc.stdout, proc.stderr)
        flag = "--slo-itl-p99-ms"
        assert (f"the sweeps were run under different SLOs ({flag}: 100 ms (cand), 50 ms (base)), so their "
                f"capacities are not comparable: give {flag} to judge every sweep under one SLO") in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = bench("compare", base, cand, "--out", tmp_path / "c", "--no-html", "--slo-itl-p99-ms", 50)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert data["slo"]["decode_p99_ms"] == 50.0 and data["slo"]["source"] == "flags"
    assert data["slo"]["notes"] == ["--slo-itl-p99-ms 50 given: used instead of the 100 ms the sweep cand recorded"]
    assert "bench compare: SLO: --slo-itl-p99-ms 50 given: used instead of the 100 ms the sweep cand" in proc.stderr
    plan_out = tmp_path / "p"
    proc = bench("plan", cand, "--baseline", base, "--current-replicas", 12, "--out", plan_out, "--no-charts",
                 "--slo-itl-p99-ms", 100)
    assert proc.returncode in (0, 1), proc.stderr
    plan = json.loads((plan_out / "plan.json").read_text())
    assert plan["slo"]["decode_p99_ms"] == 100.0
    assert plan["slo"]["notes"] == ["--slo-itl-p99-ms 100 given: used instead of the 50 ms the sweep base recorded"]


def test_choosing_the_slo():
    flags = {"ttft_p99_ms": "--ttft", "decode_p99_ms": "--decode", "decode_metric": "--metric"}
    none = {"ttft_p99_ms": None, "decode_p99_ms": None, "decode_metric": None}
    recorded = {"config": {"slo": {"ttft_p99_ms": 800, "decode_p99_ms": 60, "decode_metric": "tpot"}}}
    got = SIDE.choose_slo([("a", recorded), ("b", None)], none, flags)
    assert (got.as_dict(), got.source) == ({"ttft_p99_ms": 800.0, "decode_p99_ms": 60.0, "decode_metric": "tpot"},
                                           "recorded")
    assert got.notes == ["b recorded no SLO (a sweep of an earlier version, or no manifest): judged under the one "
                         "the other sweeps recorded"]
    got = SIDE.choose_slo([("a", None)], none, flags)
    assert (got.as_dict(), got.source, got.notes) == (SIDE.DEFAULT_SLO, "default", [])
    got = SIDE.choose_slo([("a", recorded)], {**none, "decode_metric": "itl"}, flags)
    assert got.decode_metric == "itl" and got.notes == ["--metric itl given: used instead of the tpot the sweep a "
                                                        "recorded"]
    other = {"config": {"slo": {"ttft_p99_ms": 500, "decode_p99_ms": 60, "decode_metric": "tpot"}}}
    with pytest.raises(SIDE.SloConflict, match=r"--ttft: 800 ms \(a\), 500 ms \(b\)"):
        SIDE.choose_slo([("a", recorded), ("b", other)], none, flags)


# -- runs that cannot show what they claim ---------------------------------------------------------


def test_a_run_whose_answers_came_in_one_chunk_is_suspect_and_no_evidence_on_the_decode_limit(tmp_path):
    d = tmp_path / "run"
    write_curve(d, {"S1_chat": 400.0}, concs=(1, 8, 32))
    # c=32 answered each request in one chunk: no gap between chunks, ITL p99 0, TPOT tiny
    one_chunk = write_result(d, "S1_chat", 32, 400.0, ttft99=300.0, itl99=0.0)
    one_chunk.update({"p99_tpot_ms": 0.54, "mean_itl_ms": 0.0})
    (d / "S1_chat_c32.json").write_text(json.dumps(one_chunk))
    side = SIDE.load_side(d)
    run = next(r for r in side.runs if r.concurrency == 32)
    why = side.suspect(run)
    assert why == ("decode latency not measured: the requests streamed 1.00 chunks on average (fewer than 2; "
                   "ITL p99 0.0 ms, TPOT p99 0.54 ms), so the run is no evidence for or against the decode limit")
    summary, issues = SUMMARY.build_summary(side, None, ttft_ms=1000.0, itl_ms=50.0, threshold=1.5)
    row = next(r for r in summary["runs"] if r["concurrency"] == 32)
    assert row["suspect"] is True and row["reason"] == why
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 8  # it does not meet the limit for free
    assert summary["scenarios"]["S1_chat"]["peak"]["concurrency"] == 8
    assert not any(R.UNMEASURED_DECODE in i for i in issues)  # nothing better is measurable there: no block
    # A TTFT p99 over the limit is a miss on its own: then the run counts (against the SLO), said so.
    summary, _ = SUMMARY.build_summary(side, None, ttft_ms=250.0, itl_ms=50.0, threshold=1.5)
    row = next(r for r in summary["runs"] if r["concurrency"] == 32)
    assert row["suspect"] is False and row["reason"] == why + "; it counts as missing the SLO on its TTFT p99 alone"
    assert summary["scenarios"]["S1_chat"]["peak"]["concurrency"] == 32
    assert summary["scenarios"]["S1_chat"]["slo"]["concurrency"] == 1
    # estimated from the means where the per-request gaps were not saved: 1 + (E2EL - TTFT) / mean ITL
    few = R.from_dict({**one_chunk, "p99_itl_ms": 3.0, "mean_itl_ms": 4.0, "mean_e2el_ms": 102.0,
                       "mean_ttft_ms": 100.0}, scenario="S1_chat", concurrency=32)
    assert R.chunks_per_request(few) == 1.5 and R.unmeasured_decode_reason(few).startswith(R.UNMEASURED_DECODE)
    many = R.from_dict({**one_chunk, "p99_itl_ms": 3.0, "mean_itl_ms": 2.0, "mean_e2el_ms": 160.0,
                        "mean_ttft_ms": 100.0}, scenario="S1_chat", concurrency=32)
    assert R.chunks_per_request(many) == 31.0 and R.unmeasured_decode_reason(many) is None
    detail = R.from_dict({**one_chunk, "itls": [[], [0.01]]}, scenario="S1_chat", concurrency=32)
    assert R.chunks_per_request(detail) == 1.5  # counted where the gaps were saved


def test_two_token_answers_need_half_their_requests_streamed_apart(tmp_path):
    """Answers of two tokens stream two chunks at most: a run where one request of many got both tokens
    in one chunk still measured the decode latency (a sweep at S3_moderation 1/16 length on a loaded CPU:
    1.9978 chunks, which a bar of 2 made suspect and worded "2.0 chunks ... fewer than 2")."""
    def run(gaps: list[list[float]], output_len: int):
        raw = {**write_result(tmp_path, "S3_moderation", 4, 200.0), "itls": gaps, R.META_OUTPUT_LEN: str(output_len)}
        return R.from_dict(raw, scenario="S3_moderation", concurrency=4)

    one_bunched = run([[0.004]] * 449 + [[]], 2)
    assert R.chunks_per_request(one_bunched) == pytest.approx(1.9978, abs=1e-4)
    assert R.unmeasured_decode_reason(one_bunched) is None
    most_bunched = run([[0.004]] * 4 + [[]] * 6, 2)
    why = R.unmeasured_decode_reason(most_bunched)
    assert why.startswith("decode latency not measured: the requests streamed 1.40 chunks on average (fewer than 1.5;")
    # longer answers keep the bar of two, and the figure shown is rounded down, never up to the bar
    nearly = run([[0.004, 0.004]] * 2 + [[0.004]] * 998, 16)
    assert R.chunks_per_request(nearly) == pytest.approx(2.002)
    almost = run([[0.004]] * 999 + [[]], 16)
    assert "streamed 1.99 chunks on average (fewer than 2;" in R.unmeasured_decode_reason(almost)


def spec_manifest(folder: Path, accepted: dict[int, tuple[float, float]], floor=None, scenario="K_korean") -> None:
    runs = [{"scenario": scenario, "concurrency": c, "num_prompts": max(32, 8 * c), "output_len": 128,
             "status": "valid", "telemetry": {"spec_draft_tokens": drafts, "spec_accepted_tokens": got}}
            for c, (drafts, got) in accepted.items()]
    telemetry = {} if floor is None else {"min_spec_acceptance_pct": floor}
    (folder / "manifest.json").write_text(json.dumps({
        "config": {"scenarios": {scenario: {"input_len": 0, "output_len": 256, "dataset": "custom"}},
                   "telemetry": telemetry},
        "served_flags": json.dumps(["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}']),
        "runs": runs}))


def test_a_collapsed_speculative_decode_on_real_text_is_suspect_with_its_acceptance(tmp_path):
    d = tmp_path / "run"
    write_curve(d, {"K_korean": 400.0}, concs=(1, 8))
    spec_manifest(d, {1: (4000.0, 2200.0), 8: (4000.0, 8.0)})  # 55 % (a working MTP draft), then 0.2 %
    side = SIDE.load_side(d)
    by_c = {r.concurrency: r for r in side.runs}
    assert side.suspect(by_c[1]) is None
    assert side.suspect(by_c[8]) == ("speculative decoding accepted 0.2% of draft tokens (below the floor of 10%, "
                                     "bench sweep --min-spec-acceptance-pct): the draft is almost always rejected, so the run "
                                     "measures a broken draft, not the configuration")
    # it blocks a passing verdict, with the fix
    base = tmp_path / "base"
    write_curve(base, {"K_korean": 100.0}, concs=(1, 8))
    _, issues = SUMMARY.build_summary(side, SIDE.load_side(base), ttft_ms=1e9, itl_ms=1e9, threshold=1.5)
    assert any("ran speculative decoding that collapsed (K_korean c=8: speculative decoding accepted 0.2%" in i
               for i in issues)
    # the floor is the one the sweep recorded; the rate vLLM wrote counts where no counter was read
    spec_manifest(d, {1: (4000.0, 2200.0), 8: (4000.0, 8.0)}, floor=0.1)
    assert SIDE.load_side(d).suspect(by_c[8]) is None
    write_result(tmp_path / "plain", "K_korean", 1, 50.0, spec=4.0)
    plain = SIDE.load_side(tmp_path / "plain")
    assert plain.suspect(plain.runs[0]).startswith("speculative decoding accepted 4.0% of draft tokens")
    assert SIDE.load_side(tmp_path / "plain", min_spec_acceptance_pct=3.0).suspect(plain.runs[0]) is None
    # acceptance on random tokens says nothing about real text: never a collapse there
    write_result(tmp_path / "random", "S1_chat", 1, 50.0, spec=4.0)
    random = SIDE.load_side(tmp_path / "random")
    assert random.suspect(random.runs[0]) is None
