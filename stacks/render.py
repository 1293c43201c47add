"""Offline render: the real program under Pulumi's mock runtime, written out as reviewable files.

`python -m stacks render <stack> --out <dir>` writes
  resources.json   every registered resource: type, name, parent, inputs, dependsOn, options
  kubernetes.yaml  every Kubernetes object as it would be applied
  helm.json        every Helm release: chart, repository, version, namespace, values
and prints a short summary. Bad config exits non-zero with the validation message, before any
resource is declared.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import config as runtime_config
from pulumi.runtime import settings as runtime_settings

from stacks import mocks as mocks_module
from stacks.settings import PROJECT, REPO, ConfigError, read_stack_file, settings_from_config

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
_NOT_K8S_OBJECTS = (HELM_RELEASE, "pulumi:providers:kubernetes")


_SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(_SECRET_SIG[0]) == _SECRET_SIG[1]


def unsecret(value: Any) -> Any:
    """The plain value inside a secret wrapper (for tests); other values unchanged."""
    return value["value"] if is_secret(value) else value


def _plain(value: Any) -> Any:
    """JSON-able copy of a deserialized input value; secrets are masked."""
    if is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.Resource):
        return {"$resource": getattr(value, "_name", type(value).__name__)}
    if isinstance(value, float) and value.is_integer():
        # Pulumi carries every number as a double; what is applied is the JSON integer.
        return int(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _name_from_urn(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


@dataclass
class Rendered:
    stack: str
    registrations: list[mocks_module.Registration]
    outputs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    # -- the three files ---------------------------------------------------------------------
    def resources(self) -> list[dict[str, Any]]:
        return [
            {
                "type": r.type,
                "name": r.name,
                "parent": r.parent_name,
                "inputs": _plain(r.inputs),
                "dependsOn": [_name_from_urn(u) for u in r.dependencies],
                "options": r.options,
            }
            for r in self.registrations
        ]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        objects = []
        for r in self.registrations:
            if not r.type.startswith("kubernetes:") or r.type in _NOT_K8S_OBJECTS:
                continue
            # Inputs carry what is applied; the name the provider would generate is in the outputs.
            body = _plain(r.inputs)
            body["metadata"] = {**_plain(r.outputs.get("metadata") or {}), **(body.get("metadata") or {})}
            ordered = {key: body.pop(key) for key in ("apiVersion", "kind", "metadata") if key in body}
            ordered.update(body)
            objects.append(ordered)
        return objects

    def helm_releases(self) -> list[dict[str, Any]]:
        releases = []
        for r in self.registrations:
            if r.type != HELM_RELEASE:
                continue
            inputs = _plain(r.inputs)
            releases.append({
                "resource": r.name,
                "name": inputs.get("name"),
                "chart": inputs.get("chart"),
                "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
                "version": inputs.get("version"),
                "namespace": inputs.get("namespace"),
                "skipCrds": bool(inputs.get("skipCrds", False)),
                "values": inputs.get("values") or {},
                "dependsOn": [_name_from_urn(u) for u in r.dependencies],
            })
        return releases

    # -- lookups for tests ---------------------------------------------------------------------
    def of_type(self, typ: str) -> list[mocks_module.Registration]:
        return [r for r in self.registrations if r.type == typ]

    def one(self, typ: str, name: str | None = None) -> mocks_module.Registration:
        found = [r for r in self.of_type(typ) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {typ} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def k8s(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.kubernetes_objects() if o.get("kind") == kind]

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "resources.json").write_text(json.dumps(self.resources(), indent=2, sort_keys=False) + "\n")
        (out / "kubernetes.yaml").write_text(
            yaml.safe_dump_all(self.kubernetes_objects(), sort_keys=False, width=120)
        )
        (out / "helm.json").write_text(json.dumps(self.helm_releases(), indent=2) + "\n")
        (out / "outputs.json").write_text(json.dumps(_plain(self.outputs), indent=2) + "\n")

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for r in self.registrations:
            counts[r.type] = counts.get(r.type, 0) + 1
        lines = [f"stack {self.stack}: {len(self.registrations)} resources, "
                 f"{len(self.kubernetes_objects())} Kubernetes objects, {len(self.helm_releases())} Helm releases "
                 f"({self.seconds:.1f} s)"]
        for typ in sorted(counts):
            lines.append(f"  {counts[typ]:3d}  {typ}")
        return "\n".join(lines)


def _config_strings(values: dict[str, Any]) -> dict[str, str]:
    # pulumi.Config reads strings; structured values travel as JSON, as the CLI hands them over.
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            value = "[secret]"  # ciphertext cannot be decrypted offline
        out[key] = value if isinstance(value, str) else json.dumps(value)
    return out


def render_config(values: dict[str, Any], *, stack: str = "test") -> Rendered:
    """Run the program under mocks with the given config ({"<ns>:<key>": value}).

    Raises ConfigError before anything is declared when the config is invalid.
    """
    from stacks import program

    settings = settings_from_config(values, stack=stack)  # fail fast, outside the runtime
    runtime_config.set_all_config(_config_strings(values), secret_keys=[])
    outputs: dict[str, Any] = {}

    async def body() -> None:
        program.run()
        root = runtime_settings.get_root_resource()
        exported = await pulumi.Output.from_input(dict(getattr(root, "outputs", {}) or {})).future()
        outputs.update(exported or {})

    started = time.perf_counter()
    mocks = mocks_module.run(body, region=settings.region, project=PROJECT, stack=stack)
    return Rendered(stack=stack, registrations=mocks.registrations, outputs=outputs,
                    seconds=time.perf_counter() - started)


def render_stack(stack: str, directory: Path = REPO) -> Rendered:
    """Render `Pulumi.<stack>.yaml` from the project directory."""
    return render_config(read_stack_file(stack, directory), stack=stack)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "render", help="render a stack's desired state offline (no cloud, no Pulumi CLI)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("stack", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path, required=True, help="directory for the rendered files")
    parser.add_argument("--dir", type=Path, default=REPO, help="directory holding the stack files (default: the project)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        rendered = render_stack(args.stack, args.dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rendered.write(args.out)
    print(rendered.summary())
    print(f"wrote {args.out}/resources.json, kubernetes.yaml, helm.json, outputs.json")
    return 0
