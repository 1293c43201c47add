"""The SLO's rules, alerts, dashboard and triggers against real parts: `promtool` checks the rule file
and unit-tests the alerts; Debian's Prometheus scrapes a recording of a real vLLM CPU server under
load (tests/fixtures/metrics/vllm-under-load.json.gz, replayed one read per scrape) and the DCGM
exporter's format, and every rule, panel and trigger query returns a series; the ScaledObject's
running trigger, evaluated on those series every polling interval and stepped through KEDA's and the
HPA's rule with the recorded start-up time, asks for the replicas the plan gives that load. Every
vLLM metric a panel or rule reads is one vLLM 0.26 (the serving image) exports."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from bench.analysis import fleet as F
from bench.analysis.sizing import replicas_for
from bench.common import fleet_queries as Q
from stacks.ops import vllm_flags
from tests.fixtures.bench_fake_metrics import dcgm_text
from tests.fixtures.prometheus_server import (LOAD, SERVER_LABELS, binaries, read_recording, start_prometheus,
                                              wait_for)

RULES = Q.rule_groups(500.0, 50.0)
# The same rules evaluated every second for the replays. The stack's groups run every 30 s: an instant
# rule (the running sum) evaluated just after its input missed a scrape (1 s scrapes can time out on a busy
# machine) has no series until the next evaluation, as long as check_every_query waits for one.
REPLAY_RULES = Q.rule_groups(500.0, 50.0, interval="1s")
# The plan's side of the check: a replica meets the SLO up to concurrency 4 (its capacity's source
# run), 20 % headroom; the load is what the recorded server carried (carried_load).
CAPACITY_CONCURRENCY, HEADROOM = 4, 0.2


def every_query() -> list[tuple[str, str]]:
    out = [(f"rule {r['record']}", r["record"]) for r in Q.recording_rules()]
    out += [(f"alert {a['alert']}", a["expr"].split(" > ")[0]) for a in Q.alerts(500.0, 50.0)]
    out += [(f"panel {title}", expr) for title, _, expr, _ in Q.PANELS]
    out += [(f"trigger {name}", expr) for name, expr in Q.trigger_queries("vllm", "tiny").items()]
    return out


def check_every_query(prom) -> None:
    # Rules are evaluated every second; the last rule's first result means all were.
    for what, expr in every_query():
        assert wait_for(prom, expr, budget_s=30), f"{what}: no series for {expr}"


def trigger_replicas(prom, start: float, end: float, startup_s: float) -> list[F.Step]:
    """The running trigger at every KEDA polling interval over [start, end], through the HPA's rule."""
    query = Q.trigger_queries("vllm", "tiny")["running"]
    step = 5.0  # the test's scrape is 1 s; KEDA polls every 15 s against 15 s scrapes
    samples = []
    t = start
    while t <= end:
        value = prom.value(query, t)
        if value is not None:
            samples.append((t - start, {"running": value}))
        t += step
    target = F.running_target(CAPACITY_CONCURRENCY, HEADROOM)
    return F.simulate(samples, [F.Trigger("running", target, average=True)], lo=1, hi=10, start=1,
                      startup_s=startup_s, down_window_s=300, down_period_s=60)


def carried_load(texts: list[str]) -> float:
    """Requests the server carried at once, on average, from its first busy read to its last: read from
    the raw /metrics texts (not through Prometheus). The client offers LOAD["concurrency"] at most; a
    CPU-starved client leaves gaps between a request's end and the next."""
    from bench.common import prometheus

    held = [sum(v for name in (Q.RUNNING, Q.WAITING) for _, v in prometheus.parse(t).get(name, []))
            for t in texts]
    busy = [i for i, v in enumerate(held) if v > 0]
    assert busy, "the recording has no request in it"
    span = held[busy[0]:busy[-1] + 1]
    return sum(span) / len(span)


def planned_replicas(load: float) -> int:
    """The plan's count for a load of `load` concurrent requests: replica-loads over the capacity."""
    return replicas_for(load / CAPACITY_CONCURRENCY, HEADROOM, 0)


# -- promtool ---------------------------------------------------------------------------------------


def test_promtool_accepts_the_rules_and_refuses_a_broken_one(tmp_path):
    _, promtool = binaries()
    good = tmp_path / "rules.yml"
    good.write_text(yaml.safe_dump(RULES, sort_keys=False))
    result = subprocess.run([promtool, "check", "rules", str(good)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(Q.recording_rules()) + len(Q.alerts(500, 50))} rules found" in result.stdout
    broken = yaml.safe_load(good.read_text())
    broken["groups"][0]["rules"][0]["expr"] = "histogram_quantile(0.99, sum by (le) (rate(x[5m]))"
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    assert subprocess.run([promtool, "check", "rules", str(tmp_path / "broken.yml")],
                          capture_output=True, text=True).returncode != 0


def _alert_test(tmp_path: Path, slow_share: int) -> subprocess.CompletedProcess:
    """TTFT observations: 10 a minute, `slow_share` of them between 0.5 and 1 s, the rest under 0.1 s."""
    _, promtool = binaries()
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(RULES, sort_keys=False))
    labels = 'job="vllm",namespace="vllm",server="chat"'
    fast = 10 - slow_share
    series = [
        {"series": f'{Q.TTFT_BUCKET}{{{labels},le="0.1"}}', "values": f"0+{fast}x30"},
        {"series": f'{Q.TTFT_BUCKET}{{{labels},le="0.5"}}', "values": f"0+{fast}x30"},
        {"series": f'{Q.TTFT_BUCKET}{{{labels},le="1"}}', "values": "0+10x30"},
        {"series": f'{Q.TTFT_BUCKET}{{{labels},le="+Inf"}}', "values": "0+10x30"},
    ]
    alert = next(a for a in Q.alerts(500.0, 50.0) if a["alert"] == "VllmTtftP99AboveSlo")
    expected = [{"exp_labels": {"namespace": "vllm", "server": "chat", **alert["labels"]},
                 "exp_annotations": {k: v.replace("{{ $labels.server }}", "chat")
                                     .replace("{{ $labels.namespace }}", "vllm")
                                     for k, v in alert["annotations"].items()}}] if slow_share else []
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series,
                       "alert_rule_test": [{"eval_time": "12m", "alertname": "VllmTtftP99AboveSlo",
                                            "exp_alerts": expected}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                          cwd=tmp_path)


