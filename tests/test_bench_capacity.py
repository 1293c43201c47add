"""SLO capacity math: per-request samples, bootstrap intervals, pass with confidence, the search."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bench.analysis import capacity as C

LIMITS = {"ttft_ms": 500.0, "decode_ms": 50.0}


def detailed(ttfts_ms, itl_ms=20.0, out=8, jitter=0.0, seed=0):
    rng = random.Random(seed)
    itls = [[(itl_ms + rng.uniform(-jitter, jitter)) / 1000 for _ in range(out - 1)] for _ in ttfts_ms]
    return {"ttfts": [t / 1000 for t in ttfts_ms], "itls": itls, "output_lens": [out] * len(ttfts_ms),
            "errors": [""] * len(ttfts_ms), "completed": len(ttfts_ms),
            "p99_ttft_ms": float(np.percentile(ttfts_ms, 99)), "p99_itl_ms": itl_ms}


def test_samples_tpot_from_itls_and_latencies():
    data = detailed([100, 200], itl_ms=10, out=5)
    s = C.samples_from_result(data)
    assert s.ttft_ms == (100.0, 200.0)
    assert s.tpot_ms == pytest.approx((10.0, 10.0))
    assert len(s.itl_ms[0]) == 4
    data["latencies"] = [0.1 + 0.08, 0.2 + 0.04]  # 0.33 stores the latency: TPOT = (lat - ttft)/(out-1)
    s = C.samples_from_result(data)
    assert s.tpot_ms == pytest.approx((20.0, 10.0))
    assert C.samples_from_result({"ttfts": [0.1]}) is None  # no detail


def test_p99_matches_numpy_and_interval_brackets_it():
    rng = np.random.default_rng(1)
    values = list(rng.lognormal(5, 0.5, 300))
    point = C.p99(values)
    assert point == pytest.approx(float(np.percentile(values, 99)))
    lo, hi = C.bootstrap_p99([[v] for v in values])
    assert lo < point < hi or lo <= point <= hi
    assert lo >= min(values) and hi <= max(values)
    # Deterministic: the same data gives the same interval.
    assert C.bootstrap_p99([[v] for v in values]) == (lo, hi)
    # Fewer samples, wider interval (relative to the point).
    lo32, hi32 = C.bootstrap_p99([[v] for v in values[:32]])
    assert (hi32 - lo32) / C.p99(values[:32]) > (hi - lo) / point * 0.5


def test_itl_interval_resamples_whole_requests():
    # One slow request with all-slow gaps: its ITLs move together in every resample.
    groups = [[10.0] * 50 for _ in range(99)] + [[100.0] * 50]
    lo, hi = C.bootstrap_p99(groups)
    assert lo == 10.0 and hi == 100.0


def test_judgement_states():
    far_below = C.judge_results([detailed([100 + i % 7 for i in range(200)])], **LIMITS)
    assert far_below.state == C.PASS and far_below.requests == 200
    assert C.confident(far_below, 200) and not C.confident(far_below, 300)
    far_above = C.judge_results([detailed([900 + i % 7 for i in range(200)])], **LIMITS)
    assert far_above.state == C.FAIL
    straddle = C.judge_results([detailed(at_the_limit(200))], **LIMITS)
    assert straddle.state == C.STRADDLE
    lo, hi = straddle.ttft.ci_ms
    assert lo <= 500 < hi
    # Decode limit on TPOT instead of ITL.
    slow_decode = C.judge_results([detailed([100] * 200, itl_ms=60)], **LIMITS, decode_metric="tpot")
    assert slow_decode.state == C.FAIL and slow_decode.decode.name == "tpot"
    # No detail: a point estimate only, never a confident pass.
    summary_only = C.judge_results([{"p99_ttft_ms": 100, "p99_itl_ms": 10, "completed": 500}], **LIMITS)
    assert summary_only.state == C.PASS and not summary_only.detailed
    assert not C.confident(summary_only, 200)


def test_repeats_are_pooled():
    a = detailed([100] * 150 + [600] * 3, seed=1)
    b = detailed([100] * 150, seed=2)
    one = C.judge_results([a], **LIMITS)
    both = C.judge_results([a, b], **LIMITS)
    assert both.requests == 303 and both.runs == 2
    assert one.ttft.p99_ms > both.ttft.p99_ms


# --- search ----------------------------------------------------------------------------------


def at_the_limit(n):
    """TTFTs whose true p99 is 500 ms: 2 % of requests spread evenly over 450-550 ms."""
    tail = max(2, n // 50)
    return [250.0] * (n - tail) + list(np.linspace(450, 550, tail))


def model_result(c, requests, seed=0):
    """Deterministic latency model: TTFT p99 = 90 ms x concurrency."""
    return detailed([90.0 * c] * requests, seed=seed)


def run_search(grid_cs, result, noise=0.0, **kw):
    """Drive a search; `result(c, n, k)` = the k-th run's result of n requests at c."""
    grid = {c: result(c, max(32, 8 * c), 0) for c in grid_cs}
    search = C.Search(grid, **LIMITS, default_noise_pct=noise, **kw)
    order, sizes = [], []
    while (c := search.next_run()) is not None:
        n = search.requests_for(c, screen=max(32, 8 * c))
        order.append(c)
        sizes.append(n)
        search.observe(c, result(c, n, len(search.runs.get(c, [])) + 1), n)
        assert len(order) < 30
    search.sizes = sizes
    return search, order


