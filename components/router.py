"""The router: one endpoint in front of a fleet's serving pools (the vLLM project's `vllm-router`).

`vllm-router` (a Rust binary in a Python wheel, pinned as the `router` extra of pyproject.toml)
runs in its multi-model mode (`--enable-igw`): each worker it finds is asked for its model
(/v1/models), and a request goes to the workers of the model its body names. The pools serve
different models (interactive: the one the interactive servers serve, batch: the batch servers'),
so the model name is the pool: no path or header split is written here. Within a model the
`cache_aware` policy sends a request to the replica whose radix tree shares the longest prefix
with it, unless that share is below the router's threshold (30 % by default) or the replicas' loads
drift apart (then the replica with the fewest requests in flight): vLLM's prefix cache then hits
across the replicas of a pool.

Workers are found through the Kubernetes API (`--service-discovery`): every pod of the workload
namespace carrying the servers' labels (`selector`), at their API port. The router's service
account may get, list and watch pods there (a Role, not a ClusterRole).

Priority: the batch servers run `--scheduling-policy priority`; vLLM reads a request's priority
from its body (`"priority": N`, lower runs first). The router passes the body through untouched
and cannot set that field itself (0.1.17 has no option for it; only a hand-written WebAssembly
middleware could rewrite bodies), so batch clients send their priority in the body.

The pod is the pinned Python image that installs the `router` extra at start (like the report Job):
egress to PyPI over HTTPS, the servers' port and the Kubernetes API; ingress on the router's port.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import system_placement
from components.labels import PART_OF
from components.network_policy import INTERNET_EGRESS_LABEL, _first_ip, service_cidr
from components.pod_security import harden

PORT = 8000
METRICS_PORT = 29000
POLICY = "cache_aware"
DEPS_DIR = "/opt/deps"


@dataclass(frozen=True)
class RouterArgs:
    namespace: str  # the servers' (the workload namespace)
    image: str
    requirements: Sequence[str]  # the `router` extra: vllm-router==<pin>
    server_labels: dict[str, str]  # every pool's pods carry these
    server_port: int
    vpc_cidr: str  # where the Kubernetes API's addresses are
    replicas: int = 2
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = ()


def pod_labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm-router", **PART_OF}


def router_args(args: RouterArgs) -> list[str]:
    """`vllm-router` arguments: multi-model mode, cache-aware balancing, Kubernetes discovery."""
    return [
        "--host", "0.0.0.0", "--port", str(PORT),
        "--enable-igw", "--policy", POLICY,
        "--service-discovery", "--service-discovery-namespace", args.namespace,
        "--service-discovery-port", str(args.server_port),
        "--selector", *[f"{k}={v}" for k, v in sorted(args.server_labels.items())],
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
    ]


def _script(requirements: Sequence[str]) -> str:
    pins = " ".join(requirements)
    return ("python -m pip install --quiet --no-cache-dir --disable-pip-version-check --root-user-action=ignore "
            f"--only-binary=:all: --target {DEPS_DIR} {pins}\n"
            f'exec python -m vllm_router.launch_router "$@"\n')


def manifests(args: RouterArgs) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, Deployment, Service and NetworkPolicies of the router."""
    ns, name, labels = args.namespace, "vllm-router", {**pod_labels(), **args.labels}
    meta = {"name": name, "namespace": ns, "labels": labels}
    pod = harden({
        "serviceAccountName": name,
        # On the system nodes: the GPU nodes' taint is not tolerated, and the router must never wait
        # for (or hold up) a GPU node.
        **system_placement(),
        "containers": [{
            "name": "router",
            "image": args.image,
            "command": ["sh", "-c", _script(args.requirements), "vllm-router"],
            "args": router_args(args),
            "env": [{"name": "PYTHONPATH", "value": DEPS_DIR}],
            "ports": [{"name": "http", "containerPort": PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 5},
            # a router that stops answering its own health check is restarted after a minute of misses; the
            # first five minutes are spared, so that a slow start (its pip install) is not cut short
            "livenessProbe": {"httpGet": {"path": "/health", "port": PORT}, "initialDelaySeconds": 300,
                              "periodSeconds": 10, "failureThreshold": 6},
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            "volumeMounts": [{"name": "deps", "mountPath": DEPS_DIR}],
        }],
        "volumes": [{"name": "deps", "emptyDir": {}}],
    }, kubernetes_api=True)
    policy = lambda suffix, selector, spec: {  # noqa: E731
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-{suffix}", "namespace": ns, "labels": dict(PART_OF)},
        "spec": {"podSelector": {"matchLabels": selector}, **spec}}
    tcp = lambda *ports: [{"protocol": "TCP", "port": p} for p in ports]  # noqa: E731
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "replicas": args.replicas,
            "selector": {"matchLabels": pod_labels()},
            "template": {"metadata": {"labels": {**labels, INTERNET_EGRESS_LABEL[0]: INTERNET_EGRESS_LABEL[1]}},
                         "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            "selector": pod_labels(),
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT},
                      {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]}},
        # The namespace denies by default: the router's way to the servers and the API, and theirs from it.
        policy("egress", pod_labels(), {"policyTypes": ["Egress"], "egress": [
            {"to": [{"podSelector": {"matchLabels": dict(args.server_labels)}}], "ports": tcp(args.server_port)},
            {"to": [{"ipBlock": {"cidr": args.vpc_cidr}}, {"ipBlock": {"cidr": _first_ip(service_cidr(args.vpc_cidr))}}],
             "ports": tcp(443)}]}),
        policy("to-servers", dict(args.server_labels), {"policyTypes": ["Ingress"], "ingress": [
            {"from": [{"podSelector": {"matchLabels": pod_labels()}}], "ports": tcp(args.server_port)}]}),
        policy("ingress", pod_labels(), {"policyTypes": ["Ingress"], "ingress": [
            {"ports": tcp(PORT, METRICS_PORT)}]}),
    ]


class Router(pulumi.ComponentResource):
    """The router's objects (see the module docstring); `url` is its in-cluster endpoint."""

    url: str

    def __init__(self, name: str, args: RouterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:fleet:Router", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        kinds = {
            "ServiceAccount": lambda n, m: k8s.core.v1.ServiceAccount(n, metadata=m["metadata"], opts=child),
            "Role": lambda n, m: k8s.rbac.v1.Role(n, metadata=m["metadata"], rules=m["rules"], opts=child),
            "RoleBinding": lambda n, m: k8s.rbac.v1.RoleBinding(n, metadata=m["metadata"], role_ref=m["roleRef"],
                                                                subjects=m["subjects"], opts=child),
            "Deployment": lambda n, m: k8s.apps.v1.Deployment(n, metadata=m["metadata"], spec=m["spec"], opts=child),
            "Service": lambda n, m: k8s.core.v1.Service(n, metadata=m["metadata"], spec=m["spec"], opts=child),
            "NetworkPolicy": lambda n, m: k8s.networking.v1.NetworkPolicy(n, metadata=m["metadata"], spec=m["spec"],
                                                                          opts=child),
        }
        self.objects = [kinds[m["kind"]](f"{name}-{m['kind'].lower()}-{m['metadata']['name']}", m)
                        for m in manifests(args)]
        self.url = f"http://vllm-router.{args.namespace}.svc:{PORT}"
        self.register_outputs({"url": self.url})
