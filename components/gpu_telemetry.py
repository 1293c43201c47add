"""GPU telemetry: NVIDIA's DCGM exporter on every GPU node, read by the bench on its own node.

The exporter runs as a DaemonSet on the GPU pools only (the nodes carrying `nvidia.com/gpu.present`,
which only the GPU NodePools' template sets), tolerating the GPU taint. It listens on the node's own
address (host network, port 9400), so the bench Job, which runs on the benchmarked server's node,
reads `http://$(HOST_IP):9400/metrics` without a Service, a Prometheus or any cross-node traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.gpu_capacity import GPU_PRESENT_LABEL, GPU_TAINT

REPOSITORY = "https://nvidia.github.io/dcgm-exporter/helm-charts"
NAMESPACE = "kube-system"
PORT = 9400


def metrics_url(host: str = "$(HOST_IP)") -> str:
    """The exporter on a node, as the bench Job reaches it (Kubernetes expands $(HOST_IP))."""
    return f"http://{host}:{PORT}/metrics"


@dataclass(frozen=True)
class DcgmExporterArgs:
    chart_version: str
    depends_on: list[pulumi.Resource] = field(default_factory=list)


def chart_values() -> dict:
    return {
        "hostNetwork": True,
        "service": {"enable": True, "port": PORT, "address": f":{PORT}", "internalTrafficPolicy": "Local"},
        # No Prometheus operator in the cluster: a ServiceMonitor would fail to apply.
        "serviceMonitor": {"enabled": False},
        "nodeSelector": {GPU_PRESENT_LABEL: "true"},
        "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}],
        "kubernetes": {"enablePodLabels": False},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    }


class DcgmExporter(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: DcgmExporterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:gpu:DcgmExporter", name, None, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="dcgm-exporter",
            chart="dcgm-exporter",
            version=args.chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=NAMESPACE,
            values=chart_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"release": self.release.name})
