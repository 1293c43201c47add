"""bench.common.kube (in-cluster API reads with the service-account token) and bench.run.hardware (capacity
type, instance type and the price that follows), against a loopback fake of the Kubernetes API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.common import kube as K
from bench.run import hardware as H

NODE = {"kind": "Node", "metadata": {"name": "ip-10-40-12-7.ap-northeast-2.compute.internal", "labels": {
    "karpenter.sh/capacity-type": "on-demand", "node.kubernetes.io/instance-type": "g7e.2xlarge",
    "topology.kubernetes.io/zone": "ap-northeast-2a", "karpenter.sh/nodepool": "g7e-on-demand"}}}


@pytest.fixture
def api():
    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization")))
            if self.headers.get("Authorization") != "Bearer sa-token":
                return self._send(401, {"kind": "Status", "message": "Unauthorized"})
            if self.path == f"/api/v1/nodes/{NODE['metadata']['name']}":
                return self._send(200, NODE)
            if self.path.startswith("/api/v1/nodes/"):
                return self._send(403, {"kind": "Status", "message": 'nodes "x" is forbidden'})
            if self.path.startswith("/api/v1/namespaces/vllm/events"):
                page = {"items": [{"reason": "Pulled"}], "metadata": {}}
                if "continue=" not in self.path:
                    page["metadata"]["continue"] = "t1"
                return self._send(200, page)
            return self._send(404, {"message": "not found"})

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield K.InCluster(f"http://127.0.0.1:{httpd.server_address[1]}", "sa-token"), seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_node_facts_read_with_the_token(api):
    client, seen = api
    facts = K.node_facts(client, NODE["metadata"]["name"])
    assert facts["capacity_type"] == "on-demand" and facts["instance_type"] == "g7e.2xlarge"
    assert facts["zone"] == "ap-northeast-2a" and facts["nodepool"] == "g7e-on-demand" and facts["error"] is None
    assert seen == [(f"/api/v1/nodes/{NODE['metadata']['name']}", "Bearer sa-token")]


def test_forbidden_and_missing_are_reasons_not_guesses(api):
    client, _ = api
    facts = K.node_facts(client, "other-node")
    assert facts["capacity_type"] is None and "HTTP 403" in facts["error"] and "forbidden" in facts["error"]
    assert "not in a Kubernetes pod" in K.node_facts(None, "n")["error"]
    with pytest.raises(K.KubeError) as err:
        K.InCluster(client.base_url, "wrong").get("/api/v1/nodes/x")
    assert err.value.status == 401


def test_list_follows_continue_tokens(api):
    client, seen = api
    assert client.items("/api/v1/namespaces/vllm/events", fieldSelector="involvedObject.name=x") == [
        {"reason": "Pulled"}, {"reason": "Pulled"}]
    assert "fieldSelector=involvedObject.name%3Dx" in seen[0][0] and "continue=t1" in seen[1][0]


def test_from_environment_uses_the_mounted_token_and_ca(tmp_path):
    assert K.InCluster.from_environment(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    (tmp_path / "token").write_text("abc\n")
    client = K.InCluster.from_environment(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1",
                                                     "KUBERNETES_SERVICE_PORT": "443"})
    assert client.base_url == "https://[fd00::1]:443" and client.token == "abc" and client.context is None
    assert K.InCluster.from_environment(tmp_path, {}) is None


def resolve(client, **kw):
    base = dict(node_name=NODE["metadata"]["name"], configured_instance_type="g7e.2xlarge", gpus=1,
                capacity_type=None, allowed_capacity_types=["spot", "on-demand"],
                prices={"spot": 1.5, "on-demand": 4.13}, price_per_hour=None, image="vllm/vllm-openai:v0.26.0")
    return H.resolve(**{**base, **kw}, client=client)


def test_the_price_follows_the_capacity_the_node_has(api):
    client, _ = api
    hw = resolve(client)
    # a Spot pool's run that landed on the on-demand fallback is priced on demand
    assert hw["capacity_type"] == "on-demand" and hw["price_per_hour"] == 4.13
    assert "label karpenter.sh/capacity-type" in hw["capacity_type_source"] and hw["notes"] == []
    unknown = resolve(client, node_name="other-node")
    assert unknown["capacity_type"] is None and unknown["price_per_hour"] is None
    assert any("capacity type unknown" in n for n in unknown["notes"])
    single = resolve(client, node_name="other-node", allowed_capacity_types=["on-demand"])
    assert single["capacity_type"] == "on-demand" and single["price_per_hour"] == 4.13
    assert resolve(client, price_per_hour=9.0)["price_source"] == "--price-per-hour"
    mismatch = resolve(client, configured_instance_type="g6e.2xlarge")
    assert mismatch["instance_type"] == "g7e.2xlarge" and "the node is a g7e.2xlarge" in mismatch["notes"][0]


def test_price_and_capacity_parsing():
    assert H.parse_prices("spot=1.50,on-demand=4.13") == {"spot": 1.5, "on-demand": 4.13}
    assert H.parse_prices(None) == {}
    for bad in ("spot", "spot=x", "reserved=1", "spot=0"):
        with pytest.raises(ValueError, match="--prices"):
            H.parse_prices(bad)
    assert H.parse_capacity_types("spot,on-demand") == ["spot", "on-demand"]
    with pytest.raises(ValueError, match="--capacity-types"):
        H.parse_capacity_types("spot,reserved")
