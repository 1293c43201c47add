"""One IAM role per Kubernetes service account, bound with EKS Pod Identity.

The role trusts only `pods.eks.amazonaws.com`, and only for this account, this cluster, this
namespace and this service account (the session tags Pod Identity sets). Its one inline policy is
built from the statements passed in, which must name every action (no wildcard actions) and say
which resources they apply to. Workloads depend on `association`: Pod Identity injects
credentials when a pod is created, so a pod started before the association exists runs without.

`server_statements` and `bench_statements` give the two workload policies of the stack: the vLLM
server reads its model prefixes and the caches and writes only its own compile-cache key; the bench
reads tokenizer files and writes only its stack's results prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.iam import scoped_pod_identity_trust
from components.labels import PART_OF
from components.weight_store import ASSETS_PREFIX, COMPILE_CACHE_PREFIX, cache_prefix, model_prefix


Statement = Mapping[str, Any]

# What bench/common/s3.py downloads from a model folder to build the tokenizer (never weights).
TOKENIZER_OBJECT_PATTERNS = ("*.json", "*.model", "tokenizer*", "*.tiktoken", "*.txt", "*.jinja")


@dataclass(frozen=True)
class WorkloadIdentityArgs:
    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    account_id: pulumi.Input[str]
    namespace: str
    service_account: str
    # IAM statements (Effect/Action/Resource[/Condition]); values may be Outputs (bucket ARNs).
    statements: Sequence[Statement]
    labels: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # What the ServiceAccount and the association wait for: the namespace, the Pod Identity agent.
    depends_on: Sequence[pulumi.Resource] = ()

    def __post_init__(self) -> None:
        for problem in statement_problems(self.statements):
            raise ValueError(f"service account {self.namespace}/{self.service_account}: {problem}")


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def statement_problems(statements: Sequence[Statement]) -> list[str]:
    """Least-privilege refusals that can be judged before any value is resolved."""
    problems = []
    if not statements:
        problems.append("no statements: a workload role needs at least one grant")
    for index, st in enumerate(statements):
        where = f"statement {index} ({st.get('Sid', 'no Sid')})"
        if st.get("Effect") != "Allow":
            problems.append(f"{where}: only Allow statements belong in a workload policy")
        if "NotAction" in st or "NotResource" in st:
            problems.append(f"{where}: NotAction/NotResource grant everything not listed")
        actions = _as_list(st.get("Action", []))
        if not actions:
            problems.append(f"{where}: no Action")
        for action in actions:
            if not isinstance(action, str):
                problems.append(f"{where}: action {action!r} must be a literal service:Action")
            elif "*" in action or "?" in action:
                problems.append(f"{where}: wildcard action {action!r}; list the actions it needs")
            elif ":" not in action:
                problems.append(f"{where}: action {action!r} must be a literal service:Action")
        resources = _as_list(st.get("Resource", []))
        if not resources:
            problems.append(f"{where}: no Resource")
        if any(r == "*" for r in resources):
            problems.append(f"{where}: Resource '*'; name the buckets, prefixes or keys")
    return problems


def _policy_json(statements: Sequence[Statement]) -> pulumi.Output[str]:
    def render(resolved: list[dict]) -> str:
        for st in resolved:
            if any(r == "*" for r in _as_list(st.get("Resource", []))):
                raise ValueError(f"statement {st.get('Sid')}: Resource '*' after resolution")
        return json.dumps({"Version": "2012-10-17", "Statement": resolved}, sort_keys=True)

    return pulumi.Output.from_input([dict(s) for s in statements]).apply(render)


class WorkloadIdentity(pulumi.ComponentResource):
    """IAM role + inline policy, Kubernetes ServiceAccount, and the Pod Identity association."""

    role: aws.iam.Role
    policy: aws.iam.RolePolicy
    service_account: k8s.core.v1.ServiceAccount
    association: aws.eks.PodIdentityAssociation
    service_account_name: str

    def __init__(self, name: str, args: WorkloadIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:identity:WorkloadIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.service_account_name = args.service_account

        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=scoped_pod_identity_trust(
                args.account_id, args.cluster_arn, args.namespace, args.service_account),
            description=f"EKS Pod Identity role of {args.namespace}/{args.service_account}",
            max_session_duration=3600,
            tags={**args.tags, "vllm-poc/workload": "true",
                  "vllm-poc/service-account": f"{args.namespace}.{args.service_account}"},
            opts=child,
        )
        self.policy = aws.iam.RolePolicy(
            f"{name}-policy",
            role=self.role.id,
            policy=_policy_json(args.statements),
            opts=child,
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={"name": args.service_account, "namespace": args.namespace,
                      "labels": {**PART_OF, **args.labels}},
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        # The association is what workloads wait for, so it also waits for the permissions.
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association",
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            service_account=args.service_account,
            role_arn=self.role.arn,
            tags=dict(args.tags),
            opts=child.merge(pulumi.ResourceOptions(
                depends_on=[self.policy, self.service_account, *args.depends_on])),
        )
        self.register_outputs({
            "roleArn": self.role.arn,
            "serviceAccount": args.service_account,
            "associationId": self.association.association_id,
        })


# -- the stack's two workload policies ---------------------------------------------------------


def _objects(bucket_arn: pulumi.Input[str], *keys: str) -> list[pulumi.Input[str]]:
    if isinstance(bucket_arn, str):
        return [f"{bucket_arn}/{key}" for key in keys]
    return [pulumi.Output.concat(bucket_arn, "/", key) for key in keys]


def _list_condition(prefixes: Sequence[str]) -> dict:
    values: list[str] = []
    for prefix in prefixes:
        # Listing is scoped to the prefix and below; the prefix without its slash is allowed too in
        # case a client lists it that way (names only; reads stay scoped by GetObject below).
        values += [f"{prefix}*", prefix.rstrip("/")]
    return {"StringLike": {"s3:prefix": values}}


def _kms(kms_key_arn: str | None, actions: list[str]) -> list[dict]:
    if not kms_key_arn:
        return []
    return [{"Sid": "UseBucketKey", "Effect": "Allow", "Action": actions, "Resource": [kms_key_arn]}]


def compile_cache_write_statements(weights_bucket_arn: pulumi.Input[str], key: str) -> list[dict[str, Any]]:
    """Write the server's own key and nothing else: objects (and the parts of a large one), and the
    listing of unfinished multipart uploads a rerun resumes (upload names only; S3 cannot scope it
    to a prefix)."""
    return [
        {
            "Sid": "WriteOwnCompileCache",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            "Resource": _objects(weights_bucket_arn, f"{cache_prefix(key)}*"),
        },
        {
            "Sid": "ResumeCompileCacheUploads",
            "Effect": "Allow",
            "Action": ["s3:ListBucketMultipartUploads"],
            "Resource": [weights_bucket_arn],
        },
    ]


def server_statements(
    weights_bucket_arn: pulumi.Input[str],
    model_prefixes: Sequence[str],
    kms_key_arn: str | None = None,
    compile_cache_key: str | None = None,
) -> list[dict]:
    """Read the server's model prefixes (target and draft) and the caches; with a compile-cache key,
    write that key's prefix (components/compile_cache.py) and nothing else."""
    prefixes = [*model_prefixes, COMPILE_CACHE_PREFIX, ASSETS_PREFIX]
    writes = compile_cache_write_statements(weights_bucket_arn, compile_cache_key) if compile_cache_key else []
    return [
        {
            "Sid": "ReadModelAndCaches",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": _objects(weights_bucket_arn, *(f"{p}*" for p in prefixes)),
        },
        {
            "Sid": "ListModelAndCaches",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [weights_bucket_arn],
            "Condition": _list_condition(prefixes),
        },
        *writes,
        *_kms(kms_key_arn, ["kms:Decrypt", "kms:GenerateDataKey"] if writes else ["kms:Decrypt"]),
    ]


