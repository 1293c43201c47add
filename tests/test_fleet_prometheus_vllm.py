"""Debian's Prometheus scrapes a live vLLM CPU server (the session's tiny server) while `vllm bench
serve` holds a steady load on it: every rule, panel and trigger query returns a series, and the
ScaledObject's running trigger, evaluated on those real series inside the load and stepped through
KEDA's and the HPA's rule, asks for the replicas the plan gives that load (the same checks as
tests/test_fleet_prometheus.py runs on the committed recording, here on the real thing).

The load is made to be seen whatever the CPU: CONCURRENCY requests at once, each decoding long
answers to the end (`--ignore-eos`), so the server runs requests from the first scrape that sees one
until the client is stopped; the trigger's one-minute average is read at an instant whose window lies
wholly inside the load (Prometheus evaluates it at that time), while the load still runs, instead of
hoping a scrape lands in a short burst. How many run at once on average depends on the machine (below),
so the plan is asked about the load the server reported.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from bench.analysis import fleet as F
from bench.common import fleet_queries as Q
from bench.common.interrupts import stop_process_group
from tests.fixtures.bench_fake_metrics import dcgm_text
from tests.fixtures.prometheus_server import read_recording, start_prometheus
from bench.analysis.sizing import replicas_for
from tests.test_fleet_prometheus import HEADROOM, REPLAY_RULES, check_every_query

pytestmark = pytest.mark.vllm

# 9 at once, each decoding 900 tokens (the model's context is 1024) to the end. On an idle machine the
# server then runs about 9 requests the whole time. On a busy one the client, not the server, sets how
# many run: it reads the streamed answers more slowly than the server writes them and sends the next
# requests late. Fresh-clone runs on 2 busy cores measured one-minute averages of 4 to 5, then 3.44
# with 9 at once and 3.42 with 12 (the server's log: 12 running for 20 s, then 1 for most of a minute:
# more streams only load the client more), and once 1.73 (scrapes of 9, 1, 1, 0, 1, 7: the client's
# sends came in bursts). So the test states a replica's capacity (1 running request under the SLO, a
# planning input like any other) whose target, 0.8 running per replica, lies well below every load
# measured, and takes the load the server really ran (its running gauge
# as scraped over the trigger's window) as the load the plan is asked about; it checks that the
# trigger's query, KEDA's and the HPA's rule, and the plan agree on it. KEDA's rule has a 10 %
# tolerance around each whole number of replicas x the target, where it keeps the count it has; the
# checks allow for that band.
CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 9, 32, 900
CAPACITY_CONCURRENCY = 1


def planned_replicas(load: float) -> int:
    """The plan's count for a load of `load` concurrent requests at this test's stated capacity."""
    return replicas_for(load / CAPACITY_CONCURRENCY, HEADROOM, 0)


WINDOW_S = 60.0  # the trigger's avg_over_time window (fleet_queries.TRIGGER_WINDOW)
# A scrape a second; Prometheus stores a sample, stamped with its scrape's start, once the server has
# answered, and a server busy with the load answers late: the window ends this long before the query, so
# the trigger's value and the window's samples, read one after the other, see the same samples.
SCRAPE_SLACK_S = 3.0


def steady_load(tiny) -> list[str]:
    return [str(tiny.python).replace("/python", "/vllm"), "bench", "serve", "--base-url", tiny.url,
            "--model", tiny.model, "--tokenizer", str(tiny.model_dir), "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--ignore-eos",
            "--num-prompts", str(CONCURRENCY * 60), "--max-concurrency", str(CONCURRENCY),
            "--request-rate", "inf", "--num-warmups", "0", "--seed", "3031", "--disable-tqdm"]


def first_busy(prom, load: subprocess.Popen, budget_s: float = 300) -> float:
    """The Unix time of the first stored scrape with a request running (the client's own start-up is
    not the load's time)."""
    raw = f'max({Q.RUNNING}{{job="{Q.VLLM_JOB}"}})'
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline and load.poll() is None:
        now = time.time()
        busy = [t for t, v in prom.series(raw, now - 10, now, 1) if v > 0]
        if busy:
            return busy[0]
        time.sleep(1)
    pytest.fail(f"the load never reached the server (client exit code {load.poll()})", pytrace=False)


def test_the_trigger_on_a_live_loaded_server_asks_for_the_planned_replicas(tiny_vllm_server, tmp_path, fake_dcgm):
    fake_dcgm.script(dcgm_text([(97.0, 40000.0, 290.0)]))
    prom = start_prometheus(tmp_path / "prometheus", vllm=[f"{tiny_vllm_server.url}/metrics"], dcgm=[fake_dcgm.url],
                            rules=REPLAY_RULES)
    load = subprocess.Popen(steady_load(tiny_vllm_server), env=tiny_vllm_server.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        start = first_busy(prom, load)
        while time.time() < start + WINDOW_S + SCRAPE_SLACK_S + 0.5 and load.poll() is None:
            time.sleep(0.5)
        still_running = load.poll() is None
        at = time.time() - SCRAPE_SLACK_S  # the window (at - 60 s, at] lies inside the load
        trigger = Q.trigger_queries("vllm", "tiny")["running"]
        value = prom.value(trigger, at)
        # KEDA polls the trigger: here every 5 s from the load's start to that instant
        samples = [(t - start, {"running": v}) for t, v in prom.series(trigger, start, at, 5)]
        raw = prom.scraped(f'{Q.RUNNING}{{job="{Q.VLLM_JOB}"}}', WINDOW_S, at)  # the window's scrapes
        stop_process_group(load, 5)
        check_every_query(prom)
    finally:
        stop_process_group(load, 5)
        prom.stop()
    assert still_running, f"the client ended before the trigger's window filled: {load.stderr.read()[-2000:]}"
    assert raw and max(raw) == CONCURRENCY, raw  # the server ran the offered load, all at once at times
    target = F.running_target(CAPACITY_CONCURRENCY, HEADROOM)
    trigger_rule = F.Trigger("running", target, True)
    assert planned_replicas(CONCURRENCY) == 12  # what an idle machine runs: ceil(9 / 1 / 0.8)
    # the trigger is the mean of the server's own scrapes over its window (one server here)
    assert value is not None and value == pytest.approx(sum(raw) / len(raw), rel=1e-6), (value, raw)
    assert value > target * (1 + F.HPA_TOLERANCE), (
        f"the server averaged {value:.2f} running requests: too little to ask for a second replica", raw)
    planned = planned_replicas(value)
    print(f"\nlive trigger: the server averaged {value:.2f} running requests over the window (offered "
          f"{CONCURRENCY}); the plan gives {planned} replicas")
    assert F.desired_for(1, value, trigger_rule) == planned, (value, planned)
    steps = F.simulate(samples, [trigger_rule], lo=1, hi=16, start=1,
                       startup_s=read_recording()["startup_s"], down_window_s=300, down_period_s=60)
    # the rule grows with the one-minute average and settles at the plan's count for the highest average
    # KEDA saw (scaling down waits five minutes), never above it; it may stop one short where that
    # average lies within the tolerance band of the count it has
    trace = [(s.t, s.values, s.replicas) for s in steps]
    highest = max(v["running"] for _, v in samples)
    ceiling = planned_replicas(highest)
    final = steps[-1].replicas
    assert final == max(s.replicas for s in steps) <= ceiling, (trace, ceiling)
    assert final == ceiling or (final == ceiling - 1 and F.desired_for(final, highest, trigger_rule) == final), trace
