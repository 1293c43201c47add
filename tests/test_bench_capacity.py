"""SLO capacity math: per-request samples, bootstrap intervals, pass with confidence, the run-to-run band
(the search over loads: tests/test_bench_search.py)."""

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


def test_end_to_end_latency_per_request_is_ttft_plus_the_decode():
    """As vLLM's own e2e latency: the TTFT plus the request's gaps (or its stored latency, where kept)."""
    data = detailed([100, 200], itl_ms=10, out=5)
    s = C.samples_from_result(data)
    assert s.e2e_ms == pytest.approx((140.0, 240.0))
    assert (s + s).e2e_ms == pytest.approx((140.0, 240.0, 140.0, 240.0))
    data["latencies"] = [0.1 + 0.08, 0.2 + 0.04]
    assert C.samples_from_result(data).e2e_ms == pytest.approx((180.0, 240.0))


def test_a_p99_interval_of_one_value_per_request_needs_a_hundred_requests():
    values = list(np.random.default_rng(3).lognormal(5, 0.5, 150))
    lo, hi = C.p99_interval(values)
    assert (lo, hi) == C.bootstrap_p99([[v] for v in values]) and lo <= C.p99(values) <= hi
    assert C.p99_interval(values[:99]) is None and C.p99_interval([None] * 200) is None
    assert C.widen((90.0, 110.0), 0.1) == (pytest.approx(90 / 1.1), pytest.approx(121.0))


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


def test_the_grouped_bootstrap_is_the_nearest_rank_p99_of_each_resample():
    """Resampling whole requests: each resample's p99 is the nearest-rank 0.99 quantile of the drawn
    requests' values, whichever shortcut computes it (here, a case where the top values all belong to one
    request, which many resamples do not draw)."""
    rng = np.random.default_rng(7)
    groups = [list(rng.uniform(10, 20, int(rng.integers(3, 9)))) for _ in range(400)]
    groups.append(list(rng.uniform(90, 100, 120)))  # one slow request owns every top value
    resamples = 200
    draws = np.random.default_rng(3).integers(0, len(groups), size=(resamples, len(groups)))
    stats = []
    for row in draws:
        drawn = np.sort(np.concatenate([groups[k] for k in row]))
        stats.append(drawn[max(0, math.ceil(0.99 * len(drawn)) - 1)])
    expected = tuple(float(v) for v in np.percentile(stats, [2.5, 97.5]))
    assert C.bootstrap_p99(groups, resamples=resamples, seed=3) == expected