def test_search_converges_on_the_known_capacity():
    search, order = run_search([1, 2, 4, 8, 16, 32, 64], lambda c, n, k: model_result(c, n))
    assert search.result() == {"concurrency_pass": 5, "concurrency_fail": 6}
    # c=6 fails with confidence on its 48-request screen; c=5 straddles on its 40-request screen (too
    # few requests for a p99 interval) and is topped up to 160 before the pass counts; then each end
    # is run once more (c=6 at its screen's size), c=6 first since c=5 ran last.
    assert order == [6, 5, 5, 6] and search.sizes == [48, 40, 120, 48]


def test_search_confirms_a_grid_pass_end_and_moves_down_when_it_fails():
    # TTFT p99 = 90 x c, but the grid's 64-request c=8 point was lucky (point estimate passes).
    def result(c, n, k):
        if c == 8 and k == 0:
            return detailed([400] * n)
        return model_result(c, n)
    search, order = run_search([1, 2, 4, 8, 16], result, bracket=1.0)
    # [8, 16) is within a 100 % bracket, so the pass end is confirmed: it fails; then [4, 8) is
    # within the bracket too and 4 is confirmed (screen + top-up), then the ends are repeated.
    assert order[:3] == [8, 4, 4]
    assert search.result() == {"concurrency_pass": 4, "concurrency_fail": 8}
    tight, order = run_search([1, 2, 4, 8, 16], result)
    assert order[:2] == [12, 10] and tight.result() == {"concurrency_pass": 5, "concurrency_fail": 6}


def test_bracket_setting_controls_precision():
    model = lambda c, n, k: detailed([25.0 * c] * n)  # noqa: E731 - capacity 20
    tight, order_tight = run_search([1, 2, 4, 8, 16, 32, 64], model, bracket=0.05)
    loose, order_loose = run_search([1, 2, 4, 8, 16, 32, 64], model, bracket=0.25)
    assert tight.result() == {"concurrency_pass": 20, "concurrency_fail": 21}
    lo, hi = loose.result()["concurrency_pass"], loose.result()["concurrency_fail"]
    assert lo <= 20 < hi and hi - lo <= 0.25 * lo
    assert len(order_loose) < len(order_tight)


