"""The in-cluster collector (`python -m bench timeline`) over a fake API serving the fixtures'
objects by path, and sleep-mode timing against a local HTTP server standing in for vLLM."""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.startup import collect as startup_collect
from bench.startup import report as startup_report
from bench.startup import sleepwake
from tests.fixtures import kube_objects as K
from tests.test_bench_startup import LOG_026, PROFILE

NODE = "ip-10-40-1-10.ap-northeast-2.compute.internal"


class FakeApi:
    """Answers GETs like the API server does, and records every path asked for (RBAC check)."""

    def __init__(self, objects: dict[str, dict], log: str, forbidden: tuple[str, ...] = ()):
        self.objects, self.log, self.forbidden, self.calls = objects, log, forbidden, []

    def get(self, path, **params):
        self.calls.append((path, params))
        if any(path.startswith(f) for f in self.forbidden):
            raise RuntimeError(f"GET {path}: HTTP 403: forbidden")
        if path == "/api/v1/namespaces/vllm/pods":
            pods = [o for p, o in self.objects.items() if p.startswith("/api/v1/namespaces/vllm/pods/")]
            return {"kind": "PodList", "items": pods}
        if path.endswith("/events"):
            name = params["fieldSelector"].split("=", 1)[1]
            items = [e for e in self.objects["events"]["items"] if e["involvedObject"]["name"] == name]
            return {"kind": "EventList", "items": items}
        if path not in self.objects:
            raise RuntimeError(f"GET {path}: HTTP 404: not found")
        return self.objects[path]

    def get_text(self, path, **params):
        self.calls.append((path, params))
        return self.log


def _api(objs, **kw) -> FakeApi:
    pod = objs["pod"]
    return FakeApi({
        f"/api/v1/namespaces/vllm/pods/{pod['metadata']['name']}": pod,
        f"/api/v1/nodes/{NODE}": objs["node"],
        f"/apis/karpenter.sh/v1/nodeclaims/{objs['nodeclaim']['metadata']['name']}": objs["nodeclaim"],
        "events": objs["events"],
    }, LOG_026, **kw)


def test_collect_follows_the_node_owner_reference_to_its_nodeclaim():
    objs = K.cold_boot()
    K.owned_by(objs["node"], "l40s-x7k2p")
    objs["events"]["items"] = [e for e in objs["events"]["items"] if e["reason"] != "Nominated"]
    api = _api(objs)
    record = startup_collect.collect(api, "vllm", "gemma-fp8-7d9f-abcde", server="gemma-fp8", config_hash="h")
    assert record["problems"] == []
    assert record["nodeclaim"] == "l40s-x7k2p" and record["node_launch_s"] == 19.0
    assert record["total_s"] == 537.0 and record["phases"]["weight_load_s"] == 29.12
    log_call = [c for c in api.calls if c[0].endswith("/log")][0]
    assert log_call[1] == {"timestamps": "true", "limitBytes": str(16 * 2**20), "container": "vllm"}
    # read-only and only these paths: what the bench Job's Role/ClusterRole grant
    assert {c[0] for c in api.calls} == {
        "/api/v1/namespaces/vllm/pods/gemma-fp8-7d9f-abcde", "/api/v1/namespaces/vllm/events",
        f"/api/v1/nodes/{NODE}", "/apis/karpenter.sh/v1/nodeclaims/l40s-x7k2p",
        "/api/v1/namespaces/vllm/pods/gemma-fp8-7d9f-abcde/log"}


def test_collect_falls_back_to_the_nominated_event_and_records_what_it_could_not_read():
    api = _api(K.cold_boot(), forbidden=("/apis/karpenter.sh/",))
    record = startup_collect.collect(api, "vllm", "gemma-fp8-7d9f-abcde")
    assert ("/apis/karpenter.sh/v1/nodeclaims/l40s-x7k2p", {}) in api.calls
    assert record["nodeclaim"] is None and record["node_launch_s"] is None
    assert record["problems"] == ["GET /apis/karpenter.sh/v1/nodeclaims/l40s-x7k2p: HTTP 403: forbidden"]
    assert record["total_s"] == 537.0 and record["new_node"] is True  # the rest still comes through


