"""`bench mix-check` and `bench plan --mixed-traffic` with the fake `vllm bench serve`.

The plan (made with a mix) says what one replica carries per scenario; the check runs all of them at
once, open loop, and the plan then says whether the scenarios added up.
"""

from __future__ import annotations

import json
import math

import pytest

from bench.analysis import plan as P
from bench.run import mixcheck as MIX
from tests.fixtures.bench_fake_metrics import vllm_text
from tests.test_bench_plan import sweep_dir

# 10 req/s of S1 (128 out) and 1 req/s of S4 (256 out) at the peak, per replica
CAND = {"S1_chat": 1280.0, "S4_rag": 256.0}
BASE = {"S1_chat": 640.0, "S4_rag": 128.0}


@pytest.fixture
def planned(tmp_path):
    cand = sweep_dir(tmp_path, "cand", CAND)
    base = sweep_dir(tmp_path, "base", BASE)
    out = tmp_path / "plan"
    assert P.main([str(cand), "--baseline", str(base), "--current-replicas", "12", "--basis", "peak",
                   "--mix", "S1_chat=0.8,S4_rag=0.2", "--spares", "1", "--no-charts", "--out", str(out)]) == 0
    return cand, base, out


def check(plan_dir, out, fake_bench, *extra):
    """mix-check on the plan with the fake vllm bench serve: 100 requests a scenario by default, the fewest on
    which a p99 can meet the SLO with confidence (the fake answers at once, whatever the window)."""
    return MIX.main(["--plan", str(plan_dir), "--base-url", "http://127.0.0.1:9", "--model", "tiny",
                     "--tokenizer", "/nonexistent-tokenizer", "--out", str(out), "--vllm-bin", fake_bench.bin,
                     "--duration-s", "2", *extra])


def test_the_plan_lists_the_load_one_replica_carries_at_the_mix(planned):
    _cand, _base, out = planned
    row = json.loads((out / "plan.json").read_text())["configurations"][0]
    # The fleet: 12 x (half the candidate's capacity) at the mix; 80/20 of requests. Per replica, the
    # rates sum to the planned share of the fleet's total over the working (non-spare) replicas.
    rates = row["per_replica_req_s"]
    assert set(rates) == {"S1_chat", "S4_rag"}
    assert rates["S1_chat"] == pytest.approx(4 * rates["S4_rag"], rel=1e-3)
    # each working replica at most at its capacity: S1 share / 10 + S4 share / 1 <= 1
    assert rates["S1_chat"] / 10 + rates["S4_rag"] / 1 <= 1 + 1e-3
    working = row["replicas"] - 1
    total = (rates["S1_chat"] + rates["S4_rag"]) * working
    # 12 base replicas: 1 / (0.8 / 5 + 0.2 / 0.5) = 1.786 req/s each
    assert total == pytest.approx(12 / (0.8 / 5 + 0.2 / 0.5), rel=1e-3)


