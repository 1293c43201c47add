"""Startup timeline from Kubernetes API objects (tests/fixtures/kube_objects.py) and a server log.

The cold boot reproduces the PoC's 537 s (node 48 s, image pull 82 s); the warm boot reuses the
node and its cached image. The log is the hand-written vLLM 0.26 log of test_bench_startup.py; the
real vLLM CPU server log is used in test_startup_timeline_vllm.py.
"""

from __future__ import annotations

import json

import pytest

from bench.analysis.pages.report_page import startup_section
from bench.startup import phases
from bench.startup import report as startup_report
from bench.startup import timeline
from tests.fixtures import kube_objects as K
from tests.test_bench_startup import LOG_026, PROFILE


@pytest.fixture
def log026():
    return phases.parse_log(LOG_026.splitlines())


def _build(objs, log, **kw):
    return timeline.build(objs["pod"], node=objs["node"], nodeclaim=objs["nodeclaim"], events=objs["events"],
                          log=log, container="vllm", **kw)


def test_go_durations_and_times():
    assert timeline.go_duration("1m22.5s") == 82.5
    assert timeline.go_duration("845ms") == 0.845
    assert timeline.go_duration("1h2m3s") == 3723.0
    assert timeline.go_duration("") is None
    assert timeline.iso(timeline.parse_time("2026-08-05T10:00:01.250000Z")) == "2026-08-05T10:00:01.250000Z"
    assert timeline.parse_time("not a time") is None


def test_cold_boot_on_a_new_node(log026):
    r = _build(K.cold_boot(), log026, server="gemma-fp8", config_hash="abc123")
    assert r["kind"] == timeline.RECORD_KIND and timeline.is_record(r)
    assert r["new_node"] is True
    assert (r["instance_type"], r["nodepool"], r["nodeclaim"]) == ("g6e.2xlarge", "l40s", "l40s-x7k2p")
    m = r["marks"]
    assert m["pod_created"] == "2026-08-05T10:00:00Z"
    assert m["nodeclaim_created"] == "2026-08-05T10:00:01Z"
    assert m["nodeclaim_launched"] == "2026-08-05T10:00:20Z"
    assert m["node_ready"] == "2026-08-05T10:00:47Z"  # NodeClaim Initialized: Ready plus GPU resources
    assert m["pod_scheduled"] == "2026-08-05T10:00:48Z"
    assert m["image_pulled"] == "2026-08-05T10:02:11Z"
    assert m["container_started"] == "2026-08-05T10:02:11Z"
    assert m["health_ok"] == "2026-08-05T10:08:57Z"
    assert (r["node_launch_s"], r["node_boot_s"]) == (19.0, 27.0)
    assert r["total_s"] == 537.0
    assert r["image"] == {"image": K.IMAGE, "image_bytes": 9_876_543_210, "image_cached": False,
                          "image_pull_s": 82.5, "image_pull_waiting_s": 82.5, "image_pull_mbps": 119.7}
    p, s = r["phases"], r["shares_pct"]
    assert p == {"node_provisioning_s": 48.0, "image_pull_s": 82.5, "cache_restore_s": None, "container_start_s": 0.5,
                 "weight_load_s": 29.12, "compile_s": 64.02, "cuda_graph_s": 18, "engine_other_s": 294.86}
    assert (s["node_provisioning_s"], s["image_pull_s"], s["weight_load_s"], s["compile_s"]) == (8.9, 15.4, 5.4, 11.9)
    assert sum(v for v in p.values() if v is not None) == pytest.approx(r["total_s"])
    assert r["compile_cache_restore"] is None  # this pod has no compile-cache pull step
    w = r["weights"]
    assert (w["bytes"], w["seconds"], w["loader"]) == (round(31.4 * 2**30), 29.12, "runai_streamer")
    assert (w["weight_load_gbps"], w["weight_load_share_of_baseline_pct"], w["weight_load_share_of_burst_pct"]) == (
        9.26, 185.2, 46.3)
    assert (r["compile_cache"], r["kv_cache_tokens"], r["config_hash"]) == ("miss", 31344, "abc123")


def test_warm_boot_reuses_the_node_and_its_image(log026):
    r = _build(K.warm_boot(), log026)
    assert r["new_node"] is False
    assert r["marks"]["nodeclaim_created"] is None and r["node_launch_s"] is None
    assert r["server"] == "gemma-fp8"  # from the pod's app.kubernetes.io/name label
    assert r["image"]["image_cached"] is True and r["image"]["image_pull_s"] == 0.0
    assert r["image"]["image_bytes"] == 9_876_543_210  # from the node's image list
    assert r["phases"]["node_provisioning_s"] == 0.8
    assert r["phases"]["container_start_s"] == 1.2
    assert r["total_s"] == 157.0
    assert r["shares_pct"]["node_provisioning_s"] == 0.5


def test_pending_pod_has_no_total():
    objs = K.cold_boot()
    objs["pod"] = K.pod("gemma-fp8-7d9f-abcde", "", created=0, scheduled=None, started=None, ready=None)
    r = timeline.build(objs["pod"], events=K.event_list(), log={})
    assert r["total_s"] is None and r["new_node"] is None
    assert r["marks"]["health_ok"] is None and r["marks"]["pod_scheduled"] is None
    assert all(v is None for v in r["shares_pct"].values())


