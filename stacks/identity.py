"""Who runs `pulumi up`, as EKS sees it: the caller's IAM role, from an STS caller-identity ARN.

EKS makes the identity that creates a cluster its admin (pulumi-eks creates clusters with
bootstrapClusterCreatorAdminPermissions), so an access entry for that same role is both needless and
fatal: the second entry fails with ResourceInUseException. The stack and preflight both refuse it.
"""

from __future__ import annotations

import re

_ASSUMED = re.compile(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+")
_ROLE = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/(?:.*/)?([^/]+)")


def caller_role_arn(caller_arn: str) -> str | None:
    """The IAM role ARN behind an assumed-role session ARN; None for users and root.

    An assumed-role ARN drops the role's path, so the result has none; compare with `same_role`.
    """
    m = _ASSUMED.fullmatch(caller_arn)
    return f"arn:{m[1]}:iam::{m[2]}:role/{m[3]}" if m else None


def same_role(role_arn: str, other: str) -> bool:
    """Role ARNs naming the same role, ignoring the path (role names are unique per account)."""
    a, b = _ROLE.fullmatch(role_arn), _ROLE.fullmatch(other)
    return bool(a and b) and a[1] == b[1] and role_arn.split(":")[4] == other.split(":")[4]


def admin_role_problems(admin_role_arns: list[str], caller_arn: str) -> list[str]:
    """cluster.adminRoleArns entries that are the caller's own role, each with the fix."""
    caller_role = caller_role_arn(caller_arn)
    candidates = [caller_role] if caller_role else ([caller_arn] if _ROLE.fullmatch(caller_arn) else [])
    return [
        f"vllm-poc:cluster.adminRoleArns[{index}]: {arn} is the role running `pulumi up` ({caller_arn}); EKS "
        "already makes the cluster's creator its admin, and a second access entry fails with "
        "ResourceInUseException. Remove it from adminRoleArns."
        for index, arn in enumerate(admin_role_arns)
        if any(same_role(arn, c) for c in candidates)
    ]
