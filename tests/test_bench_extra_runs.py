"""`sweep --capacity-search`: the SLO capacity search and open-loop runs against a fake `vllm`
whose latency model has a known SLO capacity (tests/fixtures/bench_fake_vllm.py, FAKE_VLLM_MODEL)."""

from __future__ import annotations

import json

import pytest

from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import report as RP
from bench.analysis import side as SIDE
from bench.run import sweep as S

GRID = "1,2,4,8,16,32,64"


def run_sweep(server, fake, out, *extra, scenarios="S1_chat", concurrencies=GRID):
    return S.main([
        "--base-url", server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
        "--vllm-bin", fake.bin, "--scenarios", scenarios, "--concurrencies", concurrencies,
        "--health-interval", "0.2", "--capacity-search",
        "--bench-client-cmd", f"{fake.bin} client",  # one fake process for every run: fast
        *extra,
    ])


def model(fake, **kw):
    fake.monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps(kw))


def manifest(out):
    return json.loads((out / "manifest.json").read_text())


def argv_of(fake, key):
    return [json.loads(line)["argv"] for line in fake.calls.read_text().splitlines()
            if json.loads(line)["key"] == key]


def test_search_narrows_to_the_target_with_comparable_repeats(bench_stub_server, fake_bench, tmp_path, capsys):
    # TTFT p99 = 90 ms x c: the SLO (500 ms) holds up to c=5
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, itl_ms_per_c=1)
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5") == 0
    m = manifest(out)
    closed = m["extra"]["scenarios"]["S1_chat"]["closed"]
    # c=6 (540 ms) may straddle with the band on it: the ends' throughputs are within the target either way
    assert closed["load_pass"] == 5 and closed["load_fail"] in (6, 7) and closed["reached_target"] is True
    runs = [r for r in m["extra"]["runs"] if r["kind"] == "search"]
    # bisection of the grid's [4, 8): c=6 first (540 ms: it straddles while the band is assumed, so it is
    # repeated before the next bisection), then c=5
    order = [r["concurrency"] for r in runs]
    assert order[0] == 6 and 5 in order and all(4 < c < 8 for c in order)
    # every repeat of a point ran at that point's first size: repeats that are repeats
    sizes: dict[int, set] = {}
    for r in runs:
        sizes.setdefault(r["concurrency"], set()).add(r["num_prompts"])
    assert all(len(v) == 1 for v in sizes.values()) and all(r["num_prompts"] >= 100 for r in runs)
    assert all(r["window_s"] >= 5 for r in runs)
    assert closed["noise"]["source"] == "measured" and closed["noise"]["repeats"] >= 2
    # Every search run keeps per-request detail, has its own seed and sends the goodput limits.
    seeds = set()
    for key in ("S1_chat_c5", "S1_chat_c6"):
        for argv in argv_of(fake_bench, key):
            if "bench_phase=warmup" in argv:
                continue
            assert "--save-detailed" in argv and argv[argv.index("--goodput") + 1:][:2] == ["ttft:500", "tpot:50"]
            seeds.add(argv[argv.index("--seed") + 1])
    grid_seeds = {a[a.index("--seed") + 1] for k in ("S1_chat_c4", "S1_chat_c8") for a in argv_of(fake_bench, k)}
    assert len(seeds) >= 3 and not seeds & grid_seeds
    # The report recomputes the same interval from the files.
    side = SIDE.load_side(out)
    got = CR.scenario_capacity(out, side.runs, ttft_ms=500, decode_ms=50)["S1_chat"]
    assert (got["closed"].load_pass, got["closed"].load_fail) == (5, closed["load_fail"]) and got["closed"].confirmed
    lo, hi = got["slo_capacity"]["ttft_p99_ci_ms"]
    assert lo <= 450 * 1.01 and hi <= 500
    printed = capsys.readouterr().out
    assert "GPU budget 60 min for this invocation" in printed.splitlines()[1]
    assert ("S1_chat: capacity search, closed loop" in printed and "meets the SLO at c=5" in printed
            and f"misses it for sure at c={closed['load_fail']}" in printed and "{" not in printed)
    assert "GPU time" in printed and "of the 60.0 min budget" in printed
    # the search's runs are announced and their outcomes said, one pair a run, as the grid's are
    said = [line for line in printed.splitlines() if line.startswith("bench sweep: S1_chat: closed loop, c=")]
    assert len(said) == 2 * len(runs) and said[0].startswith("bench sweep: S1_chat: closed loop, c=6 run 1, about ")
    assert said[1].startswith("bench sweep: S1_chat: closed loop, c=6 run 1 valid (")
    assert any(line.endswith("c=5 meets the SLO with confidence") for line in said)


