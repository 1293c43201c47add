"""The pack: each rule wrapped in its pulumi-policy object, and `check_resources`, which runs those
objects over (type, name, props) tuples as the engine would (the tests run the pack over the
stack's offline render that way)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import unknown_checking_proxy

from .iam import check_iam_wildcard_actions
from .images import check_image_digests, check_image_tags
from .nodes import check_ec2nodeclass_imds, check_gpu_nodepool_taint
from .serving import DEFAULT_BENCH_MAX_CONCURRENCY, check_fp8_kv_cache, check_max_num_seqs
from .stack import StackResource
from .storage import check_s3_bucket_protection
from .values import plain

PACK_NAME = "vllm-poc-guardrails"


def _resource_policy(name: str, description: str,
                     check: Callable[..., list[str]], config_schema: PolicyConfigSchema | None = None,
                     enforcement_level: EnforcementLevel = EnforcementLevel.MANDATORY,
                     ) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation) -> None:
        props = plain(args.props)
        for message in check(args.resource_type, props, args.name, args.get_config()):
            report_violation(message, None)

    return ResourceValidationPolicy(name=name, description=description, validate=validate,
                                    enforcement_level=enforcement_level,
                                    config_schema=config_schema)


def _stack_policy(name: str, description: str,
                  check: Callable[[Sequence[StackResource]], list[tuple[str, str]]],
                  ) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation) -> None:
        resources = [StackResource.from_policy_resource(r) for r in args.resources]
        for message, urn in check(resources):
            report_violation(message, urn)

    return StackValidationPolicy(name=name, description=description, validate=validate,
                                 enforcement_level=EnforcementLevel.MANDATORY)


FP8_KV_CACHE = _resource_policy(
    "vllm-fp8-kv-cache",
    "A vLLM server of an FP8 checkpoint sets --kv-cache-dtype fp8.",
    check_fp8_kv_cache)
MAX_NUM_SEQS = _resource_policy(
    "vllm-max-num-seqs",
    "vLLM --max-num-seqs is at least the bench's highest concurrency.",
    check_max_num_seqs,
    PolicyConfigSchema(properties={"benchMaxConcurrency": {
        "type": "integer", "minimum": 1, "default": DEFAULT_BENCH_MAX_CONCURRENCY,
        "description": "Highest concurrency the benchmark sweep sends to one server."}}))
IMAGE_TAGS = _resource_policy(
    "container-image-pinned",
    "Workload container images carry a version tag other than latest, or a digest.",
    check_image_tags)
IMAGE_DIGESTS = _resource_policy(
    "container-image-digest",
    "Workload container images are pinned by digest (warning only).",
    check_image_digests, enforcement_level=EnforcementLevel.ADVISORY)
EC2NODECLASS_IMDS = _resource_policy(
    "ec2nodeclass-imdsv2-hop-limit",
    "EC2NodeClass sets metadataOptions httpTokens: required and httpPutResponseHopLimit: 1.",
    check_ec2nodeclass_imds)
GPU_NODEPOOL_TAINT = _resource_policy(
    "gpu-nodepool-taint",
    "A GPU NodePool taints its nodes nvidia.com/gpu:NoSchedule.",
    check_gpu_nodepool_taint)
S3_BUCKET_PROTECTION = _stack_policy(
    "s3-bucket-public-access-and-tls",
    "Every S3 bucket has a full public-access block and a bucket policy that denies non-TLS access.",
    check_s3_bucket_protection)
IAM_WILDCARD_ACTIONS = _stack_policy(
    "iam-no-wildcard-actions-on-workload-roles",
    "IAM policies on workload roles (Pod Identity or tagged vllm-poc/workload=true) list actions "
    "without wildcards.",
    check_iam_wildcard_actions)

POLICIES: list[Policy] = [
    FP8_KV_CACHE, MAX_NUM_SEQS, IMAGE_TAGS, IMAGE_DIGESTS, EC2NODECLASS_IMDS, GPU_NODEPOOL_TAINT,
    S3_BUCKET_PROTECTION, IAM_WILDCARD_ACTIONS,
]


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str  # logical name of the resource the finding is about
    message: str


def _urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:offline::vllm-poc::{resource_type}::{name}"


def _options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def check_resources(resources: Iterable[Sequence[Any]],
                    config: Mapping[str, Mapping[str, Any]] | None = None,
                    policies: Sequence[Policy] | None = None) -> list[Violation]:
    """Run the pack's policy objects over resources given as (type, name, props) or
    (type, name, props, id) tuples, as the engine would (props wrapped in its unknown-checking proxy,
    so the pulumi_policy UNKNOWN_* sentinels behave as in a preview).

    `config` is keyed by policy name, like a `--policy-pack-config` file:
    {"vllm-max-num-seqs": {"benchMaxConcurrency": 64}}. The optional id becomes the resource's `id`
    prop, which companion resources (BucketPolicy.bucket, RolePolicy.role) are matched against.
    """
    config = config or {}
    items: list[tuple[str, str, dict[str, Any]]] = []
    for entry in resources:
        resource_type, name, props = entry[0], entry[1], dict(entry[2])
        if len(entry) > 3 and entry[3] is not None:
            props.setdefault("id", entry[3])
        items.append((resource_type, name, props))
    names_by_urn = {_urn(t, n): n for t, n, _ in items}

    violations: list[Violation] = []
    for policy in policies if policies is not None else POLICIES:
        policy_config = dict(config.get(policy.name, {}))

        def report(message: str, urn: str | None = None, *, _policy: str = policy.name,
                   _name: str = "") -> None:
            violations.append(Violation(_policy, names_by_urn.get(urn or "", _name), message))

        if isinstance(policy, ResourceValidationPolicy):
            for resource_type, name, props in items:
                urn = _urn(resource_type, name)
                args = ResourceValidationArgs(resource_type, unknown_checking_proxy(props), urn, name,
                                              _options(), None, policy_config)
                policy.validate(args, lambda message, _urn=None, _n=name, _p=policy.name:
                                violations.append(Violation(_p, _n, message)))
        elif isinstance(policy, StackValidationPolicy):
            stack = [PolicyResource(t, unknown_checking_proxy(p), _urn(t, n), n, _options(), None,
                                    None, [], {}) for t, n, p in items]
            policy.validate(StackValidationArgs(stack, policy_config), report)
    return violations
