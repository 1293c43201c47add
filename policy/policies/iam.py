"""Rule on IAM: no wildcard actions on workload roles (roles that pods assume)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .stack import StackResource, policy_statements, resolve
from .values import UNKNOWN, as_list, is_unknown


# Rule: no wildcard actions on workload roles

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
WORKLOAD_TAG = "vllm-poc/workload"
_ROLE_KEY_PROPS = ("name", "id", "arn")
_POLICY_KEY_PROPS = ("arn", "id", "name")


def _trusts_pod_identity(document: Any) -> bool | Any:
    statements = policy_statements(document)
    if is_unknown(statements):
        return UNKNOWN
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal")
        services = as_list(principal.get("Service")) if isinstance(principal, Mapping) else []
        if not is_unknown(services) and POD_IDENTITY_PRINCIPAL in services:
            return True
    return False


def is_workload_role(role: StackResource) -> bool | Any:
    """A role that pods assume: trusted by EKS Pod Identity, or tagged vllm-poc/workload=true."""
    for tags_prop in ("tags", "tagsAll"):
        tags = role.props.get(tags_prop)
        if isinstance(tags, Mapping) and str(tags.get(WORKLOAD_TAG, "")).lower() == "true":
            return True
    return _trusts_pod_identity(role.props.get("assumeRolePolicy"))


def wildcard_actions(document: Any) -> list[str] | Any:
    """Action patterns with `*` or `?` (and NotAction) in Allow statements; resource `*` is fine."""
    statements = policy_statements(document)
    if is_unknown(statements):
        return UNKNOWN
    found: list[str] = []
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        if statement.get("NotAction") is not None:
            found.append("NotAction (allows every action not listed)")
        actions = as_list(statement.get("Action"))
        if is_unknown(actions):
            continue
        found.extend(a for a in actions if isinstance(a, str) and ("*" in a or "?" in a))
    return found


# Karpenter's controller role is a workload role too (Pod Identity). Its upstream reference policies
# (karpenter 1.14 cloudformation.yaml) list every action explicitly and use `*` only in resources,
# so it passes without an exemption; a wildcard action there would be a deviation worth flagging.


def check_iam_wildcard_actions(resources: Sequence[StackResource]) -> list[tuple[str, str]]:
    roles = [r for r in resources if r.type == ROLE]
    managed = [r for r in resources if r.type == IAM_POLICY]
    grants: list[tuple[StackResource, Any, Any, str]] = []  # (holder, document, role targets, how)

    for role in roles:
        inline = as_list(role.props.get("inlinePolicies"))
        if not is_unknown(inline):
            for item in inline:
                if isinstance(item, Mapping):
                    grants.append((role, item.get("policy"), [role],
                                   f"inline policy '{item.get('name', '')}'"))
    for holder in resources:
        if holder.type == ROLE_POLICY:
            targets = resolve(holder.props.get("role"), holder.property_dependencies.get("role", []),
                               roles, _ROLE_KEY_PROPS)
            grants.append((holder, holder.props.get("policy"), targets, "role policy"))
        elif holder.type in (ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT):
            policy_targets = resolve(holder.props.get("policyArn"),
                                      holder.property_dependencies.get("policyArn", []),
                                      managed, _POLICY_KEY_PROPS)
            if is_unknown(policy_targets):
                continue
            if holder.type == ROLE_POLICY_ATTACHMENT:
                role_targets = resolve(holder.props.get("role"),
                                        holder.property_dependencies.get("role", []),
                                        roles, _ROLE_KEY_PROPS)
            else:
                refs = as_list(holder.props.get("roles"))
                deps = holder.property_dependencies.get("roles", [])
                if is_unknown(refs):
                    role_targets = resolve(UNKNOWN, deps, roles, _ROLE_KEY_PROPS)
                else:
                    role_targets = []
                    for ref in refs:
                        resolved = resolve(ref, deps, roles, _ROLE_KEY_PROPS)
                        if is_unknown(resolved):
                            continue
                        role_targets.extend(t for t in resolved if t not in role_targets)
            for policy in policy_targets:
                grants.append((policy, policy.props.get("policy"), role_targets,
                               f"managed policy attached by {holder.name}"))

    findings: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for holder, document, targets, how in grants:
        if is_unknown(targets):
            continue
        workload_roles = [t for t in targets if is_workload_role(t) is True]
        if not workload_roles:
            continue
        actions = wildcard_actions(document)
        if is_unknown(actions) or not actions:
            continue
        for role in workload_roles:
            if (holder.urn, role.urn) in seen:
                continue
            seen.add((holder.urn, role.urn))
            findings.append((
                f"{holder.name}: {how} grants wildcard actions {sorted(set(actions))} to the "
                f"workload role {role.name} (assumed by pods). List the actions the workload needs; "
                f"a `*` in Resource is fine, a `*` in Action is not.", holder.urn))
    return findings