def test_resume_replays_the_search_without_rerunning(bench_stub_server, fake_bench, tmp_path):
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, itl_ms_per_c=1)
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5") == 0
    before = len(fake_bench.keys())
    last = sorted((out / "search").glob("S1_chat_c5.run*.json"))[-1]
    last.unlink()
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5", "--resume") == 0
    assert set(fake_bench.keys()[before:]) == {"S1_chat_c5"}  # only the missing run, after its burst
    assert manifest(out)["extra"]["scenarios"]["S1_chat"]["closed"]["load_pass"] == 5


def test_a_search_run_that_falls_short_twice_runs_again_larger_and_counts(bench_stub_server, fake_bench, tmp_path):
    # a loaded CI machine: c=6 fell short of its window twice; with --attempts 2 it was lost (and the
    # search with it); two short runs now come on top of the attempts, each larger
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, itl_ms_per_c=1)
    fake_bench.plan({"S1_chat_c6": ["short", "short", "ok"]})
    fake_bench.monkeypatch.setenv("FAKE_VLLM_SHORT_S", "4")  # 4 s of a 5 s window, at any size: each resize ~2x
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5") == 0
    sixes = [r for r in manifest(out)["extra"]["runs"] if r["concurrency"] == 6]
    assert [r["valid"] for r in sixes[:3]] == [False, False, True] and [r["attempt"] for r in sixes[:3]] == [1, 2, 3]
    assert sixes[0]["num_prompts"] < sixes[1]["num_prompts"] < sixes[2]["num_prompts"]
    assert "less than the 5 s window" in sixes[1]["reason"]
    assert all(r["num_prompts"] == sixes[2]["num_prompts"] for r in sixes[3:])  # its repeats keep the size
    closed = manifest(out)["extra"]["scenarios"]["S1_chat"]["closed"]
    assert closed["load_pass"] == 5 and closed["reached_target"] is True


def test_a_point_at_the_limit_is_repeated_at_its_size_and_never_claimed(bench_stub_server, fake_bench, tmp_path):
    # TTFT p99 = 100 ms x c: exactly 500 ms at c=5, so its interval straddles the limit on every run
    model(fake_bench, ttft_ms_per_c=100, itl_ms=20)
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5",
                     "--concurrencies", "1,2,4,8") == 0
    runs = [(r["concurrency"], r["num_prompts"]) for r in manifest(out)["extra"]["runs"]]
    fives = [n for c, n in runs if c == 5]
    assert len(fives) == 5 and len(set(fives)) == 1  # the first run and its 4 repeats, all one size
    closed = manifest(out)["extra"]["scenarios"]["S1_chat"]["closed"]
    assert (closed["load_pass"], closed["load_fail"]) == (4, 6)  # never passes with confidence


