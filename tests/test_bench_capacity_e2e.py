"""Real vLLM (CPU build, tiny model): `sweep --capacity-search` through the long-lived bench client.

One short sweep (S1 at 1/16 length, a grid of c=2 alone, 5 s windows) whose SLO every point meets, so the path
is the same on any machine: the search goes above the grid (c=4, its ceiling here) with per-request
detail, then the open-loop rate search (`--open-loop always`) offers Poisson rates from the closed
loop's pass end upwards with `--goodput`, within a GPU-time budget. Checks that vLLM's own result
files carry what the capacity math reads (ttfts/itls/output_lens/start_times, request_goodput,
request_rate, burstiness), that every run held its window, that goodput and attainment are parsed,
and that one client process ran every measured window (the idle time between them is printed).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from bench.analysis import capacity_report as CR
from bench.analysis import side as SIDE

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]


def test_capacity_search_and_poisson_goodput_on_a_real_server(tiny_vllm_server, tmp_path):
    server, out = tiny_vllm_server, tmp_path / "run"
    argv = ["sweep", "--base-url", server.url, "--model", server.model, "--tokenizer", str(server.model_dir),
            "--out", str(out), "--scenarios", "S1_chat", "--length-scale", "0.0625", "--concurrencies", "2",
            "--window-s", "5", "--health-timeout-s", "60", "--bench-client", "library", "--capacity-search",
            "--search-max-concurrency", "4", "--open-loop", "always", "--budget-minutes", "1.25",
            "--slo-ttft-p99-ms", "5000", "--slo-itl-p99-ms", "2000", "--slo-decode-metric", "tpot"]
    # One grid point, the decode limit on TPOT and a minute and a quarter: on a loaded two-core machine a run may
    # come back short of its window (resized and run again), and the CPU server may stream a run's tokens in
    # one chunk, which leaves its ITL p99 unmeasured and asks for repeats (TPOT is timed from whole requests);
    # a CI run with ITL and a one-minute budget ended with c=4 unconfirmed.
    t0 = time.monotonic()
    proc = subprocess.run([server.python, "-m", "bench", *argv], env=server.bench_env(), cwd=REPO, text=True,
                          capture_output=True, timeout=400)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    timing = m["sessions"][-1]["timing"]
    extra = m["extra"]
    print(f"\nreal CPU, library client: wall {wall:.1f} s; {proc.stdout.strip().splitlines()[-1]}; "
          f"{[l for l in proc.stdout.splitlines() if 'GPU time' in l][0]}")
    assert timing["bench_client"] == "library" and timing["idle_between_windows_s"] is not None
    assert "GPU budget 1.25 min for this invocation" in proc.stdout

    # The search went above the grid to its ceiling with per-request detail; nothing missed the SLO.
    closed = extra["scenarios"]["S1_chat"]["closed"]
    assert closed["load_pass"] == 4 and closed["load_fail"] is None, proc.stdout[-4000:]
    detail = json.loads(next((out / "search").glob("S1_chat_c4.run1.json")).read_text())
    assert len(detail["ttfts"]) == len(detail["itls"]) == len(detail["start_times"]) == detail["completed"] >= 100
    assert all(r["window_s"] >= 5 for r in extra["runs"] if r["valid"])

    # The rate search offered Poisson rates with goodput, parsed.
    files = sorted((out / "open_loop").glob("S1_chat_rate*.run*.json"))
    assert files and extra["scenarios"]["S1_chat"]["open_loop"]["runs"] == len(files)
    for f in files:
        data = json.loads(f.read_text())
        assert data["burstiness"] == 1.0 and data["max_concurrency"] == 8  # 4 x the grid's top: a safety cap
        assert data["request_goodput"] is not None and data["request_goodput"] > 0
        assert data["completed"] >= 100 and data["duration"] >= 5
    caps = CR.scenario_capacity(out, SIDE.load_side(out).runs, ttft_ms=5000, decode_ms=2000,
                                decode_metric="tpot")["S1_chat"]
    points = caps["open_loop"]
    assert len(points) == len(files) and all(isinstance(p["meets"], bool) for p in points)
    assert all(0 < p["attainment_pct"] <= 100.0 + 1e-6 and p["goodput_req_s"] > 0 for p in points)
    # Whether a rate meets the SLO is a timing of a CPU server that shares two cores with the rest of the suite
    # (a fresh CI beside another suite, 2026-12-07: 112.8 req/s offered, 25.1 achieved): printed, not asserted.
    for p in points:
        print(f"open loop {p['rate']:g} req/s: {p['req_s']:.1f} achieved, attainment {p['attainment_pct']:.1f} %, "
              f"meets the SLO: {p['meets']}")
    if all(p["meets"] for p in points):
        assert caps["rate_capacity"]["req_s"] == max(p["rate"] for p in points)
    assert caps["closed"].load_pass == 4 and caps["slo_capacity"]["ttft_p99_ci_ms"][1] <= 5000
