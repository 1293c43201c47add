"""The routers: one endpoint per serving pool (traffic class), the vLLM project's `vllm-router`.

`vllm-router` (a Rust binary in a Python wheel, pinned as the `router` extra of pyproject.toml) runs
in its multi-model mode (`--enable-igw`): each worker it finds is asked for its model (/v1/models),
and a request goes to the workers of the model its body names. Within a model the `cache_aware`
policy sends a request to the replica whose radix tree shares the longest prefix with it, unless
that share is below the router's threshold (30 % by default) or the replicas' loads drift apart
(then the replica with the fewest requests in flight): vLLM's prefix cache then hits across the
replicas of a pool.

One router per pool, not one for every pool: vllm-router 0.1.17 sends a request for a model it has
no worker for to any worker it has, and its /health answers 200 with none. With the batch pool at
zero, one shared router sent batch requests to the interactive servers. Each router here finds only
its own pool's servers (`--selector` adds the pool's traffic-class label), so a batch request reaches
a batch replica or none: with none ready the batch router answers 503 ("no available workers") until
discovery adds a ready replica; interactive servers are never in its list.

Workers are found through the Kubernetes API (`--service-discovery`): the pods of the workload
namespace carrying the servers' labels and the pool's, at their API port, once they are Ready. The
routers' service account may get, list and watch pods there (a Role, not a ClusterRole).

Priority: the batch servers run `--scheduling-policy priority`; vLLM reads a request's priority
from its body (`"priority": N`, lower runs first). The router passes the body through untouched
and cannot set that field itself (0.1.17 has no option for it; only a hand-written WebAssembly
middleware could rewrite bodies), so batch clients send their priority in the body.

The pod is the pinned Python image that installs the router at every start from the lock committed in
locks/router.txt: every package at its version with the sha256 of each of its files, installed with
`pip --require-hashes --no-deps --only-binary=:all:`, so each start gets the same files or none (a
changed or unlisted file fails the install, and the pod restarts). The lock reaches the pod in an
immutable ConfigMap named after its content: a new lock is a new rollout. Egress to PyPI over HTTPS,
the pool's servers' port and the Kubernetes API; ingress on the router's port.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import system_placement
from components.labels import PART_OF, TRAFFIC_CLASS_LABEL
from components.network_policy import INTERNET_EGRESS_LABEL, _first_ip, service_cidr
from components.pod_security import harden

PORT = 8000
METRICS_PORT = 29000
POLICY = "cache_aware"
NAME = "vllm-router"
DEPS_DIR = "/opt/deps"
LOCK_DIR = "/opt/router-lock"
LOCK_FILE = "requirements.txt"


@dataclass(frozen=True)
class RouterArgs:
    namespace: str  # the servers' (the workload namespace)
    image: str
    lock: str  # locks/router.txt: the router and every dependency, pinned, with their files' sha256
    server_labels: dict[str, str]  # every pool's pods carry these
    pools: Sequence[str]  # the traffic classes: a router each
    server_port: int
    vpc_cidr: str  # where the Kubernetes API's addresses are
    replicas: int = 2
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = ()


def router_name(pool: str) -> str:
    return f"{NAME}-{pool}"


def pod_labels(pool: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": pool, **PART_OF}


def pool_server_labels(args: RouterArgs, pool: str) -> dict[str, str]:
    """The labels of one pool's server pods: the servers' common ones and the pool's traffic class."""
    return {**args.server_labels, TRAFFIC_CLASS_LABEL: pool}


def router_args(args: RouterArgs, pool: str) -> list[str]:
    """`vllm-router` arguments: multi-model mode, cache-aware balancing, discovery of one pool's servers."""
    return [
        "--host", "0.0.0.0", "--port", str(PORT),
        "--enable-igw", "--policy", POLICY,
        "--service-discovery", "--service-discovery-namespace", args.namespace,
        "--service-discovery-port", str(args.server_port),
        "--selector", *[f"{k}={v}" for k, v in sorted(pool_server_labels(args, pool).items())],
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
    ]


def lock_config_map(args: RouterArgs) -> str:
    return f"{NAME}-lock-{hashlib.sha256(args.lock.encode()).hexdigest()[:10]}"


SCRIPT = ("set -e\n"
          "python -m pip install --quiet --no-cache-dir --disable-pip-version-check --root-user-action=ignore "
          f"--only-binary=:all: --no-deps --require-hashes --target {DEPS_DIR} -r {LOCK_DIR}/{LOCK_FILE}\n"
          'exec python -m vllm_router.launch_router "$@"\n')