def test_neighbours_too_far_apart_hand_over_to_the_open_loop(bench_stub_server, fake_bench, tmp_path, capsys):
    # TTFT p99 = 400 ms x c: c=1 meets the SLO, c=2 misses it, and c=2 serves nearly twice c=1's
    # throughput: only offered rates between them can narrow the capacity
    model(fake_bench, ttft_ms_per_c=400, itl_ms=20)
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--window-s", "5", "--concurrencies", "1,2,4") == 0
    info = manifest(out)["extra"]["scenarios"]["S1_chat"]
    assert "open-loop rate search carries the answer" in info["closed"]["stopped"]
    opened = info["open_loop"]
    assert opened["reached_target"] is True and opened["width"] is not None
    for argv in [a for k in set(fake_bench.keys()) for a in argv_of(fake_bench, k)
                 if a[a.index("--request-rate") + 1] != "inf"]:
        assert argv[argv.index("--burstiness") + 1] == "1.0"
        assert argv[argv.index("--max-concurrency") + 1] == "16"  # only a safety cap (4 x the grid's top)
    caps = CR.scenario_capacity(out, SIDE.load_side(out).runs, ttft_ms=500, decode_ms=50)["S1_chat"]
    assert caps["open"].state == "meets_slo" and caps["open"].unit == "req/s"
    assert caps["rate_capacity"]["req_s"] == caps["open"].load_pass
    assert all(p["goodput_req_s"] is not None and 0 <= p["attainment_pct"] <= 100 for p in caps["open_loop"])
    printed = capsys.readouterr().out
    assert "capacity search, open loop" in printed
    # only c=1 meets the SLO: before the open loop, the rate below which Poisson arrivals could meet the TTFT
    # p99 (a request arriving within the first 2 x prefill - limit of another's prefill misses) and its cost
    p50 = json.loads((out / "S1_chat_c1.json").read_text())["p50_ttft_ms"]
    estimate = info["open_loop_estimate"]
    assert estimate["prefill_ms"] == pytest.approx(p50, abs=0.05)
    assert estimate["rate_req_s"] == pytest.approx(0.01 / ((2 * p50 - 500) / 1000), rel=1e-3)
    assert estimate["run_s"] == pytest.approx(estimate["requests"] / estimate["rate_req_s"], rel=1e-2)
    before = [i for i, line in enumerate(printed.splitlines()) if "S1_chat: before the open loop: " in line]
    opens = [i for i, line in enumerate(printed.splitlines()) if line.startswith("bench sweep: S1_chat: open loop, ")]
    assert len(before) == 1 and before[0] < opens[0] and "not a measurement" in printed.splitlines()[before[0]]
    # each open-loop run is announced with its rate, why and the GPU time it should take, then its outcome
    first = [line for line in printed.splitlines() if line.startswith("bench sweep: S1_chat: open loop, ")]
    rates = [r for r in manifest(out)["extra"]["runs"] if r["kind"] == "open_loop"]
    assert len(first) == 2 * len(rates) and "run 1, about " in first[0] and "of GPU time (0 of " in first[0]
    assert first[0].endswith("the closed loop's pass end, offered as a Poisson rate")
    assert " run 1 valid (" in first[1] and "out tok/s, TTFT p99 " in first[1]
    assert first[1].endswith(("meets the SLO with confidence", "misses it for sure",
                              "too close to the limit to call yet"))
    # the closing line gives the answer the open loop carries beside the closed loop's
    closing = [line for line in printed.splitlines() if line.startswith("bench sweep: S1_chat under the SLO: ")]
    assert len(closing) == 1 and "; by offered rate (the open loop): " in closing[0]
    assert closing[0].endswith(f"misses it at {caps['open'].load_fail:g} req/s)")


def test_the_budget_stops_the_search_and_says_what_resume_buys(bench_stub_server, fake_bench, tmp_path, capsys):
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, itl_ms_per_c=1)
    fake_bench.monkeypatch.setenv("FAKE_VLLM_WINDOW_S", "0.5")  # every run takes real time
    out = tmp_path / "out"
    assert run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5",
                     "--concurrencies", "1,4,16", "--budget-minutes", "0.06") == 0
    closed = manifest(out)["extra"]["scenarios"]["S1_chat"]["closed"]
    words = closed["stopped"]
    assert words.startswith("the GPU budget stopped it before c=")
    assert "--resume with about" in words and "more budget (--budget-minutes)" in words and "toward the 1.22x" in words
    printed = capsys.readouterr().out
    assert words in printed and "of the 0.1 min budget" in printed


