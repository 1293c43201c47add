"""A vLLM server: ServiceAccount (Pod Identity), Deployment and Service, from a serve spec.

The spec (`ServeSpec`) is plain data holding every flag, env var, request and probe budget; the
stack builds it from settings (`stacks.serving.build_serve_spec`) and this file only shapes it into
Kubernetes objects. `deployment_manifest` and `service_manifest` are plain functions so the objects
can be checked (and schema-validated) without Pulumi.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import code_volume, compile_cache
from components.compile_cache import CompileCache
from components.gpu_capacity import GPU_TAINT, POOL_LABEL
from components.labels import PART_OF
from components.pod_security import harden
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
PULUMI_TIMEOUT = "pulumi.com/timeoutSeconds"
# Pod template annotation of a benchmark target past its first round (bench.round): a new value is a new pod.
BENCH_ROUND = "vllm-poc/bench-round"
CACHE_VOLUME = "vllm-cache"
SHM_VOLUME = "dshm"
# Endpoints keep sending to a terminating pod until kube-proxy catches up; the pause lets in-flight
# connections land on a pod that is still serving.
PRESTOP_SLEEP_S = 10
API_KEY_ENTRY = "api-key"


@dataclass(frozen=True)
class Probe:
    path: str
    period_s: int
    timeout_s: int
    failure_threshold: int
    initial_delay_s: int = 0

    @property
    def budget_s(self) -> int:
        return self.initial_delay_s + self.period_s * self.failure_threshold


@dataclass(frozen=True)
class ServeSpec:
    """Everything the Deployment needs, in plain data."""

    name: str
    pool: str  # value of the vllm-poc/pool node label
    replicas: int
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]  # after `vllm serve`: the model URI, then flags
    env: dict[str, str]
    requests: dict[str, str]
    limits: dict[str, str]
    gpus: int
    cache_size_gib: int  # the compile/asset cache volume (emptyDir on the node's ephemeral disk)
    cache_mount_path: str
    shm_size_gib: int
    startup_probe: Probe
    readiness_probe: Probe
    liveness_probe: Probe
    termination_grace_s: int
    deploy_timeout_s: int
    served_model_name: str
    port: int
    notes: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)  # descriptive: model, traffic class
    # Secret (in the server's namespace) whose `api-key` entry the server requires as a bearer
    # token on /v1; None = no key.
    api_key_secret: str | None = None
    # The compile cache's S3 key and the pod's pull and push steps (components/compile_cache.py);
    # None = the cache stays on the pod's own volume.
    compile_cache: CompileCache | None = None

    @property
    def serve_args(self) -> list[str]:
        """The complete `vllm serve ...` argument list (what tests parse with vLLM's own CLI)."""
        return list(self.args)


@dataclass(frozen=True)
class RollingUpdate:
    """How an autoscaled server takes a new pod template: a replica at a time, never the whole pool.

    `max_surge` 1 with `max_unavailable` 0 starts the new replica (on a new GPU node) before an old
    one goes, so the pool never serves with fewer replicas than it has; it needs the GPU pool's limit
    to hold one replica more than the pool's maximum. Where it does not, `max_surge` 0 with
    `max_unavailable` 1 replaces one replica at a time on the GPUs the pool has. Either way the
    replicas change one after another, each a start-up: `timeout_s` is how long Pulumi waits for
    the whole rollout (a create still starts every replica at once, within one start-up's budget).
    """

    max_surge: int
    max_unavailable: int
    timeout_s: int


def strategy(rolling_update: RollingUpdate | None) -> dict[str, Any]:
    if rolling_update is None:
        # Replace, never mix: a benchmark must not hit old and new configurations at once, and a
        # surge pod would need a second GPU node.
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": rolling_update.max_surge,
                                                       "maxUnavailable": rolling_update.max_unavailable}}


