"""`python -m bench gpu-check` end to end on vLLM's CPU build: the orchestration, the record and the
page section, with the checks that run on a CPU (the model, a cold start, its timeline, the sweep and
its `vllm bench serve` cross-check at one point); the GPU-only steps say "not available on this
device" and the exit code stays 0. The compile cache's trip through S3 is left to
tests/test_startup_compile_cache.py (a second CPU server would double this test's time).

It runs under pytest's own temporary folder, as deep as CI's: a pod's TMPDIR there is too long for
the ZMQ socket names vLLM's API server and engine share (`vllm serve` exited 1 before it logged
anything), which the pods' VLLM_RPC_BASE_PATH now keeps short.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.demo import gpu_steps, gpu_sweep

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_on_the_cpu_build(vllm_env, tmp_path):
    out = tmp_path / ("deep-as-ci-" * 4) / "gpu-check"
    # as in CI: a pod's TMPDIR (<out>/work/pod/tmp) plus a socket's uuid passes 107 characters
    assert len(str(out / "work" / "pod" / "tmp")) + 37 > gpu_steps.IPC_PATH_MAX
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "gpu-check", "--out", str(out), "--allow-small-vocab", "--vocab-words", "2000",
         "--steps", "model,cold_start,timeline,sleep_wake,sweep,speculative", "--concurrencies", "2",
         "--window-s", "2", "--length-scale", "0.125", "--agree-pct", "1000", "--health-timeout-s", "900"],
        cwd=REPO, env={**vllm_env.env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + gpu_steps.tail(out / "logs" / "server-cold.log")
    record = json.loads((out / "gpu-check.json").read_text())
    checks = record["checks"]
    assert record["broken"] == [] and record["device"]["gpu"] is False
    assert record["versions"]["vllm"] and record["versions"]["torch"] and record["versions"]["transformers"]
    # the model and tensor-parallel size the figures belong to (TP=1: per GPU = per replica)
    assert record["model"]["shape"] == "tiny" and record["model"]["tensor_parallel_size"] == 1
    assert record["model_choice"] == {"shape": "tiny"} and record["device"]["gpus_seen"] == 0
    # the transformers trap, asked of the CPU build's vLLM (0.32.0 reads Gemma 4 configs right)
    assert record["transformers_trap"]["status"] == "ok", record["transformers_trap"]
    assert record["transformers_trap"]["vllm"] == vllm_env.version == record["versions"]["vllm"]
    assert {k: c["status"] for k, c in checks.items()} == {
        "model": "ok", "cold_start": "ok", "timeline": "ok", "sleep_wake": "not available",
        "compile_cache": "skipped", "sweep": "ok", "speculative": "not available"}
    cold = checks["cold_start"]
    assert cold["healthy_s"] > 0 and cold["engine_init_s"] is not None
    assert cold["startup_record"]["kind"] == "vllm-poc/startup-record"
    assert [m["event"] for m in checks["timeline"]["milestones"]][-1] in ("api_ready", "health_ok")
    sweep = checks["sweep"]
    # the point sized from the burst, the prefix cache emptied before each side, each side's hits read
    assert sweep["server"] == "cold" and sweep["prefix_cache_reset"] is True
    (point,) = sweep["points"]
    assert point["concurrency"] == 2 and point["burst_req_s"] > 0 and point["bench"]["output_len"] == 16
    assert sweep["gpus"] == 1 and point["bench"]["per_gpu_output_tok_s"] == round(point["bench"]["output_tok_s"], 1)
    for side in ("bench", "vllm_bench_serve"):
        assert point[side]["valid"], point
        assert point[side]["duration_s"] > 0
        assert point[side]["prefix_cache_hit_pct"] is not None
    # this step's estimate is the sweep's floor (the record rounds the burst's rate to 0.01 request/s: one
    # prompt either way); the sweep sizes up from its own burst, or repeats a run that held too short
    assert point["bench"]["prompts"] >= max(100, gpu_sweep.point_prompts(point["burst_req_s"], 2, 2.0)) - 1
    assert point["bench_minus_cli_pct"] is not None
    assert sweep["spread"]["gap_range_pct"] == [point["bench_minus_cli_pct"]] * 2
    assert "not available on this device" in checks["speculative"]["reason"]
    # the page section names every check and carries no Python reprs
    md = (out / "gpu-check.md").read_text()
    assert "Sweep, cross-checked against vllm bench serve" in md and "None" not in md
    assert "Model: the tiny random Llama. Transformers trap: ok" in md
    assert (out / "gpu-check.html").read_text().startswith("<!doctype html>")


def test_an_experiment_on_the_cpu_build(vllm_env, tmp_path):
    """`--experiment max-num-seqs` with two of its variants on the tiny model: one server per variant on the
    shared compile cache, `bench sweep` on each. The first command is stopped with SIGTERM (what `timeout` sends
    when a GPU box's time limit ends) while the second variant's sweep runs: it stops that sweep and that
    server, marks the variant cut off and exits 143 saying how to continue (on the H200 box a stopped command
    had left its server holding the GPU). The same command again keeps the finished variant without starting
    its server, continues the cut-off variant's sweep and compares both: `bench compare`, the record and its
    page."""
    import os
    import signal
    import time

    out = tmp_path / "gc"
    common = [sys.executable, "-m", "bench", "gpu-check", "--out", str(out), "--experiment", "max-num-seqs",
              "--allow-small-vocab", "--vocab-words", "2000", "--concurrencies", "2", "--length-scale", "0.125",
              "--health-timeout-s", "900", "--window-s", "5"]
    env = {**vllm_env.env, "PYTHONPATH": str(REPO)}
    root = out / "experiments" / "max-num-seqs"
    log = tmp_path / "first.log"
    with log.open("w") as fh:
        first = subprocess.Popen([*common, "--variants", "seqs-16,seqs-32"], cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
        manifest = root / "seqs-32" / "S1_chat" / "manifest.json"
        deadline = time.monotonic() + 1200
        while not manifest.is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert manifest.is_file(), log.read_text()[-3000:]
        os.kill(first.pid, signal.SIGTERM)  # to gpu-check alone: it passes the stop on to its sweep
        rc = first.wait(timeout=120)
    said = log.read_text()
    assert rc == 143, said[-3000:]
    assert "stopped by SIGTERM; its vLLM server is stopped" in said and "run the same command again" in said
    assert "Traceback" not in said
    record = json.loads((root / "experiment.json").read_text())
    cut = record["variants"]["seqs-32"]
    # the cut-off sweep is kept as far as it got, and the page says so
    assert cut["status"] == "cut off" and cut["sweeps"]["S1_chat"]["cut_off"] is True, cut
    assert cut["sweeps"]["S1_chat"]["rc"] is None and "**seqs-32: S1_chat** (cut off after " in (
        root / "experiment.md").read_text()
    assert "stopped" in (root / "seqs-32" / "sweep-S1_chat.log").read_text()  # the sweep said so, in its log
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the stopped command still run: {left}"
    assert record["variants"]["seqs-16"]["status"] == "ok"

    # the same command again: seqs-16, finished, is kept without a start; the cut-off seqs-32 resumes its sweep,
    # and the comparison takes both
    again = subprocess.run([*common, "--variants", "seqs-16,seqs-32"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "seqs-16: kept from an earlier command" in again.stdout, again.stdout[-3000:]
    assert "versions and trap as probed at" in again.stdout  # the first command's probes, not asked twice
    assert not (out / "server.pid.json").exists()  # the note of a running server goes with the server
    record = json.loads((root / "experiment.json").read_text())
    assert record["kind"] == "vllm-poc/gpu-experiment" and record["scenarios"] == {"S1_chat": [2]}
    for label, seqs, starts in (("seqs-16", "16", 1), ("seqs-32", "32", 2)):
        v = record["variants"][label]
        assert v["status"] == "ok" and v["flags"][v["flags"].index("--max-num-seqs") + 1] == seqs
        assert len(v["starts"]) == starts and v["starts"][0]["healthy_s"] > 0 and v["starts"][0]["kv_cache_tokens"]
        (run,) = v["sweeps"]["S1_chat"]["runs"]
        assert run["concurrency"] == 2 and run["valid"] and run["output_tok_s"] > 0
        assert (root / label / "S1_chat" / "manifest.json").is_file() and (root / label / "server-1.log").is_file()
    assert record["variants"]["seqs-32"]["sweeps"]["S1_chat"]["resumed"] is True
    compared = record["compare"]["S1_chat"]
    assert compared["status"] == "ok" and compared["variants"] == ["seqs-16", "seqs-32"], compared
    assert compared["cells"][0]["concurrency"] == 2 and not compared["incomplete"], compared
    assert "slo_capacity_winner" in compared  # bench compare's lead under the SLO, or null where it has none
    md = (root / "experiment.md").read_text()
    assert "| seqs-16 | ok |" in md and "**Comparison: S1_chat**" in md and "None" not in md
    assert (root / "compare" / "S1_chat" / "compare.md").is_file()
