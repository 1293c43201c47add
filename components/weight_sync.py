"""The weight-sync Job: one model's weights into its S3 prefix, on a system node, before any server loads it.

Mode `hub` runs `python -m weights sync` (copy the pinned Hub revision, file by file, skipping what is
already there); mode `check` runs `python -m weights check` (for `stage-weights` from a laptop: fail in
seconds, printing the staging command, when the model is missing). `pulumi up` waits for the Job
(Pulumi's Job await: Complete, or fail as soon as the Job fails), and servers depend on it, so a
server never starts on an empty prefix.

Image and code: the pinned plain Python image (tens of MB, pulled in seconds; the 25 GB vLLM image
would take minutes and half a system node's disk), the `weights/` package from an immutable
ConfigMap (as the bench Job takes its code), and its two dependencies pip-installed at start from
the pins in pyproject.toml (the `weight-sync` extra). Nothing is built or pushed; the system nodes
already reach the internet through the NAT gateway, which the Hub download needs anyway.

The Job's name carries a hash of model, revision, mode, image, requirements and code: a change runs
a new sync, an unchanged `pulumi up` leaves the finished Job alone. A failed Job is replaced on the
next `pulumi up` (replaceUnready).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import SYSTEM_LABEL, SYSTEM_TAINT_KEY
from components.labels import PART_OF
from components.network_policy import INTERNET_EGRESS_LABEL
from components.pod_security import harden
from components.weight_store import model_prefix
from components.workload_identity import _kms, _objects

CODE_DIR = "/opt/vllm-poc"
DEPS_DIR = "/opt/deps"
SCRATCH_DIR = "/scratch"
TOKEN_KEY = "token"
# `python -m weights` exit code for problems a retry cannot fix (see weights/__main__.py)
FINAL_EXIT_CODE = 2
# Credentials first (standard library only, bounded): a pod created before its Pod Identity association
# took effect exits before the pip install. Passing network errors are retried inside `python -m
# weights`, so the install runs once per pod.
CREDENTIALS_WAIT_S = 60
_SCRIPT = (
    f"python -m weights.credentials --wait-s {CREDENTIALS_WAIT_S}\n"
    "python -m pip install --quiet --no-cache-dir --disable-pip-version-check --root-user-action=ignore "
    f"--only-binary=:all: --target {DEPS_DIR} -r {CODE_DIR}/weights/requirements.txt\n"
    'exec python -m weights "$@"\n'
)


@dataclass(frozen=True)
class WeightSyncArgs:
    model_id: str  # Hugging Face repo id
    revision: str
    bucket: str  # weights bucket name; the model goes to s3://<bucket>/models/<id>/
    mode: Literal["hub", "check"]
    namespace: str
    image: str
    service_account: str
    code: dict[str, str]  # weights package: file name -> source
    requirements: Sequence[str]  # pinned pip requirements
    region: str
    token_secret: str | None = None  # Secret holding the Hugging Face token under key `token`
    scratch_gib: int = 20
    timeout_s: int = 7200
    stage_hint: str = ""  # check mode: the command that stages the model
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = ()


def destination(bucket: str, model_id: str) -> str:
    return f"s3://{bucket}/{model_prefix(model_id).rstrip('/')}"


def config_hash(args: WeightSyncArgs) -> str:
    payload = {
        "model": args.model_id, "revision": args.revision, "bucket": args.bucket, "mode": args.mode,
        "image": args.image, "requirements": list(args.requirements), "scratch": args.scratch_gib,
        "code": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(args.code.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def job_name(model_id: str, digest: str) -> str:
    """`weights-<model slug>-<hash>`: one per model, unique in the namespace, at most 63 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", model_id.lower()).strip("-")[:44].rstrip("-")
    return f"weights-{slug}-{digest[:10]}"


def command_args(args: WeightSyncArgs) -> list[str]:
    dest = destination(args.bucket, args.model_id)
    if args.mode == "hub":
        return ["sync", "--model", args.model_id, "--revision", args.revision, "--dest", dest,
                "--scratch", SCRATCH_DIR, "--scratch-gib", str(args.scratch_gib), "--region", args.region]
    return ["check", "--dest", dest, "--region", args.region, "--stage-hint", args.stage_hint]


