"""What every Job that runs the bench package shares: its code from an immutable ConfigMap, the
environment `python -m bench` expects, a results folder it uploads from, and (for the Jobs that
work with a server) a place on that server's node.

The bench Job, the start-up timeline Job, the streamer Job and the mixed-traffic check differ in command, resources and
placement only; these pieces are theirs in common. The code volume lays the package out as its
tree (components/code_volume.py). The bench Jobs also read the prompt set (the Korean marketplace
prompts): it is one ConfigMap per stack, named after its content, that every bench Job projects
into the package's data/ folder, where bench.common.workloads reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import code_volume
from components.network_policy import S3_RANGES_CONFIG_MAP

# Where the bench package is mounted (as $CODE_DIR/bench) and where results are written before upload.
CODE_DIR = "/opt/vllm-poc"
RESULTS_DIR = "/results"
# The package folder the prompt set is projected into (bench/data/, as in the repository).
PROMPTS_FOLDER = "data/"


def code_config_map(resource_name: str, name: str, namespace: str, labels: dict[str, str],
                    code: dict[str, str], opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """The bench package ({path in the package: source}) as an immutable ConfigMap (`name` is cut to
    Kubernetes' 63 characters), keyed as components/code_volume.py says."""
    return k8s.core.v1.ConfigMap(
        resource_name,
        metadata={"name": name[:63], "namespace": namespace, "labels": labels},
        data=code_volume.data(code),
        immutable=True,
        opts=opts,
    )


def prompt_config_map(resource_name: str, namespace: str, labels: dict[str, str], files: dict[str, str],
                      opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """The prompt set as one immutable ConfigMap, `bench-prompts-<hash of its files>`: a changed
    prompt set is a new ConfigMap (and, through the bench hash, new Jobs), never an edit in place."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(files[name].encode()).hexdigest()}\0".encode())
    return k8s.core.v1.ConfigMap(
        resource_name,
        metadata={"name": f"bench-prompts-{digest.hexdigest()[:10]}", "namespace": namespace, "labels": labels},
        data=dict(sorted(files.items())),
        immutable=True,
        opts=opts,
    )


def env(region: str, results_uri: Any) -> list[dict[str, Any]]:
    """PYTHONPATH to the package, unbuffered logs, the region, where results go in S3, and the S3
    ranges the namespace's NetworkPolicy allows (read when the pod starts; see bench/run/s3reach.py)."""
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


def volumes(code: k8s.core.v1.ConfigMap, files: Iterable[str], prompts: k8s.core.v1.ConfigMap | None = None,
            prompt_files: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The code folder, the package's `files` at their paths (with the prompt set projected into its
    data/ folder, when given), and results."""
    code_source = {"name": code.metadata["name"], "items": code_volume.items(files)}
    if prompts is None:
        volume = {"name": "code", "configMap": code_source}
    else:
        volume = {"name": "code", "projected": {"sources": [
            {"configMap": code_source},
            {"configMap": {"name": prompts.metadata["name"],
                           "items": code_volume.items(prompt_files, PROMPTS_FOLDER)}},
        ]}}
    return [volume, {"name": "results", "emptyDir": {}}]


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
