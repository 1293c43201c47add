"""The answer's state and sentences (bench/analysis/answer.py), as `bench publish`, `bench open` and the stack
output `report` give them."""

from __future__ import annotations

import pytest

from bench.analysis import answer


@pytest.mark.parametrize("verdict, state", [
    (None, None),
    ({"threshold": 1.5, "min_ratio": 3.49, "pass": True, "basis": "slo"}, "pass"),
    ({"threshold": 1.5, "min_ratio": 1.2, "pass": False, "basis": "slo"}, "fail"),
    # the ratio clears the threshold but the verdict did not pass: the comparison was incomplete
    ({"threshold": 1.5, "min_ratio": 2.0, "pass": False, "basis": "slo"}, "inconclusive"),
    ({"threshold": 1.5, "min_ratio": None, "pass": False, "basis": "slo"}, "inconclusive"),
    # the three-state verdict, where the report writes it, is taken as it is
    ({"threshold": 1.5, "min_ratio": 1.2, "pass": False, "state": "inconclusive", "reasons": ["x"]}, "inconclusive"),
])
def test_state(verdict, state):
    assert answer.verdict_state({"verdict": verdict}) == state


def test_lines_are_sentences_without_reprs():
    labels = {"candidate": "g7e/nvfp4-g7e", "baseline": "g7e/nvfp4-l40s"}
    line = answer.verdict_line({"verdict": {"threshold": 1.5, "min_ratio": 3.4912, "pass": True, "basis": "slo"}},
                               labels)
    assert line == ("Verdict PASS for g7e/nvfp4-g7e against g7e/nvfp4-l40s on the slo basis: smallest per-GPU "
                    "ratio 3.49x against the threshold 1.5x.")
    line = answer.verdict_line({"verdict": {"threshold": 1.5, "min_ratio": None, "pass": False, "basis": "slo",
                                            "state": "inconclusive", "reasons": ["S4_rag: no valid run"]}}, labels)
    assert line.startswith("Verdict INCONCLUSIVE") and "no ratio" in line and line.endswith("S4_rag: no valid run.")
    assert answer.verdict_line({"verdict": None}, {"baseline": "matrix/gemma-fp8"}) == (
        "No verdict: matrix/gemma-fp8 was reported without a baseline to compare with.")
    plan = {"basis": "slo", "current": {"replicas": 12, "usd_month": None},
            "configurations": [{"label": "a", "replicas": 4}, {"label": "b", "replicas": None},
                               {"label": "c", "replicas": None, "replicas_range": [4, 6],
                                "reason": "run the capacity search to narrow it"},
                               {"label": "d", "replicas": None, "replicas_range": [3, None], "reason": None}]}
    assert answer.plan_line(plan) == ("Plan on the slo basis: a 4 replicas, b: cannot carry the load at the SLO, "
                                      "c 4-6 replicas (run the capacity search to narrow it), d 3 or more replicas "
                                      "(today 12).")
    for text in (line, answer.plan_line(plan)):
        assert "None" not in text and "nan" not in text


