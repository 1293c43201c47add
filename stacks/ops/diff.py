"""What a change does to a stack, offline: `python -m stacks diff <stack> [--against <git ref>] [--json]`.

The stack is rendered twice under Pulumi's mock runtime (as `python -m stacks render` does): from the
working tree, and from the commit `--against` names, checked out with `git archive` into a temporary
folder and rendered there by this same Python (the project's .venv). The two `resources.json` are
compared resource by resource, as Pulumi matches them, by type and resource name:

  create   in the working tree only
  update   in both, inputs changed; each changed field is listed with its old and new value
  replace  in both, and a change the object cannot take in place: a new name (Kubernetes objects
           named after a hash of their content, such as `bench-code-<server>-<hash>`, are paired
           with their predecessor here, not shown as a delete and a create), a new namespace, the
           data of an immutable ConfigMap, a Job's pod template, an AWS resource's identifying
           input (bucket, cluster, role name...); the table is FORCE_NEW below
  delete   at the ref only

Kubernetes objects, Helm releases and AWS resources are all covered (every resource the program
registers). Without `--against`, the ref is where the branch left main: `git merge-base HEAD main`
(or `origin/main`); without either branch, HEAD (the uncommitted changes). `--json` prints
`{"create": [...], "update": [...], "replace": [...], "delete": [...], "effects": [...]}`.

What costs GPU time is said first, in words (`effects`): "restarts server gemma-fp8" (its pod
template changed: a cold start; "rolls server chat one replica at a time" for an autoscaled server, whose
replicas restart one after another), "re-runs sweep bench-gemma-fp8" (a new sweep identity: hours of GPU),
"scales server gemma-fp8 to 0 replicas", "re-records the start-up of gemma-fp8", "writes the report
again". A change with no effect there restarts nothing and re-runs nothing.

This is what the render shows, not the provider's own diff: `pulumi preview --diff` against the
real state stays the authority (the PR workflow posts both). Nothing is written outside a
temporary folder, which is removed at the end and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from bench.common.interrupts import exit_code, signal_name, stop_behind, stop_process_group
from stacks.loader import stack_path
from stacks.ops.render import render_stack
from stacks.settings import REPO, ConfigError

KINDS = ("create", "update", "replace", "delete")
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
_ABSENT = object()

# Inputs whose change replaces a resource instead of updating it, by type (glob). Kubernetes objects
# also always by metadata.name and metadata.namespace; Helm releases by name and namespace.
FORCE_NEW: dict[str, tuple[str, ...]] = {
    "kubernetes:batch/v1:Job": ("spec.template", "spec.selector"),
    "kubernetes:apps/v1:*": ("spec.selector",),
    "kubernetes:core/v1:Service": ("spec.clusterIP",),
    "kubernetes:rbac.authorization.k8s.io/v1:*Binding": ("roleRef",),
    "kubernetes:core/v1:PersistentVolumeClaim": ("spec",),
    "kubernetes:helm.sh/v3:Release": ("name", "namespace"),
    "aws:cloudwatch/eventRule:EventRule": ("name",),
    "aws:cloudwatch/eventTarget:EventTarget": ("rule", "targetId"),
    "aws:cloudwatch/logGroup:LogGroup": ("name",),
    "aws:ec2/eip:Eip": ("domain",),
    "aws:ec2/launchTemplate:LaunchTemplate": ("name", "namePrefix"),
    "aws:ec2/natGateway:NatGateway": ("allocationId", "subnetId"),
    "aws:ec2/routeTable:RouteTable": ("vpcId",),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": ("subnetId",),
    "aws:ec2/subnet:Subnet": ("vpcId", "cidrBlock", "availabilityZone"),
    "aws:ec2/tag:Tag": ("resourceId", "key"),
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("vpcId", "serviceName", "vpcEndpointType"),
    "aws:eks/accessEntry:AccessEntry": ("clusterName", "principalArn"),
    "aws:eks/addon:Addon": ("clusterName", "addonName"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("clusterName", "namespace", "serviceAccount"),
    "aws:iam/role:Role": ("name", "namePrefix", "path"),
    "aws:iam/rolePolicy:RolePolicy": ("name", "role"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("role", "policyArn"),
    "aws:s3/bucket:Bucket": ("bucket", "bucketPrefix"),
    "aws:s3/bucket*:*": ("bucket",),
    "aws:sqs/queue:Queue": ("name", "fifoQueue"),
    "aws:sqs/queuePolicy:QueuePolicy": ("queueUrl",),
    "eks:index:Cluster": ("name",),
    # pulumi-eks passes these to the aws.eks.NodeGroup inside, which cannot take them in place
    "eks:index:ManagedNodeGroup": ("amiType", "capacityType", "clusterName", "diskSize", "instanceTypes",
                                   "nodeGroupName", "nodeGroupNamePrefix", "nodeRole", "nodeRoleArn", "remoteAccess",
                                   "subnetIds"),
}
# Inputs that give an AWS resource a fixed name. Pulumi creates a replacement before it deletes the
# resource it replaces; under an unchanged fixed name AWS refuses that second resource, unless
# deleteBeforeReplace is set (then the old one goes first, and what ran on it with it).
FIXED_NAME_FIELDS = ("name", "bucket", "nodeGroupName")
# A hash in a name (a ConfigMap or Job named after its content): stripped to pair renamed resources.
_HASH = re.compile(r"-[0-9a-f]{8,}(?=-|$)")


class DiffError(Exception):
    """Bad input or a checkout that cannot be compared; the message says what to do."""


# -- comparing two renders ---------------------------------------------------------------------------


def _is_k8s_object(typ: str) -> bool:
    return typ.startswith("kubernetes:") and typ != HELM_RELEASE and not typ.startswith("kubernetes:pulumi")


def describe(record: dict[str, Any]) -> str:
    """How a reviewer names the object: `Kind namespace/name`, a Helm release, or the resource name."""
    inputs = record.get("inputs") or {}
    if _is_k8s_object(record["type"]) and inputs.get("kind"):
        meta = inputs.get("metadata") or {}
        name = meta.get("name") or f"{record['name']} (name chosen by Pulumi)"
        return f"{inputs['kind']} {meta['namespace']}/{name}" if meta.get("namespace") else f"{inputs['kind']} {name}"
    if record["type"] == HELM_RELEASE:
        chart = inputs.get("chart") or "chart"
        version = f" {inputs['version']}" if inputs.get("version") else ""
        return f"Helm release {inputs.get('name') or record['name']} ({chart}{version})"
    return f"{record['type'].rsplit(':', 1)[-1]} {record['name']}"


def _maybe_json(value: Any) -> Any:
    # IAM policies and Helm values travel as JSON strings: compare what they say, field by field.
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def field_changes(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The fields that differ, deepest first: [{"field", "before"?, "after"?}] (a side missing: not set)."""
    if before is _ABSENT or after is _ABSENT or type(before) is not type(after):
        if before == after:
            return []
        change: dict[str, Any] = {"field": path or "(whole object)"}
        if before is not _ABSENT:
            change["before"] = before
        if after is not _ABSENT:
            change["after"] = after
        return [change]
    if isinstance(before, dict):
        changes = []
        for key in sorted(set(before) | set(after)):
            changes += field_changes(before.get(key, _ABSENT), after.get(key, _ABSENT), f"{path}.{key}" if path else key)
        return changes
    if isinstance(before, list):
        changes = []
        for i in range(max(len(before), len(after))):
            changes += field_changes(before[i] if i < len(before) else _ABSENT,
                                     after[i] if i < len(after) else _ABSENT, f"{path}[{i}]")
        return changes
    if before == after:
        return []
    parsed_before, parsed_after = _maybe_json(before), _maybe_json(after)
    if parsed_before is not before and parsed_after is not after:
        return field_changes(parsed_before, parsed_after, f"{path}(json)")
    return [{"field": path, "before": before, "after": after}]


