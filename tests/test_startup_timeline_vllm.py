"""The startup timeline over a real vLLM CPU server's log (the session's tiny server).

The pod and node around it are the fixtures' API objects; the container start and /health OK
marks are placed so that the server's own first-line-to-ready time fits inside them.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.startup import phases
from bench.startup import timeline
from tests.fixtures import kube_objects as K

pytestmark = pytest.mark.vllm


def test_timeline_from_the_real_server_log(tiny_vllm_server, tmp_path):
    log = phases.parse_file(tiny_vllm_server.log)
    assert log["ready"] and log["kv_cache_tokens"] > 0
    ready_after = log["time_to_ready_s"] + 2.0
    for boot, started in (("cold", 131.0), ("warm", 3602.0)):
        objs = getattr(K, f"{boot}_boot")()
        created = timeline.created(objs["pod"])
        pod_name = objs["pod"]["metadata"]["name"]
        objs["pod"] = K.pod(pod_name, objs["pod"]["spec"]["nodeName"],
                            created=(created - K.T0).total_seconds(),
                            scheduled=started - (131 - 48 if boot == "cold" else 1.2), started=started,
                            ready=started + ready_after)
        record = timeline.build(objs["pod"], node=objs["node"], nodeclaim=objs["nodeclaim"],
                                events=objs["events"], log=log, container="vllm", server="tiny")
        assert record["new_node"] is (boot == "cold")
        assert record["kv_cache_tokens"] == log["kv_cache_tokens"]
        assert record["phases"]["weight_load_s"] == log["weight_load_s"] and record["weights"]["loader"] == "default"
        other = record["phases"]["engine_other_s"]
        known = sum(v or 0 for v in (log["weight_load_s"], timeline._compile_s(log), log["cuda_graph_s"]))
        assert other == pytest.approx(ready_after - known, abs=1e-3) and other >= 0
        assert sum(v for v in record["phases"].values() if v is not None) == pytest.approx(record["total_s"])
        path = tmp_path / "startup" / f"{boot}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(record))
        # the stored record read back by `bench startup` with the vLLM image's python (no boto3 there)
        proc = subprocess.run([tiny_vllm_server.python, "-m", "bench", "startup", str(path), "--json"],
                              env=tiny_vllm_server.bench_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["timeline"]["new_node"] is (boot == "cold") and out["instance_type"] == "g6e.2xlarge"
        assert out["kv_cache_tokens"] == log["kv_cache_tokens"] and out["weight_load_gbps"] is None
