"""S3 storage for model weights (with the compile-cache and assets prefixes) and bench results.

Both buckets get the same controls: every public-access switch on, bucket-owner-enforced ownership
(ACLs off), default encryption (SSE-S3, or SSE-KMS with a bucket key when a key ARN is given), a
bucket policy that refuses plain-HTTP requests, and a rule that aborts multipart uploads left
behind by an interrupted `stage-weights` after a week (resumable meanwhile).

Versioning stays off on both: weights are re-stageable copies of public checkpoints (a 31-62 GB
re-upload would otherwise keep every old version), and results live under a fresh run id each time.

Teardown: `destroy` (the PoC default) empties and deletes both buckets. `retain-weights` keeps the
weights bucket, and the controls on it, out of `pulumi destroy` (retain_on_delete) and refuses to
delete it while it holds objects (no force_destroy), so a later stack can import it instead of
re-staging 100+ GB. Pulumi's `protect` is not used: it makes the whole `pulumi destroy` fail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_MAX_BUCKET_NAME = 63
# Interrupted multipart uploads keep costing until aborted; a week leaves time to resume staging.
ABORT_MULTIPART_DAYS = 7
RESULTS_ROOT = "runs/"
COMPILE_CACHE_PREFIX = "compile-cache/"
ASSETS_PREFIX = "assets/"


def model_prefix(hf_id: str) -> str:
    """Weights bucket prefix of a model, with its trailing slash.

    The slash matters: `models/google/gemma-4-31B-it` is also a prefix of the assistant's
    `models/google/gemma-4-31B-it-assistant/`, so listings and IAM grants would leak across models.
    """
    return f"models/{hf_id}/"


def bucket_name(name_prefix: str, role: str, account_id: str, region: str) -> str:
    """`<prefix>-<role>-<account>-<region>`: stable, so a retained bucket can be imported again."""
    return f"{name_prefix}-{role}-{account_id}-{region}"


def cache_prefix(key: str) -> str:
    """A compile cache's prefix in the weights bucket, with its trailing slash (components/compile_cache.py)."""
    return f"{COMPILE_CACHE_PREFIX}{key}/"


def results_prefix(stack: str) -> str:
    """Where one stack's bench runs go: runs/<stack>/<server>/<run id>/..."""
    return f"{RESULTS_ROOT}{stack}/"


@dataclass(frozen=True)
class CompileCacheWriters:
    """Who may write the weights bucket's compile-cache/ prefix: the servers' Pod Identity sessions."""

    cluster_arn: pulumi.Input[str]
    namespace: str
    service_accounts: Sequence[str]


@dataclass(frozen=True)
class WeightStoreArgs:
    # Bucket names are `<name_prefix>-weights-<account>-<region>` and `...-results-...`: stable, so a
    # retained weights bucket can be imported again, and unique per account and region.
    name_prefix: str
    account_id: str
    region: str
    teardown: Literal["destroy", "retain-weights"] = "destroy"
    kms_key_arn: str | None = None
    # Hugging Face ids whose URIs become outputs (s3://<weights>/models/<org>/<name>/).
    model_ids: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    # The weights bucket's policy refuses compile-cache/ writes from anyone else (compile caches are
    # code the servers run); None: from everyone.
    compile_cache_writers: CompileCacheWriters | None = None

    def __post_init__(self) -> None:
        longest = len(f"{self.name_prefix}-weights-") + 12 + 1 + len(self.region)
        if not _NAME.match(self.name_prefix) or "--" in self.name_prefix or longest > _MAX_BUCKET_NAME:
            raise ValueError(
                f"bucket name prefix {self.name_prefix!r} must be lowercase letters, digits and single "
                f"'-', and short enough that '{self.name_prefix}-weights-<account>-{self.region}' "
                f"stays within {_MAX_BUCKET_NAME} characters"
            )
        if self.teardown not in ("destroy", "retain-weights"):
            raise ValueError(f"teardown {self.teardown!r}: use destroy or retain-weights")


def tls_only_policy(bucket_arn: str, extra: Sequence[dict] = ()) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [*extra, {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }],
    }


