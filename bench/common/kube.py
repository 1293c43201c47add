"""A tiny client of the Kubernetes API for code running in a pod (stdlib only).

It authenticates with the pod's service-account token and trusts the cluster CA mounted next to
it, so what it may read is exactly what the service account's RBAC grants (the bench Job: `get` on
nodes, nothing else). One write: `patch` (a merge patch), for the GPU release Job's scale of its
servers' Deployments (bench/run/release.py; its Role names those Deployments and nothing else). Reads return parsed JSON; failures raise `KubeError` with the HTTP status
and the API server's message, so callers can record why a fact is unknown instead of guessing.

    client = InCluster.from_environment()        # None outside a pod
    node = client.get("/api/v1/nodes/" + name)
    events = client.get("/api/v1/namespaces/vllm/events", fieldSelector="involvedObject.name=x")
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# Node labels the bench records (set by Kubernetes and Karpenter on every node it launches).
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
NODEPOOL_LABEL = "karpenter.sh/nodepool"


class KubeError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass
class InCluster:
    base_url: str  # https://<host>:<port>
    token: str
    context: ssl.SSLContext | None = None
    timeout_s: float = 10.0

    @classmethod
    def from_environment(cls, sa_dir: Path = SERVICE_ACCOUNT_DIR,
                         env: dict[str, str] | None = None) -> "InCluster | None":
        """The pod's own credentials, or None when not running in a pod with a mounted token."""
        env = os.environ if env is None else env
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        token_file, ca_file = sa_dir / "token", sa_dir / "ca.crt"
        if not host or not token_file.is_file():
            return None
        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file.is_file() else None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # IPv6 service address
        return cls(f"https://{host}:{port}", token_file.read_text().strip(), context)

    def get(self, path: str, **params: str) -> dict[str, Any]:
        """GET an API path ("/api/v1/nodes/x", "/apis/karpenter.sh/v1/nodeclaims") as JSON."""
        return self._call("GET", path, params)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PATCH an API path with a JSON merge patch (`{"spec": {"replicas": 0}}` on a scale)."""
        return self._call("PATCH", path, {}, body)

    def _call(self, method: str, path: str, params: dict[str, str],
              body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.base_url.rstrip("/") + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", errors="replace") if exc.fp else ""
            try:
                message = json.loads(body).get("message") or body
            except ValueError:
                message = body
            raise KubeError(f"{method} {path}: HTTP {exc.code}: {message[:300]}", exc.code) from None
        except (OSError, ValueError, urllib.error.URLError) as exc:
            raise KubeError(f"{method} {path}: {getattr(exc, 'reason', exc)}") from None

    def items(self, path: str, **params: str) -> list[dict[str, Any]]:
        """Every item of a list path, following `continue` tokens."""
        out: list[dict[str, Any]] = []
        token = None
        while True:
            page = self.get(path, **params, **({"continue": token} if token else {}))
            out += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return out


def node_facts(client: InCluster | None, node_name: str | None) -> dict[str, Any]:
    """What the bench records about the node it runs on; `error` says why a fact is missing."""
    facts: dict[str, Any] = {"node": node_name, "capacity_type": None, "instance_type": None,
                             "zone": None, "nodepool": None, "error": None}
    if not node_name:
        facts["error"] = "node name unknown (NODE_NAME not set)"
        return facts
    if client is None:
        facts["error"] = "not in a Kubernetes pod (no service-account token)"
        return facts
    try:
        node = client.get(f"/api/v1/nodes/{urllib.parse.quote(node_name)}")
    except KubeError as exc:
        facts["error"] = str(exc)
        return facts
    labels = (node.get("metadata") or {}).get("labels") or {}
    facts.update(capacity_type=labels.get(CAPACITY_TYPE_LABEL), instance_type=labels.get(INSTANCE_TYPE_LABEL),
                 zone=labels.get(ZONE_LABEL), nodepool=labels.get(NODEPOOL_LABEL))
    if not facts["capacity_type"]:
        facts["error"] = f"node {node_name} has no {CAPACITY_TYPE_LABEL} label"
    return facts