def test_kv_regression_warns_only_for_the_same_configuration(log026):
    first = _build(K.cold_boot(), dict(log026, kv_cache_tokens=23320, compile_cache="hit"), server="gemma-fp8",
                   config_hash="h1")
    second = _build(K.warm_boot(), dict(log026, kv_cache_tokens=12150, compile_cache="miss"), server="gemma-fp8",
                    config_hash="h1")
    other = dict(second, config_hash="h2", pod="other-pod")
    warnings = timeline.kv_regressions([second, first, other])
    assert len(warnings) == 1
    assert "gemma-fp8-7d9f-fghij" in warnings[0] and "12,150" in warnings[0] and "23,320" in warnings[0]
    assert "compile cache miss vs hit" in warnings[0]
    assert timeline.kv_regressions([first, dict(second, kv_cache_tokens=23320)]) == []


def test_a_boot_whose_memory_profile_hands_the_kv_cache_more_than_the_share_is_warned(tmp_path, log026, capsys):
    """The stack's start-up records keep the parsed log; the report's start-up section (markdown and page) warns
    for a boot with negative non-torch memory, and `bench startup` on the stored record does too."""
    profiled = phases.parse_log([*LOG_026.splitlines(), PROFILE.format(proc="EngineCore", pid=178, non_torch="-4.4")])
    cold = _build(K.cold_boot(), dict(log026, kv_cache_tokens=40000), server="gemma-fp8", config_hash="h")
    warm = _build(K.warm_boot(), profiled, server="gemma-fp8", config_hash="h")
    assert timeline.memory_warnings([cold]) == []
    warned = timeline.boot_warnings([cold, warm])
    assert len(warned) == 2 and warned[0].startswith("gemma-fp8 pod gemma-fp8-7d9f-fghij: KV cache 31,344 tokens, below 40,000")
    assert warned[1].startswith("gemma-fp8 pod gemma-fp8-7d9f-fghij: vLLM counted -4.4 GiB of non-torch memory")
    folder = tmp_path / "results"
    (folder / "startup").mkdir(parents=True)
    (folder / "startup" / "warm.json").write_text(json.dumps(warm))
    assert f"- {warned[1]}" in startup_report.markdown(folder).splitlines()
    page = startup_section([warm])
    assert "<li>gemma-fp8 pod gemma-fp8-7d9f-fghij: vLLM counted -4.4 GiB of non-torch memory" in page
    assert "<li>" not in startup_section([cold])
    assert phases.main([str(folder / "startup" / "warm.json")]) == 0
    assert "Warning: vLLM counted -4.4 GiB" in capsys.readouterr().out


def test_startup_accepts_the_stored_record(tmp_path, capsys, log026):
    path = tmp_path / "startup" / "pod.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_build(K.cold_boot(), log026)))
    assert phases.main([str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instance_type"] == "g6e.2xlarge"  # taken from the record's node
    assert (out["weight_load_gbps"], out["weight_load_share_of_baseline_pct"]) == (9.26, 185.2)
    assert out["kv_cache_tokens"] == 31344 and out["weight_load_s"] == 29.12
    assert out["timeline"]["total_s"] == 537.0 and out["timeline"]["new_node"] is True
    assert phases.main([str(path), "--json", "--instance-type", "g7e.2xlarge"]) == 0
    assert json.loads(capsys.readouterr().out)["weight_load_share_of_baseline_pct"] == 18.5
    assert phases.main([str(path)]) == 0
    table = capsys.readouterr().out
    assert "Weight load rate" in table and "Node provisioning (pod created -> scheduled)" in table
    assert "48.0 s (9%)" in table and "yes" in table


def test_report_section_in_table_5_layout(tmp_path, log026):
    folder = tmp_path / "results"
    (folder / "startup").mkdir(parents=True)
    cold = _build(K.cold_boot(), dict(log026, kv_cache_tokens=23320), server="gemma-fp8", config_hash="h")
    warm = _build(K.warm_boot(), dict(log026, kv_cache_tokens=20000), server="gemma-fp8", config_hash="h")
    (folder / "startup" / "a.json").write_text(json.dumps(warm))
    (folder / "startup" / "b.json").write_text(json.dumps(cold))
    (folder / "startup" / "sleep-b.json").write_text(json.dumps(
        {"kind": startup_report.SLEEP_KIND, "server": "gemma-fp8", "pod": "b", "level": 1, "sleep_s": 26.8,
         "wake_s": 3.6, "first_request_s": 0.4}))
    (folder / "startup" / "junk.json").write_text("{not json")
    text = startup_report.markdown(folder)
    lines = text.splitlines()
    assert "## Startup" in lines
    rows = [line for line in lines if line.startswith("| gemma-fp8 / ")]
    assert rows[0].startswith("| gemma-fp8 / gemma-fp8-7d9f-abcde (new node, image pulled, compile cache miss) | 537.0 s |")
    assert "| 48.0 s (9%) | 82.5 s (15%) |" in rows[0] and "| 29.1 s (5%) | 64.0 s (12%) |" in rows[0]
    assert "(warm node, image cached" in rows[1] and "| 157.0 s |" in rows[1]
    limits = [line for line in lines if line.startswith("| gemma-fp8-7d9f-abcde | g6e.2xlarge")][0]
    assert "| 9.3 Gbps | 185% of 5 | 46% of 20 | 9.9 GB | 82.5 s | 120 MB/s | 23,320 |" in limits
    assert any("KV cache 20,000 tokens, below 23,320" in line for line in lines)
    assert "| gemma-fp8 / b | 1 | 26.8 s | 3.6 s | 0.4 s |" in lines
    assert startup_report.markdown(tmp_path / "empty") == ""
