"""GPU release: a benchmarked server gives its GPUs back once the answer is in, and takes them again
for a new sweep (`bench.releaseGpus`, on by default).

Per benchmarked server, two small Jobs on the system nodes, in the plain Python image, running
`python -m bench.run.release` (bench/run/release.py, stdlib only) with its own service account:

  wake-<server>-<sweep>     before the start-up record and the sweep: a server released after an
                            earlier sweep is scaled back up, and `pulumi up` waits until it is
                            available (seconds when it already is, as on a first `up`).
  release-<server>-<sweep>  after them (not awaited): waits until every Job that uses the server
                            has ended (its start-up record, its sweep, the report that reads the
                            sweep, the mixed-traffic check on it), then scales the server's
                            Deployment to 0. Karpenter's consolidation (WhenEmpty) then removes the
                            empty GPU node; `karpenter.sh/do-not-disrupt` sits on pods, and no pod is
                            left on the node to carry it.

Both are named by the sweep's identity (its results prefix hash), like the sweep itself: an
unchanged `pulumi up` leaves the finished Jobs alone, so the server stays at 0 and nothing is
measured again; a new sweep identity wakes the server, measures, and releases it again.

Who owns `spec.replicas`: not Pulumi. A released server's Deployment is declared without
`replicas` (Kubernetes sets 1 at creation; components/vllm_server.py), so a later `up` or
`up --refresh` never scales it back, and Pulumi's server-side apply never conflicts with the
`scale` subresource writes of the release (the same rule as for a Deployment under an
autoscaler: whatever scales it owns the field).

RBAC, one Role in the servers' namespace: `get` and `patch` on `deployments/scale` and `get` on
`deployments`, for the stack's own benchmarked servers by name (resourceNames), and `get` on the
Jobs it waits for, by name. Nothing cluster-wide, no list or watch, no other verb.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod, code_volume
from components.cluster import SYSTEM_LABEL, SYSTEM_TAINT_KEY
from components.labels import PART_OF
from components.pod_security import harden

SERVICE_ACCOUNT = "vllm-release"
RBAC_NAME = "vllm-poc-gpu-release"
MODULE = "bench.run.release"
POD_LABELS = {"app.kubernetes.io/name": "vllm-release"}
# The release waits for sweeps (12 h), the report and its mixed-traffic check: a day is ample.
RELEASE_DEADLINE_S = 24 * 3600
# A waited object whose wait overlaps another's ("<Kind>/<name>"): one `up` waits for one of them only.
OVERLAPS_ANNOTATION = "vllm-poc/await-overlaps"
POLL_S = 60


@dataclass(frozen=True)
class ServerRelease:
    server: str  # the server's Deployment
    sweep_hash: str  # the sweep's identity (its results prefix hash): names both Jobs
    jobs: Sequence[str]  # every Job that uses the server, by name
    replicas: int = 1
    wake_timeout_s: int = 2700  # the server's own deploy timeout: a cold start from 0
    depends_on: Sequence[pulumi.Resource] = ()  # the server's Deployment, for the wake


@dataclass(frozen=True)
class GpuReleaseArgs:
    namespace: str
    image: str  # plain Python: the module needs nothing but the standard library
    code: dict[str, str]  # what `bench.run.release` imports, {path in the package: source}
    servers: Sequence[ServerRelease]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


def role_rules(servers: Sequence[ServerRelease]) -> list[dict[str, Any]]:
    """The Role's rules: the stack's own benchmarked server Deployments and the Jobs that use them."""
    deployments = sorted({s.server for s in servers})
    jobs = sorted({j for s in servers for j in s.jobs})
    return [
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": deployments,
         "verbs": ["get", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": deployments, "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": jobs, "verbs": ["get"]},
    ]


def job_name(action: str, server: str, sweep_hash: str) -> str:
    return f"{action}-{server}-{sweep_hash[:10]}"[:63]


def command(action: str, namespace: str, release: ServerRelease) -> list[str]:
    argv = ["python", "-m", MODULE, action, "--namespace", namespace, "--deployment", release.server]
    if action == "release":
        argv += [arg for name in release.jobs for arg in ("--job", name)] + ["--poll-seconds", str(POLL_S)]
    else:
        argv += ["--replicas", str(release.replicas), "--timeout-seconds", str(release.wake_timeout_s),
                 "--poll-seconds", "10"]
    return argv


def job_manifest(action: str, namespace: str, image: str, code_config_map: str, code: dict[str, str],
                 release: ServerRelease) -> dict[str, Any]:
    """A wake or release Job as applied (plain data, so tests read it without Pulumi)."""
    labels = {**POD_LABELS, "app.kubernetes.io/instance": release.server, "vllm-poc/action": action, **PART_OF}
    # the wake's own --timeout-seconds ends it first; the deadline only stops a pod that hangs
    deadline = RELEASE_DEADLINE_S if action == "release" else release.wake_timeout_s + 30
    container = {
        "name": action,
        "image": image,
        "command": command(action, namespace, release),
        "env": [{"name": "PYTHONPATH", "value": bench_pod.CODE_DIR}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [{"name": "code", "mountPath": f"{bench_pod.CODE_DIR}/bench", "readOnly": True}],
    }
    pod_spec = harden({
        "serviceAccountName": SERVICE_ACCOUNT,
        "restartPolicy": "Never",
        # The system nodes: the release must not be the pod that keeps a GPU node from emptying.
        "nodeSelector": {SYSTEM_LABEL: "system"},
        "tolerations": [{"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [{"name": "code", "configMap": {"name": code_config_map, "items": code_volume.items(code)}}],
    }, kubernetes_api=True)
    # The wake waits only when the server was released, and then its Deployment is unchanged and not
    # waited for; when `up` does wait for the Deployment (created or changed), the wake finds it ready.
    # So the two waits never add up: the time budget (stacks/ops/time_budget.py) counts the longer one.
    annotations = ({"pulumi.com/skipAwait": "true"} if action == "release"
                   else {"pulumi.com/timeoutSeconds": str(deadline + 30),
                         OVERLAPS_ANNOTATION: f"Deployment/{release.server}"})
    return {
        "metadata": {"name": job_name(action, release.server, release.sweep_hash), "namespace": namespace,
                     "labels": labels, "annotations": annotations},
        # No ttlSecondsAfterFinished: a Job that deleted itself would be created again by the next
        # `pulumi up --refresh`, and a release that runs again is harmless but a wake would not be.
        "spec": {"backoffLimit": 3, "activeDeadlineSeconds": deadline,
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
    }


def code_name(code: dict[str, str]) -> str:
    """The code ConfigMap's name, after its content (immutable: new code, new name)."""
    digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(code.items())).encode()).hexdigest()
    return f"release-code-{digest[:10]}"


