"""The fleet's routers as the stack renders them, run for real: the pinned `vllm-router` on each pool
router's rendered arguments, finding its workers through a Kubernetes API (a fake one on 127.0.0.1 that
lists and watches the pods of both pools, as the API server would) in front of stand-in servers.

With the batch pool at zero, a batch request is refused (503) and the interactive servers never see it;
a batch replica that is starting (not Ready) is not used; once Ready, discovery adds it and batch requests
reach it. And the router pod's install: the rendered command refuses a file whose sha256 the committed
lock does not list, and a lock entry without one.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.common.interrupts import stop_process_group
from bench.demo import cpu_vllm
from components import router as R
from stacks.versions import lock_text
from tests.fixtures.vllm_env import router_binary
from tests.test_fleet_router import Replica

pytestmark = pytest.mark.vllm

SERVER = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/component": "server"}


class FakeKubeApi:
    """The pods of one namespace, listed and watched (JSON lines, chunked) as kube-rs's watcher asks."""

    def __init__(self, namespace: str = "vllm"):
        self.namespace, self.pods, self.version, self.requests = namespace, {}, 1, []
        self.watchers: list[queue.Queue] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                outer.requests.append(self.path)
                if not self.path.startswith(f"/api/v1/namespaces/{outer.namespace}/pods"):
                    return self._json(404, {"kind": "Status", "status": "Failure", "code": 404})
                if "watch=true" in self.path:
                    return self._watch()
                with outer.lock:
                    listing = {"kind": "PodList", "apiVersion": "v1", "items": list(outer.pods.values()),
                               "metadata": {"resourceVersion": str(outer.version)}}
                self._json(200, listing)

            def _json(self, code: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _watch(self) -> None:
                events: queue.Queue = queue.Queue()
                with outer.lock:
                    outer.watchers.append(events)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while (event := events.get()) is not None:
                        data = (json.dumps(event) + "\n").encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                finally:
                    with outer.lock:
                        outer.watchers.remove(events)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _event(self, kind: str, pod: dict) -> None:
        for events in self.watchers:
            events.put({"type": kind, "object": pod})

    def put(self, name: str, traffic_class: str, *, ready: bool) -> None:
        """A server pod on 127.0.0.1, Running, Ready or not (added, or changed)."""
        with self.lock:
            self.version += 1
            kind = "MODIFIED" if name in self.pods else "ADDED"
            self.pods[name] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "uid": f"uid-{name}",
                             "resourceVersion": str(self.version),
                             "labels": {**SERVER, "app.kubernetes.io/instance": name.rsplit("-", 1)[0],
                                        "vllm-poc/traffic-class": traffic_class}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
            self._event(kind, self.pods[name])

    def delete(self, name: str) -> None:
        """As the API server deletes a pod: marked terminating (deletionTimestamp, no longer Ready), then gone."""
        with self.lock:
            pod = self.pods.pop(name)
            for kind in ("MODIFIED", "DELETED"):
                self.version += 1
                pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": str(self.version),
                                           "deletionTimestamp": "2026-12-04T00:00:00Z"},
                       "status": {**pod["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
                self._event(kind, pod)

    def close(self) -> None:
        with self.lock:
            for events in self.watchers:
                events.put(None)
        self.httpd.shutdown()


class PoolRouter:
    """`vllm-router` on a pool router's rendered arguments, its API and metrics on free local ports."""

    def __init__(self, args: list[str], api: FakeKubeApi, server_port: int, folder: Path):
        self.port, metrics = cpu_vllm.free_port(), cpu_vllm.free_port()
        values = {"--host": "127.0.0.1", "--port": str(self.port), "--prometheus-host": "127.0.0.1",
                  "--prometheus-port": str(metrics), "--service-discovery-port": str(server_port)}
        args = [values.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
            "users": [{"name": "router", "user": {"token": "test"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "router", "namespace": "vllm"}}]}))
        self.log = folder / "router.log"
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        with self.log.open("w") as fh:
            self.proc = subprocess.Popen([str(router_binary()), *args], env={**env, "KUBECONFIG": str(kubeconfig)},
                                         stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait(lambda: self.workers() is not None, "answer")

    def workers(self) -> list[str] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/workers", timeout=5) as resp:
                return sorted(w["url"] for w in json.load(resp)["workers"])
        except (OSError, ValueError):
            if self.proc.poll() is not None:
                pytest.fail(f"vllm-router exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            return None

    def wait(self, done, what: str, budget_s: float = 30) -> None:
        deadline = time.monotonic() + budget_s
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"vllm-router did not {what} within {budget_s:.0f} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.25)

    def complete(self, model: str) -> tuple[int, str]:
        req = urllib.request.Request(f"{self.url}/v1/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": model, "prompt": "nightly summary",
                                                      "max_tokens": 4}).encode())
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> None:
        stop_process_group(self.proc, 10)


@pytest.fixture(scope="module")
def rendered_routers() -> dict[str, list[str]]:
    from stacks.ops.render import render_stack

    return {o["metadata"]["labels"]["app.kubernetes.io/instance"]: o["spec"]["template"]["spec"]["containers"][0]["args"]
            for o in render_stack("fleet").k8s("Deployment")
            if o["metadata"]["labels"].get("app.kubernetes.io/name") == R.NAME}