def deployment(args: RouterArgs, pool: str) -> dict[str, Any]:
    name = router_name(pool)
    labels = {**pod_labels(pool), **args.labels}
    pod = harden({
        "serviceAccountName": NAME,
        # On the system nodes: the GPU nodes' taint is not tolerated, and the router must never wait
        # for (or hold up) a GPU node.
        **system_placement(),
        "containers": [{
            "name": "router",
            "image": args.image,
            "command": ["sh", "-c", SCRIPT, NAME],
            "args": router_args(args, pool),
            "env": [{"name": "PYTHONPATH", "value": DEPS_DIR}],
            "ports": [{"name": "http", "containerPort": PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
            # /health answers 200 with no worker: a pool at zero leaves its router ready, refusing requests
            "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 5},
            # a router that stops answering its own health check is restarted after a minute of misses; the
            # first five minutes are spared, so that a slow start (its pip install) is not cut short
            "livenessProbe": {"httpGet": {"path": "/health", "port": PORT}, "initialDelaySeconds": 300,
                              "periodSeconds": 10, "failureThreshold": 6},
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            "volumeMounts": [{"name": "deps", "mountPath": DEPS_DIR},
                             {"name": "lock", "mountPath": LOCK_DIR, "readOnly": True}],
        }],
        "volumes": [{"name": "deps", "emptyDir": {}},
                    {"name": "lock", "configMap": {"name": lock_config_map(args),
                                                   "items": [{"key": LOCK_FILE, "path": LOCK_FILE}]}}],
    }, kubernetes_api=True)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": args.namespace, "labels": labels},
            "spec": {"replicas": args.replicas, "selector": {"matchLabels": pod_labels(pool)},
                     "template": {"metadata": {"labels": {**labels, INTERNET_EGRESS_LABEL[0]: INTERNET_EGRESS_LABEL[1]}},
                                  "spec": pod}}}


def manifests(args: RouterArgs) -> list[dict[str, Any]]:
    """The lock's ConfigMap, ServiceAccount, Role and RoleBinding; per pool a Deployment, a Service and the
    NetworkPolicies that let it reach that pool's servers (and them accept it)."""
    ns = args.namespace
    meta = {"name": NAME, "namespace": ns, "labels": {"app.kubernetes.io/name": NAME, **PART_OF, **args.labels}}
    tcp = lambda *ports: [{"protocol": "TCP", "port": p} for p in ports]  # noqa: E731

    def policy(name: str, selector: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": ns, "labels": dict(PART_OF)},
                "spec": {"podSelector": {"matchLabels": selector}, **spec}}

    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True, "data": {LOCK_FILE: args.lock},
         "metadata": {**meta, "name": lock_config_map(args)}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}]},
        # The namespace denies by default: anyone in reach of the namespace may call the routers.
        policy(f"{NAME}-ingress", {"app.kubernetes.io/name": NAME}, {"policyTypes": ["Ingress"], "ingress": [
            {"ports": tcp(PORT, METRICS_PORT)}]}),
    ]
    for pool in args.pools:
        name, servers = router_name(pool), pool_server_labels(args, pool)
        objects += [
            deployment(args, pool),
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": name, "namespace": ns, "labels": {**pod_labels(pool), **args.labels}},
             "spec": {"selector": pod_labels(pool),
                      "ports": [{"name": "http", "port": PORT, "targetPort": PORT},
                                {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]}},
            # this pool's servers and the API, nothing else; and this pool's servers accept this router
            policy(f"{name}-egress", pod_labels(pool), {"policyTypes": ["Egress"], "egress": [
                {"to": [{"podSelector": {"matchLabels": servers}}], "ports": tcp(args.server_port)},
                {"to": [{"ipBlock": {"cidr": args.vpc_cidr}},
                        {"ipBlock": {"cidr": _first_ip(service_cidr(args.vpc_cidr))}}],
                 "ports": tcp(443)}]}),
            policy(f"{name}-to-servers", servers, {"policyTypes": ["Ingress"], "ingress": [
                {"from": [{"podSelector": {"matchLabels": pod_labels(pool)}}], "ports": tcp(args.server_port)}]}),
        ]
    return objects


class Router(pulumi.ComponentResource):
    """The routers' objects (see the module docstring); `urls` are their in-cluster endpoints, by pool."""

    urls: dict[str, str]

    def __init__(self, name: str, args: RouterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:fleet:Router", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        kinds = {
            "ConfigMap": lambda n, m: k8s.core.v1.ConfigMap(n, metadata=m["metadata"], data=m["data"],
                                                            immutable=True, opts=child),
            "ServiceAccount": lambda n, m: k8s.core.v1.ServiceAccount(n, metadata=m["metadata"], opts=child),
            "Role": lambda n, m: k8s.rbac.v1.Role(n, metadata=m["metadata"], rules=m["rules"], opts=child),
            "RoleBinding": lambda n, m: k8s.rbac.v1.RoleBinding(n, metadata=m["metadata"], role_ref=m["roleRef"],
                                                                subjects=m["subjects"], opts=child),
            "Deployment": lambda n, m: k8s.apps.v1.Deployment(n, metadata=m["metadata"], spec=m["spec"], opts=child),
            "Service": lambda n, m: k8s.core.v1.Service(n, metadata=m["metadata"], spec=m["spec"], opts=child),
            "NetworkPolicy": lambda n, m: k8s.networking.v1.NetworkPolicy(n, metadata=m["metadata"], spec=m["spec"],
                                                                          opts=child),
        }
        # Logical names without the lock's hash: a new lock replaces its ConfigMap under the same resource.
        self.objects = [kinds[m["kind"]](f"{name}-{m['kind'].lower()}-"
                                         f"{NAME + '-lock' if m['kind'] == 'ConfigMap' else m['metadata']['name']}", m)
                        for m in manifests(args)]
        self.urls = {pool: f"http://{router_name(pool)}.{args.namespace}.svc:{PORT}" for pool in args.pools}
        self.register_outputs({"urls": self.urls})