def test_scenarios_that_add_up_hold_and_the_plan_says_so(planned, fake_bench, tmp_path, monkeypatch):
    _cand, _base, plan_dir = planned
    # A server that keeps TTFT p99 at 20 ms per request in flight: the mix stays within the SLO.
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    out = tmp_path / "mixed"
    assert check(plan_dir, out, fake_bench) == 0
    result = json.loads((out / "mixed_traffic.json").read_text())
    assert result["held"] is True and result["configuration"] == "cand"
    assert {r["slo_state"] for r in result["scenarios"].values()} == {"pass"}
    rates = json.loads((plan_dir / "plan.json").read_text())["configurations"][0]["per_replica_req_s"]
    assert result["per_replica_req_s"] == rates
    calls = fake_bench.calls_made()
    assert sorted(c["key"].rsplit("_c", 1)[0] for c in calls) == ["S1_chat", "S4_rag"]
    for call in calls:  # open loop at each scenario's rate, Poisson arrivals, its own prompts
        argv = call["argv"]
        scenario = call["key"].rsplit("_c", 1)[0]
        assert argv[argv.index("--request-rate") + 1] == f"{rates[scenario]:g}"
        assert argv[argv.index("--burstiness") + 1] == "1.0"
        # one window for both: the slower scenario's 100 requests set it, the other sends for as long
        window = max(2.0, *(100 / r for r in rates.values()))
        assert argv[argv.index("--num-prompts") + 1] == str(max(100, math.ceil(round(rates[scenario] * window, 6))))
    assert result["window_s"] == round(window, 1) and result["duration_s"] == 2
    # the server's /metrics is read around the mix (the sweep's telemetry); nothing answers at port 9: said, not zero
    tele = result["telemetry"]
    assert tele["metrics_url"] == "http://127.0.0.1:9/metrics" and tele["measured"] is False
    assert tele["requests_waiting_max"] is None and tele["errors"]["before"].startswith("http://127.0.0.1:9/metrics: ")
    assert len({c["seed"] for c in calls}) == 2
    assert (out / "mixed" / "S1_chat.json").is_file() and (out / "mixed" / "S4_rag.log").is_file()

    final = tmp_path / "plan-final"
    assert P.main([str(planned[0]), "--baseline", str(planned[1]), "--current-replicas", "12", "--basis", "peak",
                   "--mix", "S1_chat=0.8,S4_rag=0.2", "--spares", "1", "--no-charts", "--mixed-traffic", str(out),
                   "--out", str(final)]) == 0
    assert json.loads((final / "plan.json").read_text())["mixed_traffic"]["held"] is True
    text = (final / "plan.md").read_text()
    assert "## Mixed traffic" in text and "the assumption held; the scenarios add up" in text
    assert "every scenario met the SLO with confidence" in text
    assert "another load" not in text


def test_every_scenario_sends_for_one_window_so_the_load_stays_mixed_to_its_end():
    """The priority experiment's rates on an H100 (2026-12-07): S4_rag's 100 requests at 0.4534 req/s need 220.6 s,
    so S1_chat and S2_summary send for as long instead of 60 s, and none of S4_rag's requests arrives alone."""
    rates = {"S1_chat": 4.4446, "S2_summary": 1.2579, "S4_rag": 0.4534}
    window = MIX.window_s(rates, 60.0, 100)
    assert window == pytest.approx(220.55, abs=0.01)
    counts = {s: MIX.requests_for(r, window, 100) for s, r in rates.items()}
    assert counts == {"S1_chat": 981, "S2_summary": 278, "S4_rag": 100}
    assert all(abs(n / rates[s] - window) < 1 / rates[s] for s, n in counts.items())  # within one arrival
    # a short minimum leaves --duration-s as the window; a rate of 0 (a plan's unused scenario) sets nothing
    assert MIX.window_s(rates, 60.0, 10) == 60.0 and MIX.window_s({**rates, "S3_moderation": 0.0}, 60.0, 10) == 60.0
    assert MIX.requests_for(2.0, 50.0, 100) == 100 and MIX.requests_for(0.5, 200.0, 100) == 100


def test_the_mix_reads_the_servers_metrics_unless_told_none(planned, fake_bench, fake_metrics, tmp_path,
                                                             monkeypatch):
    _cand, _base, plan_dir = planned
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    fake_metrics.script(vllm_text(preemptions=1), vllm_text(running=70, waiting=12, kv=0.93, preemptions=5))
    check(plan_dir, tmp_path / "a", fake_bench, "--metrics-url", fake_metrics.url)
    tele = json.loads((tmp_path / "a" / "mixed_traffic.json").read_text())["telemetry"]
    assert tele["measured"] is True and tele["interval_s"] == 1.0
    assert (tele["requests_running_max"], tele["requests_waiting_max"], tele["kv_cache_usage_max_pct"],
            tele["preemptions"]) == (70, 12, 93.0, 4)
    served = fake_metrics.served
    check(plan_dir, tmp_path / "b", fake_bench, "--metrics-url", "none")
    tele = json.loads((tmp_path / "b" / "mixed_traffic.json").read_text())["telemetry"]
    assert tele["metrics_url"] is None and tele["measured"] is False and fake_metrics.served == served


