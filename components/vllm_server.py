"""A vLLM server: ServiceAccount (Pod Identity), Deployment and Service, from the serve spec.

Every flag, env var, request and probe budget comes from `stacks.serving.build_serve_spec`; this
file only shapes them into Kubernetes objects. `deployment_manifest` and `service_manifest` are
plain functions so the objects can be checked (and schema-validated) without Pulumi.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.gpu_capacity import GPU_TAINT, POOL_LABEL
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs, server_statements
from stacks import catalog
from stacks.serving import ModelUris, ServerSettings, ServeSpec, build_serve_spec, server_model_prefixes

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
PULUMI_TIMEOUT = "pulumi.com/timeoutSeconds"
CACHE_VOLUME = "vllm-cache"
SHM_VOLUME = "dshm"
# Endpoints keep sending to a terminating pod until kube-proxy catches up; the pause lets in-flight
# connections land on a pod that is still serving.
PRESTOP_SLEEP_S = 10


def server_labels(server: ServerSettings) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": server.name,
        "app.kubernetes.io/part-of": "vllm-poc",
        "app.kubernetes.io/component": "server",
        "vllm-poc/model": server.model,
        "vllm-poc/traffic-class": server.traffic_class,
    }


def selector_labels(server: ServerSettings) -> dict[str, str]:
    # Immutable on a Deployment: only what identifies the server, never its settings.
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": server.name}


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
    server: ServerSettings,
    *,
    namespace: str,
    service_account: str,
    do_not_disrupt: bool = False,
    args: Any = None,
) -> dict[str, Any]:
    """The Deployment as applied. `args` may replace spec.args (e.g. with an Output)."""
    pod_annotations = {DO_NOT_DISRUPT: "true"} if do_not_disrupt else {}
    container = {
        "name": "vllm",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(spec.command),
        "args": list(spec.args) if args is None else args,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": [{"name": k, "value": v} for k, v in spec.env.items()],
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
    pod_spec = {
        "serviceAccountName": service_account,
        # A Service named like VLLM would inject VLLM_PORT=tcp://..., which vLLM reads as its own
        # setting and fails on; no service links, no such variables.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": spec.termination_grace_s,
        "nodeSelector": {POOL_LABEL: server.pool},
        "tolerations": [{"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
                         "effect": GPU_TAINT["effect"]}],
        "containers": [container],
        "volumes": [
            # The node's compile/asset cache outlives the pod: a restart on the same node skips
            # torch.compile (73 s -> 8.5 s, PoC 4.1).
            {"name": CACHE_VOLUME, "hostPath": {"path": spec.cache_host_path, "type": "DirectoryOrCreate"}},
            # NCCL and vLLM's worker queues use shared memory; the container default is 64 MiB.
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_size_gib}Gi"}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": server.name,
            "namespace": namespace,
            "labels": server_labels(server),
            # Pulumi waits for availability through a cold start (node, pull, load, compile).
            "annotations": {PULUMI_TIMEOUT: str(spec.deploy_timeout_s)},
        },
        "spec": {
            "replicas": server.replicas,
            # Replace, never mix: a benchmark must not hit old and new configurations at once, and
            # a surge pod would need a second GPU node.
            "strategy": {"type": "Recreate"},
            "progressDeadlineSeconds": spec.deploy_timeout_s,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(server)},
            "template": {
                "metadata": {"labels": server_labels(server), "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }


def service_manifest(spec: ServeSpec, server: ServerSettings, *, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": server.name, "namespace": namespace, "labels": server_labels(server)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(server),
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def server_identity_args(
    server: ServerSettings,
    *,
    cluster_name: pulumi.Input[str],
    cluster_arn: pulumi.Input[str],
    account_id: pulumi.Input[str],
    namespace: str,
    weights_bucket_arn: pulumi.Input[str],
    kms_key_arn: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
    tags: dict[str, str] | None = None,
) -> WorkloadIdentityArgs:
    """The server's own role: read its model prefixes (target and draft) and the caches."""
    return WorkloadIdentityArgs(
        cluster_name=cluster_name,
        cluster_arn=cluster_arn,
        account_id=account_id,
        namespace=namespace,
        service_account=server.name,
        statements=server_statements(weights_bucket_arn, server_model_prefixes(server), kms_key_arn),
        labels=selector_labels(server),
        tags=dict(tags or {}),
        depends_on=list(depends_on),
    )


@dataclass(frozen=True)
class VllmServerArgs:
    server: ServerSettings
    instance_type: str  # the pool's instance type (stacks.catalog)
    raid0: bool  # whether the pool stripes instance-store NVMe under /mnt/k8s-disks/0
    weights_bucket: pulumi.Input[str]
    region: str
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

    def __post_init__(self) -> None:
        if (self.identity is None) == (self.service_account_name is None):
            raise ValueError(f"server {self.server.name}: give either identity or service_account_name")


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
        server = args.server
        instance = catalog.gpu_instance(args.instance_type)

        def spec_for(bucket: str) -> ServeSpec:
            return build_serve_spec(server, instance, ModelUris.for_bucket(bucket, server),
                                    region=args.region, raid0=args.raid0)

        # Only the model URIs depend on the bucket name; everything else is known now.
        self.spec = spec_for("<weights-bucket>")
        self.notes = self.spec.notes
        serve_args = pulumi.Output.from_input(args.weights_bucket).apply(lambda b: list(spec_for(b).args))

        waits: list[pulumi.Resource] = list(args.depends_on)
        if args.identity is not None:
            self.identity = WorkloadIdentity(f"{name}-identity", args.identity, opts=child)
            service_account = self.identity.service_account_name
            waits += [self.identity.association, self.identity.service_account]
        else:
            self.identity = None
            service_account = args.service_account_name

        manifest = deployment_manifest(self.spec, server, namespace=args.namespace,
                                       service_account=service_account,
                                       do_not_disrupt=args.do_not_disrupt, args=serve_args)
        manifest["metadata"]["labels"].update(args.labels)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=waits)),
        )
        service = service_manifest(self.spec, server, namespace=args.namespace)
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=service["metadata"],
            spec=service["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        self.url = f"http://{server.name}.{args.namespace}.svc.cluster.local:{self.spec.port}"
        self.register_outputs({
            "url": self.url,
            "servedModelName": self.spec.served_model_name,
            "deployment": server.name,
        })
