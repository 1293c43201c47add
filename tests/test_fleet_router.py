"""The router the fleet stack runs (vllm-router, the pinned wheel, in components/router.py's mode) in
front of stand-in servers on 127.0.0.1 that answer like vLLM's OpenAI API and record what reached
them: a request goes to the pool its model names; within a pool, requests sharing a prefix stay on
one replica (cache_aware); the priority a batch client sets in the body, or in vLLM's X-Vllm-Priority header,
reaches the batch server. The stack runs one such router per pool (tests/test_fleet_router_pools.py: each
on its rendered arguments, finding its pool through a Kubernetes API); here one router holds both models.
tests/test_fleet_router_vllm.py runs it in front of real vLLM CPU servers."""

from __future__ import annotations

import json
import random
import string
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fixtures.vllm_env import router_binary, start_router


class Replica:
    """A stand-in server for one model: /v1/models, /health, completions; records each request body."""

    def __init__(self, model: str, port: int = 0):
        self.model, self.bodies, self.headers = model, [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if self.path.startswith("/v1/models"):
                    self._send({"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self._send({})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path in ("/v1/completions", "/v1/chat/completions"):
                    outer.bodies.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                self._send({"id": "x", "object": "text_completion", "model": outer.model,
                            "choices": [{"index": 0, "text": ".", "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    replicas = {"chat-a": Replica("chat"), "chat-b": Replica("chat"), "batch": Replica("batch")}
    router = start_router(tmp_path_factory.mktemp("router") / "router.log", [r.url for r in replicas.values()])
    yield router, replicas
    router.stop()
    for r in replicas.values():
        r.httpd.shutdown()


def complete(router, body: dict, headers: dict | None = None) -> dict:
    req = urllib.request.Request(f"{router.url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def test_the_router_learns_each_servers_model_from_the_server(fleet):
    router, replicas = fleet
    by_url = {w["url"]: w["model_id"] for w in router.workers()}
    assert by_url == {r.url: r.model for r in replicas.values()}


def test_each_request_reaches_the_pool_its_model_names(fleet):
    router, replicas = fleet
    before = {name: len(r.bodies) for name, r in replicas.items()}
    for i in range(4):
        assert complete(router, {"model": "batch", "prompt": f"summarise document {i}", "max_tokens": 4})["model"] == "batch"
        assert complete(router, {"model": "chat", "prompt": f"hello {i}", "max_tokens": 4})["model"] == "chat"
    gained = {name: len(r.bodies) - before[name] for name, r in replicas.items()}
    assert gained["batch"] == 4 and gained["chat-a"] + gained["chat-b"] == 4
    assert all(b["model"] == "batch" for b in replicas["batch"].bodies)


def test_requests_sharing_a_prefix_stay_on_one_replica_of_the_pool(fleet):
    router, replicas = fleet
    a, b = replicas["chat-a"], replicas["chat-b"]
    before = (len(a.bodies), len(b.bodies))
    prefix = "You are the marketplace's assistant. Policy: answer in Korean, cite the listing. " * 8
    for i in range(8):
        complete(router, {"model": "chat", "prompt": prefix + f"Question {i}?", "max_tokens": 4})
    gained = sorted([len(a.bodies) - before[0], len(b.bodies) - before[1]])
    assert gained == [0, 8]  # round robin would split them 4/4 and miss the prefix cache half the time


def test_unrelated_requests_one_after_another_all_go_to_one_replica(fleet):
    """Below the policy's prefix threshold the router picks the replica with the fewest requests in
    flight, the first on a tie: requests that never overlap all land on one replica (docs/serving.md;
    tests/test_fleet_router_vllm.py sweeps at lengths where c=4's requests overlap)."""
    router, replicas = fleet
    a, b = replicas["chat-a"], replicas["chat-b"]
    before = (len(a.bodies), len(b.bodies))
    rng = random.Random(30)
    for _ in range(12):
        prompt = "".join(rng.choice(string.ascii_letters + " ") for _ in range(80))
        complete(router, {"model": "chat", "prompt": prompt, "max_tokens": 4})
    assert sorted([len(a.bodies) - before[0], len(b.bodies) - before[1]]) == [0, 12]


def test_a_batch_clients_priority_reaches_the_batch_server_untouched(fleet):
    router, replicas = fleet
    complete(router, {"model": "batch", "prompt": "nightly summary", "max_tokens": 4, "priority": 10})
    assert replicas["batch"].bodies[-1]["priority"] == 10


def test_a_priority_header_reaches_the_batch_server_too(fleet):
    # vLLM releases newer than the serving image read X-Vllm-Priority ahead of the body's field
    # (docs/serving.md): a header set in front of the router would reach the servers through it
    router, replicas = fleet
    complete(router, {"model": "batch", "prompt": "weekly digest", "max_tokens": 4}, {"X-Vllm-Priority": "7"})
    assert replicas["batch"].headers[-1].get("x-vllm-priority") == "7"
    assert "priority" not in replicas["batch"].bodies[-1]


def test_the_pinned_router_accepts_the_arguments_the_stack_gives_it(tmp_path):
    from stacks.ops.render import render_stack

    routers = [o for o in render_stack("fleet").k8s("Deployment") if o["metadata"]["name"].startswith("vllm-router-")]
    assert len(routers) == 2
    for deployment in routers:
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        script = ("import json, sys\nfrom vllm_router.launch_router import parse_router_args\n"
                  "a = parse_router_args(sys.argv[1:])\n"
                  "print(json.dumps({'policy': str(a.policy), 'igw': a.enable_igw, 'sd': a.service_discovery,"
                  " 'selector': a.selector, 'ns': a.service_discovery_namespace, 'port': a.service_discovery_port}))")
        python = router_binary().parent / "python"
        proc = subprocess.run([str(python), "-c", script, *args], text=True, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        parsed = json.loads(proc.stdout.strip().splitlines()[-1])
        assert parsed["igw"] and parsed["sd"] and "cache_aware" in parsed["policy"].lower()
        pool = deployment["metadata"]["labels"]["app.kubernetes.io/instance"]
        assert parsed["selector"] == {"app.kubernetes.io/component": "server", "app.kubernetes.io/name": "vllm",
                                      "vllm-poc/traffic-class": pool}
        assert parsed["ns"] == "vllm" and parsed["port"] == 8000