def test_an_open_loop_run_past_what_the_server_serves_is_estimated_at_the_servers_pace():
    """The budget check's estimate of an open-loop run: at the offered rate while the server keeps up; past the
    most it has served, the requests drain at that pace (on the CPU build, 2,065 requests offered at 375 req/s
    to a server that had served 78 req/s took 28 s, estimated 5.5 s, and the budget overran)."""
    from bench.run.extra_runs import open_loop_seconds

    assert open_loop_seconds(2065, 375.3, 78.0) == pytest.approx(2065 / 78.0)
    assert open_loop_seconds(408, 74.13, 78.0) == pytest.approx(408 / 74.13)  # below the pace: the offered rate
    assert open_loop_seconds(408, 74.13, None) == pytest.approx(408 / 74.13)  # nothing served yet


def test_repeats_that_disagree_are_a_broken_measurement_naming_their_runs(bench_stub_server, fake_bench, tmp_path):
    # a run-level factor of sigma 0.5: two identical runs differ by times, not percent
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, noise=0.5)
    out = tmp_path / "out"
    run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5", "--concurrencies", "2,4,8")
    caps = CR.scenario_capacity(out, SIDE.load_side(out).runs, ttft_ms=500, decode_ms=50)["S1_chat"]
    closed = caps["closed"]
    assert closed.state == "broken_measurement" and "broken measurement" in closed.reason
    assert closed.fail_runs and all(name in closed.reason for name in closed.fail_runs)
    assert "more than 30 %" in closed.reason


@pytest.mark.parametrize("argv, needle", [
    (["--target-width", "1"], "--target-width must be above 1"),
    (["--budget-minutes", "0"], "--budget-minutes must be above 0"),
    (["--extra-budget", "1"], "--extra-budget is gone with the search it tuned: use --budget-minutes"),
    (["--search-requests", "100"], "--search-requests is gone"),
    (["--window-s", "3"], "--window-s 3: a run of under 5 s"),
])
def test_bad_settings_exit_2(bench_stub_server, fake_bench, tmp_path, capsys, argv, needle):
    assert run_sweep(bench_stub_server, fake_bench, tmp_path / "o", *argv) == 2
    assert needle in capsys.readouterr().err


# --- report and plan on the swept folders ----------------------------------------------------

SLO_CAPACITY_KEYS = {"concurrency_pass", "concurrency_fail", "output_tok_s", "req_s", "ttft_p99_ci_ms",
                     "decode_p99_ci_ms", "source_run", "repeats"}


def sides(server, fake, tmp_path, base_model, cand_model, *extra):
    folders = {}
    for label, m in (("base", base_model), ("cand", cand_model)):
        model(fake, **m)
        folders[label] = tmp_path / label
        assert run_sweep(server, fake, folders[label], "--window-s", "5", "--label", label,
                         "--concurrencies", "1,2,4,8,16,32", *extra) == 0
    return folders["base"], folders["cand"]