def test_straddling_point_is_repeated_at_the_end_and_counts_as_failing_unless_confident():
    def result(c, n, k):
        if c == 5:  # true p99 right at the limit: the pooled repeats still straddle
            return detailed(at_the_limit(n))
        return model_result(c, n)

    search, order = run_search([1, 2, 4, 8], result)
    # its 40-request screen misses by the point estimate (counts as failing, no top-up), c=4 is
    # confirmed, then c=5, an end that only straddles, is run again (not back to back)
    assert order == [6, 5, 4, 4, 5] and search.reruns[5] == 1
    # its upper end is the lowest concurrency that misses for sure (c=6 at 540 ms), not c=5
    assert search.result() == {"concurrency_pass": 4, "concurrency_fail": 6}
    _, no_repeats = run_search([1, 2, 4, 8], result, repeats=0, end_repeats=0)
    assert no_repeats.count(5) == 1


def test_a_failure_near_the_boundary_whose_repeats_pass_is_not_a_hard_fail():
    # c=5 is truly at 450 ms; its top-up run was slow (run-level factor 1.15: 518 ms) and its
    # repeats normal: pooled, it passes, so the capacity moves up to it.
    def result(c, n, k):
        slow = 1.15 if (c == 5 and k == 2) else 1.0
        return detailed([90.0 * c * slow] * n, seed=k)
    search, order = run_search([1, 2, 4, 8], result, noise=10.0, repeats=2)
    assert search.runs[5] and search.decided(5) is True
    assert search.result()["concurrency_pass"] == 5


def test_the_run_to_run_band_is_measured_from_repeats_and_widens_judgements():
    runs = [detailed([100.0] * 200, seed=1) | {"output_throughput": tok, "p50_ttft_ms": 100.0}
            for tok in (1000.0, 1100.0)]
    measured = C.noise([runs], default_pct=17.0)
    assert measured.source == "measured" and measured.df == 1
    spread = 100 * C.Z95 * abs(math.log(1100 / 1000)) / math.sqrt(2)
    assert measured.measured_pct == pytest.approx(spread, abs=0.01)
    assert min(spread, 17.0) < measured.pct < max(spread, 17.0)  # pooled with the default
    assert C.noise([[runs[0]]], default_pct=17.0) == C.Noise(17.0, None, 0)
    # 460 ms against 500: passes within one run, straddles once a 17 % run-to-run band is on it
    point = [detailed([460.0] * 200)]
    assert C.judge_results(point, **LIMITS).state == C.PASS
    assert C.judge_results(point, **LIMITS, noise_pct=17.0).state == C.STRADDLE
    assert C.judge_results(point * 4, **LIMITS, noise_pct=17.0).state == C.PASS  # 4 runs: band / 2


def test_too_few_requests_give_no_p99_interval():
    j = C.judge_results([detailed([100.0 + i for i in range(32)])], **LIMITS)
    assert j.state == C.STRADDLE and j.as_dict()["ttft_p99_ci_ms"] is None
    assert "not enough requests for a p99 interval (32; at least 100)" in j.as_dict()["p99_ci_note"]
    assert C.judge_results([detailed([900.0] * 32)], **LIMITS).state == C.FAIL  # a clear miss still fails


def test_never_meets_and_above_grid():
    never, order = run_search([1, 2, 4], lambda c, n, k: model_result(c + 10, n))
    assert never.result() == {"state": C.NEVER_MEETS_SLO} and order == []
    always, order = run_search([1, 2, 4], lambda c, n, k: model_result(c / 100, n))
    assert always.result() == {"concurrency_pass": 4, "concurrency_fail": None}
    assert order == [4, 4]  # its 32-request grid point is confirmed: screen, then topped up to 160


def test_rate_list_and_rate_capacity():
    assert C.rate_list(2.0) == [1.0, 1.5, 1.8, 2.0, 2.2]
    points = [{"rate": 1.0, "meets": True, "output_tok_s": 10, "goodput_req_s": 1.0},
              {"rate": 1.5, "meets": True, "output_tok_s": 15, "goodput_req_s": 1.4},
              {"rate": 2.0, "meets": False}, {"rate": 2.2, "meets": True}]
    assert C.rate_capacity(points) == {"req_s": 1.5, "output_tok_s": 15, "goodput_req_s": 1.4}
    assert C.rate_capacity([{"rate": 1.0, "meets": False}]) is None