def bench_statements(
    weights_bucket_arn: pulumi.Input[str],
    model_ids: Sequence[str],
    results_bucket_arn: pulumi.Input[str],
    results_prefix: str,
    kms_key_arn: str | None = None,
) -> list[dict]:
    """Tokenizer files of the benchmarked models; read/write on this stack's results prefix only."""
    prefixes = [model_prefix(m) for m in model_ids]
    if not results_prefix.endswith("/") or "*" in results_prefix:
        raise ValueError(f"results prefix {results_prefix!r} must be a literal prefix ending in '/'")
    return [
        {
            "Sid": "ReadTokenizerFiles",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": _objects(weights_bucket_arn,
                                 *(f"{p}{pattern}" for p in prefixes for pattern in TOKENIZER_OBJECT_PATTERNS)),
        },
        {
            # bench/common/s3.py lists the model folder to find which tokenizer files exist.
            "Sid": "ListModelFolders",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [weights_bucket_arn],
            "Condition": _list_condition(prefixes),
        },
        {
            "Sid": "ReadWriteResults",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
            "Resource": _objects(results_bucket_arn, f"{results_prefix}*"),
        },
        {
            "Sid": "ListResults",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [results_bucket_arn],
            "Condition": _list_condition([results_prefix]),
        },
        *_kms(kms_key_arn, ["kms:Decrypt", "kms:GenerateDataKey"]),
    ]