def test_a_capacity_is_worded_with_the_run_it_came_from():
    """summary.json's interval in words: the figure, its run (load, loop, file where recorded), where the
    SLO holds; the repeats and run-to-run spread when the analysis records them, nothing when it does not."""
    interval = {"source": "search", "state": "meets_slo", "output_tok_s": [2836.4, 3010.25], "load_unit": "concurrency",
                "load_pass": 28, "load_fail": 32, "load_max": 64, "confirmed": True}
    assert answer.capacity_words(interval) == ("2,836.4 to 3,010.2 tok/s (from c=28, closed loop; meets the SLO at "
                                               "c=28, misses it at c=32)")
    recorded = {**interval, "source_run": "search/S1_chat_c28.run2.json", "repeats": 2, "noise_pct": 12.5}
    assert answer.from_words(recorded) == ("c=28, closed loop, search/S1_chat_c28.run2.json, mean of 2 runs; "
                                           "run-to-run band 12.5 %")
    # the runs behind the figure, as bench sweep's printed line names them
    both = {**recorded, "source_runs": ["search/S1_chat_c28.run1.json", "search/S1_chat_c28.run2.json"]}
    assert answer.from_words(both).startswith("c=28, closed loop, search/S1_chat_c28.run1.json and 1 more, mean of 2 "
                                              "runs; ")
    assert answer.from_words({**recorded, "repeats": 1}).startswith("c=28, closed loop, search/S1_chat_c28.run2.json; ")
    assert answer.from_words({**recorded, "noise_source": "measured", "point_tok_s": 2836.4}, figure=True) == (
        "2,836.4 tok/s (c=28, closed loop, search/S1_chat_c28.run2.json, mean of 2 runs); run-to-run band 12.5 %, "
        "measured from repeats")
    # a band set by another figure than output tok/s says which, and the tok/s band that widened the ends
    by_figure = {"output_tok_s": 6.43, "ttft": 6.35, "decode": 14.18}
    assert answer.from_words({**recorded, "noise_pct": 14.18, "noise_source": "measured",
                              "noise_pct_by_figure": by_figure}) == (
        "c=28, closed loop, search/S1_chat_c28.run2.json, mean of 2 runs; run-to-run band 6.43 % on output tok/s "
        "(the largest, 14.18 %, on the decode p99), measured from repeats")
    assert answer.source_run({**interval, "source_run": {"file": "S1_chat_c24.json", "load": 24}}) == (
        24, "S1_chat_c24.json")
    assert answer.capacity_words({**interval, "output_tok_s": [2836.4, None], "load_fail": None},
                                 per_gpu=[709.1, None]).startswith("709.1 tok/s per GPU or more (from c=28")
    never = {"source": "grid", "state": "never_meets_slo", "output_tok_s": [0.0, 0.0], "load_unit": "concurrency",
             "load_pass": None, "load_fail": 1}
    assert answer.capacity_words(never) == ("0 tok/s (never meets the SLO at the loads tested: misses it from c=1, "
                                            "one request at a time)")
    assert answer.capacity_words({"state": "no_data"}) == "unknown (no usable run)"
    opened = {"source": "open_loop", "state": "meets_slo", "output_tok_s": [900.0, 1000.0], "load_unit": "req/s",
              "load_pass": 7.5, "load_fail": 8.25}
    assert answer.capacity_words(opened) == ("900.0 to 1,000.0 tok/s (from 7.5 req/s, open loop; meets the SLO at "
                                             "7.5 req/s, misses it at 8.25 req/s)")


def test_where_the_slo_holds_never_reads_a_missing_load_as_none():
    """make demo, 2026-12-06: a broken measurement's row read "still meets the SLO at None, the highest load tested"."""
    from bench.analysis import answer as A

    broken = {"state": "broken_measurement", "load_unit": "concurrency", "load_pass": None, "load_fail": None}
    assert A.bracket_words(broken) == "not decided: repeats of one run disagree (a broken measurement)"
    unsure = {"state": "meets_slo", "load_unit": "concurrency", "load_pass": None, "load_fail": 8}
    assert A.bracket_words(unsure) == "no load met the SLO with confidence; misses it at c=8"
    assert A.bracket_words(unsure | {"load_fail": None}) == "no load met the SLO with confidence"
    assert A.bracket_words(unsure | {"load_pass": 4}) == "meets the SLO at c=4, misses it at c=8"
    for interval in (broken, unsure, unsure | {"load_fail": None}):
        assert "None" not in A.bracket_words(interval)
    # the pages word a broken capacity as the markdown does: its reason, not "unknown from closed loop"
    from bench.analysis import markup

    reason = "broken measurement: repeats of the same run differ in output tok/s by a band of 30.1 %"
    html = markup.capacity_html(broken | {"reason": reason}, None, ["scenarios", "S2_summary"])
    assert html == "not measured: " + reason and A.capacity_words(broken | {"reason": reason}) == html