def test_a_window_longer_than_the_runs_may_take_is_refused_before_any_run(fake_bench, tmp_path, capsys):
    args = ["--base-url", "http://127.0.0.1:9", "--model", "tiny", "--tokenizer", "/nonexistent-tokenizer",
            "--vllm-bin", fake_bench.bin, "--run-timeout-s", "600"]
    assert MIX.main(["--rates", "S1_chat=2,S4_rag=0.05", "--min-requests", "50", "--out", str(tmp_path / "a"),
                     *args]) == 2
    err = capsys.readouterr().err
    assert ("every scenario would send for 16 min 40 s (S4_rag's 50 requests (--min-requests) at 0.05 req/s), longer "
            "than --run-timeout-s 600 allows the runs: raise --run-timeout-s") in err and "Traceback" not in err
    assert MIX.main(["--rates", "S1_chat=2", "--duration-s", "900", "--out", str(tmp_path / "b"), *args]) == 2
    assert "(--duration-s 900)" in capsys.readouterr().err
    assert fake_bench.calls_made() == [] and not (tmp_path / "a").exists()
    # a plan's scenario at 0 req/s sets no window and is not the one named
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"configurations": [{"label": "x", "per_replica_req_s": {"S1_chat": 0.0,
                                                                                        "S4_rag": 0.05}}]}))
    assert MIX.main(["--plan", str(plan), "--min-requests", "50", "--out", str(tmp_path / "c"), *args]) == 2
    assert "(S4_rag's 50 requests (--min-requests) at 0.05 req/s)" in capsys.readouterr().err


def test_the_check_judges_with_the_plans_slo_and_says_a_flag_that_differs(planned, fake_bench, tmp_path,
                                                                           monkeypatch, capsys):
    _cand, _base, plan_dir = planned
    plan = json.loads((plan_dir / "plan.json").read_text())
    plan["slo"].update(ttft_p99_ms=900.0, decode_p99_ms=70.0)  # as if the sweeps had recorded it
    (plan_dir / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    check(plan_dir, tmp_path / "a", fake_bench)
    slo = json.loads((tmp_path / "a" / "mixed_traffic.json").read_text())["slo"]
    assert slo == {"ttft_p99_ms": 900.0, "decode_p99_ms": 70.0, "decode_metric": "itl"}
    capsys.readouterr()
    check(plan_dir, tmp_path / "b", fake_bench, "--slo-ttft-p99-ms", "400")
    assert json.loads((tmp_path / "b" / "mixed_traffic.json").read_text())["slo"]["ttft_p99_ms"] == 400.0
    assert ("bench mix-check: SLO: --slo-ttft-p99-ms 400 given: used instead of the 900 ms the plan recorded"
            in capsys.readouterr().err)


def test_scenarios_that_slow_each_other_down_do_not_hold(planned, fake_bench, tmp_path, monkeypatch):
    _cand, base, plan_dir = planned
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 900.0, "itl_ms": 10.0}))
    out = tmp_path / "mixed"
    assert check(plan_dir, out, fake_bench) == 1
    result = json.loads((out / "mixed_traffic.json").read_text())
    assert result["held"] is False
    assert all(r["meets_slo"] is False and r["ttft_p99_ms"] > 500 for r in result["scenarios"].values())
    final = tmp_path / "plan-final"
    # Planned at another headroom than the check ran: the plan says the check is of another load.
    assert P.main([str(planned[0]), "--baseline", str(base), "--current-replicas", "12", "--basis", "peak",
                   "--mix", "S1_chat=0.8,S4_rag=0.2", "--headroom", "0.3", "--no-charts", "--mixed-traffic",
                   str(out / "mixed_traffic.json"), "--out", str(final)]) == 0
    text = (final / "plan.md").read_text()
    assert "the assumption did not hold; the scenarios do not add up" in text and "TTFT p99" in text
    assert "another load than this plan puts on a replica" in text and "--headroom" in text