def test_the_single_value_bootstrap_counts_the_top_and_gives_what_a_sort_gives():
    """One TTFT a request: from 400 requests on, each resample's p99 is read off the draws that land among the
    top values; a resample that drew none of them (a constructed one here) is sorted whole. Every resample's
    figure is the one a sort of its draws gives, ties and all."""
    from bench.analysis.capacity import stats

    rng = np.random.default_rng(11)
    for n in (399, 400, 1000, 2600):
        values = np.round(rng.lognormal(5, 0.6, n) / 5)  # ties
        draws = np.random.default_rng(n).integers(0, n, size=(300, n))
        draws[0] = int(np.argmin(values))  # every draw the smallest value: its p99 lies below the top slice
        draws[1, : n // 2] = int(np.argmax(values))  # half the draws the largest
        rank = max(0, math.ceil(0.99 * n) - 1)
        sorted_draws = [float(np.sort(values[row])[rank]) for row in draws]
        assert stats._p99_of_draws(values, draws).tolist() == sorted_draws  # noqa: SLF001


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


def test_the_run_to_run_band_is_measured_from_repeats_and_widens_judgements():
    runs = [detailed([100.0] * 200, seed=1) | {"output_throughput": tok, "p99_ttft_ms": 100.0}
            for tok in (1000.0, 1100.0)]
    measured = C.noise([runs], default_pct=17.0)
    assert measured.source == "measured" and measured.df == 1
    spread = 100 * C.Z95 * abs(math.log(1100 / 1000)) / math.sqrt(2)
    assert measured.measured_pct == pytest.approx(spread, abs=0.01)
    assert min(spread, 17.0) < measured.pct < max(spread, 17.0)  # pooled with the default
    assert C.noise([[runs[0]]], default_pct=17.0) == C.Noise(17.0, None, 0)
    named = C.noise([runs], default_pct=17.0, names=[["a.json", "b.json"]])
    assert named.repeats == 2 and named.names == (("a.json", "b.json"),)
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


def test_a_decode_latency_streaming_does_not_resolve_is_no_evidence():
    # ITL p99 of 0.0045 ms: tokens arrive bunched in one chunk; that says nothing about decoding
    bunched = detailed([100.0] * 200, itl_ms=0.0045)
    j = C.judge_results([bunched], **LIMITS)
    assert j.decode.state == C.UNMEASURED and j.state == C.UNMEASURED and not C.confident(j, 100)
    # TPOT divides a request's whole decode time: measurable whatever the chunking
    assert C.judge_results([bunched], **LIMITS, decode_metric="tpot").state == C.PASS
    # a TTFT miss still fails the point
    assert C.judge_results([detailed([900.0] * 200, itl_ms=0.0045)], **LIMITS).state == C.FAIL
    # without detail the point estimate is treated alike
    summary = C.judge_results([{"p99_ttft_ms": 100, "p99_itl_ms": 0.0045, "completed": 500}], **LIMITS)
    assert summary.state == C.UNMEASURED


# --- one band per figure ---------------------------------------------------------------------


def agreeing_tok_s_spread_itl(itl_medians=(20.0, 24.0, 22.0)):
    """Three comparable repeats as on the H200 at c=24: output tok/s within 1 %, the same TTFT
    p99, ITL p99s 20 % apart."""
    return [detailed([100.0] * 200, itl_ms=itl, seed=k)
            | {"output_throughput": tok}
            for k, (tok, itl) in enumerate(zip((1000.0, 1005.0, 1010.0), itl_medians))]


def pooled_band(values, default_pct):
    """The band of one figure, computed apart from the code: 1.96 x the standard deviation of the logs
    (n - 1 degrees of freedom), pooled with the default as one more degree of freedom."""
    logs = np.log(values)
    df = len(values) - 1
    var = float(np.var(logs, ddof=1))
    prior = (default_pct / 100 / C.Z95) ** 2
    return 100 * C.Z95 * math.sqrt((df * var + prior) / (df + 1))


def test_each_figure_has_its_own_band_and_the_largest_is_the_headline():
    noise = C.noise([agreeing_tok_s_spread_itl()], default_pct=11.0)
    tok, ttft, decode = (noise.figure(f) for f in (C.OUTPUT_TOK_S, C.TTFT, C.DECODE))
    assert tok == pytest.approx(pooled_band([1000.0, 1005.0, 1010.0], 11.0), abs=0.01)
    assert ttft == pytest.approx(pooled_band([100.0] * 3, 11.0), abs=0.01)  # agreeing runs: the default / sqrt(3)
    assert decode == pytest.approx(pooled_band([20.0, 24.0, 22.0], 11.0), abs=0.01)
    assert tok < 7 and decode > 15
    # the headline stays the largest: the decode p99's, what the repeats alone measured of it
    assert noise.pct == decode == max(noise.bands().values()) and noise.widest == C.DECODE
    logs = np.log([20.0, 24.0, 22.0])
    assert noise.measured_pct == pytest.approx(100 * C.Z95 * float(np.std(logs, ddof=1)), abs=0.01)
    assert noise.df == 2 and noise.repeats == 3 and noise.source == "measured"
    assert noise.bands() == {"output_tok_s": tok, "ttft": ttft, "decode": decode}


def test_a_figure_no_repeat_measured_keeps_the_default():
    runs = agreeing_tok_s_spread_itl()
    for r in runs:
        del r["p99_ttft_ms"]  # a result without a TTFT p99
    noise = C.noise([runs], default_pct=11.0)
    assert noise.figure(C.TTFT) == 11.0 and noise.figure(C.DECODE) == noise.pct > 15
    # nothing measured: every figure has the default
    assumed = C.noise([[runs[0]]], default_pct=11.0)
    assert assumed.bands() == dict.fromkeys(C.NOISE_FIGURES, 11.0) and assumed.widest is None
    # per-figure defaults (the open loop starting from the closed loop's bands)
    start = {C.OUTPUT_TOK_S: 4.0, C.TTFT: 6.0, C.DECODE: 15.0}
    opened = C.noise([[runs[0]]], default_pct=start)
    assert opened.bands() == start and opened.pct == 15.0 and opened.source == "assumed"
    with pytest.raises(ValueError, match="no default run-to-run band for ttft"):
        C.noise([runs], default_pct={C.OUTPUT_TOK_S: 4.0, C.DECODE: 15.0})
    with pytest.raises(ValueError, match="no run-to-run band for 'p99'"):
        noise.figure("p99")


def test_each_check_is_widened_by_its_own_figures_band():
    noise = C.noise([agreeing_tok_s_spread_itl()], default_pct=11.0)
    ttft, decode = noise.figure(C.TTFT) / 100, noise.figure(C.DECODE) / 100
    # TTFT 460 ms against 500: within the TTFT band (about 6 %), not within the decode band (about 16 %)
    point = [detailed([460.0] * 200, itl_ms=20.0)]
    judged = C.judge_results(point, **LIMITS, noise_pct=noise)
    assert judged.ttft.band == pytest.approx(ttft) and judged.decode.band == pytest.approx(decode)
    assert judged.ttft.interval_ms[1] == pytest.approx(460.0 * (1 + ttft))
    assert judged.ttft.state == C.PASS and judged.state == C.PASS
    assert C.judge_results(point, **LIMITS, noise_pct=noise.pct).state == C.STRADDLE  # one band for both: it would not
    # ITL 46 ms against 50: the decode band (about 16 %) makes it straddle, whatever the TTFT band
    slow_decode = C.judge_results([detailed([100.0] * 200, itl_ms=46.0)], **LIMITS, noise_pct=noise)
    assert slow_decode.decode.state == C.STRADDLE and slow_decode.ttft.state == C.PASS
    # the search's way: judged once without a band, re-judged under the band; four runs halve each band
    bare = C.judge_results(point * 4, **LIMITS)
    again = C.with_band(bare, noise)
    assert (again.ttft.band, again.decode.band) == pytest.approx((ttft / 2, decode / 2))
    # one number still widens both checks alike (the assumed default, a caller with one figure)
    single = C.with_band(bare, 17.0)
    assert single.ttft.band == single.decode.band == pytest.approx(0.085)
    summary = C.judge_summary(460.0, 46.0, **LIMITS, noise_pct=noise)
    assert summary.ttft.band == pytest.approx(ttft) and summary.decode.band == pytest.approx(decode)


def test_a_bootstrap_is_kept_for_the_same_values_and_never_for_others():
    """A search judges its runs again and again: the same requests' interval is computed once; requests
    of the same count with other values get their own."""
    from bench.analysis.capacity import stats

    rng = np.random.default_rng(7)
    one = [[float(v)] for v in rng.uniform(100, 500, 200)]
    other = [[v[0] * 1.5] for v in one]
    first = stats.bootstrap_p99(one)
    kept = len(stats._BOOTSTRAPS)
    assert stats.bootstrap_p99([list(g) for g in one]) == first and len(stats._BOOTSTRAPS) == kept
    assert stats.bootstrap_p99(other) == pytest.approx((first[0] * 1.5, first[1] * 1.5))
    assert len(stats._BOOTSTRAPS) == kept + 1
