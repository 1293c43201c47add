"""Offline render: the real program under Pulumi's mock runtime, written out as reviewable files.

`python -m stacks render <stack> --out <dir>` writes
  resources.json   every registered resource: type, name, parent, inputs, dependsOn, options
  kubernetes.yaml  every Kubernetes object as it would be applied, in dependency order
  helm.json        every Helm release: chart, repository, version, namespace, values
  outputs.json     the stack outputs
  code/            the Python packages the Jobs mount (bench, weights) and the bench's prompt set
                   (bench/data), once each; the ConfigMaps in kubernetes.yaml and resources.json name
                   each file and its sha256
and prints a short summary. Two renders of the same stack are byte-identical, so a change reviews as
a diff. Bad config exits 2 with every problem of the stack file, before any resource is declared.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import config as runtime_config
from pulumi.runtime import settings as runtime_settings

from bench.common.cli import out_folder
from components import code_volume
from stacks import loader
from stacks.ops import mocks as mocks_module
from stacks.settings import PROJECT, REPO, ConfigError

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
_NOT_K8S_OBJECTS = (HELM_RELEASE, "pulumi:providers:kubernetes")


_SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(_SECRET_SIG[0]) == _SECRET_SIG[1]


def unsecret(value: Any) -> Any:
    """The plain value inside a secret wrapper (for tests); other values unchanged."""
    return value["value"] if is_secret(value) else value


def _masked(value: Any) -> Any:
    """A secret's shape with every leaf masked: a Secret's stringData keeps its keys, so it still reads as one."""
    if isinstance(value, dict) and not is_secret(value):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return "[secret]"


def _plain(value: Any) -> Any:
    """JSON-able copy of a deserialized input value; secrets are masked (their keys kept, every value hidden)."""
    if is_secret(value):
        return _masked(unsecret(value))
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


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


# Apply order of Kubernetes kinds (what must exist before what uses it), as Helm installs them;
# Karpenter's EC2NodeClass before the NodePools that name it. Unknown kinds go last.
KIND_ORDER = (
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
    "ServiceAccount", "Secret", "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
    "DaemonSet", "Pod", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "Ingress", "EC2NodeClass", "NodePool",
)

CODE_DIR = "code"


def _kind_rank(kind: str | None) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def dependency_order(items: list[tuple[str, tuple, set[str]]]) -> list[int]:
    """Indexes of (id, sort key, ids it depends on) so that each comes after its dependencies, ties
    broken by the sort key (dependencies outside the list are ignored; a cycle falls back to the key)."""
    ids = {ident: i for i, (ident, _, _) in enumerate(items)}
    waiting = {i: {ids[d] for d in deps if d in ids and ids[d] != i} for i, (_, _, deps) in enumerate(items)}
    users: dict[int, set[int]] = {i: set() for i in waiting}
    for i, deps in waiting.items():
        for d in deps:
            users[d].add(i)
    ready = [(items[i][1], i) for i, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order: list[int] = []
    while ready or len(order) < len(items):
        if not ready:  # a cycle: take the smallest remaining by key
            rest = sorted((items[i][1], i) for i in waiting if i not in order)
            ready = [rest[0]]
            waiting[rest[0][1]] = set()
        _, i = heapq.heappop(ready)
        if i in order:
            continue
        order.append(i)
        for user in sorted(users[i]):
            waiting[user].discard(i)
            if not waiting[user] and user not in order:
                heapq.heappush(ready, (items[user][1], user))
    return order


def _code_reference(path: str, text: str) -> str:
    return f"file {CODE_DIR}/{path} sha256:{hashlib.sha256(text.encode()).hexdigest()}"


# ConfigMap entries written out as files of the render: Python modules and the prompt set.
CODE_SUFFIXES = (".py", ".jsonl")


def _project_folders() -> list[Path]:
    """The project's packages, then their sub-folders (bench/data), where ConfigMap files come from."""
    packages = sorted(p for p in REPO.iterdir() if (p / "__init__.py").is_file())
    subfolders = sorted(d for p in packages for d in p.iterdir() if d.is_dir() and d.name != "__pycache__")
    return packages + subfolders


def code_package(files: dict[str, str], fallback: str) -> str:
    """Where a ConfigMap's files ({path in the package: text}) live in the project (bench, weights,
    bench/data): the folder holding exactly these files; else the ConfigMap's name without its hash
    suffix."""
    for directory in _project_folders():
        if all((directory / rel).is_file() and (directory / rel).read_text() == text for rel, text in files.items()):
            return directory.relative_to(REPO).as_posix()
    return re.sub(r"-[0-9a-f]{8,}$", "", fallback) or "configmap"


def externalize_code(data: Any, files: dict[str, str], name: str = "configmap") -> Any:
    """A ConfigMap's `data` with each Python module (and prompt file) replaced by a reference to its
    file in the render directory, `code/<package>/<path in the package>` (collected into `files`,
    once per content); a key names its path as components/code_volume.py says (run.sweep.py:
    run/sweep.py)."""
    if not isinstance(data, dict):
        return data
    modules = {k: v for k, v in data.items()
               if isinstance(k, str) and k.endswith(CODE_SUFFIXES) and isinstance(v, str)}
    if not modules:
        return data
    package = code_package({code_volume.path(k): v for k, v in modules.items()}, name)
    out = {}
    for key, text in data.items():
        if key in modules:
            path = f"{package}/{code_volume.path(key)}"
            if files.get(path, text) != text:  # another ConfigMap, other code under the same name
                path = f"{package}-{hashlib.sha256(text.encode()).hexdigest()[:8]}/{code_volume.path(key)}"
            files[path] = text
            out[key] = _code_reference(path, text)
        else:
            out[key] = text
    return out


