"""The rehearsal's accounting without vLLM: SLO attainment per request, the autoscaler on the reads,
replica-hours and cost against the plan, the report section; and `bench rehearse`'s refusals."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import main as bench_main
from bench.analysis import fleet as F
from bench.run import rehearsal as RH

POOL = {"configuration": "g7e", "min_replicas": 1, "max_replicas": 4, "running_per_replica": 8.0,
        "waiting_per_replica": 1, "kv_cache_usage": 0.9, "startup_s": 60.0, "scale_down_window_s": 120,
        "scale_down_period_s": 60, "reason": None, "capacity": {"scenario": "S1_chat", "req_s": 2.5}}
PLAN = {"headroom": 0.2, "spares": 1,
        "configurations": [{"label": "g7e", "usd_hour_on_demand": 4.0, "usd_hour_spot": 1.5}],
        "fleet": {"slo": {"ttft_p99_ms": 500.0, "itl_p99_ms": 50.0}, "pools": {"interactive": POOL}}}


def test_a_request_meets_the_slo_when_answered_within_both_limits():
    ttfts = [0.2, 0.6, 0.3, 0.0, 0.1]
    itls = [[0.01] * 50, [0.01] * 50, [0.01] * 98 + [0.2, 0.2], [], [0.04, 0.049]]
    errors = ["", "", "", "connection reset", ""]
    got = RH.attainment(ttfts, itls, errors, ttft_ms=500, itl_ms=50)
    # 1 meets; 2 starts late; 3's own ITL p99 (2 slow gaps of 100) is over; 4 failed; 5 meets
    assert got == {"sent": 5, "answered": 4, "met": 2, "attainment": 0.4}
    assert RH.attainment([], [], [], ttft_ms=500, itl_ms=50)["attainment"] is None


def test_the_plans_peak_is_its_serving_replicas_at_the_capacity_less_the_headroom():
    # (4 replicas - 1 spare) x 2.5 req/s x 0.8
    assert RH.planned_peak_req_s(PLAN, POOL) == pytest.approx(6.0)
    assert RH.planned_peak_req_s(PLAN, {**POOL, "capacity": {}}) is None


def test_replica_hours_integrate_the_replicas_asked_for_until_the_run_ends():
    steps = [F.Step(0.0, {}, 1, 1, 1), F.Step(600.0, {}, 3, 3, 1), F.Step(1800.0, {}, 3, 2, 2)]
    # 1 x 600 s + 3 x 1200 s + 2 x 1800 s (to 3600 s)
    assert RH.replica_hours(steps, 3600.0) == pytest.approx((600 + 3600 + 3600) / 3600)
    # fewer replicas served than recommended: from 600 s (1 of 3) until 1800 s (2 of 3) and on to the end
    assert RH.short_seconds(steps, 3600.0) == pytest.approx(3000.0)


def test_the_account_scales_on_the_reads_and_prices_both_fleets():
    # a burst of 30 running requests for 2 minutes on an idle pool, read every 15 s for 10 minutes
    samples = [(t, {"running": 30.0 if 60 <= t < 180 else 0.0, "waiting": 0.0, "kv-cache": 0.1})
               for t in range(0, 600, 15)]
    report = RH.account(plan=PLAN, pool_name="interactive", samples=samples, duration_s=600.0,
                        requests={"sent": 10, "answered": 10, "met": 9, "attainment": 0.9},
                        run={"ttft_p99_ms": 420.0, "itl_p99_ms": 30.0})
    auto = report["autoscaler"]
    # ceil(30 / 8) = 4 replicas asked for at once, served after the 60 s start-up
    assert auto["peak_replicas"] == 4
    first = next(s for s in auto["steps"] if s["replicas"] == 4)
    assert first["t"] == 60 and next(s for s in auto["steps"] if s["ready"] == 4)["t"] == 120
    assert auto["short_s"] == pytest.approx(60.0)
    hours = report["replica_hours"]
    assert hours["planned"] == pytest.approx(4 * 600 / 3600)
    assert 600 / 3600 < hours["autoscaled"] < hours["planned"]
    assert report["cost_usd"]["autoscaled_on_demand"] == pytest.approx(hours["autoscaled"] * 4.0, abs=1e-4)
    assert report["cost_usd"]["planned_spot"] == pytest.approx(hours["planned"] * 1.5, abs=1e-4)
    assert report["held"] is True
    report = {**report, "scenario": "S1_chat", "request_rate": 6.0, "planned_peak_req_s": 6.0, "burstiness": 0.5,
              "duration_s": 600.0, "base_url": "http://router:8000"}
    md, page = RH.markdown(report), RH.html_section(report)
    assert "90.0% (9 of 10 requests" in md and "| Cost, Spot | 0.6062 USD autoscaled" in md and "None" not in md
    assert page.startswith('<section id="rehearsal">') and "90.0% (9 of 10 requests" in page


def test_reads_sum_the_queues_and_average_the_cache_over_the_servers_that_answered():
    reads = [(0.0, [{"requests_running": 3, "requests_waiting": 1, "kv_cache_usage": 0.2},
                    {"requests_running": 5, "requests_waiting": 0, "kv_cache_usage": 0.4}]),
             (1.0, [None, None]),
             (2.0, [None, {"requests_running": 2, "requests_waiting": 2, "kv_cache_usage": 0.5}])]
    assert RH.samples_from(reads) == [(0.0, {"running": 8.0, "waiting": 1.0, "kv-cache": pytest.approx(0.3)}),
                                      (2.0, {"running": 2.0, "waiting": 2.0, "kv-cache": 0.5})]


@pytest.mark.parametrize("extra, says", [
    (["--pool", "batch"], "--pool: the plan has no 'batch' pool"),
    (["--request-rate", "0"], "argument --request-rate: 0 cannot be right: give a number above 0"),
    ([], "give the servers' --metrics-url"),
    (["--prometheus-url", "http://127.0.0.1:9"], "--prometheus-url needs --server"),
])
def test_bad_input_exits_2_naming_the_flag(tmp_path, capsys, extra, says):
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    metrics = [] if any(e.startswith("--prometheus") for e in extra) or not extra else \
        ["--metrics-url", "http://127.0.0.1:9/metrics"]
    try:
        rc = bench_main(["rehearse", "--plan", str(tmp_path), "--base-url", "http://127.0.0.1:9", "--model", "m",
                         "--tokenizer", str(tmp_path), "--out", str(tmp_path / "out"), *metrics, *extra])
    except SystemExit as exc:  # refused while the arguments are parsed
        rc = exc.code
    assert rc == 2 and says in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    with pytest.raises(SystemExit) as stop:  # refused while the arguments are parsed, as every --out
        bench_main(["rehearse", "--plan", str(tmp_path), "--base-url", "http://127.0.0.1:9", "--model", "m",
                    "--tokenizer", str(tmp_path), "--out", str(tmp_path / "plan.json"),
                    "--metrics-url", "http://127.0.0.1:9/metrics"])
    assert stop.value.code == 2 and "--out:" in capsys.readouterr().err


def test_nothing_counts_past_the_end_of_the_run():
    steps = [F.Step(0.0, {}, 2, 2, 2), F.Step(50.0, {}, 2, 2, 2), F.Step(120.0, {}, 4, 4, 2)]
    assert RH.replica_hours(steps, 100.0) == pytest.approx(2 * 100 / 3600)
    assert RH.short_seconds(steps, 100.0) == 0


def test_the_reads_are_re_timed_to_the_trace_leaving_out_the_clients_start_up():
    from bench.run.rehearse import trace_window

    reads = [(t, {"running": float(t)}) for t in (0.0, 20.0, 39.5, 41.0, 50.0, 60.5, 70.0)]
    # vLLM's client imported for 40 s, then its trace ran 20 s, ending at 60 s
    assert trace_window(reads, 40.0, 60.0) == [(0.0, {"running": 39.5}), (1.0, {"running": 41.0}),
                                               (10.0, {"running": 50.0}), (20.5, {"running": 60.5})]
