"""Rule on S3 buckets: a full public-access block and a TLS-only bucket policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .stack import StackResource, policy_statements, resolve
from .values import UNKNOWN, as_list, is_unknown


# Rule: S3 buckets have a full public-access block and a TLS-only bucket policy

BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                       "restrictPublicBuckets")
_BUCKET_KEY_PROPS = ("bucket", "id")


def _all_flags(props: Mapping[str, Any]) -> bool | Any:
    """True if all four flags are true, UNKNOWN if none is false but some are unknown."""
    values = [props.get(flag) for flag in PUBLIC_ACCESS_FLAGS]
    if any(v is False or v is None for v in values):
        return False
    if any(is_unknown(v) for v in values):
        return UNKNOWN
    return all(v is True for v in values)


def _is_false(value: Any) -> bool:
    if isinstance(value, list):
        return len(value) > 0 and all(_is_false(v) for v in value)
    return value is False or (isinstance(value, str) and value.lower() == "false")


def _denies_insecure_transport(statement: Mapping[str, Any]) -> bool:
    if statement.get("Effect") != "Deny":
        return False
    principal = statement.get("Principal")
    if isinstance(principal, Mapping):
        principal = principal.get("AWS")
    if principal != "*" and principal != ["*"]:
        return False
    actions = as_list(statement.get("Action"))
    if is_unknown(actions) or not any(a in ("s3:*", "*") for a in actions):
        return False
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return False
    insecure = False
    for operator in ("Bool", "BoolIfExists"):
        block = condition.get(operator)
        if isinstance(block, Mapping):
            for key, value in block.items():
                if key.lower() == "aws:securetransport" and _is_false(value):
                    insecure = True
    if not insecure:
        return False
    resources = as_list(statement.get("Resource"))
    if is_unknown(resources) or any(is_unknown(r) for r in resources):
        return True
    # The deny must cover the objects, not only the bucket ARN.
    return any(isinstance(r, str) and (r == "*" or r.endswith("/*")) for r in resources)


def is_tls_only_policy(document: Any) -> bool | Any:
    statements = policy_statements(document)
    if is_unknown(statements):
        return UNKNOWN
    return any(_denies_insecure_transport(s) for s in statements)


def check_s3_bucket_protection(resources: Sequence[StackResource]) -> list[tuple[str, str]]:
    buckets = [r for r in resources if r.type in BUCKET_TYPES]
    blocks = [r for r in resources if r.type == PUBLIC_ACCESS_BLOCK]
    policies = [r for r in resources if r.type == BUCKET_POLICY]
    account_blocked = any(_all_flags(r.props) is True for r in resources
                          if r.type == ACCOUNT_PUBLIC_ACCESS_BLOCK)

    def companions(kind: Sequence[StackResource]) -> tuple[dict[str, list[StackResource]], bool]:
        matched: dict[str, list[StackResource]] = {b.urn: [] for b in buckets}
        unresolved = False
        for companion in kind:
            targets = resolve(companion.props.get("bucket"),
                               companion.property_dependencies.get("bucket", []),
                               buckets, _BUCKET_KEY_PROPS)
            if is_unknown(targets):
                unresolved = True
                continue
            for target in targets:
                matched[target.urn].append(companion)
        return matched, unresolved

    block_map, blocks_unresolved = companions(blocks)
    policy_map, policies_unresolved = companions(policies)
    findings: list[tuple[str, str]] = []
    for bucket in buckets:
        label = bucket.name
        # Public-access block.
        states = [_all_flags(b.props) for b in block_map[bucket.urn]]
        if not account_blocked and True not in states and not any(is_unknown(s) for s in states):
            if block_map[bucket.urn]:
                findings.append((f"{label}: its BucketPublicAccessBlock does not set all of "
                                 f"{', '.join(PUBLIC_ACCESS_FLAGS)} to true.", bucket.urn))
            elif not blocks_unresolved:
                findings.append((f"{label}: no BucketPublicAccessBlock; add one with "
                                 f"{', '.join(PUBLIC_ACCESS_FLAGS)} all true.", bucket.urn))
        # TLS-only bucket policy (a BucketPolicy resource, or the legacy inline `policy` prop).
        documents = [p.props.get("policy") for p in policy_map[bucket.urn]]
        inline = bucket.props.get("policy")
        if inline is not None and inline != "":
            documents.append(inline)
        verdicts = [is_tls_only_policy(d) for d in documents]
        if True not in verdicts and not any(is_unknown(v) for v in verdicts):
            if documents:
                findings.append((f"{label}: its bucket policy does not deny requests with "
                                 f"aws:SecureTransport=false (Effect Deny, Principal *, Action s3:*, "
                                 f"Resource covering the bucket and its objects).", bucket.urn))
            elif not policies_unresolved:
                findings.append((f"{label}: no BucketPolicy denying requests without TLS; add one "
                                 f"that denies s3:* when aws:SecureTransport is false.", bucket.urn))
    return findings
