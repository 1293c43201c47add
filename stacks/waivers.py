"""The scanner waivers of security/waivers.toml, rendered where the scanners read them.

security/waivers.toml stays the one list of accepted findings, each with its reason. Its checkov
entries become checkov's own suppression form on the objects they match: an annotation
`checkov.io/skip<N>: <check id>=<reason>` in the object's metadata, so checkov run by anyone on the
rendered manifests (or on the live objects) reports the finding as skipped, with the reason, instead
of failed. The program applies them to every Kubernetes object it declares (a stack transformation,
registered before any resource), matching `<Kind>.<namespace>.<name>` against each entry's glob, as
checkov names resources. parliament has no suppression inside a policy document; its entries are
applied by tests/test_scanners.py.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from stacks.settings import REPO

WAIVERS_FILE = REPO / "security" / "waivers.toml"
SKIP_PREFIX = "checkov.io/skip"
_NOT_OBJECTS = ("kubernetes:helm.sh/", "pulumi:providers:")


@dataclass(frozen=True)
class CheckovWaiver:
    check: str  # checkov id, e.g. CKV_K8S_11
    resource: str  # glob over checkov's resource id, Kind.namespace.name
    reason: str

    def matches(self, resource_id: str) -> bool:
        return fnmatch.fnmatchcase(resource_id, self.resource)

    @property
    def annotation(self) -> str:
        """`<check>=<reason>` on one line (checkov splits the value at its one `=`)."""
        return f"{self.check}={' '.join(self.reason.split())}"


def load(path: Path | None = None) -> dict[str, list[dict[str, str]]]:
    """The file's tables: {"checkov": [...], "parliament": [...]}."""
    return tomllib.loads((path or WAIVERS_FILE).read_text(encoding="utf-8"))


def checkov_waivers(path: Path | None = None) -> list[CheckovWaiver]:
    path = path or WAIVERS_FILE
    waivers = []
    for i, entry in enumerate(load(path).get("checkov", [])):
        where = f"{path.name}: checkov entry {i + 1} ({entry.get('check', 'no check')})"
        missing = [key for key in ("check", "resource", "reason") if not str(entry.get(key, "")).strip()]
        if missing:
            raise ValueError(f"{where}: set {', '.join(missing)}")
        if "=" in entry["reason"]:
            raise ValueError(f"{where}: the reason holds '='; checkov reads `<check>=<reason>` and would reject "
                             f"the annotation. Reword it without '='")
        waivers.append(CheckovWaiver(entry["check"], entry["resource"], entry["reason"]))
    return waivers


def resource_id(kind: str, namespace: str | None, name: str) -> str:
    """checkov's name for a Kubernetes object (`default` for the namespace of cluster-wide kinds)."""
    return f"{kind}.{namespace or 'default'}.{name}"


def skip_annotations(waivers: list[CheckovWaiver], kind: str, namespace: str | None, name: str) -> dict[str, str]:
    """`checkov.io/skip<N>` annotations for one object, numbered in the file's order."""
    found = [w for w in waivers if w.matches(resource_id(kind, namespace, name))]
    return {f"{SKIP_PREFIX}{n}": w.annotation for n, w in enumerate(found, start=1)}


def checkov_transformation(waivers: list[CheckovWaiver]) -> pulumi.ResourceTransformation:
    """A stack transformation adding each object's skip annotations (objects named in plain strings)."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if not args.type_.startswith("kubernetes:") or args.type_.startswith(_NOT_OBJECTS):
            return None
        metadata: Any = args.props.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            return None
        namespace = metadata.get("namespace")
        annotations = skip_annotations(waivers, args.type_.rsplit(":", 1)[-1], namespace if isinstance(namespace, str)
                                       else None, metadata["name"])
        if not annotations:
            return None
        merged = {**(metadata.get("annotations") or {}), **annotations}
        return pulumi.ResourceTransformationResult({**args.props, "metadata": {**metadata, "annotations": merged}},
                                                   args.opts)

    return transform
