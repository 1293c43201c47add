"""Debian's Prometheus scrapes a live vLLM CPU server (the session's tiny server) while `vllm bench
serve` loads it: every rule, panel and trigger query returns a series, and the running trigger,
through KEDA's and the HPA's rule, asks for the replicas the plan gives that load (the same checks
as tests/test_fleet_prometheus.py runs on the committed recording, here on the real thing)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.fixtures.bench_fake_metrics import dcgm_text
from tests.fixtures.prometheus_server import load_command, read_recording, record, start_prometheus
from tests.test_fleet_prometheus import RULES, carried_load, check_every_query, planned_replicas, trigger_replicas

pytestmark = pytest.mark.vllm


def test_prometheus_on_a_live_server_under_load(tiny_vllm_server, tmp_path, fake_dcgm):
    fake_dcgm.script(dcgm_text([(97.0, 40000.0, 290.0)]))
    prom = start_prometheus(tmp_path / "prometheus", vllm=[f"{tiny_vllm_server.url}/metrics"], dcgm=[fake_dcgm.url],
                            rules=RULES)
    try:
        started = time.time()
        load = subprocess.Popen(load_command(str(tiny_vllm_server.python).replace("/python", "/vllm"),
                                             tiny_vllm_server.url, tiny_vllm_server.model,
                                             tiny_vllm_server.model_dir, tmp_path / "results"),
                                env=tiny_vllm_server.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        texts = record(f"{tiny_vllm_server.url}/metrics", load)  # the raw reads, beside Prometheus's scrapes
        assert load.wait(timeout=300) == 0, load.stderr.read()[-3000:]
        ended = time.time()
        check_every_query(prom)
        # the start-up simulated is the recorded CPU server's (this session's server started long ago)
        steps = trigger_replicas(prom, started, ended, read_recording()["startup_s"])
    finally:
        prom.stop()
    carried = carried_load(texts)
    assert max(s.replicas for s in steps) == planned_replicas(carried), (carried, [(s.t, s.values, s.replicas)
                                                                                   for s in steps])
