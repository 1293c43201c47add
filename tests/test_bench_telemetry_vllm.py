"""Telemetry against a real vLLM (CPU build, prefix caching on, as vLLM's V1 engine defaults to).

One short sweep (S1_chat at 384/4 tokens: three KV blocks of 128, so a replayed prompt would find
two of them cached; c=1, 2) must show, in the stored telemetry, prefix-cache hits near zero for
every run: each run drew prompts with a seed of its own. Then a run whose prompts the cache holds
(a shared 256-token prefix, as a replayed seed would send them), after a warm-up request that the
measured window must not count, is flagged suspect, kept out of the report's figures, and the sweep
exits 1. Four `vllm bench serve` processes in all (each
mostly CLI start-up on CPU).

The sweep uses a seed no other test uses: the server is shared by the session, and a test that
replayed another test's prompts would measure exactly the cache effect this test guards against.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench.common import prometheus
from bench.run import telemetry as T

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
SEED = "424242"


def sweep(server, out: Path, concurrencies: str, *extra: str) -> subprocess.CompletedProcess:
    args = ["sweep", "--base-url", server.url, "--model", server.model, "--tokenizer", str(server.model_dir),
            "--out", str(out), "--scenarios", "S1_chat", "--scenario", "S1_chat=384/4",
            "--concurrencies", concurrencies, "--window-s", "5",
            "--seed", SEED, "--health-timeout-s", "60", "--telemetry-interval-s", "0.5", *extra]
    return subprocess.run([server.python, "-m", "bench", *args], env=server.bench_env(), cwd=REPO, text=True,
                          capture_output=True, timeout=300)


def test_real_metrics_distinct_prompts_and_replay_flagged(tiny_vllm_server, tmp_path):
    values = T.server_values(prometheus.parse(metrics_text(tiny_vllm_server)))
    # every figure the bench reads has a name this vLLM exposes
    for key in ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens",
                "generation_tokens", "kv_cache_usage", "requests_waiting", "requests_running"):
        assert values[key] is not None, key
    assert values["process_start"]

    out = tmp_path / "fresh"
    proc = sweep(tiny_vllm_server, out, "1,2", "--warmups", "0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    runs = manifest["runs"]
    assert [r["status"] for r in runs] == ["valid"] * 2
    seeds, attempts = set(), 0
    for rec in runs:
        # a run that held its window too short ran again, larger: every attempt drew its own prompts
        seeds.update(a["seed"] for a in rec["attempts"])
        attempts += len(rec["attempts"])
        attempt = rec["attempts"][-1]
        tele = rec["telemetry"]
        print(f"\n{rec['scenario']} c={rec['concurrency']}: prefix-cache hits {tele['prefix_cache_hit_pct']}% "
              f"of {tele['prefix_cache_queries']:.0f} queried tokens, {tele['samples']} samples")
        assert tele["prompt_tokens"] == rec["num_prompts"] * rec["input_len"]
        assert tele["generation_tokens"] == rec["num_prompts"] * rec["output_len"]
        assert tele["prefix_cache_queries"] >= tele["prompt_tokens"]
        assert tele["prefix_cache_hit_pct"] < 1.0 and rec["suspect"] is None
        assert tele["server_restarted"] is False and tele["kv_cache_usage_max_pct"] is not None
        assert (out / attempt["telemetry_file"]).is_file()
    assert len(seeds) == attempts >= 2

    # Prompts the cache already holds, as a replayed seed sends them: the servers' KV cache keeps about
    # 85 prompts of this size (bench/demo/cpu_vllm.py), fewer than a run sends, so a seed replayed after
    # another run finds its prompts evicted; 256 tokens every prompt shares do what a replay does.
    replay = tmp_path / "replay"
    # requests enough to hold the window even when served from the cache (a short run is invalid first)
    proc = sweep(tiny_vllm_server, replay, "1", "--attempts", "1", "--warmups", "1", "--min-prompts", "600",
                 "--bench-args", "--random-prefix-len 256")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = json.loads((replay / "manifest.json").read_text())["runs"]
    (attempt,) = rec["attempts"]
    # the warm-up drew a prompt of its own and ran before the measured window: not counted
    assert attempt["warmup"]["rc"] == 0 and attempt["warmup"]["seed"] not in seeds | {attempt["seed"]}
    # (a run that is not valid keeps its size on its attempt, not on the run)
    assert rec["telemetry"]["prompt_tokens"] == attempt["num_prompts"] * (256 + rec["input_len"])
    assert rec["status"] == "suspect" and "prefix-cache hits" in rec["suspect"]
    assert rec["telemetry"]["prefix_cache_hit_pct"] > 5.0
    assert "SUSPECT S1_chat c=1" in proc.stderr

    rep = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "bench", "report", str(replay), "--out", str(rep), "--no-charts"],
                          cwd=REPO, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((rep / "summary.json").read_text())
    (row,) = summary["runs"]
    assert row["valid"] is True and row["suspect"] is True and row["prefix_cache_hit_pct"] > 5.0
    assert summary["scenarios"]["S1_chat"]["peak"] is None  # a suspect run makes no figure

    capture = os.environ.get("VLLM_POC_CAPTURE_METRICS_TO")  # refreshes tests/fixtures/metrics/
    if capture:
        Path(capture).write_text(metrics_text(tiny_vllm_server))


def metrics_text(server) -> str:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as resp:
        return resp.read().decode()