def test_the_ttft_alert_fires_above_the_slo_and_stays_quiet_below(tmp_path):
    slow = _alert_test(tmp_path, slow_share=2)  # p99 ~0.99 s for 10 minutes: above 500 ms
    assert slow.returncode == 0, slow.stdout + slow.stderr
    quiet = _alert_test(tmp_path, slow_share=0)  # every request under 0.1 s
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    # expecting the alert where it stays quiet fails: the unit test can go red
    flipped = yaml.safe_load((tmp_path / "test.yml").read_text())
    flipped["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"server": "chat"}}]
    (tmp_path / "test.yml").write_text(yaml.safe_dump(flipped, sort_keys=False))
    _, promtool = binaries()
    assert subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True,
                          cwd=tmp_path).returncode != 0


# -- the names vLLM 0.26 exports -------------------------------------------------------------------


def vllm_026_metric_names() -> set[str]:
    """Every `vllm:` metric name the serving image's vLLM declares (its source, in .vllm-image)."""
    folder = vllm_flags.image_dir()
    problem = vllm_flags.check_parser_dir(folder)
    if problem:
        pytest.fail(f"the image's vLLM is not installed: {problem}", pytrace=False)
    names: set[str] = set()
    for path in (folder / "vllm").rglob("*.py"):
        names |= set(re.findall(r"""["'](vllm:[a-z0-9_]+)["']""", path.read_text(errors="replace")))
    return names


def test_every_rule_panel_and_trigger_reads_metrics_vllm_0_26_exports():
    known = vllm_026_metric_names()
    assert {"vllm:num_requests_running", "vllm:time_to_first_token_seconds"} <= known
    assert "vllm:gpu_cache_usage_perc" not in known  # removed in V1: a query on it would stay empty
    used: set[str] = set()
    for _, expr in every_query() + [(r["record"], r["expr"]) for r in Q.recording_rules()]:
        used |= {n for n in Q.metric_names(expr) if n.startswith("vllm:")}
    assert used and used <= known, sorted(used - known)
    assert Q.metric_names("rate(vllm:gpu_cache_usage_perc[5m])") - known == {"vllm:gpu_cache_usage_perc"}
    dcgm = {n for _, expr in every_query() for n in Q.metric_names(expr) if n.startswith("DCGM_")}
    assert dcgm == {Q.GPU_UTIL, Q.GPU_FB_USED, Q.GPU_POWER}  # the DCGM exporter fields the bench reads


# -- a recording of a real server under load, replayed into Prometheus ---------------------------


def test_every_query_returns_a_series_and_the_trigger_asks_for_the_planned_replicas(tmp_path, fake_metrics,
                                                                                    fake_dcgm):
    recording = read_recording()
    texts = recording["texts"]
    assert recording["load"] == LOAD and len(texts) >= 10
    fake_metrics.script(*texts)
    fake_dcgm.script(dcgm_text([(97.0, 40000.0, 290.0)]))
    started = time.time()
    prom = start_prometheus(tmp_path / "prometheus", vllm=[fake_metrics.url], dcgm=[fake_dcgm.url],
                            rules=REPLAY_RULES)
    try:
        deadline = time.monotonic() + len(texts) * 2 + 30
        while fake_metrics.served < len(texts) + 2 and time.monotonic() < deadline:
            time.sleep(1)
        assert fake_metrics.served >= len(texts), "Prometheus did not scrape the whole recording"
        check_every_query(prom)
        found = prom.query(f'{Q.RUNNING_SUM}{{server="tiny"}}')
        assert found[0]["metric"]["namespace"] == SERVER_LABELS["namespace"]
        steps = trigger_replicas(prom, started, time.time(), recording["startup_s"])
    finally:
        prom.stop()
    load = carried_load(texts)
    assert 1 <= load <= LOAD["concurrency"]
    peak = max(s.replicas for s in steps)
    assert peak == planned_replicas(load) > 1, (load, [(s.t, s.values, s.replicas) for s in steps])
    grown = next(s for s in steps if s.replicas == peak)
    assert all(s.ready < peak for s in steps if s.t - grown.t < recording["startup_s"])