def test_a_run_that_never_ends_is_stopped_and_the_check_cannot_tell(planned, fake_bench, tmp_path, monkeypatch):
    _cand, _base, plan_dir = planned
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    fake_bench.plan({"S1_chat_c64": ["hang"]})
    out = tmp_path / "mixed"
    # 10 s: the other scenario's fake run, a process of its own, must end inside it; on a loaded 2-core machine
    # (the fresh-clone CI beside vLLM's tests, 2026-12-06) its start alone outlasted 3 s
    # (5 requests: S4_rag's 10 at 0.71 req/s would need a 14 s window, which a 10 s limit refuses up front)
    assert check(plan_dir, out, fake_bench, "--run-timeout-s", "10", "--min-requests", "5") == 1
    result = json.loads((out / "mixed_traffic.json").read_text())
    # The other scenario ran at the same time and finished; the hung one was stopped.
    assert result["held"] is None and result["scenarios"]["S4_rag"]["valid"] is True
    assert result["scenarios"]["S1_chat"]["valid"] is False
    assert "stopped after 10 s" in (out / "mixed" / "S1_chat.log").read_text()


def test_a_plan_without_a_mix_is_refused(tmp_path, fake_bench, capsys):
    cand = sweep_dir(tmp_path, "cand", CAND)
    base = sweep_dir(tmp_path, "base", BASE)
    out = tmp_path / "plan"
    assert P.main([str(cand), "--baseline", str(base), "--current-replicas", "12", "--basis", "peak",
                   "--no-charts", "--out", str(out)]) == 0
    assert check(out, tmp_path / "m", fake_bench) == 2
    assert "make the plan with --mix" in capsys.readouterr().err
    assert check(tmp_path / "nowhere", tmp_path / "m", fake_bench) == 2
    assert "--plan: no plan.json" in capsys.readouterr().err
    assert P.main([str(cand), "--load", "S1_chat=1", "--mixed-traffic", str(out / "plan.json"), "--no-charts",
                   "--out", str(tmp_path / "p2")]) == 2
    assert "is not a `bench mix-check` result" in capsys.readouterr().err


def test_stated_rates_with_a_priority_per_scenario(fake_bench, tmp_path, monkeypatch):
    """--rates instead of a plan (the priority experiment's loads), and --priority sent with vLLM's
    `priority` field on that scenario's requests only; the end-to-end p99 is kept per scenario."""
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    out = tmp_path / "mixed"
    assert MIX.main(["--rates", "S1_chat=3,S2_summary=0.5", "--priority", "S2_summary=1", "--configuration", "fcfs",
                     "--base-url", "http://127.0.0.1:9", "--model", "tiny", "--tokenizer", "/nonexistent-tokenizer",
                     "--out", str(out), "--vllm-bin", fake_bench.bin, "--duration-s", "2"]) == 0
    result = json.loads((out / "mixed_traffic.json").read_text())
    assert result["rates_from"] == "--rates" and result["configuration"] == "fcfs"
    assert result["per_replica_req_s"] == {"S1_chat": 3.0, "S2_summary": 0.5}
    assert result["priority"] == {"S2_summary": 1}
    assert result["scenarios"]["S2_summary"]["priority"] == 1 and "priority" not in result["scenarios"]["S1_chat"]
    assert all(r["e2e_p99_ms"] is not None and r["e2e_p99_ms"] >= r["ttft_p99_ms"]
               for r in result["scenarios"].values())
    calls = {c["key"].rsplit("_c", 1)[0]: c["argv"] for c in fake_bench.calls_made()}
    assert json.loads(calls["S2_summary"][calls["S2_summary"].index("--extra-body") + 1]) == {"priority": 1}
    assert "--extra-body" not in calls["S1_chat"]
    assert calls["S1_chat"][calls["S1_chat"].index("--request-rate") + 1] == "3"