def _under(field: str, prefix: str) -> bool:
    return field == prefix or field.startswith((f"{prefix}.", f"{prefix}[", f"{prefix}(json)"))


def replace_reasons(typ: str, before: dict[str, Any], changes: list[dict[str, Any]]) -> list[str]:
    """Why the changes cannot be applied in place (empty: an update)."""
    fields = [c["field"] for c in changes]
    prefixes = []
    if _is_k8s_object(typ):
        prefixes += ["metadata.name", "metadata.namespace", "kind", "apiVersion"]
        if (before.get("inputs") or {}).get("immutable") is True:
            prefixes += ["data", "binaryData", "stringData"]
    prefixes += [p for pattern, paths in FORCE_NEW.items() if fnmatch.fnmatchcase(typ, pattern) for p in paths]
    reasons = []
    for prefix in dict.fromkeys(prefixes):
        if any(_under(f, prefix) for f in fields):
            reasons.append(f"{prefix} changed")
    return reasons


def name_collision(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why replacing this AWS resource would fail: its replacement is created first under the same fixed
    name (None for Kubernetes objects, which pulumi-kubernetes deletes first when they are named, for a
    name that changes or is generated, and with deleteBeforeReplace)."""
    if _is_k8s_object(after["type"]) or after["type"] == HELM_RELEASE:
        return None
    if (after.get("options") or {}).get("deleteBeforeReplace"):
        return None
    old, new = before.get("inputs") or {}, after.get("inputs") or {}
    for name in FIXED_NAME_FIELDS:
        if isinstance(new.get(name), str) and new.get(name) == old.get(name):
            return (f"the replacement is created before the old one is deleted, under the same {name} "
                    f"{new[name]!r}, which AWS refuses; let Pulumi or AWS name it (a prefix), or set deleteBeforeReplace")
    return None


def _index(resources: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["type"], r["name"]): r for r in resources}


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    return {"type": record["type"], "name": record["name"], "object": describe(record)}


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    changes = field_changes(before.get("inputs") or {}, after.get("inputs") or {})
    if (before.get("parent") or "") != (after.get("parent") or ""):
        changes.append({"field": "(parent)", "before": before.get("parent") or "the stack",
                        "after": after.get("parent") or "the stack"})
    return changes


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The preview of going from the `old` render's resources to the `new` one's."""
    before, after = _index(old), _index(new)
    out: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for key in sorted(before.keys() & after.keys()):
        changes = _changed(before[key], after[key])
        if not changes:
            continue
        reasons = replace_reasons(key[0], before[key], changes)
        if any(c["field"] == "(parent)" for c in changes):
            reasons.append("moved to another parent (a new resource identity)")
        if reasons:
            entry = {**_entry(after[key]), "replaces": describe(before[key]), "reasons": reasons, "changes": changes}
            if collision := name_collision(before[key], after[key]):
                entry["collides"] = collision
            out["replace"].append(entry)
        else:
            out["update"].append({**_entry(after[key]), "changes": changes})
    created = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    # A resource whose own name carries a content hash: the new hash replaces the old one.
    unhashed = {}
    for key in deleted:
        unhashed.setdefault((key[0], _HASH.sub("", key[1])), []).append(key)
    for key in created:
        candidates = unhashed.get((key[0], _HASH.sub("", key[1])))
        if candidates and _HASH.search(key[1]):
            old_key = candidates.pop(0)
            deleted.remove(old_key)
            changes = _changed(before[old_key], after[key])
            out["replace"].append({**_entry(after[key]), "replaces": describe(before[old_key]),
                                   "reasons": [f"renamed from {old_key[1]}"], "changes": changes})
        else:
            out["create"].append(_entry(after[key]))
    out["delete"] = [_entry(before[key]) for key in deleted]
    return out


# -- what it costs -------------------------------------------------------------------------------------

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
JOB = "kubernetes:batch/v1:Job"
_JOB_EFFECTS = {  # app.kubernetes.io/name of a Job -> (what a new one does, what a replaced one does)
    "vllm-bench": ("runs sweep bench-{server}", "re-runs sweep bench-{server}"),
    "vllm-startup": ("records the start-up of {server}", "re-records the start-up of {server}"),
    "vllm-report": ("writes the report", "writes the report again"),
}


def _labels(record: dict[str, Any]) -> dict[str, str]:
    return ((record.get("inputs") or {}).get("metadata") or {}).get("labels") or {}


def _server(record: dict[str, Any]) -> str:
    labels = _labels(record)
    return labels.get("app.kubernetes.io/instance") or ((record.get("inputs") or {}).get("metadata") or {}).get(
        "name") or record["name"]


def effects(old: list[dict[str, Any]], new: list[dict[str, Any]],
            result: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What the change does to the servers and the sweeps, in words (see the module docstring)."""
    del old  # what a change does is read from the new objects and the changed fields
    after = _index(new)
    said: list[str] = []
    for kind in ("create", "replace", "update"):
        for entry in result[kind]:
            record = after[(entry["type"], entry["name"])]
            fields = [c["field"] for c in entry.get("changes") or []]
            if entry["type"] == DEPLOYMENT and _labels(record).get("app.kubernetes.io/name") == "vllm":
                server = _server(record)
                if kind == "create":
                    said.append(f"starts server {server}")
                    continue
                if any(_under(f, "spec.template") for f in fields) or kind == "replace":
                    rolling = ((record.get("inputs") or {}).get("spec") or {}).get("strategy", {}).get("type")
                    # an autoscaled server rolls: each replica restarts, never all at once
                    said.append(f"rolls server {server} one replica at a time" if rolling == "RollingUpdate"
                                and kind != "replace" else f"restarts server {server}")
                replicas = [c for c in entry.get("changes") or [] if c["field"] == "spec.replicas"]
                for change in replicas:
                    said.append(f"scales server {server} to {change.get('after', 'its default of 1')} replicas")
            elif entry["type"] == JOB and _labels(record).get("app.kubernetes.io/name") in _JOB_EFFECTS:
                new_text, again = _JOB_EFFECTS[_labels(record)["app.kubernetes.io/name"]]
                said.append((new_text if kind == "create" else again).format(server=_server(record)))
    return sorted(dict.fromkeys(said))


# -- text -------------------------------------------------------------------------------------------

_SIGN = {"create": "+", "update": "~", "replace": "+-", "delete": "-"}
_WIDTH = 110


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."


def _change_line(change: dict[str, Any]) -> str:
    before = _short(change["before"]) if "before" in change else "(not set)"
    after = _short(change["after"]) if "after" in change else "(not set)"
    return f"      {change['field']}: {before} => {after}"


def format_text(result: dict[str, list[dict[str, Any]]], header: str, unchanged: int,
                max_fields: int = 20, said: list[str] | None = None) -> str:
    counts = ", ".join(f"{len(result[k])} to {k}" for k in KINDS)
    lines = [header]
    if said:
        lines += [f"this change {text}" for text in said]
    if not any(result.values()):
        lines.append(f"no changes: {unchanged} resources render the same")
        return "\n".join(lines) + "\n"
    lines.append(f"{counts}; {unchanged} unchanged")
    for kind in KINDS:
        for entry in result[kind]:
            lines.append("")
            lines.append(f"{_SIGN[kind]} {kind} {entry['object']}  [{entry['type']} {entry['name']}]")
            if kind == "replace":
                lines.append(f"    replaces {entry['replaces']}: {'; '.join(entry['reasons'])}")
                if entry.get("collides"):
                    lines.append(f"    WILL FAIL: {entry['collides']}")
            changes = entry.get("changes") or []
            lines += [_change_line(c) for c in changes[:max_fields]]
            if len(changes) > max_fields:
                lines.append(f"      ... and {len(changes) - max_fields} more fields (--json lists them all)")
    return "\n".join(lines) + "\n"


# -- git and the two renders --------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)


def repository_root(project: Path = REPO) -> Path:
    try:
        found = _git(project, "rev-parse", "--show-toplevel")
    except FileNotFoundError:
        raise DiffError("git is not installed; install git (the diff renders a commit taken from git)") from None
    if found.returncode != 0:
        raise DiffError(f"{project} is not a git checkout; run the diff in a clone of the project, or compare two "
                        f"`python -m stacks render` folders with `diff -r`")
    return Path(found.stdout.strip())


def resolve_ref(root: Path, ref: str | None) -> tuple[str, str]:
    """(commit, how it was chosen) for --against, or the default: the merge-base with main, else HEAD."""
    if ref is not None:
        found = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode != 0:
            raise DiffError(f"--against {ref}: no such commit in {root}; give a branch, tag or commit "
                            f"(for example --against main or --against HEAD~1; `git fetch` first for origin/...)")
        return found.stdout.strip(), ref
    for base in ("main", "origin/main"):
        merge_base = _git(root, "merge-base", "HEAD", base)
        if merge_base.returncode == 0:
            return merge_base.stdout.strip(), f"merge-base with {base}"
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.returncode != 0:
        raise DiffError(f"{root} has no commit yet; commit once, or give --against <ref>")
    return head.stdout.strip(), "HEAD (no main branch here)"


def export_commit(root: Path, commit: str, dest: Path) -> None:
    """The commit's tracked files into `dest` (`git archive`; no checkout, the working tree untouched)."""
    proc = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit],
                          capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise DiffError(f"git archive {commit[:12]} failed: {proc.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
        archive.extractall(dest, filter="data")


def start_render(tree: Path, project: Path, stack: str, out: Path) -> subprocess.Popen[str]:
    """`python -m stacks render` of the project folder inside `tree`, by this Python, in its own group."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([sys.executable, "-m", "stacks", "render", stack, "--out", str(out)], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _last_lines(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


@dataclass
class Diff:
    stack: str
    commit: str
    chosen: str
    result: dict[str, list[dict[str, Any]]]
    unchanged: int
    note: str = ""
    effects: list[str] = field(default_factory=list)

    @property
    def header(self) -> str:
        head = f"stack {self.stack}: working tree against {self.commit[:12]} ({self.chosen})"
        return head + (f"\n{self.note}" if self.note else "")


def run_diff(stack: str, against: str | None, project: Path = REPO) -> Diff:
    """Render the stack from the working tree and from the ref, and compare them."""
    root = repository_root(project)
    commit, chosen = resolve_ref(root, against)
    relative = project.resolve().relative_to(root.resolve())
    with tempfile.TemporaryDirectory(prefix="stacks-diff-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        export_commit(root, commit, tree)
        old_project = tree / relative
        print(f"diff: rendering {stack} at {commit[:12]} ({chosen}) and in the working tree", file=sys.stderr,
              flush=True)
        proc = None
        if (old_project / f"Pulumi.{stack}.yaml").is_file():
            proc = start_render(tree, old_project, stack, Path(tmp) / "old")
        try:
            try:
                new_resources = json.loads(render_stack(stack, project).files()["resources.json"])
            except pulumi.RunError as err:  # the program refused the stack, as `pulumi up` would
                raise DiffError(str(err)) from None
            note = ""
            if proc is None:
                old_resources: list[dict[str, Any]] = []
                note = f"Pulumi.{stack}.yaml does not exist at {commit[:12]}: every resource is new"
            else:
                stdout, stderr = proc.communicate(timeout=900)
                if proc.returncode != 0:
                    raise DiffError(f"the stack does not render at {commit[:12]} ({chosen}):\n"
                                    f"{_last_lines(stderr or stdout)}")
                old_resources = json.loads((Path(tmp) / "old" / "resources.json").read_text())
        finally:
            stop_process_group(proc, grace_s=3)
    result = compare(old_resources, new_resources)
    touched = {(e["type"], e["name"]) for kind in ("update", "replace") for e in result[kind]}
    unchanged = len({(r["type"], r["name"]) for r in new_resources} - touched
                    - {(e["type"], e["name"]) for e in result["create"]})
    return Diff(stack, commit, chosen, result, unchanged, note, effects(old_resources, new_resources, result))


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "diff", help="what a change does to a stack: the render at a git ref against the working tree",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("stack", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--against", metavar="REF",
                        help="git branch, tag or commit to compare with (default: the merge-base of HEAD and "
                             "main, or origin/main; without either, HEAD)")
    parser.add_argument("--json", action="store_true",
                        help='print {"create": [...], "update": [...], "replace": [...], "delete": [...], '
                         '"effects": ["restarts server ...", "re-runs sweep ..."]}')
    parser.set_defaults(func=main)


def _stopped(exc: BaseException) -> int:
    print(f"diff: stopped by {signal_name(exc)}; nothing was kept (both renders were in a temporary "
          f"folder, now removed); rerun the same command", file=sys.stderr)
    return exit_code(exc)


def main(args: argparse.Namespace) -> int:
    try:
        stack_path(args.stack)  # an unknown stack fails before git and the renders
        diff = run_diff(args.stack, args.against)
    except (ConfigError, DiffError) as err:
        print(f"diff: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - an error a stop caused is the stop; any other goes on up
        stop = stop_behind(err)
        if stop is None:
            if isinstance(err, OSError):
                print(f"diff: error: {err.strerror or err}", file=sys.stderr)
                return 2
            raise
        return _stopped(stop)
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    if args.json:
        print(json.dumps({**diff.result, "effects": diff.effects}, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(format_text(diff.result, diff.header, diff.unchanged, said=diff.effects), end="")
    return 0
