"""Records a benchmarked server's start-up timeline right after its Deployment becomes available.

A short Job runs `python3 -m bench timeline` (bench/startup/collect.py) in the server's image on the
server's node, with the bench's service account: it reads the server pods, their Events, Nodes and
Karpenter NodeClaims and the servers' logs, and stores one record per pod under the sweep's results
prefix (`startup/<pod>.json`), where `bench report` finds them. With sleep mode on it first times
`/sleep` and `/wake_up` on the server. Pulumi waits for it (a few seconds; sleep/wake adds ~30 s on a
GPU), and the bench Job starts after it, so the measurement never overlaps the sweep. Missing facts
are recorded in the record, never fatal: the command always exits 0.

RBAC, read-only and least privilege: in the servers' namespace get/list pods, get pods/log, list
events; cluster-wide get nodes and get karpenter.sh nodeclaims (no list, no watch, no secrets).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod
from components.labels import PART_OF
from components.pod_security import harden

RBAC_NAME = "vllm-poc-startup-reader"
# The Job's own deadline: it reads a few objects and logs (seconds; sleep/wake ~30 s on a GPU), and
# `pulumi up` waits for it on the longest chain of a first `up` (stacks/ops/time_budget.py). Pulumi waits
# a little longer (scheduling, image already on the node), so it never gives up on a Job that
# Kubernetes would still let finish.
DEADLINE_S = 300
PULUMI_WAIT_S = DEADLINE_S + 120

NAMESPACE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]
# Nodes: `get` comes with the bench's own node read (BenchNodeAccess), granted to the same account.
CLUSTER_RULES = [
    {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get"]},
]


@dataclass(frozen=True)
class StartupJobArgs:
    server: str
    namespace: str
    image: str
    service_account: str
    server_pod_labels: dict[str, str]
    results_uri: pulumi.Input[str]
    region: str
    code: dict[str, str]
    config_hash: str
    container: str = "vllm"
    sleep_wake_port: int | None = None  # the server's port when sleep mode is on
    served_model: str | None = None
    depends_on: list[pulumi.Resource] = field(default_factory=list)


def job_name(server: str, config_hash: str) -> str:
    return f"startup-{server}-{config_hash[:10]}"[:63]


def command(args: StartupJobArgs) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in sorted(args.server_pod_labels.items()))
    argv = ["python3", "-m", "bench.startup.collect", "--namespace", args.namespace, "--selector", selector,
            "--out", bench_pod.RESULTS_DIR, "--container", args.container, "--server", args.server,
            "--config-hash", args.config_hash]
    if args.sleep_wake_port:
        argv += ["--sleep-wake-port", str(args.sleep_wake_port)]
        if args.served_model:
            argv += ["--model", args.served_model]
    return ["sh", "-c", shlex.join(argv) + "; exit 0"]


class StartupReaderRbac(pulumi.ComponentResource):
    """The read-only grants `bench timeline` needs, bound to one service account."""

    def __init__(self, name: str, namespace: str, service_account: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:StartupReaderRbac", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        subject = [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]
        labels = dict(PART_OF)
        role = k8s.rbac.v1.Role(f"{name}-role", metadata={"name": RBAC_NAME, "namespace": namespace,
                                                          "labels": labels}, rules=NAMESPACE_RULES, opts=child)
        k8s.rbac.v1.RoleBinding(
            f"{name}-binding", metadata={"name": RBAC_NAME, "namespace": namespace, "labels": labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RBAC_NAME},
            subjects=subject, opts=child.merge(pulumi.ResourceOptions(depends_on=[role])))
        cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-cluster-role", metadata={"name": RBAC_NAME, "labels": labels},
                                               rules=CLUSTER_RULES, opts=child)
        self.binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-binding", metadata={"name": RBAC_NAME, "labels": labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RBAC_NAME},
            subjects=subject, opts=child.merge(pulumi.ResourceOptions(depends_on=[cluster_role])))
        self.register_outputs({})


class StartupJob(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: StartupJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:StartupJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/name": "vllm-startup", "app.kubernetes.io/instance": args.server,
                  "vllm-poc/config-hash": args.config_hash[:10], **PART_OF}
        code = bench_pod.code_config_map(f"{name}-code", f"startup-code-{args.server}-{args.config_hash[:10]}",
                                         args.namespace, labels, args.code, child)
        container = {
            "name": "timeline",
            "image": args.image,
            "command": command(args),
            "env": bench_pod.env(args.region, args.results_uri),
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "256Mi"},
                          "limits": {"cpu": "500m", "memory": "1Gi"}},
            "volumeMounts": bench_pod.volume_mounts(),
        }
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": job_name(args.server, args.config_hash), "namespace": args.namespace, "labels": labels,
                      "annotations": {"pulumi.com/timeoutSeconds": str(PULUMI_WAIT_S)}},
            # No ttlSecondsAfterFinished: a Job that deleted itself would be created again by the next
            # `pulumi up --refresh`, recording a start-up nobody asked for. Pulumi deletes it.
            spec={
                "backoffLimit": 1,
                "activeDeadlineSeconds": DEADLINE_S,
                "template": {
                    "metadata": {"labels": labels},
                    # It reads pods, events, nodes and NodeClaims: the one other pod with a token.
                    "spec": harden({
                        "serviceAccountName": args.service_account,
                        "restartPolicy": "Never",
                        "containers": [container],
                        "volumes": bench_pod.volumes(code, args.code),
                        # On the server's node, where its image already is.
                        **bench_pod.on_server_node(args.server_pod_labels),
                    }, kubernetes_api=True),
                },
            },
            opts=child.merge(pulumi.ResourceOptions(depends_on=[code, *args.depends_on])),
        )
        self.register_outputs({"jobName": self.job.metadata["name"]})