def test_report_slo_basis_verdict_and_plan(bench_stub_server, fake_bench, tmp_path, capsys):
    base, cand = sides(bench_stub_server, fake_bench, tmp_path, dict(ttft_ms_per_c=90, itl_ms=20),
                       dict(ttft_ms_per_c=30, itl_ms=20))
    out = tmp_path / "report"
    assert RP.main([str(cand), "--baseline", str(base), "--out", str(out), "--no-charts"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sc = summary["scenarios"]["S1_chat"]
    assert set(sc["slo_capacity"]) == SLO_CAPACITY_KEYS
    # TTFT p99 = 30 ms x c: the SLO holds up to c=16 (480 ms), which a run-to-run band can leave unconfirmed
    cp, cf = sc["slo_capacity"]["concurrency_pass"], sc["slo_capacity"]["concurrency_fail"]
    assert 12 <= cp <= 16 < cf <= 20
    assert sc["slo"]["concurrency"] == cp and sc["slo"]["output_tok_s"] == sc["slo_capacity"]["output_tok_s"]
    assert sc["slo_capacity_interval"]["source_run"] == sc["slo"]["source_run"] == sc["slo_capacity"]["source_run"]
    assert sc["rate_capacity"] is None  # the closed loop narrowed it: no open loop was needed
    comp = summary["comparison"]["S1_chat"]
    assert comp["baseline_state"] == "meets_slo" and comp["slo_ratio"] > 1.5
    # The ratio is of one kind of capacity on both sides (open loop where both bracketed their rate
    # capacity, else closed loop), never mixed, and it is rebuilt from the two capacity figures.
    theirs = CR.scenario_capacity(base, SIDE.load_side(base).runs, ttft_ms=500, decode_ms=50)["S1_chat"]
    kind, key = (("open", "rate_capacity_interval") if comp["slo_basis_source"] == "open_loop"
                 else ("closed", "slo_capacity_interval"))
    assert comp["slo_ratio"] == pytest.approx(sc[key]["point_tok_s"] / theirs[kind].point, rel=1e-3)
    assert summary["verdict"]["basis"] == "slo" and summary["verdict"]["pass"] is True
    text = (out / "report.md").read_text()
    assert "## Capacity under the SLO" in text and "on the slo basis" in text
    assert "GPU time" in text and "[plan/plan.md](plan/plan.md)" in text
    assert "GPU busy share of the last sweep session" in text and "library client" in text
    plan = json.loads((out / "plan" / "plan.json").read_text())
    assert plan["basis"] == "slo" and plan["current"]["replicas"] == 12
    row = plan["configurations"][0]
    assert row["replicas_range"][1] < 12 and (row["replicas"] is not None or "only as an interval" in row["reason"])
    print(f"\nslo basis: ratio {comp['slo_ratio']} in {comp['slo_ratio_interval']} from {comp['slo_basis_source']}; "
          f"plan {row['replicas_range']}")
    # The PoC report's method on request.
    assert RP.main([str(cand), "--baseline", str(base), "--out", str(out), "--no-charts",
                    "--basis", "peak"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"]["basis"] == "peak"
    assert summary["verdict"]["min_ratio"] == summary["comparison"]["S1_chat"]["throughput_ratio"]


def test_baseline_that_never_meets_the_slo_is_a_state(bench_stub_server, fake_bench, tmp_path):
    base, cand = sides(bench_stub_server, fake_bench, tmp_path, dict(ttft_ms_per_c=600, itl_ms=20),
                       dict(ttft_ms_per_c=30, itl_ms=20))
    out = tmp_path / "report"
    RP.main([str(cand), "--baseline", str(base), "--out", str(out), "--no-charts"])
    summary = json.loads((out / "summary.json").read_text())
    comp = summary["comparison"]["S1_chat"]
    assert comp["baseline_state"] == "never_meets_slo" and comp["slo_ratio"] is None
    base_summary = CR.scenario_capacity(base, SIDE.load_side(base).runs, ttft_ms=500, decode_ms=50)
    assert base_summary["S1_chat"]["slo_capacity"] == {"state": "never_meets_slo"}
    # The candidate meets the SLO where the baseline never does: that clears any threshold.
    fleet = summary["verdict"].pop("fleet")  # what it means for the fleet (the report's default 12 replicas)
    print(f"\nfleet when the baseline never meets the SLO: {fleet}")
    assert fleet["current"] == 12 and fleet["baseline"]["label"] == "base"
    # today's fleet carries no load within the SLO: no count follows, and none is shown as a zero
    assert fleet["replicas_range"] is None and "only the candidate meets the SLO" in fleet["reason"]
    assert summary["verdict"] == {"threshold": 1.5, "min_ratio": None, "pass": True, "basis": "slo",
                                  "state": "pass", "reasons": [], "min_ratio_interval": [None, None],
                                  "min_ratio_scenario": "S1_chat"}
    assert comp["slo_ratio_interval"] == [None, None] and comp["slo_state"] == "pass"


# --- one long-lived bench client -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["library", "process"])
def test_busy_share_with_one_long_lived_client(bench_stub_server, fake_bench, tmp_path, capsys, mode):
    fake_bench.monkeypatch.setenv("FAKE_VLLM_WINDOW_S", "5.5")  # a real window, as long as the shortest allowed
    out = tmp_path / "out"
    extra = ["--bench-client-cmd", f"{fake_bench.bin} client"] if mode == "library" else ["--bench-client", "process"]
    assert S.main(["--base-url", bench_stub_server.url, "--model", "tiny", "--tokenizer", "/unused",
                   "--out", str(out), "--vllm-bin", fake_bench.bin, "--scenarios", "S1_chat", "--window-s", "5",
                   "--concurrencies", "1,2", "--health-interval", "0.2", "--warmups", "0", *extra]) == 0
    pids = fake_bench.pids()
    assert len(pids) == 2 and len(set(pids)) == (1 if mode == "library" else 2)
    timing = manifest(out)["sessions"][-1]["timing"]
    assert timing["bench_client"] == ("library" if mode == "library" else "process")
    # the idle time between two windows is a printed figure (line below), not a bound: a loaded machine
    # stretched it to 2.2 s (library) and 5.8 s (process) beside another suite; one client process is
    # what the pids above check
    assert timing["idle_between_windows_s"] >= 0
    assert 0 < timing["busy_share_pct"] <= 100
    printed = capsys.readouterr().out
    line = next(l for l in printed.splitlines() if "busy share" in l)
    with capsys.disabled():
        print(f"\n[fake, {mode}] {line}")
    assert (out / "S1_chat_c2.json").exists() and "$ " in (out / "logs" / "S1_chat_c2.attempt1.log").read_text()


def test_a_server_gone_during_the_search_stops_the_sweep(bench_stub_server, fake_bench, tmp_path, capsys):
    """The capacity search's runs look at /health after a failure as the grid's do: a server gone stops the
    sweep (exit 3) instead of each later search run failing to connect; the grid's runs are kept."""
    model(fake_bench, ttft_ms_per_c=90, itl_ms=20, itl_ms_per_c=1)
    fake_bench.plan({"S1_chat_c6": ["server_down"]})  # the search's first run (see the test above)
    out = tmp_path / "out"
    # 5 s, not 1: a fresh-clone run beside other work saw the stub's healthy /health take over 1 s to answer (the
    # sweep then stopped early, on a grid run's check); the server gone answers 503 at once, so the test waits
    # the 5 s once, after the search's failed run
    rc = run_sweep(bench_stub_server, fake_bench, out, "--open-loop", "never", "--window-s", "5",
                   "--health-timeout-s", "5")
    err = " ".join(capsys.readouterr().err.split())
    assert rc == S.EXIT_UNHEALTHY, err
    assert "the server stopped answering during the search run search/S1_chat_c6.run1:" in err
    assert "Traceback" not in err
    assert fake_bench.keys().count("S1_chat_c6") == 1 and fake_bench.keys()[-1] == "S1_chat_c6"
    assert all(r["status"] == "valid" for r in manifest(out)["runs"])  # the grid's seven runs


def test_the_stub_server_is_silent_about_a_client_that_stopped_waiting(capsys):
    """On a loaded CI run the sweep's 2 s health check gave up before the stub answered, and socketserver printed
    the stub's BrokenPipeError traceback into the stderr the test above reads: the stub ignores a gone client, and
    still reports any other error."""
    from tests.fixtures.bench_env import _Stub, _StubHTTPServer

    httpd = _StubHTTPServer(("127.0.0.1", 0), _Stub)
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), ValueError("a bug")):
            try:
                raise error
            except Exception:  # noqa: BLE001
                httpd.handle_error(None, ("127.0.0.1", 1))
    finally:
        httpd.server_close()
    err = capsys.readouterr().err
    assert "ValueError: a bug" in err and "BrokenPipeError" not in err and "ConnectionResetError" not in err


def test_the_budget_check_pads_a_run_by_the_tok_s_band_not_the_widest():
    """On the H200 on 2026-12-06, S3_moderation's decode p99s spread over a 215.58 % band while its output tok/s
    agreed within 7.13 %: padded by the widest band, a 23 s run was priced at 77 s and the search stopped with 71
    of its 212 s unspent. A run's length follows its throughput: the pad is the output tok/s band."""
    from bench.analysis.capacity import search as SE
    from bench.run import extra_runs as X
    from tests.test_bench_search import result

    def spread_decode() -> SE.Search:
        search = SE.Search(ttft_ms=500.0, decode_ms=50.0)
        for k, itl in enumerate((15.0, 120.0)):  # the same throughput, decode p99s far apart
            search.observe(8, result(300, 256.0 + k, n=200, seed=k, itl_ms=itl), f"c8.run{k + 1}")
        search.observe(16, result(900, 330.0, n=200, seed=5), "c16")
        return search

    search = spread_decode()
    noise = search.noise()
    assert noise.figure(C.DECODE) > 100 and noise.figure(C.OUTPUT_TOK_S) < 10 and noise.pct > 100
    started = []

    class Invalid:
        valid, reason = False, "stopped here on purpose"

    def run(step, k):
        started.append(step.load)
        return Invalid(), 23.0

    spent, runs, why = X.drive(search, run, lambda step: 23.0, budget_s=30.0)
    assert len(started) == 1 and spent == 23.0  # 23 s x (1 + the tok/s band) fits in 30 s; x (1 + 1.5) would not
    load = search.words(started[0])
    spent, runs, why = X.drive(spread_decode(), run, lambda step: 23.0, budget_s=24.0)
    assert runs == 0 and why.startswith(f"the GPU budget stopped it before {load} (about 25 s")


def test_a_run_past_the_target_starts_only_where_the_budget_also_holds_its_repeat():
    """Placing the pass end is optional: with room for one run but not for its repeat, the search ends at the
    target it reached, says so, and reports no budget stop."""
    from bench.analysis.capacity import search as SE
    from bench.run import extra_runs as X
    from tests.test_bench_search import h100_second_search, result

    lines, started = [], []

    def run(step, k):
        started.append(step.load)
        raise AssertionError("no run was to start")

    search = h100_second_search()
    spent, runs, why = X.drive(search, run, lambda step: 30.0, budget_s=50.0, say=lines.append)
    assert (spent, runs, why, started) == (0.0, 0, None, []) and search.stopped == SE.NARROW
    assert lines and "the target is reached; the budget left (50 s) holds no run and its repeat at c=22" in lines[-1]

    class Pass:
        valid, output_tok_s, ttft_p99_ms, path = True, 958.9, 444.0, "search/S1_chat_c22.run1.json"
        raw = result(444.0, 958.9, n=187, seed=7)

    def run_one(step, k):
        started.append(step.load)
        return Pass(), 30.0

    search = h100_second_search()
    spent, runs, why = X.drive(search, run_one, lambda step: 30.0, budget_s=70.0)
    assert started == [22] and why is None and search.stopped == SE.NARROW and search.bounds()[0] == 22


def test_a_repeat_past_the_target_needs_room_for_itself_only():
    """A repeat that may settle the load above the pass end needs the budget for one run: the room a new load
    keeps for its repeat is that run."""
    from bench.analysis.capacity import search as SE
    from bench.run import extra_runs as X
    from tests.test_bench_search import result, straddling_above_the_pass_end as edge

    class Pass:
        valid, output_tok_s, ttft_p99_ms, path = True, 990.0, 455.0, "search/S1_chat_c23.run2.json"
        raw = result(455, 990.0, n=240, seed=6)

    started, lines = [], []

    def run(step, k):
        started.append((step.load, step.repeat, k))
        return Pass(), 30.0

    search = edge()
    est = 30.0 * (1 + search.noise().figure(C.OUTPUT_TOK_S) / 100)
    spent, runs, why = X.drive(search, run, lambda step: 30.0, budget_s=est * 1.5)  # one run's room, not two
    assert started == [(23, True, 2)] and why is None and search.bounds()[0] == 23 and search.stopped == SE.NARROW
    spent, runs, why = X.drive(edge(), run, lambda step: 30.0, budget_s=est * 0.9, say=lines.append)
    assert runs == 0 and why is None and "holds no repeat at c=23" in lines[-1]
