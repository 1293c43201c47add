"""Runs sized by time (bench/run/sizing.py): from a burst at the run's load, a window held, never fewer
requests than a p99 needs; a run that did not hold its load is not a measurement of it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from bench.run import grid, sizing


def closed_loop(concurrency: int, requests: int, latency_s: float, gap_s: float = 0.0) -> dict:
    """A closed loop as vLLM's client runs it: `concurrency` slots, each starting its next request
    `gap_s` after the last one ended, every request `latency_s` long."""
    free = [0.0] * concurrency
    starts, lat = [], []
    for _ in range(requests):
        k = min(range(concurrency), key=lambda i: free[i])
        starts.append(free[k])
        lat.append(latency_s)
        free[k] = free[k] + latency_s + gap_s
    end = max(s + l for s, l in zip(starts, lat))
    return {"start_times": starts, "latencies": lat, "max_concurrency": concurrency, "completed": requests,
            "num_prompts": requests, "duration": end}


def test_a_run_is_sized_to_its_window_from_the_burst_and_never_under_the_floor():
    # 40 req/s at c=8, a 15 s window with the margin, plus the last wave
    assert sizing.closed_loop_requests(40.0, 8, 15.0) == 15 * 1.4 * 40 + 8
    assert sizing.closed_loop_requests(0.5, 1, 15.0) == sizing.MIN_REQUESTS  # slow: the p99 floor wins
    assert sizing.closed_loop_requests(None, 4, 5.0) == max(100, int(5 * 1.4 * 16) + 4)  # no burst: assumed
    assert sizing.open_loop_requests(2.0, 15.0) == 100 and sizing.open_loop_requests(20.0, 15.0) == 330
    assert sizing.burst_requests(1) == 8 and sizing.burst_requests(64) == 128 and sizing.burst_requests(500) == 256


def test_closed_loop_runs_are_whole_waves():
    # the H100's grid at c=32: 258 requests made 8 waves and a ninth of 2, which read 7 % below a run of 254;
    # a run is now a whole number of waves
    for rate, c in ((9.9, 32), (7.8, 24), (0.27, 1), (33.3, 7), (5.0, 64)):
        n = sizing.closed_loop_requests(rate, c, 15.0)
        assert n % c == 0 and n >= max(sizing.MIN_REQUESTS, 2 * c)
        assert n - c < max(sizing.MIN_REQUESTS, 2 * c, math.ceil(15.0 * sizing.MARGIN * rate) + c)  # the least such
    assert sizing.closed_loop_requests(9.9, 32, 15.0) == 256 and sizing.closed_loop_requests(0.5, 3, 15.0) == 102
    assert sizing.whole_waves(sizing.MAX_REQUESTS + 5, 64) == sizing.MAX_REQUESTS // 64 * 64  # capped, still whole
    # a closed-loop run sized again after falling short is whole waves too, and whole prefixes where it has them;
    # an open-loop run's concurrency is only its cap: its count keeps no waves
    plain, shared = SimpleNamespace(workload=None, concurrency=24), SimpleNamespace(
        workload=SimpleNamespace(num_prefixes=10), concurrency=8)
    assert grid.whole_prefixes(plain, sizing.resize(201, 10.0, 15.0, 24)) == 504  # 483 -> 21 waves of 24
    assert grid.whole_prefixes(shared, 104) == 120  # a multiple of 10 prefixes and of 8 in flight
    assert grid.whole_prefixes(plain, 116, closed_loop=False) == 116
    assert grid.whole_prefixes(shared, 116, closed_loop=False) == 120


def test_a_lighter_load_already_measured_bounds_a_bursts_low_reading():
    measured = {1: 20.0, 4: 60.0, 16: 150.0}
    assert sizing.rate_for(30.0, measured, 8) == 60.0  # c=4 ran at 60 req/s: c=8 serves at least that
    assert sizing.rate_for(90.0, measured, 8) == 90.0
    assert sizing.rate_for(None, measured, 2) == 20.0 and sizing.rate_for(None, {}, 2) is None


def test_a_burst_reads_its_rate_after_the_first_wave():
    # a first wave slowed by its start (each request 0.5 s), then steady 0.1 s requests: 4 slots
    run = closed_loop(4, 4, latency_s=0.5)
    tail = closed_loop(4, 8, latency_s=0.1)
    run["start_times"] += [s + 0.5 for s in tail["start_times"]]
    run["latencies"] += tail["latencies"]
    run.update(completed=12, duration=0.7)
    assert sizing.burst_rate(run, 4) == pytest.approx(8 / 0.2)  # 8 requests in the 0.2 s after the first wave
    assert sizing.burst_rate({"completed": 12, "duration": 0.7}, 4) == pytest.approx(12 / 0.7)  # no detail


def test_the_steady_window_is_the_time_the_concurrency_was_held():
    run = closed_loop(4, 400, latency_s=0.1)  # 10 waves a second: 100 waves, the last one drains
    top, held = sizing.in_flight(run)
    assert top == 4 and held == pytest.approx(run["duration"], abs=1e-6)  # waves in lockstep: the last one is full
    assert sizing.window_problem(run, 4, 5.0) is None
    short = sizing.window_problem(run, 4, 15.0)
    assert "held concurrency 4" in short and "less than the 15 s window" in short and "repeated" in short


def test_a_run_that_never_reached_its_concurrency_is_not_a_measurement_of_it():
    run = closed_loop(4, 400, latency_s=0.1)
    run["max_concurrency"] = 8  # asked for 8, never had more than 4 in flight
    words = sizing.window_problem(run, 8, 5.0)
    assert words.startswith("the run never had 8 requests in flight (at most 4)")


def test_a_client_a_request_behind_still_holds_a_high_concurrency():
    # c=32 with a client that lags: 29 of 32 in flight counts as holding it, 28 does not
    assert sizing.held_at(32) == 29 and sizing.held_at(4) == 4 and sizing.held_at(1) == 1


def test_without_detail_the_window_is_estimated_from_the_duration():
    run = {"duration": 20.0, "completed": 100, "max_concurrency": 10}
    assert sizing.steady_window(run, 10) == pytest.approx(18.0)  # less the last wave's share
    assert sizing.window_problem(run, 10, 15.0) is None and sizing.window_problem(run, 10, 19.0) is not None


def test_a_short_run_is_sized_again_from_what_it_held():
    assert sizing.resize(200, 4.0, 5.0, 8) == 400  # 200 x 5 x 1.6 / 4
    assert sizing.resize(200, None, 5.0, 8) == 400


def test_tries_count_failures_against_attempts_and_short_runs_on_top():
    tries = sizing.Tries(2)
    assert not tries.last_failure()
    assert tries.another(short=True) and tries.another(short=True)  # MAX_RESIZES short runs, free
    assert tries.shorts == 2 and not tries.last_failure()
    assert tries.another(short=True) and tries.last_failure()  # a third counts as a failure
    assert not tries.another(short=False)
    once = sizing.Tries(1)
    assert once.last_failure() and not once.another(short=False)
    errors = sizing.Tries(2)
    assert errors.another(short=False) and not errors.another(short=False)


def test_a_clients_turn_around_between_requests_is_not_a_drop_in_load():
    # c=1, 9 ms requests with a 9 ms turn-around (a busy 2-core machine serving 2-token requests):
    # the load never left, the whole run holds it
    run = closed_loop(1, 500, latency_s=0.009, gap_s=0.009)
    top, held = sizing.in_flight(run)
    assert top == 1 and held == pytest.approx(run["duration"], rel=1e-6)
    assert sizing.window_problem(run, 1, 5.0) is None
    # a client that falls behind by longer than a turn-around: only the time in flight counts
    lagging = closed_loop(1, 50, latency_s=0.1, gap_s=0.1)
    assert sizing.in_flight(lagging)[1] == pytest.approx(50 * 0.1)
    assert sizing.window_problem(lagging, 1, 8.0) is not None