def test_a_batch_request_is_refused_until_a_batch_replica_is_ready_and_never_reaches_the_interactive_pool(
        rendered_routers, tmp_path):
    assert set(rendered_routers) == {"interactive", "batch"}
    port = cpu_vllm.free_port()
    chat = Replica("chat", port)  # the interactive pool's one replica, on the port discovery uses
    apis = {pool: FakeKubeApi() for pool in rendered_routers}  # the same pods, one API per router
    routers: dict[str, PoolRouter] = {}
    try:
        for api in apis.values():
            api.put("chat-0", "interactive", ready=True)  # the batch pool is at zero
        for pool, args in rendered_routers.items():
            (tmp_path / pool).mkdir()
            routers[pool] = PoolRouter(args, apis[pool], port, tmp_path / pool)
        interactive, batch = routers["interactive"], routers["batch"]
        interactive.wait(lambda: interactive.workers() == [chat.url], "discover the interactive replica")
        batch.wait(lambda: any("watch=true" in p for p in apis["batch"].requests), "watch the pods")
        time.sleep(1)
        assert batch.workers() == []  # the batch router knows no interactive server
        status, _ = interactive.complete("chat")
        assert status == 200 and len(chat.bodies) == 1
        # batch at zero: refused, for the batch model and for any other, and the interactive replica sees none
        for model in ("batch", "chat"):
            status, text = batch.complete(model)
            assert status == 503 and "no available workers" in text.lower(), (status, text)
        assert len(chat.bodies) == 1 and all(b["model"] == "chat" for b in chat.bodies)

        # a batch replica starts (on the same address, the interactive one gone): not Ready, not used
        chat.httpd.shutdown()
        chat.httpd.server_close()
        replica = Replica("batch", port)
        apis["batch"].delete("chat-0")
        apis["batch"].put("batch-0", "batch", ready=False)
        time.sleep(2)
        assert batch.workers() == []
        assert batch.complete("batch")[0] == 503 and replica.bodies == []
        # Ready: discovery adds it, and batch requests reach it
        apis["batch"].put("batch-0", "batch", ready=True)
        batch.wait(lambda: batch.workers() == [replica.url], "add the Ready batch replica")
        status, text = batch.complete("batch")
        assert status == 200 and json.loads(text)["model"] == "batch"
        assert [b["model"] for b in replica.bodies] == ["batch"]
        # and it goes when its pod does
        apis["batch"].delete("batch-0")
        batch.wait(lambda: batch.workers() == [], "drop the deleted replica")
        assert batch.complete("batch")[0] == 503 and len(replica.bodies) == 1
        replica.httpd.shutdown()
    finally:
        for router in routers.values():
            router.stop()
        for api in apis.values():
            api.close()


# -- the router pod's install --------------------------------------------------------------------


def _wheel(path: Path, name: str, version: str) -> None:
    """A wheel that installs, but is not the file the lock names."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name.replace('-', '_')}/__init__.py", "")
        wheel.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}/RECORD", "")


def _run_install(tmp_path: Path, requirements: str, index: str) -> subprocess.CompletedProcess:
    """The rendered pod command, with the pod's folders under tmp_path and pip's index on 127.0.0.1."""
    lock_dir, deps = tmp_path / "lock", tmp_path / "deps"
    lock_dir.mkdir(exist_ok=True)
    (lock_dir / R.LOCK_FILE).write_text(requirements)
    script = R.SCRIPT.replace(R.LOCK_DIR, str(lock_dir)).replace(R.DEPS_DIR, str(deps))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").unlink(missing_ok=True)
    (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": index, "PIP_NO_INPUT": "1", "PIP_DEFAULT_TIMEOUT": "10"}
    return subprocess.run(["sh", "-c", script, R.NAME, "--version"], env=env, capture_output=True, text=True,
                          timeout=180)


def test_the_router_pods_install_refuses_what_the_lock_does_not_hash(tmp_path):
    (entry,) = [e for e in lock_text("router.txt").replace("\\\n", " ").splitlines() if e.startswith("vllm-router==")]
    version = entry.split("==")[1].split()[0]
    files = tmp_path / "index" / "vllm-router"
    files.mkdir(parents=True)
    wheel = f"vllm_router-{version}-py3-none-any.whl"
    _wheel(files / wheel, "vllm-router", version)
    (files / "index.html").write_text(f'<html><body><a href="{wheel}">{wheel}</a></body></html>')

    class Index(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            path = tmp_path / "index" / self.path.strip("/").removeprefix("simple/")
            path = path / "index.html" if path.is_dir() else path
            body = path.read_bytes() if path.is_file() else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html" if path.suffix == ".html" else "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{httpd.server_address[1]}/simple/"
    try:
        # the committed lock's own line for the router: the file served is not one it hashes
        proc = _run_install(tmp_path, entry + "\n", index)
        assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stderr, proc.stderr[-2000:]
        assert not (tmp_path / "deps" / "vllm_router").exists()
        # a line without a hash is refused before anything is fetched
        proc = _run_install(tmp_path, f"vllm-router=={version}\n", index)
        assert proc.returncode != 0 and "hash" in proc.stderr.lower(), proc.stderr[-2000:]
        # the same wheel, hashed in the requirements, installs: the command itself works
        import hashlib

        digest = hashlib.sha256((files / wheel).read_bytes()).hexdigest()
        proc = _run_install(tmp_path, f"vllm-router=={version} --hash=sha256:{digest}\n", index)
        assert (tmp_path / "deps" / "vllm_router" / "__init__.py").is_file(), proc.stderr[-2000:]
    finally:
        httpd.shutdown()
