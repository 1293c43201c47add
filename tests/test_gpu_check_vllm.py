"""`python -m bench gpu-check` end to end on vLLM's CPU build: the orchestration, the record and the
page section; the GPU-only steps say "not available on this device" and the exit code stays 0.

The compile cache still travels through the servers' own push and pull (a moto server on 127.0.0.1)
and a second server starts on the restored cache; the CPU build serves in eager mode here, so there
is no compile to skip, and the step says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_on_the_cpu_build(vllm_env, tmp_path):
    out = tmp_path / "gpu-check"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "gpu-check", "--out", str(out), "--allow-small-vocab", "--vocab-words", "2000",
         "--concurrencies", "1,4", "--window-s", "3", "--length-scale", "0.125", "--agree-pct", "1000",
         "--health-timeout", "900"],
        cwd=REPO, env={**vllm_env.env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "gpu-check.json").read_text())
    checks = record["checks"]
    assert record["broken"] == [] and record["device"]["gpu"] is False
    assert record["versions"]["vllm"] and record["versions"]["torch"]
    assert {k: c["status"] for k, c in checks.items()} == {
        "model": "ok", "cold_start": "ok", "timeline": "ok", "sleep_wake": "not available", "sweep": "ok",
        "compile_cache": "not available", "speculative": "not available"}
    cold = checks["cold_start"]
    assert cold["healthy_s"] > 0 and cold["engine_init_s"] is not None
    assert cold["startup_record"]["kind"] == "vllm-poc/startup-record"
    assert [m["event"] for m in checks["timeline"]["milestones"]][-1] in ("api_ready", "health_ok")
    for point in checks["sweep"]["points"]:
        assert point["bench"]["valid"] and point["vllm_bench_serve"]["valid"], point
        assert point["vllm_bench_serve"]["prompts"] >= 16 and point["apart_pct"] is not None
    cache = checks["compile_cache"]
    assert cache["transport"] == "moto" and cache["push"]["outcome"] == "pushed"
    # the push stores each distinct content once; the pull restores every file of the manifest
    assert cache["pull"]["outcome"] == "restored" and cache["pull"]["bytes"] == cache["cache_bytes"]
    assert cache["restored_start"]["healthy_s"] > 0
    assert "not available on this device" in checks["speculative"]["reason"]
    # the page section names every check and carries no Python reprs
    md = (out / "gpu-check.md").read_text()
    assert "Sweep, cross-checked against vllm bench serve" in md and "None" not in md
    assert (out / "gpu-check.html").read_text().startswith("<!doctype html>")