class RenderError(Exception):
    """A problem with where to write the render (not with the config)."""


@dataclass
class Rendered:
    stack: str
    registrations: list[mocks_module.Registration]
    outputs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    # -- the three files ---------------------------------------------------------------------
    def resources(self) -> list[dict[str, Any]]:
        """Every resource, sorted by type then name, with its dependsOn sorted."""
        records = [
            {
                "type": r.type,
                "name": r.name,
                "parent": r.parent_name,
                "inputs": _plain(r.inputs),
                "dependsOn": sorted(_name_from_urn(u) for u in r.dependencies),
                "options": r.options,
            }
            for r in self.registrations
        ]
        return sorted(records, key=lambda r: (r["type"], r["name"], r["parent"] or ""))

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object in apply order: after what it depends on, else by kind, namespace, name."""
        items, objects = [], []
        for r in self.registrations:
            if not r.type.startswith("kubernetes:") or r.type in _NOT_K8S_OBJECTS:
                continue
            # Inputs carry what is applied; the name the provider would generate is in the outputs.
            body = _sorted_keys(_plain(r.inputs))
            body["metadata"] = _sorted_keys(
                {**_plain(r.outputs.get("metadata") or {}), **(body.get("metadata") or {})})
            ordered = {key: body.pop(key) for key in ("apiVersion", "kind", "metadata") if key in body}
            ordered.update(body)
            meta = ordered["metadata"]
            key = (_kind_rank(ordered.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                   r.name)
            items.append((r.urn, key, set(r.dependencies)))
            objects.append(ordered)
        return [objects[i] for i in dependency_order(items)]

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
                "values": _sorted_keys(inputs.get("values") or {}),
                "dependsOn": sorted(_name_from_urn(u) for u in r.dependencies),
            })
        return sorted(releases, key=lambda r: r["resource"])

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

    def files(self) -> dict[str, str]:
        """The render directory's files: {relative path: text}. Identical for identical config."""
        code: dict[str, str] = {}
        resources = self.resources()
        for r in resources:
            if r["type"] == "kubernetes:core/v1:ConfigMap":
                meta = r["inputs"].get("metadata") or {}
                r["inputs"]["data"] = externalize_code(r["inputs"].get("data"), code, str(meta.get("name") or r["name"]))
        objects = self.kubernetes_objects()
        for o in objects:
            if o.get("kind") == "ConfigMap":
                o["data"] = externalize_code(o.get("data"), code, str(o["metadata"].get("name") or "configmap"))
        files = {
            "resources.json": json.dumps(resources, indent=2, sort_keys=True) + "\n",
            "kubernetes.yaml": yaml.safe_dump_all(objects, sort_keys=False, width=120),
            "helm.json": json.dumps(self.helm_releases(), indent=2, sort_keys=True) + "\n",
            "outputs.json": json.dumps(_plain(self.outputs), indent=2, sort_keys=True) + "\n",
        }
        files.update({f"{CODE_DIR}/{name}": code[name] for name in sorted(code)})
        return files

    def write(self, out: Path) -> None:
        """Write the files into `out` (created; a previous render's files there are replaced)."""
        if out.exists() and not out.is_dir():
            raise RenderError(f"--out {out} is a file, not a directory; give a directory (it is created if missing)")
        files = self.files()
        out.mkdir(parents=True, exist_ok=True)
        if (out / CODE_DIR).is_dir():
            shutil.rmtree(out / CODE_DIR)  # no stale module of an earlier render
        for rel, text in files.items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

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
    # local import: the program loads the provider SDKs (pulumi_aws, pulumi_kubernetes, pulumi_eks, about
    # two seconds); every command's --help and a bad stack file answer before that
    from stacks import program

    settings = loader.settings_from_values(values, stack=stack)  # fail fast, outside the runtime
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
    """Render `Pulumi.<stack>.yaml` from the project directory (checked by stacks.loader first)."""
    return render_config(loader.load_config(stack, directory), stack=stack)


def _folder(value: str) -> Path:
    return Path(out_folder(value))


_folder.kind = "folder"  # type: ignore[attr-defined]  # as every --out (tests/test_cli_vocabulary.py)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "render", help="render a stack's desired state offline (no cloud, no Pulumi CLI)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("stack", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=_folder, metavar="DIR",
                        help="directory for resources.json, kubernetes.yaml, helm.json, outputs.json and code/ "
                             "(created; files of an earlier render there are replaced; default: build/render/STACK)")
    parser.add_argument("--dir", type=Path, default=REPO, help="directory holding the stack files (default: the project)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.out is None:
        args.out = Path("build") / "render" / args.stack
    if args.out.exists() and not args.out.is_dir():
        print(f"render: error: --out {args.out} is a file, not a directory; give a directory "
              "(it is created if missing)", file=sys.stderr)
        return 2
    try:
        rendered = render_stack(args.stack, args.dir)
        rendered.write(args.out)
    except (ConfigError, RenderError, pulumi.RunError) as err:
        # RunError: the program refused the stack (checks against the account), as `pulumi up` would
        print(f"render: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"render: error: cannot write {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(rendered.summary())
    print(f"wrote {args.out}/: resources.json, kubernetes.yaml, helm.json, outputs.json, {CODE_DIR}/")
    return 0
