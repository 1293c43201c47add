"""A one-off Job per GPU pool that measures the Run:ai streamer from S3 on that pool's instance type.

It runs `python3 -m bench streamer` in the vLLM image (which ships the streamer and boto3) with the
bench package mounted from an immutable ConfigMap, on a node of the pool (node selector, GPU
taint tolerated, no GPU requested: the weights go to host memory), and stores streamer.json under
the stack's results prefix. Its name carries a hash of what shapes the figures, so an unchanged
`pulumi up` leaves a finished Job alone and a changed grid runs again under a new prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod
from components.labels import PART_OF
from components.pod_security import harden

POOL_LABEL = "vllm-poc/pool"


@dataclass(frozen=True)
class StreamerJobArgs:
    pool: str
    instance_type: str
    namespace: str
    image: str
    service_account: str
    model_uri: str  # s3://<weights bucket>/models/<hf id>/
    results_uri: pulumi.Input[str]  # s3://<results bucket>/runs/<stack>/streamer/<pool>/<hash>/
    concurrencies: list[int]
    memory_limit_gib: list[int]
    repeats: int
    memory_request_gib: int
    region: str
    code: dict[str, str]
    config_hash: str
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    deadline_hours: int = 3


def job_name(pool: str, config_hash: str) -> str:
    return f"streamer-{pool}-{config_hash[:10]}"[:63]


def command(args: StreamerJobArgs) -> list[str]:
    return [
        "python3", "-m", "bench.startup.streamer", args.model_uri,
        "--concurrency", ",".join(map(str, args.concurrencies)),
        "--memory-limit-gib", ",".join(map(str, args.memory_limit_gib)),
        "--repeats", str(args.repeats),
        "--instance-type", args.instance_type,
        "--out", bench_pod.RESULTS_DIR,
    ]


class StreamerJob(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    code: k8s.core.v1.ConfigMap
    results_uri: pulumi.Output[str]

    def __init__(self, name: str, args: StreamerJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:StreamerJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/name": "vllm-streamer", "app.kubernetes.io/instance": args.pool,
                  "vllm-poc/config-hash": args.config_hash[:10], **PART_OF}
        self.code = bench_pod.code_config_map(
            f"{name}-code", f"streamer-code-{args.pool}-{args.config_hash[:10]}", args.namespace, labels,
            args.code, child)
        self.results_uri = pulumi.Output.from_input(args.results_uri)
        memory = f"{args.memory_request_gib}Gi"
        container = {
            "name": "streamer",
            "image": args.image,
            "command": command(args),
            "env": bench_pod.env(args.region, self.results_uri),
            # The streamer buffer lives in host memory: the request covers the largest grid point.
            "resources": {"requests": {"cpu": "2", "memory": memory, "ephemeral-storage": "2Gi"},
                          "limits": {"memory": memory}},
            "volumeMounts": bench_pod.volume_mounts(),
        }
        pod_spec = harden({
            "serviceAccountName": args.service_account,
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": bench_pod.volumes(self.code, args.code),
            # On the pool's instance type: the measurement is of that NIC.
            "nodeSelector": {POOL_LABEL: args.pool},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        })
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": job_name(args.pool, args.config_hash), "namespace": args.namespace,
                      "labels": labels, "annotations": {"pulumi.com/skipAwait": "true"}},
            spec={
                "backoffLimit": 1,
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    # bad arguments (2) do not get better on a retry
                    {"action": "FailJob", "onExitCodes": {"containerName": "streamer", "operator": "In",
                                                          "values": [2]}},
                ]},
                "activeDeadlineSeconds": args.deadline_hours * 3600,
                # No ttlSecondsAfterFinished: Pulumi manages the Job, and one that deleted itself would be
                # created again by the next `pulumi up --refresh` (a whole new run against the live server).
                "template": {
                    "metadata": {"labels": labels, "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                    "spec": pod_spec,
                },
            },
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.code, *args.depends_on])),
        )
        self.register_outputs({"jobName": self.job.metadata["name"], "resultsUri": self.results_uri})


def streamer_statements(weights_bucket_arn: pulumi.Input[str], model_prefixes: list[str],
                        results_bucket_arn: pulumi.Input[str], results_prefix: str,
                        kms_key_arn: str | None = None) -> list[dict]:
    """Read the streamed models' weights; write only under the streamer results prefix."""
    def objects(bucket: pulumi.Input[str], keys: list[str]) -> list:
        return [pulumi.Output.concat(bucket, "/", key) if not isinstance(bucket, str) else f"{bucket}/{key}"
                for key in keys]

    if not results_prefix.endswith("/") or "*" in results_prefix:
        raise ValueError(f"results prefix {results_prefix!r} must be a literal prefix ending in '/'")
    statements = [
        {"Sid": "ReadStreamedModels", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": objects(weights_bucket_arn, [f"{p}*" for p in model_prefixes])},
        {"Sid": "ListStreamedModels", "Effect": "Allow", "Action": ["s3:ListBucket"],
         "Resource": [weights_bucket_arn],
         "Condition": {"StringLike": {"s3:prefix": [v for p in model_prefixes for v in (f"{p}*", p.rstrip("/"))]}}},
        {"Sid": "WriteStreamerResults", "Effect": "Allow", "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
         "Resource": objects(results_bucket_arn, [f"{results_prefix}*"])},
    ]
    if kms_key_arn:
        statements.append({"Sid": "UseBucketKey", "Effect": "Allow",
                           "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": [kms_key_arn]})
    return statements