def job_manifest(args: WeightSyncArgs, name: str, code_config_map: str) -> dict:
    """The Job as applied (plain data, so tests can check it without Pulumi)."""
    env = [
        {"name": "PYTHONPATH", "value": f"{CODE_DIR}:{DEPS_DIR}"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "AWS_REGION", "value": args.region},
        {"name": "AWS_DEFAULT_REGION", "value": args.region},
        {"name": "HF_HOME", "value": f"{SCRATCH_DIR}/.hf-home"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
    ]
    if args.token_secret:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": args.token_secret, "key": TOKEN_KEY}}})
    labels = {"app.kubernetes.io/name": "vllm-weight-sync", "app.kubernetes.io/instance": name, **PART_OF,
              **args.labels}
    container = {
        "name": "sync",
        "image": args.image,
        "command": ["sh", "-ec", _SCRIPT, "weights"],
        "args": command_args(args),
        "env": env,
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": f"{args.scratch_gib + 2}Gi"},
            # A CPU limit: the sync shares the system nodes with Karpenter and CoreDNS, and is
            # bound by the network, not by its hashing.
            "limits": {"cpu": "2", "memory": "3Gi"},
        },
        "volumeMounts": [
            {"name": "code", "mountPath": f"{CODE_DIR}/weights", "readOnly": True},
            {"name": "deps", "mountPath": DEPS_DIR},
            {"name": "scratch", "mountPath": SCRATCH_DIR},
        ],
    }
    pod_spec = harden({
        "serviceAccountName": args.service_account,
        "restartPolicy": "Never",
        # The system nodes, never a GPU node: the sync needs no GPU, and GPU nodes' disks are sized for images.
        "nodeSelector": {SYSTEM_LABEL: "system"},
        "tolerations": [{"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [
            {"name": "code", "configMap": {"name": code_config_map}},
            {"name": "deps", "emptyDir": {"sizeLimit": "1Gi"}},
            # One file at a time lives here; the sync refuses a file larger than this up front.
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{args.scratch_gib}Gi"}},
        ],
    }, cache_dir=f"{SCRATCH_DIR}/.cache")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": args.namespace,
            "labels": labels,
            "annotations": {
                # Pulumi waits for the sync (plus time to schedule and install) and fails with it.
                "pulumi.com/timeoutSeconds": str(args.timeout_s + 600),
                "pulumi.com/replaceUnready": "true",
            },
        },
        "spec": {
            # Network errors are retried inside the pod (python -m weights --attempts); a new pod is for
            # a pod that got no credentials, or one that died. Each resumes: finished files are skipped,
            # a half-sent file keeps its parts.
            "backoffLimit": 3 if args.mode == "hub" else 2,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                # A gated repo without access, a missing repo, revision or file, a missing shard, a model
                # not staged: retrying cannot help, and `pulumi up` should say so now.
                {"action": "FailJob", "onExitCodes": {"containerName": "sync", "operator": "In",
                                                       "values": [FINAL_EXIT_CODE]}},
            ]},
            "activeDeadlineSeconds": args.timeout_s,
            # The pod installs its requirements from PyPI and (mode hub) downloads from the Hub:
            # HTTPS to public addresses (components/network_policy.py).
            "template": {"metadata": {"labels": {**labels, INTERNET_EGRESS_LABEL[0]: INTERNET_EGRESS_LABEL[1]}},
                         "spec": pod_spec},
        },
    }


def weight_sync_statements(weights_bucket_arn: pulumi.Input[str], model_ids: Sequence[str],
                           kms_key_arn: str | None = None) -> list[dict]:
    """Write the models' prefixes (objects and multipart uploads); list the bucket."""
    prefixes = [model_prefix(m) for m in model_ids]
    return [
        {
            "Sid": "WriteModels",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                       "s3:ListMultipartUploadParts"],
            "Resource": _objects(weights_bucket_arn, *(f"{p}*" for p in prefixes)),
        },
        {
            # HeadBucket (is the bucket there?) carries no prefix, so the listing is not prefix-scoped;
            # it shows object names only, and the bucket holds public checkpoints.
            "Sid": "ListWeights",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:ListBucketMultipartUploads"],
            "Resource": [weights_bucket_arn],
        },
        *_kms(kms_key_arn, ["kms:Decrypt", "kms:GenerateDataKey"]),
    ]


def token_secret(name: str, namespace: str, token: pulumi.Input[str], opts: pulumi.ResourceOptions) -> k8s.core.v1.Secret:
    """The Hugging Face token as a Kubernetes Secret (the value stays a Pulumi secret in state)."""
    return k8s.core.v1.Secret(
        name,
        metadata={"name": name, "namespace": namespace, "labels": dict(PART_OF)},
        type="Opaque",
        string_data={TOKEN_KEY: pulumi.Output.secret(token)},
        opts=opts,
    )


class WeightSync(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    code: k8s.core.v1.ConfigMap

    def __init__(self, name: str, args: WeightSyncArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:weights:WeightSync", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        digest = config_hash(args)
        self.job_name = job_name(args.model_id, digest)
        files = {**args.code, "requirements.txt": "".join(f"{r}\n" for r in args.requirements)}
        self.code = k8s.core.v1.ConfigMap(
            f"{name}-code",
            metadata={"name": self.job_name, "namespace": args.namespace,
                      "labels": {"app.kubernetes.io/name": "vllm-weight-sync", **PART_OF}},
            data=dict(sorted(files.items())),
            immutable=True,
            opts=child,
        )
        manifest = job_manifest(args, self.job_name, self.job_name)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.code, *args.depends_on])),
        )
        self.register_outputs({"jobName": self.job_name, "destination": destination(args.bucket, args.model_id)})
