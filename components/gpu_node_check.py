"""A GPU node check: before a pool's servers are created, one short pod must land on a node of that pool.

A server whose GPU node never comes (Spot or on-demand capacity short, a quota, a NodeClass that
resolves no AMI) would otherwise hold `pulumi up` for the Deployment's 45-minute cold-start budget. This
Job asks Karpenter for a node of the pool with a pod that needs no GPU and exits at once; Pulumi waits
for it (Job await) and fails the update when its deadline passes, naming the pool. The node it brings
up stays for the server, which is created right after (an empty node is only removed after the pool's
consolidateAfter).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.gpu_capacity import GPU_TAINT, POOL_LABEL
from components.labels import PART_OF
from components.pod_security import harden

# A node of a single-type pool normally joins in 1-3 minutes; Karpenter retries another offering or the
# on-demand fallback pool after an insufficient-capacity error within a few more.
DEADLINE_S = 900


@dataclass(frozen=True)
class GpuNodeCheckArgs:
    pool: str  # value of the vllm-poc/pool node label
    instance_type: str
    namespace: str
    image: str  # any small image with python3 (the weight-sync image)
    deadline_s: int = DEADLINE_S
    depends_on: Sequence[pulumi.Resource] = ()
    labels: dict[str, str] = field(default_factory=dict)


def job_name(args: GpuNodeCheckArgs) -> str:
    digest = hashlib.sha256(json.dumps([args.pool, args.instance_type, args.image, args.deadline_s]).encode()).hexdigest()
    return f"gpu-node-{args.pool}"[:52].rstrip("-") + f"-{digest[:10]}"


def job_manifest(args: GpuNodeCheckArgs) -> dict:
    name = job_name(args)
    labels = {"app.kubernetes.io/name": "vllm-gpu-node-check", "app.kubernetes.io/instance": args.pool, **PART_OF,
              **args.labels}
    message = (f"no {args.instance_type} node of GPU pool {args.pool} within {args.deadline_s // 60} min: see "
               f"`kubectl get nodeclaims -l karpenter.sh/nodepool={args.pool}` and `kubectl describe nodepool {args.pool}` "
               "(capacity, quota or AMI)")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": args.namespace,
            "labels": labels,
            "annotations": {
                "pulumi.com/timeoutSeconds": str(args.deadline_s + 120),
                "pulumi.com/replaceUnready": "true",
                "vllm-poc/on-failure": message,
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": args.deadline_s,
            "template": {
                "metadata": {"labels": labels},
                "spec": harden({
                    "restartPolicy": "Never",
                    "nodeSelector": {POOL_LABEL: args.pool},
                    "tolerations": [{"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
                                     "effect": GPU_TAINT["effect"]}],
                    "containers": [{
                        "name": "check",
                        "image": args.image,
                        "command": ["python3", "-c", "import os; print('GPU node', os.environ['NODE_NAME'], 'is up')"],
                        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
                    }],
                }),
            },
        },
    }


class GpuNodeCheck(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: GpuNodeCheckArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:gpu:GpuNodeCheck", name, None, opts)
        manifest = job_manifest(args)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"jobName": manifest["metadata"]["name"]})
