"""Sweep orchestration: plan, command line, validity, retry, resume, SIGTERM, overhead.

`vllm bench serve` is replaced by tests/fixtures/bench_fake_vllm.py (instant, scriptable) and the
server by a small HTTP stub (fixtures in tests/fixtures/bench_env.py); the real vLLM run is in
test_bench_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.analysis import results as R
from bench.run import grid as G
from bench.run import runner
from bench.run import sweep as S

REPO = Path(__file__).resolve().parents[1]

# `vllm bench serve` flags of vLLM 0.26.0 that the sweep uses (read from
# the 0.26.0 wheel's parser). The e2e test proves them against the local 0.32 build by running.
FLAGS_026 = {
    "--backend", "--endpoint", "--base-url", "--model", "--tokenizer", "--dataset-name",
    "--random-input-len", "--random-output-len", "--random-range-ratio", "--ignore-eos",
    "--num-prompts", "--max-concurrency", "--request-rate", "--num-warmups", "--percentile-metrics",
    "--metric-percentiles", "--seed", "--save-result", "--result-dir", "--result-filename",
    "--metadata", "--disable-tqdm", "--save-detailed",
}


def sweep_args(server, out, fake, *extra):
    return [
        "--base-url", server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
        "--vllm-bin", fake.bin, "--scenarios", "S1_chat,S3_moderation", "--concurrencies", "1,4",
        "--window-s", "5", "--health-interval", "0.2",
        *extra,
    ]


def manifest(out):
    return json.loads((out / "manifest.json").read_text())


# --- plan and command line -------------------------------------------------------------------


def plan_for(*argv):
    parser = S.argparse.ArgumentParser()
    S.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["sweep", "--base-url", "http://x", "--model", "m", "--tokenizer", "t",
                              "--out", "o", *argv])
    return args, G.build_plan(args)


def test_default_plan_is_the_seed_matrix():
    _, plan = plan_for()
    assert len(plan) == 28
    assert {(p.scenario, p.input_len, p.output_len) for p in plan} == {
        ("S1_chat", 256, 128), ("S2_summary", 1024, 256), ("S3_moderation", 512, 16), ("S4_rag", 4096, 256)}
    assert sorted({p.concurrency for p in plan}) == [1, 2, 4, 8, 16, 32, 64]
    # every run is sized by time from a burst at its load: the plan holds only the floor (a p99 of
    # fewer than 100 requests is the slowest one) and two waves of burst
    assert {p.num_prompts for p in plan} == {100} and all(p.sized for p in plan)
    by_c = {p.concurrency: p.warmups for p in plan if p.scenario == "S1_chat"}
    assert by_c[1] == 8 and by_c[8] == 16 and by_c[64] == 128
    longer, plan15 = plan_for("--window-s", "30")
    assert {p.run_hash for p in plan15}.isdisjoint({p.run_hash for p in plan})  # another window: other runs


@pytest.mark.parametrize("argv, needle", [
    (["--window-s", "2"], "--window-s 2: a run of under 5 s measures start-up"),
    (["--min-prompts", "32"], "--min-prompts 32: a p99 of fewer than 100 requests"),
    (["--prompts-per-concurrency", "8"], "--prompts-per-concurrency is gone"),
])
def test_runs_too_short_or_too_small_are_refused(argv, needle):
    with pytest.raises(G.UsageError, match=needle):
        plan_for(*argv)


def test_overrides_scale_and_warmups():
    _, plan = plan_for("--scenario", "S1_chat=32/8", "--scenario", "X_new=100/10", "--length-scale", "0.5",
                       "--concurrencies", "1,2", "--warmups", "auto")
    got = {(p.scenario, p.concurrency): (p.input_len, p.output_len, p.warmups) for p in plan}
    assert got[("S1_chat", 1)] == (16, 4, 8)  # the burst: two waves, at least 8 requests
    assert got[("X_new", 2)] == (50, 5, 8)
    assert got[("S3_moderation", 1)] == (256, 8, 8)
    assert [p.concurrency for p in plan if p.scenario == "S4_rag"] == [1, 2]


@pytest.mark.parametrize("argv, needle", [
    (["--scenario", "S1_chat=32"], "NAME=INPUT/OUTPUT"),
    (["--scenarios", "S9"], "unknown S9"),
    (["--warmups", "many"], "--warmups"),
])
def test_bad_inputs_name_the_option(argv, needle):
    with pytest.raises(G.UsageError, match=needle):
        plan_for(*argv)


@pytest.mark.parametrize("text, needle", [
    ("0,2", "0,2 cannot be right: give whole numbers of 1 or more"),
    ("1,two", "1,two is not a list of whole numbers"),
    ("4,2,2", "4,2,2 names 2 twice; give each concurrency once: 2,4"),
    ("4,2", "4,2 is not in increasing order; give 2,4"),
])
def test_concurrencies_are_refused_unless_increasing_whole_numbers(text, needle, tmp_path, capsys):
    with pytest.raises(G.UsageError, match=needle):
        G.parse_concurrencies(text)
    # The sweep refuses them while its arguments are parsed: exit 2, the flag and the fix, no traceback.
    assert S.main(["--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "t", "--out",
                   str(tmp_path / "o"), "--concurrencies", text]) == 2
    err = capsys.readouterr().err
    assert f"argument --concurrencies: {needle}" in err and "Traceback" not in err
    assert G.parse_concurrencies("1,2,4") == [1, 2, 4]


def test_a_scenario_s_own_concurrencies_follow_the_same_rule(tmp_path, capsys):
    assert S.main(["--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "t", "--out",
                   str(tmp_path / "o"), "--scenario-concurrencies", "K_korean=64,1,8"]) == 2
    err = capsys.readouterr().err
    assert ("argument --scenario-concurrencies: K_korean: 64,1,8 is not in increasing order; give 1,8,64" in err
            and "Traceback" not in err)


def test_run_hash_changes_with_parameters():
    _, a = plan_for("--concurrencies", "4")
    _, b = plan_for("--concurrencies", "4", "--seed", "1")
    _, c = plan_for("--concurrencies", "4")
    assert [p.run_hash for p in a] == [p.run_hash for p in c]
    assert not set(p.run_hash for p in a) & set(p.run_hash for p in b)


def test_command_uses_only_flags_known_in_vllm_026():
    args, plan = plan_for("--bench-args", "--temperature 0")
    cmd = G.bench_command(["vllm"], args, plan[0], "/tok", Path("/r"), seed=123, num_prompts=240)
    assert cmd[:3] == ["vllm", "bench", "serve"]
    flags = {c for c in cmd if c.startswith("--")}
    assert flags - {"--temperature"} <= FLAGS_026
    assert "--temperature" in flags  # passthrough
    joined = " ".join(cmd)
    for part in ("--dataset-name random", "--random-range-ratio 0", "--request-rate inf",
                 "--percentile-metrics ttft,tpot,itl,e2el", "--metric-percentiles 50,90,99",
                 "--max-concurrency 1", "--num-prompts 240", "--save-detailed", "--result-filename S1_chat_c1.json"):
        assert part in joined
    meta = cmd[cmd.index("--metadata") + 1:]
    assert "scenario=S1_chat" in meta and "concurrency=1" in meta
    assert f"{R.META_RUN_HASH}={plan[0].run_hash}" in meta


# --- sweeps with the fake bench --------------------------------------------------------------


def test_sweep_all_valid_writes_results_manifest_logs(bench_stub_server, fake_bench, tmp_path, capsys):
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--instance-type", "g6e.2xlarge", "--gpus", "4",
                             "--server-args", "--kv-cache-dtype fp8")) == 0
    names = sorted(p.name for p in out.glob("*_c*.json"))
    assert names == ["S1_chat_c1.json", "S1_chat_c4.json", "S3_moderation_c1.json", "S3_moderation_c4.json"]
    assert len(list((out / "logs").glob("*.log"))) == 4
    m = manifest(out)
    assert m["server"]["vllm_version"] == "0.26.0" and m["server"]["max_model_len"] == 1024
    assert m["instance_type"] == "g6e.2xlarge" and m["gpus"] == 4
    assert m["served_flags"] == "--kv-cache-dtype fp8"
    assert len(m["config_hash"]) == 12 and m["started_at"] and m["finished_at"]
    assert [r["status"] for r in m["runs"]] == ["valid"] * 4
    assert all(len(r["attempts"]) == 1 and r["attempts"][0]["rc"] == 0 for r in m["runs"])
    printed = capsys.readouterr().out
    progress = [line for line in printed.splitlines() if line.startswith("[")]
    assert len(progress) == 4 and all("ETA" in line for line in progress)
    assert progress[0].startswith("[1/4] S1_chat c=1")
    # this side's half of the verdict, recorded with the results (and uploaded with the manifest)
    cap = m["capacity"]
    assert cap["slo"] == {"ttft_p99_ms": 500.0, "decode_p99_ms": 50.0, "decode_metric": "itl"}
    s1 = cap["scenarios"]["S1_chat"]["slo_capacity_interval"]
    assert s1["source"] == "grid" and s1["state"] in ("meets_slo", "never_meets_slo") and s1["load_max"] == 4
    assert "bench sweep: S1_chat under the SLO: " in printed


def test_exit0_with_failed_requests_is_invalid_retried_and_kept(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    fake_bench.plan({"S1_chat_c4": ["fail_all", "fail_all"], "S3_moderation_c1": ["partial", "ok"],
               "S3_moderation_c4": ["crash", "crash"]})
    assert S.main(sweep_args(bench_stub_server, out, fake_bench)) == 1
    runs = {(r["scenario"], r["concurrency"]): r for r in manifest(out)["runs"]}
    bad = runs[("S1_chat", 4)]
    assert bad["status"] == "invalid" and len(bad["attempts"]) == 2
    assert [a["rc"] for a in bad["attempts"]] == [0, 0]  # the trap: exit 0, nothing completed
    assert "100 failed requests" in bad["reason"] and "completed 0 < 100" in bad["reason"]
    assert "Not Found" in bad["reason"]
    assert (out / "S1_chat_c4.attempt1.invalid.json").exists()
    assert (out / "S1_chat_c4.attempt2.invalid.json").exists()
    assert not (out / "S1_chat_c4.json").exists()
    retried = runs[("S3_moderation", 1)]
    assert retried["status"] == "valid" and [a["valid"] for a in retried["attempts"]] == [False, True]
    assert "1 failed requests" in retried["attempts"][0]["reason"]
    crashed = runs[("S3_moderation", 4)]
    assert crashed["status"] == "invalid" and "exited 1" in crashed["reason"]
    assert fake_bench.keys().count("S1_chat_c1") == 1


def test_a_run_that_falls_short_runs_again_larger_beyond_its_attempts(bench_stub_server, fake_bench, tmp_path):
    # falling short of the window is a sizing miss, not a failure: two such runs come on top of --attempts
    out = tmp_path / "out"
    fake_bench.plan({"S1_chat_c4": ["short", "short", "ok"], "S3_moderation_c4": ["short"]})
    assert S.main(sweep_args(bench_stub_server, out, fake_bench)) == 1
    runs = {(r["scenario"], r["concurrency"]): r for r in manifest(out)["runs"]}
    grew = runs[("S1_chat", 4)]
    assert grew["status"] == "valid" and [a["valid"] for a in grew["attempts"]] == [False, False, True]
    sizes = [a["num_prompts"] for a in grew["attempts"]]
    assert sizes[0] < sizes[1] < sizes[2] and grew["attempts"][1]["resize_to"] == sizes[2]
    # each resize from the last short run's share held, with the retry margin
    held = [a["steady_window_s"] for a in grew["attempts"][:2]]
    assert all(sizes[i + 1] >= sizes[i] * 5 * 1.6 / held[i] - 4 for i in (0, 1))
    stayed = runs[("S3_moderation", 4)]
    assert stayed["status"] == "invalid" and len(stayed["attempts"]) == 2 + 2
    assert "less than the 5 s window" in stayed["reason"]


def test_resume_reruns_only_what_is_not_valid(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    fake_bench.plan({"S1_chat_c4": ["fail_all", "fail_all", "ok"]})
    assert S.main(sweep_args(bench_stub_server, out, fake_bench)) == 1
    assert S.main(sweep_args(bench_stub_server, out, fake_bench)) == 2  # refuses to overwrite without --resume
    (out / "S3_moderation_c1.json").unlink()
    stale = json.loads((out / "S3_moderation_c4.json").read_text())
    stale[R.META_RUN_HASH] = "0" * 12
    (out / "S3_moderation_c4.json").write_text(json.dumps(stale))
    before = len(fake_bench.keys())
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--resume")) == 0
    assert sorted(fake_bench.keys()[before:]) == ["S1_chat_c4", "S3_moderation_c1", "S3_moderation_c4"]
    m = manifest(out)
    assert sorted(m["sessions"][-1]["skipped_valid"]) == ["S1_chat_c1.json"]
    assert (out / "S3_moderation_c4.stale1.json").exists()
    rec = {(r["scenario"], r["concurrency"]): r for r in m["runs"]}
    assert [a["n"] for a in rec[("S1_chat", 4)]["attempts"]] == [1, 2, 3]
    assert len(m["sessions"]) == 2 and all(r["status"] == "valid" for r in m["runs"])
    # A changed plan invalidates what was recorded under the old one.
    before = len(fake_bench.keys())
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--resume", "--seed", "7")) == 0
    assert len(fake_bench.keys()) - before == 4


def test_a_folder_of_another_grid_or_slo_is_refused_naming_the_difference(bench_stub_server, fake_bench, tmp_path,
                                                                          capsys):
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--slo-itl-p99-ms", "100")) == 0
    assert manifest(out)["config"]["slo"] == {"ttft_p99_ms": 500.0, "decode_p99_ms": 100.0, "decode_metric": "itl"}
    capsys.readouterr()
    before = len(fake_bench.keys())
    for extra in ((), ("--resume",)):
        assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--slo-itl-p99-ms", "100", *extra,
                                 "--concurrencies", "1,2")) == 2
        err = capsys.readouterr().err
        assert (f"{out} holds a sweep of another grid or SLO (S1_chat at concurrencies 1,4 in the folder, 1,2 asked "
                "(runs at 4 would stay and count); S3_moderation at concurrencies 1,4 in the folder, 1,2 asked (runs at "
                "4 would stay and count)): choose another --out for this one, or continue that sweep with its own "
                "settings and --resume") in err
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--resume")) == 2
    assert ("SLO TTFT p99 <= 500 ms, ITL p99 <= 100 ms in the folder, TTFT p99 <= 500 ms, ITL p99 <= 50 ms asked"
            in capsys.readouterr().err)
    assert len(fake_bench.keys()) == before  # nothing ran
    # Its own grid and SLO continue; a subset of its scenarios keeps the others' records.
    (out / "S1_chat_c4.json").unlink()
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--slo-itl-p99-ms", "100", "--resume",
                             "--scenarios", "S1_chat")) == 0
    assert fake_bench.keys()[before:] == ["S1_chat_c4"]
    m = manifest(out)
    assert sorted((r["scenario"], r["concurrency"], r["status"]) for r in m["runs"]) == [
        ("S1_chat", 1, "valid"), ("S1_chat", 4, "valid"), ("S3_moderation", 1, "valid"), ("S3_moderation", 4, "valid")]
    assert set(m["config"]["scenarios"]) == {"S1_chat", "S3_moderation"}


def test_health_wait_is_bounded_and_says_why(bench_stub_server, fake_bench, tmp_path, capsys):
    bench_stub_server.unhealthy_for(3600)
    # the wait gives up after 4 s and says why every 0.25 s: on a loaded machine a probe of the stub can take
    # a second (on CI a 1.5 s wait once ran out before any line was due)
    assert S.main(sweep_args(bench_stub_server, tmp_path / "o", fake_bench, "--health-timeout-s", "4",
                             "--health-say-every", "0.25")) == 3
    assert fake_bench.keys() == []
    captured = capsys.readouterr()
    said = [line for line in captured.out.splitlines() if "still waiting for" in line]
    assert said and all("HTTP 503 (the server is up but not ready" in line for line in said)
    assert "did not answer 200 within" in captured.err and "--health-timeout-s" in captured.err


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on leaving: nothing listens there


def test_wrong_port_says_why_within_fifteen_seconds(fake_bench, tmp_path):
    """The default cadence: a line naming the reason comes 10 s into the wait (bound: 15 s)."""
    url = f"http://127.0.0.1:{_closed_port()}"
    argv = ["--base-url", url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(tmp_path / "o"),
            "--vllm-bin", fake_bench.bin, "--scenarios", "S1_chat", "--concurrencies", "1",
            "--health-timeout-s", "14", "--health-interval", "0.5"]  # the reason is due at 10 s: 4 s of slack
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "bench", "sweep", *argv], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic(), line))
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    started = next(t for t, line in lines if "waiting for" in line and "still" not in line)
    reason = [(t, line) for t, line in lines if "still waiting for" in line]
    print(f"\nwrong port: first reason line {reason[0][0] - started:.1f} s into the wait" if reason else "")
    assert reason, "".join(line for _, line in lines)
    assert "connection refused" in reason[0][1] and url in reason[0][1]
    assert reason[0][0] - started < 15
    assert proc.returncode == 3 and fake_bench.keys() == []


def test_a_model_the_server_does_not_serve_stops_before_any_run(bench_stub_server, fake_bench, tmp_path, capsys):
    args = sweep_args(bench_stub_server, tmp_path / "o", fake_bench)
    args[args.index("--model") + 1] = "gemma-typo"
    assert S.main(args) == 2
    err = capsys.readouterr().err
    assert "--model gemma-typo: the server at" in err and "it serves tiny (GET /v1/models)" in err
    assert "Traceback" not in err and fake_bench.calls_made(phase=None) == []
    assert not (tmp_path / "o" / "manifest.json").exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # an exited child of an exited parent may linger as a zombie until reaped
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_sigterm_stops_marks_pending_and_resume_finishes(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    fake_bench.plan({"S3_moderation_c1": ["hang", "ok"]})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "bench", "sweep", *sweep_args(bench_stub_server, out, fake_bench)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while "S3_moderation_c1" not in fake_bench.keys():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, output
    hung = fake_bench.pids()[fake_bench.keys().index("S3_moderation_c1")]
    deadline = time.monotonic() + 10
    while _alive(hung):  # the bench process was stopped too, not left orphaned
        assert time.monotonic() < deadline, f"bench process {hung} still running"
        time.sleep(0.1)
    status = {r["file"]: r["status"] for r in manifest(out)["runs"]}
    assert status == {"S1_chat_c1.json": "valid", "S1_chat_c4.json": "valid",
                      "S3_moderation_c1.json": "pending", "S3_moderation_c4.json": "pending"}
    assert manifest(out)["sessions"][-1]["interrupted"]
    before = len(fake_bench.keys())
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--resume")) == 0
    assert fake_bench.keys()[before:] == ["S3_moderation_c1", "S3_moderation_c4"]


def test_overhead_is_recorded_and_adds_up(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--concurrencies", "1,2,4,8")) == 0
    t = manifest(out)["sessions"][-1]["timing"]
    assert t["wall_s"] >= t["bench_processes_s"] > 0
    accounted = t["health_wait_s"] + t["bench_processes_s"] + t["orchestration_overhead_s"]
    assert accounted == pytest.approx(t["wall_s"], abs=0.01)
    # With an instant fake bench almost all time is process start-up; the orchestrator's own cost per
    # combination is a figure to read, not to assert (it moves with the machine's load).
    print(f"fake-bench sweep: wall {t['wall_s']:.2f} s, bench processes {t['bench_processes_s']:.2f} s, "
          f"orchestration {t['orchestration_overhead_s']:.3f} s ({t['orchestration_overhead_pct']:.2f}%), "
          f"{t['orchestration_overhead_s'] / 8:.3f} s per combination")
    assert t["orchestration_overhead_s"] >= 0 and len(manifest(out)["runs"]) == 8


def test_eta_model_separates_fixed_and_proportional_time():
    _, plan = plan_for("--scenarios", "S1_chat,S4_rag", "--concurrencies", "1")
    s1, s4 = plan
    eta = runner.EtaModel()
    eta.observe(s1, process_s=20.0, window_s=10.0)
    # fixed 10 s; rate = 10 s / cost(S1): S4 costs more per prompt, so its estimate is larger
    assert eta.estimate([s1]) == pytest.approx(20.0)
    assert eta.estimate([s4]) == pytest.approx(10.0 + 10.0 * s4.cost() / s1.cost())
    assert eta.estimate([]) == 0.0


def test_run_hash_covers_hardware_image_and_server_flags():
    _, base = plan_for("--instance-type", "g6e.2xlarge", "--gpus", "1", "--image", "vllm/vllm-openai:v0.26.0",
                       "--server-args", '["--max-model-len", "8192"]')
    for changed in (["--instance-type", "g7e.2xlarge"], ["--gpus", "4"], ["--image", "vllm/vllm-openai:v0.27.0"],
                    ["--server-args", '["--max-model-len", "4096"]']):
        argv = ["--instance-type", "g6e.2xlarge", "--gpus", "1", "--image", "vllm/vllm-openai:v0.26.0",
                "--server-args", '["--max-model-len", "8192"]']
        argv[argv.index(changed[0]) + 1] = changed[1]
        _, other = plan_for(*argv)
        assert not {p.run_hash for p in base} & {p.run_hash for p in other}, changed


def test_a_server_that_stops_answering_stops_the_sweep(bench_stub_server, fake_bench, tmp_path, capsys):
    """An engine out of GPU memory took its server down mid-run on the H100 box (2026-12-05); every later run
    failed to connect in a second or two, and the sweep went on trying them. Now a failed run is followed by a
    look at /health (a restarting pod gets --health-timeout-s to come back): a server gone stops the sweep with
    exit 3, the finished runs kept and the unfinished one pending for --resume."""
    out = tmp_path / "out"
    fake_bench.plan({"S1_chat_c4": ["server_down"]})
    # 5 s, not 1: on loaded CI cores the stub's healthy /health has taken over a second to answer, which would
    # stop the sweep at its first check (tests/test_bench_extra_runs.py saw it); the server gone answers 503 at
    # once, so the 5 s are waited once, after the failed run
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--health-timeout-s", "5")) == S.EXIT_UNHEALTHY
    err = " ".join(capsys.readouterr().err.split())
    assert "bench sweep: the server stopped answering during S1_chat c=4:" in err
    assert "the sweep stops: 1 valid run(s) kept in" in err and "--resume" in err and "Traceback" not in err
    status = {(r["scenario"], r["concurrency"]): r["status"] for r in manifest(out)["runs"]}
    assert status == {("S1_chat", 1): "valid", ("S1_chat", 4): "pending", ("S3_moderation", 1): "pending",
                      ("S3_moderation", 4): "pending"}
    assert fake_bench.keys() == ["S1_chat_c1", "S1_chat_c4"]  # no retry and no later run against a dead server
    assert (out / "S1_chat_c4.attempt1.invalid.json").exists()
    # the reports and the experiment page word each unfinished run by what happened to it (they read
    # "not run (status pending)" for the run the server died in)
    from bench.analysis import side as SIDE
    why = {(r.scenario, r.concurrency): r.problems[0] for r in SIDE.load_side(out).runs if not r.valid}
    assert why[("S1_chat", 4)] == ("not finished: the sweep stopped during this run (the server stopped answering "
                                   "during S1_chat c=4); bench sweep --resume runs it")
    assert why[("S3_moderation", 1)] == "not run: the sweep stopped before it; bench sweep --resume runs it"


def test_a_failed_run_on_a_server_that_still_answers_is_retried(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    fake_bench.plan({"S1_chat_c4": ["fail_all", "ok"]})
    # 5 s for the same reason as above: a slow answer from a healthy stub must not read as a server gone
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, "--health-timeout-s", "5")) == 0
    assert fake_bench.keys().count("S1_chat_c4") == 2
