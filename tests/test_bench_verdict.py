"""The verdict on intervals: three states decided from grids, searches and open loops, gating exit
codes, explicit prices, unreadable manifests, capacity-search folders, and words without reprs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from bench.analysis import answer
from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import report as REP
from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis import summary as SUMMARY
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP
from tests.test_bench_plan import result as detailed_result

OUT_LEN = {"S1_chat": 128, "S2_summary": 256}
REPR = re.compile(r"\bNone\b|\bnan\b|\binf\b|\('|\['|\{'|\)\)|<[a-z_.]+ object")


def assert_words(text: str) -> None:
    """No Python reprs, tuples, None, nan or inf in text meant for people."""
    found = REPR.findall(text)
    assert not found, f"repr-like text {found} in: " + text[max(0, text.find(found[0]) - 200):][:400]


def grid(folder: Path, scenario: str, points: dict[int, tuple[float, bool]]) -> None:
    """One result per concurrency: (output tok/s, meets the SLO)."""
    folder.mkdir(parents=True, exist_ok=True)
    out_len = OUT_LEN.get(scenario, 64)
    for c, (tok, meets) in points.items():
        n = max(32, 8 * c)
        data = {"num_prompts": n, "completed": n, "failed": 0, "duration": n * out_len / tok,
                "max_concurrency": c, "scenario": scenario, R.META_OUTPUT_LEN: str(out_len),
                R.META_INPUT_LEN: "256", "total_output_tokens": n * out_len, "output_throughput": tok,
                "request_throughput": tok / out_len, "p50_ttft_ms": 50.0, "p99_ttft_ms": 100.0 if meets else 900.0,
                "p50_itl_ms": 10.0, "p99_itl_ms": 20.0}
        (folder / R.result_filename(scenario, c)).write_text(json.dumps(data))


def doubling(per_c: float, meets_up_to: int, concs=(1, 2, 4, 8, 16, 32, 64)) -> dict[int, tuple[float, bool]]:
    return {c: (per_c * c, c <= meets_up_to) for c in concs}


def summarize(cand, base, **kw):
    kw.setdefault("basis", "slo")
    side = SIDE.load_side(cand, price_per_hour=kw.pop("price", None))
    other = SIDE.load_side(base, price_per_hour=kw.pop("base_price", None))
    return SUMMARY.build_summary(side, other, ttft_ms=500.0, itl_ms=50.0, threshold=kw.pop("threshold", 1.5), **kw)


def report(tmp_path, cand, base, *argv):
    out = tmp_path / "rep"
    rc = REP.main([str(cand), "--baseline", str(base), "--out", str(out), "--no-charts", *argv])
    return rc, json.loads((out / "summary.json").read_text()), (out / "report.md").read_text()


# --- the math ---------------------------------------------------------------------------------


def test_ratio_interval_ends():
    cap = lambda lo, hi, state=CAP.MEETS: CAP.Capacity(CAP.GRID, state, lo, hi)  # noqa: E731
    assert V.ratio_interval(cap(3200, 6400), cap(800, 1600), 1, 1) == (2.0, 8.0)
    assert V.ratio_interval(cap(3200, 6400), cap(800, 1600), 4, 1) == (0.5, 2.0)  # per GPU
    assert V.ratio_interval(cap(3200, math.inf), cap(800, 1600), 1, 1) == (2.0, math.inf)
    assert V.ratio_interval(cap(3200, 6400), cap(800, math.inf), 1, 1) == (0.0, 8.0)
    only_candidate = V.ratio_interval(cap(3200, 6400), cap(0, 0, CAP.NEVER), 1, 1)
    assert only_candidate == (math.inf, math.inf)
    assert V.ratio_interval(cap(0, 0, CAP.NEVER), cap(800, 1600), 1, 1) == (0.0, 0.0)
    assert V.ratio_interval(cap(0, 0, CAP.NEVER), cap(0, 0, CAP.NEVER), 1, 1) is None  # neither meets
    assert V.ratio_interval(cap(3200, 6400), CAP.Capacity(CAP.GRID, CAP.NO_DATA), 1, 1) is None
    assert V.interval_text(only_candidate) == "unbounded (only the candidate meets the SLO)"
    assert V.interval_text((2.0, math.inf)) == "2.00x or more (no upper bound)"
    assert V.interval_text([2.0, None]) == "2.00x or more (no upper bound)"
    assert V.interval_text((0.0, 8.0)) == "8.00x or less (no lower bound)"
    assert V.interval_text((0.0, 0.0)) == "0x (only the baseline meets the SLO)"
    assert V.interval_text([0.0, None]) == "no bound either way (the capacities it is made of are open)"


def test_grid_capacity_interval_open_end_and_never(tmp_path):
    grid(tmp_path / "a", "S1_chat", doubling(100.0, 8))
    grid(tmp_path / "b", "S1_chat", doubling(100.0, 64))
    grid(tmp_path / "c", "S1_chat", doubling(100.0, 0))
    grid(tmp_path / "d", "S1_chat", doubling(100.0, 0, concs=(4, 8)))
    caps = {}
    for name in "abcd":
        side = SIDE.load_side(tmp_path / name)
        caps[name] = CR.scenario_capacity(side.path, side.runs, ttft_ms=500, decode_ms=50)["S1_chat"]["closed"]
    a, b, c, d = caps["a"], caps["b"], caps["c"], caps["d"]
    # Nothing was run twice: the assumed run-to-run band widens both ends of each interval.
    band = 1 + C.DEFAULT_NOISE_PCT / 100
    assert (a.state, a.point, a.load_pass, a.load_fail, a.source) == (CAP.MEETS, 800.0, 8, 16, CAP.GRID)
    assert (a.lo, a.hi) == (pytest.approx(800.0 / band), pytest.approx(1600.0 * band))
    assert (a.source_run, a.repeats, a.noise_pct, a.noise_source) == ("S1_chat_c8.json", 1, C.DEFAULT_NOISE_PCT,
                                                                      "assumed")
    assert (b.point, b.lo, b.hi, b.load_pass, b.load_fail) == (6400.0, pytest.approx(6400 / band), math.inf, 64, None)
    assert (c.state, c.lo, c.hi, c.load_fail) == (CAP.NEVER, 0.0, 0.0, 1)  # misses at one request at a time
    assert (d.state, d.lo, d.hi, d.load_fail) == (CAP.NEVER, 0.0, pytest.approx(400.0 * band), 4)  # below the lowest load
    # one wording of a capacity everywhere (bench sweep's line, the plan, the report): answer.capacity_words
    assert answer.capacity_words(a.as_dict()) == (
        "800.0 tok/s, 95 % interval 720.7 to 1,776.0 (from c=8, closed loop, S1_chat_c8.json; run-to-run band 11 %, "
        "assumed, no point was run twice; meets the SLO at c=8, misses it at c=16)")
    flat = CAP.Capacity(CAP.GRID, CAP.MEETS, lo=394.7, hi=394.7, load_pass=7, load_fail=8, point=394.7)  # saturated
    assert answer.capacity_words(flat.as_dict()) == (
        "394.7 tok/s, 95 % interval 394.7 (from c=7, closed loop; meets the SLO at c=7, misses it at c=8)")
    words_b = answer.capacity_words(b.as_dict())
    assert "or more" in words_b and "no upper bound" in words_b
    assert answer.capacity_words(d.as_dict()).startswith("below 444.0 tok/s (never meets the SLO")


def test_the_upper_end_is_the_throughput_at_the_lowest_sure_miss(tmp_path):
    def closed(name, points):
        grid(tmp_path / name, "S1_chat", points)
        side = SIDE.load_side(tmp_path / name)
        return CR.scenario_capacity(side.path, side.runs, ttft_ms=500, decode_ms=50)["S1_chat"]["closed"]

    band = 1 + C.DEFAULT_NOISE_PCT / 100
    # the capacity lies between the throughput where the SLO holds and where it is missed for sure
    adjacent = closed("adjacent", {8: (800.0, True), 10: (1000.0, True), 11: (1100.0, False)})
    assert (adjacent.load_pass, adjacent.load_fail) == (10, 11)
    assert (adjacent.lo, adjacent.hi) == (pytest.approx(1000 / band), pytest.approx(1100 * band))
    assert adjacent.fail_runs == ("S1_chat_c11.json",)
    assert adjacent.width == pytest.approx(1.1 * band * band)
    wide = closed("wide", {8: (800.0, True), 16: (1600.0, False)})
    assert wide.hi == pytest.approx(1600 * band)
    # a curve falling past its best run: never below the figure with its band
    falling = closed("falling", {8: (800.0, True), 16: (700.0, False)})
    assert falling.hi == pytest.approx(800 * band)


# --- three states from the grid alone ---------------------------------------------------------


def test_grid_alone_passes_a_clear_case(tmp_path):
    for s in ("S1_chat", "S2_summary"):
        grid(tmp_path / "base", s, doubling(100.0, 8))   # [800, 1,600)
        grid(tmp_path / "cand", s, doubling(400.0, 8))   # [3,200, 6,400): 2x to 8x
    summary, issues = summarize(tmp_path / "cand", tmp_path / "base")
    v = summary["verdict"]
    assert issues == [] and v["state"] == "pass" and v["pass"] is True and v["reasons"] == []
    # [3,200, 6,400) over [800, 1,600): 2x to 8x, each end's assumed band (11 %) on in quadrature
    band = C.DEFAULT_NOISE_PCT / 100
    spread = 1 + math.hypot(band, band)
    expect = [round(2.0 / spread, 4), round(8.0 * spread, 4)]
    assert v["min_ratio"] == expect[0] and v["min_ratio_interval"] == expect and v["basis"] == "slo"
    c = summary["comparison"]["S1_chat"]
    assert c["slo_ratio_interval"] == expect and c["slo_basis_source"] == "grid" and c["slo_ratio"] == 4.0
    assert c["slo_state"] == "pass" and c["baseline_state"] == "meets_slo"
    iv = summary["scenarios"]["S1_chat"]["slo_capacity_interval"]
    assert iv == {"source": "grid", "state": "meets_slo", "output_tok_s": [round(3200 / (1 + band), 4), round(6400 * (1 + band), 4)],
                  "load_unit": "concurrency", "load_pass": 8, "load_fail": 16, "load_max": 64, "confirmed": False,
                  "point_tok_s": 3200.0, "loop": "closed", "source_run": "S1_chat_c8.json",
                  "source_runs": ["S1_chat_c8.json"], "fail_runs": ["S1_chat_c16.json"], "repeats": 1,
                  "noise_pct": C.DEFAULT_NOISE_PCT,
                  "noise_pct_by_figure": dict.fromkeys(("output_tok_s", "ttft", "decode"), C.DEFAULT_NOISE_PCT),
                  "noise_source": "assumed", "noise_repeats": 0,
                  "width": round(6400 * (1 + band) / (3200 / (1 + band)), 4), "target_width": 1.22, "reason": None}
    # summary's `slo` is the same figure, with its run
    assert summary["scenarios"]["S1_chat"]["slo"] == {"concurrency": 8, "output_tok_s": 3200.0, "loop": "closed",
                                                      "source_run": "S1_chat_c8.json"}


def test_grid_alone_fails_when_a_best_case_is_below_the_threshold(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 8))
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 8))
    grid(tmp_path / "base", "S2_summary", doubling(100.0, 8))                     # [800, 1,600)
    grid(tmp_path / "cand", "S2_summary", {**doubling(100.0, 8), 16: (900.0, False)})  # [800, 900)
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base")
    v = summary["verdict"]
    assert v["state"] == "fail" and v["pass"] is False
    spread = 1 + math.hypot(C.DEFAULT_NOISE_PCT / 100, C.DEFAULT_NOISE_PCT / 100)
    expect = [round(0.5 / spread, 4), round(900 / 800 * spread, 4)]
    assert summary["comparison"]["S2_summary"]["slo_ratio_interval"] == expect
    assert v["reasons"] == ["S2_summary: even the best case is below the 1.5x threshold (SLO ratio per GPU "
                            "0.43x to 1.30x)"]
    assert v["min_ratio_interval"] == expect


def test_grid_alone_cannot_decide_a_close_case_and_names_the_search(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 8))   # [800, 1,600)
    grid(tmp_path / "cand", "S1_chat", doubling(200.0, 8))   # [1,600, 3,200): 1x to 4x
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base")
    v = summary["verdict"]
    assert v["state"] == "inconclusive" and v["pass"] is False and v["min_ratio"] == 0.8654
    (reason,) = v["reasons"]
    assert reason.startswith("S1_chat: the SLO ratio per GPU, 0.87x to 4.62x, spans the 1.5x threshold")
    assert "--capacity-search --resume" in reason


def test_open_upper_end_of_the_baseline_asks_for_higher_loads(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 64))  # still meets at c=64
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 64))
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base")
    v = summary["verdict"]
    assert summary["comparison"]["S1_chat"]["slo_ratio_interval"] == [0.0, None]
    assert v["state"] == "inconclusive" and "still meets the SLO at its highest load (c=64)" in v["reasons"][0]
    assert ("the SLO ratio per GPU, no bound either way (the capacities it is made of are open), spans "
            "the 1.5x threshold") in v["reasons"][0]
    assert "0.00x" not in " ".join(v["reasons"])


def test_only_the_candidate_meets_the_slo(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 0))  # misses from c=1
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 8))
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base")
    c, v = summary["comparison"]["S1_chat"], summary["verdict"]
    assert c["slo_ratio_interval"] == [None, None] and c["baseline_state"] == "never_meets_slo"
    assert v["state"] == "pass" and v["min_ratio"] is None
    # the other way round: a measured limit of the candidate
    summary, _ = summarize(tmp_path / "base", tmp_path / "cand")
    assert summary["verdict"]["state"] == "fail"
    assert "the candidate (base) never meets the SLO at the loads tested (it misses from c=1)" in \
        summary["verdict"]["reasons"][0]
    # neither side: no ratio under the SLO, not a fail
    summary, _ = summarize(tmp_path / "base", tmp_path / "base")
    assert summary["verdict"]["state"] == "inconclusive"
    assert "neither side meets the SLO" in summary["verdict"]["reasons"][0]


def test_peak_basis_keeps_the_method_and_gets_the_states(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 8))
    grid(tmp_path / "cand", "S1_chat", doubling(200.0, 8))
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base", basis="peak")
    v = summary["verdict"]
    assert (v["state"], v["min_ratio"], v["min_ratio_interval"], v["basis"]) == ("pass", 2.0, [2.0, 2.0], "peak")
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base", basis="peak", threshold=2.5)
    assert summary["verdict"]["state"] == "fail"
    assert summary["verdict"]["reasons"] == ["S1_chat: the peak ratio per GPU, 2.00x, is below the 2.5x threshold"]
    grid(tmp_path / "base", "S4_rag", doubling(10.0, 8))  # the candidate never ran S4_rag
    summary, _ = summarize(tmp_path / "cand", tmp_path / "base", basis="peak")
    assert summary["verdict"]["state"] == "inconclusive" and summary["verdict"]["min_ratio"] == 2.0


# --- the command: exit codes, prices, manifests, files, words ---------------------------------


def test_exit_codes_are_opt_in_and_the_state_is_written_either_way(tmp_path, capsys):
    for name, per_c in (("base", 100.0), ("clear", 400.0), ("close", 200.0), ("short", 120.0)):
        grid(tmp_path / name, "S1_chat", doubling(per_c, 8) if name != "short" else
             {**doubling(100.0, 8), 16: (900.0, False)})
    for cand, state, code in (("clear", "pass", 0), ("short", "fail", 1), ("close", "inconclusive", 3)):
        rc, summary, md = report(tmp_path, tmp_path / cand, tmp_path / "base")
        assert rc == 0 and summary["verdict"]["state"] == state
        rc, summary, md = report(tmp_path, tmp_path / cand, tmp_path / "base", "--exit-code")
        assert rc == code and summary["verdict"]["state"] == state
        assert f"**{state.upper()}**" in md
        assert_words(md)
        assert f"verdict {state.upper()} on the slo basis" in capsys.readouterr().out
    out = tmp_path / "alone"
    assert REP.main([str(tmp_path / "clear"), "--out", str(out), "--no-charts", "--exit-code"]) == 3
    assert "no verdict without --baseline" in capsys.readouterr().err
    assert REP.main([str(tmp_path / "empty-does-not-exist"), "--out", str(out), "--exit-code"]) == 2


def test_explicit_prices_give_the_cost_ratio_whatever_the_capacity_type(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 8))
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 8))
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base", "--price-per-hour", "1.5",
                             "--baseline-price-per-hour", "2.76")
    c = summary["comparison"]["S1_chat"]
    assert c["cost_efficiency_ratio"] == pytest.approx(4.0 * 2.76 / 1.5, abs=1e-3)
    assert c["slo_cost_efficiency_ratio"] == pytest.approx(4.0 * 2.76 / 1.5, abs=1e-3)
    assert "may be the wrong one" not in md and "$1.50 (given)" in md
    # A price the sweep was given (--price-per-hour at sweep time) counts as given too.
    for d, price in ((tmp_path / "cand", 1.5), (tmp_path / "base", 2.76)):
        (d / "manifest.json").write_text(json.dumps({"price_per_hour": price, "capacity_type": None,
                                                     "hardware": {"price_source": "--price-per-hour"}}))
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    assert summary["comparison"]["S1_chat"]["cost_efficiency_ratio"] == pytest.approx(7.36, abs=1e-3)
    # A looked-up price (a price table by capacity type) with the capacity type unknown is withheld.
    (tmp_path / "cand" / "manifest.json").write_text(json.dumps(
        {"price_per_hour": 1.5, "hardware": {"price_source": "price table for spot"}}))
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    assert summary["comparison"]["S1_chat"]["cost_efficiency_ratio"] is None
    assert "capacity type (Spot or on-demand) of cand is unknown" in md


def test_a_truncated_manifest_is_unreadable_not_hand_collected(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 8))
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 8))
    whole = json.dumps({"label": "cand", "config": {"seed": 0, "scenarios": {}}, "runs": []})
    (tmp_path / "cand" / "manifest.json").write_text(whole[:25])
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base", "--exit-code")
    v = summary["verdict"]
    assert rc == 3 and v["state"] == "inconclusive"  # clear intervals, but the sides cannot be checked
    assert any("manifest.json" in r and "is not valid JSON" in r and "bench fetch" in r for r in v["reasons"])
    assert "Manifest: unreadable: manifest.json is not valid JSON" in md and "hand-collected" not in md.split(
        "Baseline:")[0]
    ignored = {f["file"]: f["reason"] for f in summary["ignored_files"]}
    assert "not valid JSON" in ignored["manifest.json"]
    assert_words(md)
    # the same intervals fail-wise are not trusted either: no fail on sides that cannot be compared
    grid(tmp_path / "short", "S1_chat", {**doubling(100.0, 8), 16: (900.0, False)})
    (tmp_path / "short" / "manifest.json").write_text(whole[:25])
    rc, summary, _ = report(tmp_path, tmp_path / "short", tmp_path / "base", "--exit-code")
    assert rc == 3 and summary["verdict"]["state"] == "inconclusive"


def _searched_folder(folder: Path, per_c: float, *, budget_stopped: bool) -> None:
    """A sweep with --capacity-search: S1 grid [8, 16) searched to [10, 12); S2 grid only when the
    budget stopped its search; open-loop runs for S1; invalid attempts and logs kept."""
    grid(folder, "S1_chat", doubling(per_c, 8, concs=(1, 8, 16)))
    grid(folder, "S2_summary", doubling(per_c, 8, concs=(1, 8, 16)))
    search = folder / CR.SEARCH_DIR
    search.mkdir()
    for c, ttft in ((12, 600.0), (10, 400.0), (11, 600.0)):
        data = detailed_result("S1_chat", c, per_c * c, n=200, detail=[ttft] * 200,
                               extra={"bench_kind": "search", "scenario": "S1_chat"})
        (search / CR.search_filename("S1_chat", c, 1)).write_text(json.dumps(data))
    (search / "S1_chat_c11.run1.attempt1.invalid.json").write_text(json.dumps({"completed": 0}))
    if not budget_stopped:
        data = detailed_result("S2_summary", 8, per_c * 8, n=200, detail=[400.0] * 200)
        (search / CR.search_filename("S2_summary", 8, 1)).write_text(json.dumps(data))
    opened = folder / CR.OPEN_LOOP_DIR
    opened.mkdir()
    for rate in (0.5, 1.0):
        data = detailed_result("S1_chat", 16, per_c * 4 * rate, n=100, extra={
            "request_rate": rate, "burstiness": 1.0, "request_goodput": rate * 0.99, "bench_kind": "open_loop",
            "scenario": "S1_chat", "max_concurrency": 16})
        (opened / CR.open_loop_filename("S1_chat", rate)).write_text(json.dumps(data))


def test_a_capacity_search_folder_accounts_for_every_file_without_rename_advice(tmp_path):
    _searched_folder(tmp_path / "cand", 400.0, budget_stopped=False)
    _searched_folder(tmp_path / "base", 100.0, budget_stopped=True)  # S2's search never ran: grid bracket
    # a hand-copied open-loop result and a second copy of a grid result in the top folder
    (tmp_path / "cand" / "copy-of-rate.json").write_text((tmp_path / "cand" / "open_loop" / "S1_chat_rate1.run1.json")
                                                        .read_text())
    (tmp_path / "cand" / "S1_chat-c8-again.json").write_text((tmp_path / "cand" / "S1_chat_c8.json").read_text())
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    ignored = {f["file"]: f["reason"] for f in summary["ignored_files"]}
    assert not any(k.startswith(("search/S1_chat_c1", "open_loop/")) and k.endswith("0.json") for k in ignored)
    assert not any(f.startswith(("search/", "open_loop/")) and "invalid" not in f for f in ignored)
    assert not any(f.startswith(("baseline:search/", "baseline:open_loop/")) and "invalid" not in f for f in ignored)
    assert "invalid attempt 1 of a capacity search run (S1_chat_c11.run1)" in ignored[
        "search/S1_chat_c11.run1.attempt1.invalid.json"]
    assert "rename" not in " ".join(ignored.values())
    assert "not a closed-loop grid run (offered 1 req/s)" in ignored["copy-of-rate.json"]
    assert "S1_chat_c8.json is already there" in ignored["S1_chat-c8-again.json"]
    c1, c2 = summary["comparison"]["S1_chat"], summary["comparison"]["S2_summary"]
    # every offered rate met the SLO on both sides (an open upper end): the search's bracket decides
    rate = summary["scenarios"]["S1_chat"]["rate_capacity_interval"]
    assert rate["point_tok_s"] == 1600.0 and rate["output_tok_s"][1] is None and rate["loop"] == "open"
    assert rate["source_run"] == "open_loop/S1_chat_rate1.run1.json"
    # bracketed [10, 11) on both sides: cand 4,000 tok/s at c=10 over base 1,000
    closed = summary["scenarios"]["S1_chat"]["slo_capacity_interval"]
    assert (closed["load_pass"], closed["load_fail"], closed["point_tok_s"]) == (10, 11, 4000.0)
    assert closed["source_run"] == "search/S1_chat_c10.run1.json" and closed["noise_source"] == "assumed"
    spread = 1 + math.hypot(C.DEFAULT_NOISE_PCT / 100, C.DEFAULT_NOISE_PCT / 100)
    assert c1["slo_basis_source"] == "search"
    # [10, 11) on both sides: each capacity lies between c=10's and c=11's throughputs, widened by the bands
    assert c1["slo_ratio_interval"] == [pytest.approx(4000 / 1100 / spread, abs=1e-4),
                                        pytest.approx(4400 / 1000 * spread, abs=1e-4)]
    assert c1["slo_ratio"] == 4.0  # the two capacity figures: 4,000 / 1,000 tok/s
    assert c2["slo_basis_source"] == "search" and c2["slo_ratio_interval"] is not None
    # the budget stopped the baseline's S2 search, yet its grid bracket still bounds the ratio:
    # [3,200, 6,400) over [800, 1,600) = 2x to 8x before the bands, a pass, not a fail on a missing figure
    assert c2["slo_ratio_interval"][0] > 1.5 and summary["verdict"]["state"] == "pass"
    assert_words(md)


def test_report_words_never_show_reprs(tmp_path):
    grid(tmp_path / "base", "S1_chat", doubling(100.0, 64))
    grid(tmp_path / "cand", "S1_chat", doubling(400.0, 0))
    grid(tmp_path / "cand", "S4_rag", doubling(10.0, 8))
    for d, seed in ((tmp_path / "cand", 0), (tmp_path / "base", None)):
        config = {"scenarios": {"S1_chat": {"input_len": 256, "output_len": 128}}, "min_prompts": 32,
                  "prompts_per_concurrency": 8}
        if seed is not None:
            config.update(seed=seed, seed_scheme="sha256(scenario,c,attempt) v1")
        (d / "manifest.json").write_text(json.dumps({"config": config, "runs": []}))
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    assert_words(md)
    assert "seed: recorded on one side only (0 (seed scheme sha256(scenario,c,attempt) v1) vs baseline not recorded)" \
        in md
    for r in summary["verdict"]["reasons"]:
        assert_words(r)


# --- one capacity figure, with its run ----------------------------------------------------------


def test_the_capacity_is_the_highest_load_meeting_the_slo_not_the_best_run(tmp_path):
    # c=8 serves more than c=16 (a noisy or thrashing curve), but c=16 is the highest load that meets
    # the SLO: the capacity is c=16's throughput, named with its run, on every figure of summary.json.
    grid(tmp_path / "cand", "S1_chat", {1: (400.0, True), 8: (3000.0, True), 16: (2800.0, True),
                                        32: (2500.0, False)})
    grid(tmp_path / "base", "S1_chat", {1: (100.0, True), 8: (700.0, True), 16: (700.0, True),
                                        32: (800.0, False)})
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    sc = summary["scenarios"]["S1_chat"]
    iv = sc["slo_capacity_interval"]
    assert (iv["point_tok_s"], iv["load_pass"], iv["source_run"]) == (2800.0, 16, "S1_chat_c16.json")
    assert sc["slo"] == {"concurrency": 16, "output_tok_s": 2800.0, "loop": "closed", "source_run": "S1_chat_c16.json"}
    assert iv["output_tok_s"][0] < 2800.0 < iv["output_tok_s"][1]  # the band around the figure
    assert sc["peak"]["concurrency"] == 8 and sc["peak"]["output_tok_s"] == 3000.0  # the peak is another figure
    assert summary["comparison"]["S1_chat"]["slo_ratio"] == 4.0  # 2,800 / 700: the two capacity figures
    assert re.search(r"2,800\.0 tok/s, 95 % interval [0-9,.]+ to [0-9,.]+ \(from c=16, closed loop, S1_chat_c16\.json", md)
    assert "run-to-run band 11 %, assumed, no point was run twice" in md


def test_a_search_rerun_that_misses_at_a_grid_point_moves_the_capacity(tmp_path):
    # The grid's c=32 met the SLO on a 256-request point estimate; the capacity search ran c=32
    # again with per-request detail and it missed for sure: c=32 is a miss (both runs together),
    # the capacity is c=16's, and the peak takes the search's runs into account.
    for label, per_c in (("cand", 400.0), ("base", 100.0)):
        folder = tmp_path / label
        grid(folder, "S1_chat", {1: (per_c, True), 16: (per_c * 16, True), 32: (per_c * 32, True),
                                 64: (per_c * 30, False)})
        (folder / CR.SEARCH_DIR).mkdir()
        data = detailed_result("S1_chat", 32, per_c * 34, n=200, detail=[900.0] * 200,
                               extra={"bench_kind": "search", "scenario": "S1_chat"})
        (folder / CR.SEARCH_DIR / CR.search_filename("S1_chat", 32, 1)).write_text(json.dumps(data))
    rc, summary, md = report(tmp_path, tmp_path / "cand", tmp_path / "base")
    sc = summary["scenarios"]["S1_chat"]
    iv = sc["slo_capacity_interval"]
    assert (iv["load_pass"], iv["load_fail"], iv["point_tok_s"]) == (16, 32, 6400.0)
    assert iv["source_run"] == "S1_chat_c16.json" and sc["slo"]["concurrency"] == 16
    assert iv["fail_runs"] == ["S1_chat_c32.json", "search/S1_chat_c32.run1.json"]
    # c=32 ran twice (12,800 tok/s on 256 requests, 13,600 on 200): runs of two sizes are not repeats,
    # so they measure no run-to-run band (it stays assumed); the peak is their request-weighted mean
    assert iv["noise_source"] == "assumed" and iv["noise_repeats"] == 0
    peak = (256 * 12800 + 200 * 13600) / 456
    assert sc["peak"]["concurrency"] == 32 and sc["peak"]["output_tok_s"] == pytest.approx(peak, abs=1e-3)
    assert sc["peak"]["source_runs"] == ["S1_chat_c32.json", "search/S1_chat_c32.run1.json"]
    ratio = summary["comparison"]["S1_chat"]
    assert ratio["slo_ratio"] == 4.0 and ratio["throughput_ratio"] == 4.0
    assert re.search(r"6,400\.0 tok/s, 95 % interval [0-9,.]+ to [0-9,.]+ \(from c=16, closed loop, S1_chat_c16\.json", md)


def test_the_capacity_carries_each_figures_band_and_names_the_largest():
    from tests.test_bench_search import agreeing_tok_s_spread_itl
    state = agreeing_tok_s_spread_itl()
    noise = state.noise()
    tok, decode = noise.figure(C.OUTPUT_TOK_S), noise.figure(C.DECODE)
    cap = CAP.from_search(state, CAP.SEARCH, CAP.CONCURRENCY)
    assert cap.state == CAP.MEETS and cap.load_pass == 8 and cap.load_fail == 16
    assert cap.band_lo == pytest.approx(C.band(tok, 3)) and cap.band_hi == pytest.approx(tok / 100)
    assert (cap.lo, cap.hi) == pytest.approx(state.ends())
    iv = cap.as_dict()
    assert iv["noise_pct"] == decode and iv["noise_source"] == "measured" and iv["noise_repeats"] == 3
    assert iv["noise_pct_by_figure"] == {"output_tok_s": tok, "ttft": noise.figure(C.TTFT), "decode": decode}
    words = (f"run-to-run band {tok:g} % on output tok/s (the largest, {decode:g} %, on the decode p99), measured "
             "from repeats")
    assert V.noise_words(cap.noise_pct, cap.noise_source, cap.noise_by_figure) == words
    assert words in answer.capacity_words(cap.as_dict())
    assert_words(answer.capacity_words(cap.as_dict()))
    # where output tok/s set the band, or the band is assumed, the words stay as they were
    assert V.noise_words(8.0, "measured", {"output_tok_s": 8.0, "ttft": 5.0, "decode": 3.0}) == (
        "run-to-run band 8 %, measured from repeats")
    assert V.noise_words(11.0, "assumed", dict.fromkeys(("output_tok_s", "ttft", "decode"), 11.0)) == (
        "run-to-run band 11 %, assumed, no point was run twice")
