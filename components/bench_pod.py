"""What every Job that runs the bench package shares: its code from an immutable ConfigMap, the
environment `python -m bench` expects, a results folder it uploads from, and (for the Jobs that
work with a server) a place on that server's node.

The bench Job, the start-up timeline Job, the streamer Job and the mixed-traffic check differ in
command and resources only; these pieces are theirs in common.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.network_policy import S3_RANGES_CONFIG_MAP

# Where the bench package is mounted (as $CODE_DIR/bench) and where results are written before upload.
CODE_DIR = "/opt/vllm-poc"
RESULTS_DIR = "/results"


def code_config_map(resource_name: str, name: str, namespace: str, labels: dict[str, str],
                    code: dict[str, str], opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """The bench package as an immutable ConfigMap (`name` is cut to Kubernetes' 63 characters)."""
    return k8s.core.v1.ConfigMap(
        resource_name,
        metadata={"name": name[:63], "namespace": namespace, "labels": labels},
        data=dict(sorted(code.items())),
        immutable=True,
        opts=opts,
    )


def env(region: str, results_uri: Any) -> list[dict[str, Any]]:
    """PYTHONPATH to the package, unbuffered logs, the region, where results go in S3, and the S3
    ranges the namespace's NetworkPolicy allows (read when the pod starts; see bench/s3reach.py)."""
    return [
        {"name": "PYTHONPATH", "value": CODE_DIR},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "AWS_REGION", "value": region},
        {"name": "AWS_DEFAULT_REGION", "value": region},
        {"name": "VLLM_POC_RESULTS_URI", "value": results_uri},
        {"name": "VLLM_POC_S3_CIDRS", "valueFrom": {"configMapKeyRef": {
            "name": S3_RANGES_CONFIG_MAP, "key": "cidrs", "optional": True}}},
    ]


def volume_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "code", "mountPath": f"{CODE_DIR}/bench", "readOnly": True},
        {"name": "results", "mountPath": RESULTS_DIR},
    ]


def volumes(code: k8s.core.v1.ConfigMap) -> list[dict[str, Any]]:
    return [
        {"name": "code", "configMap": {"name": code.metadata["name"]}},
        {"name": "results", "emptyDir": {}},
    ]


def on_server_node(server_pod_labels: dict[str, str]) -> dict[str, Any]:
    """Pod spec keys that place a pod on a server's node, where the server's image already is: pod
    affinity to the server's pods and the GPU taint tolerated (no GPU is requested)."""
    return {
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": dict(server_pod_labels)},
            "topologyKey": "kubernetes.io/hostname",
        }]}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
