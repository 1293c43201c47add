"""Autoscaling: KEDA (its Helm chart) and one ScaledObject per vLLM server Deployment.

Each ScaledObject scales its Deployment on vLLM's own metrics through the in-cluster Prometheus
(components/monitoring.py): running requests and waiting requests summed over the replicas
(AverageValue: the HPA divides by the replica count) and the KV-cache usage averaged over them
(Value), with the targets `bench plan` derived from the measured capacity (stacks/settings/fleet.py
says what each is). Never GPU utilisation. Scale-up is immediate; scale-down waits a stabilisation
window and removes one replica per period, both sized by the measured start-up time. A pool with
minReplicas 0 (batch only) wakes on its wake query, since vLLM's metrics vanish with the last replica.

Releasing a server (scaling it to 0 by hand or by a Job) must pause its ScaledObject first, or KEDA
scales it straight back: annotate the ScaledObject with `autoscaling.keda.sh/paused-replicas: "0"`
(PAUSED_REPLICAS), which holds the Deployment at 0 until the annotation is removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import system_placement
from components.labels import PART_OF

REPOSITORY = "https://kedacore.github.io/charts"
API_VERSION = "keda.sh/v1alpha1"
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"


@dataclass(frozen=True)
class TriggerSpec:
    name: str
    query: str
    threshold: float
    metric_type: str  # AverageValue | Value


@dataclass(frozen=True)
class ScaledServer:
    deployment: str
    min_replicas: int
    max_replicas: int
    triggers: list[TriggerSpec]
    scale_down_window_s: int
    scale_down_period_s: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AutoscalingArgs:
    chart_version: str
    namespace: str  # KEDA's own
    workload_namespace: str  # the servers'
    prometheus_url: str
    polling_interval_s: int
    servers: list[ScaledServer]
    depends_on: list[pulumi.Resource] = field(default_factory=list)


def _number(value: float) -> str:
    return f"{value:g}"


def scaled_object(server: ScaledServer, *, namespace: str, prometheus_url: str, polling_interval_s: int) -> dict:
    """The ScaledObject manifest of one server (keda.sh/v1alpha1)."""
    to_zero = server.min_replicas == 0
    triggers = [{
        "type": "prometheus",
        "name": t.name,
        "metricType": t.metric_type,
        "metadata": {
            "serverAddress": prometheus_url,
            "query": t.query,
            "threshold": _number(t.threshold),
            "activationThreshold": "0",
            # A pool at zero has no vLLM series: that is no load, not an error. Above zero, a
            # missing series is an error KEDA reports (the HPA then holds the count).
            "ignoreNullValues": "true" if to_zero else "false",
        },
    } for t in server.triggers]
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": server.deployment},
        "pollingInterval": polling_interval_s,
        "minReplicaCount": server.min_replicas,
        "maxReplicaCount": server.max_replicas,
        "advanced": {
            "restoreToOriginalReplicaCount": False,
            "horizontalPodAutoscalerConfig": {
                "name": f"keda-{server.deployment}",
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 60},
                                             {"type": "Pods", "value": 2, "periodSeconds": 60}]},
                    "scaleDown": {"stabilizationWindowSeconds": server.scale_down_window_s, "selectPolicy": "Min",
                                  "policies": [{"type": "Pods", "value": 1,
                                                "periodSeconds": server.scale_down_period_s}]},
                },
            },
        },
        "triggers": triggers,
    }
    if to_zero:
        # The last replica goes only after the window a scale-down waits anyway.
        spec["cooldownPeriod"] = server.scale_down_window_s
    return {
        "apiVersion": API_VERSION,
        "kind": "ScaledObject",
        "metadata": {"name": server.deployment, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "vllm-autoscaling",
                                "app.kubernetes.io/instance": server.deployment, **PART_OF, **server.labels}},
        "spec": spec,
    }


def chart_values() -> dict:
    # The operator, the metrics API server and the admission webhooks all read the top-level
    # nodeSelector and tolerations (each component's own would take precedence); the chart's default
    # tolerates no taint, and every node of this cluster has one.
    return {
        **system_placement(),
        "resources": {
            "operator": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "metricServer": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        },
    }


class Autoscaling(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    scaled_objects: dict[str, k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: AutoscalingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:fleet:Autoscaling", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.release = k8s.helm.v3.Release(
            f"{name}-keda",
            name="keda",
            chart="keda",
            version=args.chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=args.namespace,
            values=chart_values(),
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        self.scaled_objects = {}
        for server in args.servers:
            manifest = scaled_object(server, namespace=args.workload_namespace, prometheus_url=args.prometheus_url,
                                     polling_interval_s=args.polling_interval_s)
            self.scaled_objects[server.deployment] = k8s.apiextensions.CustomResource(
                f"{name}-{server.deployment}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=child.merge(pulumi.ResourceOptions(depends_on=[self.release, *args.depends_on])),
            )
        self.register_outputs({"scaledObjects": sorted(self.scaled_objects)})