def disruption_budget(spec: ServeSpec, *, namespace: str) -> dict[str, Any]:
    """An autoscaled server's PodDisruptionBudget: a node drain or a consolidation evicts one replica at
    a time, and waits for its replacement to be ready before the next."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": spec.name, "namespace": namespace, "labels": server_labels(spec)},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(spec)}}}


def replace_api_key(spec: ServeSpec, secret: str | None) -> ServeSpec:
    """The spec with its API key Secret set (or cleared)."""
    return dataclasses.replace(spec, api_key_secret=secret)


def selector_labels(spec: ServeSpec) -> dict[str, str]:
    # Immutable on a Deployment: only what identifies the server, never its settings.
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": spec.name}


def server_labels(spec: ServeSpec) -> dict[str, str]:
    return {
        **selector_labels(spec),
        **PART_OF,
        "app.kubernetes.io/component": "server",
        **spec.labels,
    }


def api_key_env(secret: str | None, variable: str) -> list[dict[str, Any]]:
    """`variable` read from the `api-key` entry of `secret` (nothing without a secret).

    vLLM reads VLLM_API_KEY like `--api-key` and `vllm bench serve` sends OPENAI_API_KEY as a
    bearer token; an env var keeps the key out of the process's command line, which `ps` shows
    and the bench records.
    """
    if not secret:
        return []
    return [{"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": API_KEY_ENTRY}}}]


def _probe(probe) -> dict[str, Any]:
    return {
        "httpGet": {"path": probe.path, "port": "http"},
        "initialDelaySeconds": probe.initial_delay_s,
        "periodSeconds": probe.period_s,
        "timeoutSeconds": probe.timeout_s,
        "failureThreshold": probe.failure_threshold,
    }


def deployment_manifest(
    spec: ServeSpec,
    *,
    namespace: str,
    service_account: str,
    do_not_disrupt: bool = False,
    rolling_update: RollingUpdate | None = None,
    bench_round: int = 1,
) -> dict[str, Any]:
    """The Deployment as applied (Recreate unless a rolling update is given: an autoscaled server). A bench
    round past the first is written into the pod template, so raising it replaces the pod: a fresh server
    (a new process, likely a new node) for the round's sweep. Round 1 adds nothing."""
    pod_annotations = {DO_NOT_DISRUPT: "true"} if do_not_disrupt else {}
    if bench_round > 1:
        pod_annotations[BENCH_ROUND] = str(bench_round)
    cache = spec.compile_cache
    if cache is not None:
        pod_annotations.update(compile_cache.annotations(cache))
    container = {
        "name": "vllm",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(spec.command),
        "args": list(spec.args),
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": [{"name": k, "value": v} for k, v in spec.env.items()] + api_key_env(spec.api_key_secret, "VLLM_API_KEY"),
        "resources": {"requests": dict(spec.requests), "limits": dict(spec.limits)},
        "volumeMounts": [
            {"name": CACHE_VOLUME, "mountPath": spec.cache_mount_path},
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
        ],
        "startupProbe": _probe(spec.startup_probe),
        "readinessProbe": _probe(spec.readiness_probe),
        "livenessProbe": _probe(spec.liveness_probe),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_S}}},
    }
    pod_spec = harden({
        "serviceAccountName": service_account,
        # A Service named like VLLM would inject VLLM_PORT=tcp://..., which vLLM reads as its own
        # setting and fails on; no service links, no such variables.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": spec.termination_grace_s,
        "nodeSelector": {POOL_LABEL: spec.pool},
        "tolerations": [{"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
                         "effect": GPU_TAINT["effect"]}],
        # With a compile cache in S3: its pull before vLLM starts, its push sidecar beside it.
        **({"initContainers": compile_cache.init_containers(
            cache, image=spec.image, cache_volume=CACHE_VOLUME, cache_mount=spec.cache_mount_path,
            port=spec.port)} if cache is not None else {}),
        "containers": [container],
        "volumes": [
            # Compile and asset caches on the node's ephemeral disk (the instance-store RAID0 where
            # the pool has one): a container restart in the pod (engine crash, liveness kill, OOM)
            # keeps them and skips most of torch.compile (the PoC measured 73 s cold, 8.5 s from a
            # cache); a new pod restores them from S3 (compile-cache-pull). Not a hostPath: that is
            # refused by the namespace's `restricted` admission, and a node directory shared by
            # every pod would let one pod plant compiled kernels that the next server executes.
            {"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": f"{spec.cache_size_gib}Gi"}},
            # NCCL and vLLM's worker queues use shared memory; the container default is 64 MiB.
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_size_gib}Gi"}},
            *(compile_cache.volumes(spec.name, cache) if cache is not None else []),
        ],
    # Python's bytecode on the cache volume: the image ships none (vLLM's Dockerfiles install without
    # compiling it) and the root filesystem is read-only, so without a place to write it each of vLLM's
    # processes (API server, engine, worker) compiled torch's and vLLM's sources again at every start.
    # With it the first process compiles and the others, and any restart in the pod, read
    # (docs/startup.md: a CPU server here took 80 s to /health, 47 s, then 31 s).
    }, cache_dir=spec.cache_mount_path, bytecode_dir=f"{spec.cache_mount_path}/{compile_cache.BYTECODE_FOLDER}")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": spec.name,
            "namespace": namespace,
            "labels": server_labels(spec),
            # Pulumi waits for availability through a cold start (node, pull, load, compile).
            "annotations": {PULUMI_TIMEOUT: str(spec.deploy_timeout_s)},
        },
        "spec": {
            "replicas": spec.replicas,
            "strategy": strategy(rolling_update),
            "progressDeadlineSeconds": spec.deploy_timeout_s,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(spec)},
            "template": {
                "metadata": {"labels": server_labels(spec), "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }


def service_manifest(spec: ServeSpec, *, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        # Not awaited: pulumi-kubernetes would wait 10 minutes for ready endpoints, less than a cold start
        # (the Deployment's own wait covers readiness, and nothing waits on the Service).
        "metadata": {"name": spec.name, "namespace": namespace, "labels": server_labels(spec),
                     "annotations": {"pulumi.com/skipAwait": "true"}},
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(spec),
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


@dataclass(frozen=True)
class VllmServerArgs:
    spec: ServeSpec
    namespace: str
    # Either an identity to create (see server_identity_args) or an existing service account whose
    # Pod Identity association is in depends_on.
    identity: WorkloadIdentityArgs | None = None
    service_account_name: str | None = None
    # The pool's NodePool(s) and the namespace; the server waits for them.
    depends_on: Sequence[pulumi.Resource] = ()
    # Keep Karpenter from consolidating or expiring the node under this server.
    do_not_disrupt: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    # Scaled by the GPU release (components/release_job.py), not by Pulumi: the Deployment is declared
    # without `replicas` (1 at creation), so no later `up` scales a released server back up.
    released_by_job: bool = False
    # A ScaledObject owns the replica count (components/autoscaling.py): `pulumi up` leaves it alone.
    autoscaled: bool = False
    # How a new pod template reaches an autoscaled server's replicas (None: Recreate, for a benchmark target
    # or a fixed server); with it the server gets a PodDisruptionBudget too.
    rolling_update: RollingUpdate | None = None
    # bench.round of a benchmark target (1 otherwise): past 1, in the pod template (deployment_manifest)
    bench_round: int = 1

    def __post_init__(self) -> None:
        if (self.identity is None) == (self.service_account_name is None):
            raise ValueError(f"server {self.spec.name}: give either identity or service_account_name")


class VllmServer(pulumi.ComponentResource):
    """One vLLM server on one GPU pool."""

    spec: ServeSpec
    identity: WorkloadIdentity | None
    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    url: str
    notes: tuple[str, ...]

    def __init__(self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:serving:VllmServer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.spec = spec = args.spec
        self.notes = spec.notes
        for note in spec.notes:  # shown by `pulumi preview` and `up` beside this server
            pulumi.log.info(note, resource=self)

        waits: list[pulumi.Resource] = list(args.depends_on)
        if args.identity is not None:
            self.identity = WorkloadIdentity(f"{name}-identity", args.identity, opts=child)
            service_account = self.identity.service_account_name
            waits += [self.identity.association, self.identity.service_account]
        else:
            self.identity = None
            service_account = args.service_account_name

        self.cache_code: list[k8s.core.v1.ConfigMap] = []
        if spec.compile_cache is not None:
            # The pull and push steps' code, immutable: new code gets new names and a new rollout.
            labels = {"app.kubernetes.io/name": "vllm-compile-cache", "app.kubernetes.io/instance": spec.name,
                      **PART_OF}
            for suffix, config_map, files in zip(
                    ("code", "bench"), compile_cache.config_map_names(spec.name, spec.compile_cache),
                    (spec.compile_cache.code, spec.compile_cache.helpers)):
                self.cache_code.append(k8s.core.v1.ConfigMap(
                    f"{name}-cache-{suffix}",
                    metadata={"name": config_map, "namespace": args.namespace, "labels": labels},
                    data=code_volume.data(files),
                    immutable=True,
                    opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
                ))
            waits += self.cache_code

        rolling = args.rolling_update
        manifest = deployment_manifest(spec, namespace=args.namespace, service_account=service_account,
                                       do_not_disrupt=args.do_not_disrupt, rolling_update=rolling,
                                       bench_round=args.bench_round)
        manifest["metadata"]["labels"].update(args.labels)
        if args.released_by_job:
            del manifest["spec"]["replicas"]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child.merge(pulumi.ResourceOptions(
                depends_on=waits, ignore_changes=["spec.replicas"] if args.autoscaled else None,
                # a create starts every replica at once; a rollout starts them one after another
                custom_timeouts=pulumi.CustomTimeouts(create=f"{spec.deploy_timeout_s}s",
                                                      update=f"{rolling.timeout_s}s") if rolling else None)),
        )
        self.disruption_budget = None
        if rolling is not None:
            budget = disruption_budget(spec, namespace=args.namespace)
            self.disruption_budget = k8s.policy.v1.PodDisruptionBudget(
                f"{name}-disruption-budget", metadata=budget["metadata"], spec=budget["spec"],
                opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))))
        service = service_manifest(spec, namespace=args.namespace)
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=service["metadata"],
            spec=service["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        self.url = f"http://{spec.name}.{args.namespace}.svc.cluster.local:{spec.port}"
        self.register_outputs({
            "url": self.url,
            "servedModelName": spec.served_model_name,
            "deployment": spec.name,
            **({"compileCache": spec.compile_cache.uri} if spec.compile_cache is not None else {}),
        })