def test_timeline_command_writes_records_into_the_results_folder_and_s3(tmp_path, capsys, aws):
    import boto3

    boto3.client("s3").create_bucket(Bucket="results",
                                     CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    api = _api(K.warm_boot())
    api.log += PROFILE.format(proc="EngineCore", pid=178, non_torch="-4.4") + "\n"  # as vLLM 0.26 logged it on the H100
    args = startup_collect.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(
        ["--namespace", "vllm", "--selector", "app.kubernetes.io/name=gemma-fp8", "--out", str(tmp_path),
         "--server", "gemma-fp8", "--config-hash", "h1", "--upload", "s3://results/runs/dev/gemma-fp8/h1/"])
    assert startup_collect.run(args, client=api) == 0
    record = json.loads((tmp_path / "startup" / "gemma-fp8-7d9f-fghij.json").read_text())
    stored = boto3.client("s3").get_object(Bucket="results", Key="runs/dev/gemma-fp8/h1/startup/gemma-fp8-7d9f-fghij.json")
    assert json.loads(stored["Body"].read()) == record
    assert record["kind"] == "vllm-poc/startup-record" and record["new_node"] is False
    assert record["config_hash"] == "h1" and record["total_s"] == 157.0
    assert ("/api/v1/namespaces/vllm/pods", {"labelSelector": "app.kubernetes.io/name=gemma-fp8"}) in api.calls
    assert "startup" in startup_report.markdown(tmp_path).lower()
    out = capsys.readouterr().out
    assert "gemma-fp8-7d9f-fghij: 157.0 s to /health, warm node, weights at 9.3 Gbps" in out
    assert "bench timeline: gemma-fp8-7d9f-fghij: warning: vLLM counted -4.4 GiB of non-torch memory" in out


def test_timeline_outside_a_cluster_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(startup_collect, "in_cluster_client", lambda: None)
    from bench.__main__ import main

    assert main(["timeline", "--namespace", "vllm", "--selector", "a=b", "--out", str(tmp_path)]) == 2
    assert "service-account token" in capsys.readouterr().err


class _SleepyVllm(BaseHTTPRequestHandler):
    state = {"sleeping": False, "calls": []}
    sleep_delay, wake_delay = 1.0, 0.1
    # the server's own clock: each call really takes its delay and moves this clock by exactly that much,
    # so a test can time the client against it whatever the machine's load adds around the calls
    clock = [0.0]
    dev_mode = True

    def do_POST(self):  # noqa: N802
        self.state["calls"].append(self.path)
        if not self.dev_mode:
            return self._send(404, b'{"detail":"Not Found"}')
        if self.path.startswith("/sleep"):
            time.sleep(self.sleep_delay)
            self.clock[0] += self.sleep_delay
            self.state["sleeping"] = True
        elif self.path == "/wake_up":
            time.sleep(self.wake_delay)
            self.clock[0] += self.wake_delay
            self.state["sleeping"] = False
        elif self.path == "/v1/completions":
            self.rfile.read(int(self.headers["Content-Length"]))
            return self._send(200, b'{"choices":[{"text":"x"}]}')
        self._send(200, b"")

    def do_GET(self):  # noqa: N802
        self._send(200, json.dumps({"is_sleeping": self.state["sleeping"]}).encode())

    def _send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def sleepy_server():
    _SleepyVllm.state = {"sleeping": False, "calls": []}
    _SleepyVllm.dev_mode = True
    _SleepyVllm.clock = [0.0]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SleepyVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_sleep_and_wake_are_timed_on_the_server(sleepy_server, monkeypatch):
    # the client reads the server's clock, so the machine's load adds nothing: each call must read exactly
    # its own delay (a wake timed from the first call, or a sleep timed past the wake, would read 1.1 s)
    monkeypatch.setattr(sleepwake, "time", argparse.Namespace(
        perf_counter=lambda: _SleepyVllm.clock[0], strftime=time.strftime, gmtime=time.gmtime))
    out = sleepwake.measure(sleepy_server, level=1, model="tiny")
    assert out["error"] is None and out["confirmed"] is True
    assert out["sleep_s"] == _SleepyVllm.sleep_delay and out["wake_s"] == _SleepyVllm.wake_delay
    assert out["first_request_s"] is not None
    assert _SleepyVllm.state["calls"] == ["/sleep?level=1", "/wake_up", "/v1/completions"]


def test_sleep_mode_off_is_reported_not_raised(sleepy_server):
    _SleepyVllm.dev_mode = False
    out = sleepwake.measure(sleepy_server)
    assert out["sleep_s"] is None and "--enable-sleep-mode" in out["error"]


def test_timeline_times_sleep_mode_on_each_pod_ip(sleepy_server, tmp_path):
    objs = K.warm_boot()
    objs["pod"]["status"]["podIP"] = "127.0.0.1"
    api = _api(objs)
    port = sleepy_server.rsplit(":", 1)[1]
    args = startup_collect.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(
        ["--namespace", "vllm", "--selector", "app.kubernetes.io/instance=gemma-fp8", "--out", str(tmp_path),
         "--sleep-wake-port", port, "--model", "gemma"])
    assert startup_collect.run(args, client=api) == 0
    timing = json.loads((tmp_path / "startup" / "sleep-gemma-fp8-7d9f-fghij.json").read_text())
    assert timing["kind"] == startup_report.SLEEP_KIND and timing["pod"] == "gemma-fp8-7d9f-fghij"
    assert timing["confirmed"] is True and timing["sleep_s"] >= 0.3
    boots, sleeps = startup_report.load_records(tmp_path)
    assert len(boots) == 1 and boots[0]["server"] == "gemma-fp8" and sleeps == [timing]
    assert "| Server / pod | Level | Sleep | Wake up |" in startup_report.markdown(tmp_path)