class WeightStore(pulumi.ComponentResource):
    """The weights bucket (models/, compile-cache/, assets/) and the results bucket (runs/)."""

    weights_bucket: aws.s3.Bucket
    results_bucket: aws.s3.Bucket
    weights_bucket_name: pulumi.Output[str]
    weights_bucket_arn: pulumi.Output[str]
    results_bucket_name: pulumi.Output[str]
    results_bucket_arn: pulumi.Output[str]
    model_uris: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: WeightStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:storage:WeightStore", name, None, opts)
        retain = args.teardown == "retain-weights"
        self.weights_bucket = self._bucket(name, "weights", args, retain=retain)
        self.results_bucket = self._bucket(name, "results", args, retain=False)

        self.weights_bucket_name = self.weights_bucket.bucket
        self.weights_bucket_arn = self.weights_bucket.arn
        self.results_bucket_name = self.results_bucket.bucket
        self.results_bucket_arn = self.results_bucket.arn
        self.model_uris = {
            hf_id: pulumi.Output.concat("s3://", self.weights_bucket.bucket, "/", model_prefix(hf_id))
            for hf_id in args.model_ids
        }
        self.compile_cache_uri = pulumi.Output.concat("s3://", self.weights_bucket.bucket, "/",
                                                      COMPILE_CACHE_PREFIX)
        self.assets_uri = pulumi.Output.concat("s3://", self.weights_bucket.bucket, "/", ASSETS_PREFIX)
        self.register_outputs({
            "weightsBucket": self.weights_bucket_name,
            "resultsBucket": self.results_bucket_name,
            "modelUris": self.model_uris,
        })

    def _bucket(self, name: str, role: str, args: WeightStoreArgs, *, retain: bool) -> aws.s3.Bucket:
        # A retained bucket keeps its controls too: deleting them on destroy would leave it open.
        child = pulumi.ResourceOptions(parent=self, retain_on_delete=retain or None)
        bucket = aws.s3.Bucket(
            f"{name}-{role}",
            bucket=bucket_name(args.name_prefix, role, args.account_id, args.region),
            force_destroy=not retain,
            tags={**args.tags, "vllm-poc/data": role},
            opts=child,
        )
        # S3 rejects concurrent configuration changes on one bucket (OperationAborted), so each
        # control waits for the previous one.
        ownership = aws.s3.BucketOwnershipControls(
            f"{name}-{role}-ownership",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        public_access = aws.s3.BucketPublicAccessBlock(
            f"{name}-{role}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child.merge(pulumi.ResourceOptions(depends_on=[ownership])),
        )
        if args.kms_key_arn:
            # A bucket key cuts KMS requests: 64-128 parallel ranged GETs per loader would otherwise
            # each call KMS Decrypt.
            sse_default = {"sse_algorithm": "aws:kms", "kms_master_key_id": args.kms_key_arn}
            bucket_key = True
        else:
            sse_default = {"sse_algorithm": "AES256"}
            bucket_key = None
        encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-{role}-encryption",
            bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": sse_default,
                    "bucket_key_enabled": bucket_key}],
            opts=child.merge(pulumi.ResourceOptions(depends_on=[public_access])),
        )
        if role == "weights":
            document = compile_cache_policy(bucket.arn, args.compile_cache_writers)
        else:
            document = bucket.arn.apply(tls_only_policy)
        policy = aws.s3.BucketPolicy(
            f"{name}-{role}-policy",
            bucket=bucket.id,
            policy=pulumi.Output.json_dumps(document),
            opts=child.merge(pulumi.ResourceOptions(depends_on=[encryption])),
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-{role}-lifecycle",
            bucket=bucket.id,
            rules=[{
                "id": "abort-incomplete-multipart-uploads",
                "status": "Enabled",
                "filter": {},
                "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_MULTIPART_DAYS},
            }],
            opts=child.merge(pulumi.ResourceOptions(depends_on=[policy])),
        )
        return bucket


def writers_policy_statements(bucket_arn: str, cluster_arn: str | None, namespace: str | None,
                              service_accounts: Sequence[str]) -> list[dict[str, Any]]:
    """Bucket policy: nobody but this cluster's server service accounts writes under compile-cache/.

    EKS Pod Identity tags every session with the cluster, namespace and service account
    (aws:PrincipalTag/...); a principal without those tags (a person, a CI role with s3:*, another
    cluster's pods) matches StringNotEquals and is denied, whatever its own policies allow. One
    statement per tag, because the conditions of one statement must all hold for it to apply.
    Without servers that push, nobody writes there.
    """
    resource = f"{bucket_arn}/{COMPILE_CACHE_PREFIX}*"
    actions = ["s3:PutObject", "s3:AbortMultipartUpload"]
    if not service_accounts or cluster_arn is None or namespace is None:
        return [{"Sid": "CompileCacheWritersOnly", "Effect": "Deny", "Principal": "*", "Action": actions,
                 "Resource": resource}]
    checks = (("Cluster", "eks-cluster-arn", [cluster_arn]), ("Namespace", "kubernetes-namespace", [namespace]),
              ("ServiceAccount", "kubernetes-service-account", sorted(service_accounts)))
    return [
        {
            "Sid": f"CompileCacheWritersOnly{name}",
            "Effect": "Deny",
            "Principal": "*",
            "Action": actions,
            "Resource": resource,
            "Condition": {"StringNotEquals": {f"aws:PrincipalTag/{tag}": values}},
        }
        for name, tag, values in checks
    ]


def compile_cache_policy(bucket_arn: pulumi.Input[str], writers: CompileCacheWriters | None) -> pulumi.Output[dict]:
    """The weights bucket's policy: TLS only, and compile-cache/ written by the servers alone."""
    if writers is None:
        return pulumi.Output.from_input(bucket_arn).apply(
            lambda arn: tls_only_policy(arn, writers_policy_statements(arn, None, None, [])))
    return pulumi.Output.all(bucket_arn, writers.cluster_arn).apply(
        lambda v: tls_only_policy(v[0], writers_policy_statements(v[0], v[1], writers.namespace,
                                                                  list(writers.service_accounts))))