class GpuRelease(pulumi.ComponentResource):
    """The release service account, Role and code, and per benchmarked server a wake Job (created
    here, before the sweep) and a release Job (`release_after`, once the Jobs it waits for exist)."""

    wake_jobs: dict[str, k8s.batch.v1.Job]
    release_jobs: dict[str, k8s.batch.v1.Job]

    def __init__(self, name: str, args: GpuReleaseArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:GpuRelease", name, None, opts)
        self._name, self.args = name, args
        self._child = child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        labels = {**POD_LABELS, **PART_OF}
        account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account", metadata={"name": SERVICE_ACCOUNT, "namespace": args.namespace,
                                                 "labels": labels}, opts=child)
        role = k8s.rbac.v1.Role(f"{name}-role", metadata={"name": RBAC_NAME, "namespace": args.namespace,
                                                          "labels": labels},
                                rules=role_rules(args.servers), opts=child)
        self._binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding", metadata={"name": RBAC_NAME, "namespace": args.namespace, "labels": labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RBAC_NAME},
            subjects=[{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": args.namespace}],
            opts=child.merge(pulumi.ResourceOptions(depends_on=[role, account])))
        self._code = bench_pod.code_config_map(f"{name}-code", code_name(args.code), args.namespace, labels,
                                               args.code, child)
        self.wake_jobs = {r.server: self._job("wake", r, r.depends_on) for r in args.servers}
        self.release_jobs = {}
        self.register_outputs({"servers": [s.server for s in args.servers]})

    def _job(self, action: str, release: ServerRelease, waits: Sequence[pulumi.Resource]) -> k8s.batch.v1.Job:
        args = self.args
        manifest = job_manifest(action, args.namespace, args.image, code_name(args.code), args.code, release)
        return k8s.batch.v1.Job(
            f"{self._name}-{action}-{release.server}", metadata=manifest["metadata"], spec=manifest["spec"],
            opts=self._child.merge(pulumi.ResourceOptions(depends_on=[self._code, self._binding, *waits])))

    def release_after(self, server: str, jobs: Sequence[pulumi.Resource]) -> k8s.batch.v1.Job:
        """The server's release Job, created after the Jobs it waits for (it reads them by name)."""
        (release,) = [r for r in self.args.servers if r.server == server]
        self.release_jobs[server] = self._job("release", release, jobs)
        return self.release_jobs[server]
