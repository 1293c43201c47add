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
