"""Stack rules see every resource with its links: `StackResource`, and the lookups the S3 and IAM
rules share (which resource a reference points at, the statements of a policy document)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import PolicyResource

from .values import UNKNOWN, as_list, is_unknown, plain


@dataclass
class StackResource:
    """A resource as the stack rules see it: plain props plus, per prop, the URNs it came from."""

    type: str
    name: str
    urn: str
    props: dict[str, Any]
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_policy_resource(cls, resource: PolicyResource) -> StackResource:
        deps = {key: [dep.urn for dep in value]
                for key, value in (resource.property_dependencies or {}).items()}
        return cls(resource.resource_type, resource.name, resource.urn, plain(resource.props), deps)

    def keys(self, *props: str) -> set[str]:
        """What other resources may use to point at this one: URN, logical name and the given props
        (physical name, id, ARN). The logical name matters for the offline render, where the mocks'
        ids are derived from it."""
        found = {self.urn, self.name}
        for prop in props:
            value = self.props.get(prop)
            if isinstance(value, str) and value:
                found.add(value)
        return found


def resolve(ref: Any, deps: Sequence[str], targets: Sequence[StackResource],
             key_props: tuple[str, ...]) -> list[StackResource] | Any:
    """The targets a reference points at: by dependency URN first, then by value.

    UNKNOWN if the reference is unknown and no dependency names a target (cannot tell which one).
    """
    by_dep = [t for t in targets if t.urn in deps]
    if by_dep:
        return by_dep
    if is_unknown(ref):
        return UNKNOWN
    if isinstance(ref, str):
        return [t for t in targets if ref in t.keys(*key_props)]
    return []


def policy_statements(document: Any) -> list[dict[str, Any]] | Any:
    """Statements of an IAM policy document (JSON string or dict); UNKNOWN if unknown."""
    if is_unknown(document):
        return UNKNOWN
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    if not isinstance(document, Mapping):
        return []
    statements = as_list(document.get("Statement"))
    if is_unknown(statements):
        return UNKNOWN
    return [s for s in statements if isinstance(s, Mapping)]
