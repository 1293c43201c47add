"""The router in front of a pool of two real vLLM CPU servers (the session's tiny server and one more of
the same model): `bench sweep` measures through it and both replicas serve; `bench rehearse` replays a
bursty open-loop trace through it, reads both servers' metrics, simulates the autoscaler with the
plan's targets and the second server's measured start-up, and accounts for it."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from bench.run import rehearsal as RH
from bench.common import prometheus as P
from bench.demo import cpu_vllm
from bench.run import telemetry
from tests.fixtures.bench_env import SERVE_FLAGS, wait_healthy
from tests.fixtures.vllm_env import start_router
from tests.test_bench_e2e import REPO

pytestmark = pytest.mark.vllm


# S1_chat at 64/32 tokens (the other vLLM tests use 16/8), so that requests overlap and last:
# - random prompts share no prefix, so the cache-aware policy sends each to the replica with the fewest
#   requests in flight, the first one on a tie. Requests that never overlap all go to the first
#   replica: at 16/8 a starved client once sent c=4's requests one after another, and the second
#   replica served none;
# - the rehearsal reads the servers four times a second; at 16/8 a fast machine answered each request
#   in a few tens of milliseconds, and CI once read 13 times between them and never saw one running.
LOAD_SCALE = "0.25"


def served(url: str) -> float:
    return telemetry.server_values(P.parse(telemetry.fetch(f"{url}/metrics")))["requests_succeeded"] or 0.0


@pytest.fixture(scope="module")
def pool(tiny_vllm_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    server = tiny_vllm_server
    port = cpu_vllm.free_port()
    env = server.env  # the session's cache root (tests/fixtures/vllm_env.py): only this server's start is new
    proc = cpu_vllm.start(cpu_vllm.serve_command(Path(server.python).parents[1], server.model_dir, port,
                                                 SERVE_FLAGS), env, root / "second.log")
    second = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    router = None
    try:
        wait_healthy(proc, second, root / "second.log", budget_s=600)
        startup_s = time.monotonic() - t0
        router = start_router(root / "router.log", [server.url, second])
        yield {"router": router, "replicas": [server.url, second], "startup_s": startup_s, "server": server}
    finally:
        if router is not None:
            router.stop()
        cpu_vllm.stop(proc)


def bench(server, *args, timeout=600):
    return subprocess.run([server.python, "-m", "bench", *args], env=server.bench_env(), cwd=REPO, text=True,
                          capture_output=True, timeout=timeout)


def test_the_bench_sweeps_through_the_router_and_both_replicas_serve(pool, tmp_path):
    server, router = pool["server"], pool["router"]
    workers = router.workers()
    # the router asked each server for its model: one pool, two replicas
    assert sorted(w["url"] for w in workers) == sorted(pool["replicas"])
    assert {w["model_id"] for w in workers} == {server.model}
    before = [served(u) for u in pool["replicas"]]
    out = tmp_path / "sweep"
    proc = bench(server, "sweep", "--base-url", router.url, "--model", server.model, "--tokenizer",
                 str(server.model_dir), "--out", str(out), "--scenarios", "S1_chat", "--length-scale", LOAD_SCALE,
                 "--concurrencies", "1,4", "--window-s", "5",
                 "--warmups", "0", "--health-timeout-s", "60", "--instance-type", "cpu-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    assert len(runs) == 2 and all(r["status"] == "valid" for r in runs), runs
    after = [served(u) for u in pool["replicas"]]
    gained = [a - b for a, b in zip(after, before)]
    assert all(g > 0 for g in gained), gained  # c=4's overlapping requests reached both replicas
    assert sum(gained) >= 16  # every measured request went through the router to a replica


def _plan(tmp_path, startup_s: float) -> dict:
    """A plan of this pool's size (one to two CPU replicas), in `bench plan`'s shape, with the start-up
    the second server took here."""
    window, period = math.ceil(2 * startup_s), math.ceil(startup_s)
    plan = {"headroom": 0.2, "spares": 0,
            "configurations": [{"label": "cpu", "usd_hour_on_demand": 1.5, "usd_hour_spot": None}],
            "fleet": {"slo": {"ttft_p99_ms": 5000.0, "itl_p99_ms": 1000.0}, "pools": {"interactive": {
                "configuration": "cpu", "min_replicas": 1, "max_replicas": 2, "running_per_replica": 1.0,
                "waiting_per_replica": 1, "kv_cache_usage": 0.9, "startup_s": round(startup_s, 1),
                "scale_down_window_s": window, "scale_down_period_s": period, "reason": None,
                "capacity": {"scenario": "S1_chat", "req_s": 2.0}}}}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return plan


def test_the_rehearsal_replays_a_bursty_trace_through_the_router_and_accounts_for_it(pool, tmp_path):
    server, router = pool["server"], pool["router"]
    plan = _plan(tmp_path, pool["startup_s"])
    out = tmp_path / "rehearsal"
    proc = bench(server, "rehearse", "--plan", str(tmp_path), "--pool", "interactive", "--base-url", router.url,
                 "--model", server.model, "--tokenizer", str(server.model_dir), "--out", str(out),
                 "--metrics-url", f"{pool['replicas'][0]}/metrics", "--metrics-url", f"{pool['replicas'][1]}/metrics",
                 "--duration-s", "10", "--min-requests", "12", "--length-scale", LOAD_SCALE,
                 "--scrape-interval-s", "0.25")
    report = json.loads((out / RH.FILE).read_text())
    assert proc.returncode == (0 if report["held"] else 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    # the plan's peak: 2 replicas x 2 req/s x (1 - 0.2), replayed bursty
    assert report["request_rate"] == report["planned_peak_req_s"] == pytest.approx(3.2)
    assert report["burstiness"] == 0.5 and report["rate_from"] == "plan"
    # attainment, recounted from vLLM's per-request detail
    detail = json.loads((out / "rehearsal" / "S1_chat.json").read_text())
    slo = plan["fleet"]["slo"]
    met = sum(1 for ttft, itl, err in zip(detail["ttfts"], detail["itls"], detail["errors"])
              if not err and 0 < ttft * 1000 <= slo["ttft_p99_ms"] and max(itl, default=0) * 1000 <= slo["itl_p99_ms"])
    req = report["requests"]
    assert req["sent"] == 32 and req["met"] == met and req["attainment"] == pytest.approx(met / 32, abs=1e-4)
    # the autoscaler saw the load the servers reported, and stayed within the pool's bounds
    steps = report["autoscaler"]["steps"]
    assert len(steps) >= 3 and max(s["values"]["running"] + s["values"]["waiting"] for s in steps) > 0
    assert all(1 <= s["replicas"] <= 2 for s in steps)
    hours = report["replica_hours"]
    assert hours["planned"] == pytest.approx(2 * report["duration_s"] / 3600, rel=1e-3)
    assert report["duration_s"] / 3600 * 0.9 <= hours["autoscaled"] <= hours["planned"] * 1.01
    assert report["cost_usd"]["autoscaled_on_demand"] == pytest.approx(hours["autoscaled"] * 1.5, abs=1e-4)
    assert "## Rehearsal: the interactive pool" in (out / RH.MARKDOWN).read_text()
    assert '<section id="rehearsal">' in (out / RH.HTML).read_text()