@pytest.mark.parametrize("argv, words", [
    (["--rates", "S1_chat=0"], "--rates S1_chat=0: expected SCENARIO=REQ_PER_S above 0"),
    (["--rates", "S1_chat=2", "--priority", "S1_chat=high"], "--priority S1_chat=high: expected SCENARIO=INTEGER"),
    (["--rates", "S1_chat=2", "--priority", "S4_rag=1"], "--priority: S4_rag not among this check's scenarios"),
    (["--rates", "S1_chat=2", "--priority", "S1_chat=1", "--bench-args", "--extra-body '{\"a\": 1}'"],
     "--bench-args sets that body too"),
])
def test_bad_rates_or_priorities_are_refused_by_name(argv, words, fake_bench, tmp_path, capsys):
    assert MIX.main([*argv, "--base-url", "http://127.0.0.1:9", "--model", "tiny", "--tokenizer", "/nonexistent",
                     "--out", str(tmp_path / "m"), "--vllm-bin", fake_bench.bin]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert fake_bench.calls_made() == []


def test_the_loads_come_one_way(fake_bench, tmp_path, capsys):
    common = ["--base-url", "http://127.0.0.1:9", "--model", "tiny", "--tokenizer", "/nonexistent",
              "--out", str(tmp_path / "m"), "--vllm-bin", fake_bench.bin]
    for loads in ([], ["--plan", str(tmp_path), "--rates", "S1_chat=1"]):
        assert MIX.main([*loads, *common]) == 2
        assert "give the loads one way: --plan (a plan made with --mix) or --rates" in capsys.readouterr().err


def test_a_scenario_meets_the_slo_with_confidence_or_the_check_cannot_tell(planned, fake_bench, tmp_path,
                                                                           monkeypatch, capsys):
    """As a sweep's point: each p99's interval within the run, widened by the run-to-run band, set against its
    limit. A p99 of fewer than 100 requests (about the slowest one) or an interval across a limit is no answer:
    the plan is told the check could not tell, never that the scenarios add up."""
    from argparse import Namespace

    from bench.analysis import results as R

    _cand, _base, plan_dir = planned
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    few = tmp_path / "few"
    assert check(plan_dir, few, fake_bench, "--min-requests", "10") == 1
    result = json.loads((few / "mixed_traffic.json").read_text())
    assert result["held"] is None
    assert all(r["slo_state"] == "too_few_requests" and r["meets_slo"] is None and r["ttft_p99_ms"] < 500
               for r in result["scenarios"].values() if r["requests"] < 100), result["scenarios"]
    said = capsys.readouterr().out
    assert "could not tell whether the scenarios add up" in said and "no sure miss, on fewer than 100 requests" in said

    out = tmp_path / "mixed"
    assert check(plan_dir, out, fake_bench) == 0
    run = R.load_result(out / "mixed" / "S1_chat.json")
    ttft = run.ttft_p99_ms
    low, high = json.loads((out / "mixed_traffic.json").read_text())["scenarios"]["S1_chat"]["ttft_p99_ci_ms"]

    def state(limit_ms: float, noise: float = 11.0) -> str:
        args = Namespace(slo_ttft_p99_ms=limit_ms, slo_itl_p99_ms=50.0, slo_decode_metric="itl", noise_pct=noise)
        return MIX.judge(run, 1.0, args)["slo_state"]

    assert state(high * 1.11 + 1) == "pass" and state(ttft) == "straddle" and state(low / 1.11 - 1) == "fail"
    assert state(high * 1.05) == "straddle" and state(high * 1.05, noise=0.0) == "pass"  # the band decides
    row = MIX.judge(run, 1.0, Namespace(slo_ttft_p99_ms=ttft, slo_itl_p99_ms=50.0, slo_decode_metric="itl",
                                        noise_pct=11.0))
    assert row["meets_slo"] is None and MIX.held({"S1_chat": row}) is None
    assert MIX.held({"S1_chat": row, "S4_rag": {**row, "meets_slo": False, "slo_state": "fail"}}) is False
    from bench.analysis.mixed_traffic import finding
    words = finding({"held": None, "scenarios": {"S1_chat": row}, "slo": {"decode_metric": "itl"}})
    assert f"S1_chat: TTFT p99 {ttft:,.0f} ms" in words and "reaches across its limit" in words
