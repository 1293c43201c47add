"""The way to the Kubernetes API from this machine: `python -m stacks api-path <stack>` says how the
stack reaches its API and whether this machine can (preflight runs the same checks), and
`python -m stacks allow-my-address <stack>` puts this machine's egress address into the stack file.

The paths themselves, and the checks every deploy-time reader runs, are stacks/api_path.py.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from stacks import loader
from stacks.api_path import (ALLOW_COMMAND, CLUSTER_KEY, api_path_problems, is_placeholder, placeholder_problem,
                             private_sources)
from stacks.settings import REPO, ConfigError

PATH_COMMAND = "api-path"
# Where this machine's egress IPv4 address is read from (one line of text).
EGRESS_LOOKUP_URL = "https://checkip.amazonaws.com"


class AccessError(ValueError):
    """A problem with the address lookup or the stack file; the message says what to do."""


def describe_path(settings) -> str:
    """The stack's way to the API in one line, for people (preflight, api-path, the workflows' logs)."""
    cluster = settings.cluster
    parts = []
    if cluster.public_access_cidrs:
        parts.append(f"public endpoint for {', '.join(cluster.public_access_cidrs)}")
    if private_sources(settings):
        parts.append(f"private endpoint on 443 for {', '.join(private_sources(settings))}")
    return "; ".join(parts) or "none: the endpoint is private and admits nothing"


def covered(address: str, cidrs: list[str]) -> list[str]:
    ip = ipaddress.ip_address(address)
    return [c for c in cidrs if ip in ipaddress.ip_network(c, strict=False)]


# --------------------------------------------------------------------------------------------------
# This machine's address


def egress_address(url: str = EGRESS_LOOKUP_URL, timeout_s: float = 10.0) -> str:
    """This machine's public IPv4 address as the lookup service sees it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - a fixed https URL or --lookup-url
            text = response.read(200).decode("ascii", errors="replace").strip()
    except OSError as exc:
        raise AccessError(f"could not read this machine's address from {url} ({getattr(exc, 'reason', exc)}); "
                          "pass it with --address") from None
    return public_ipv4(text, f"{url} answered")


def public_ipv4(text: str, source: str = "the address") -> str:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise AccessError(f"{source} {text[:60]!r}, which is not an IP address; pass it with --address") from None
    if ip.version != 4 or not ip.is_global:
        raise AccessError(f"{source} {ip}, which is not a public IPv4 address the EKS endpoint could be opened to; "
                          "pass the deploying machine's egress address with --address")
    return str(ip)


# --------------------------------------------------------------------------------------------------
# Can this machine reach it? (preflight and `api-path`)


@dataclass(frozen=True)
class Reach:
    level: str  # "blocker" | "warning" | "note"
    message: str
    fix: str | None = None


def reach_findings(settings, inside_vpc: bool, lookup: Callable[[], str] | None, strict: bool = False) -> list[Reach]:
    """Whether `pulumi up` from this machine reaches the API through the stack's paths."""
    stack, cluster = settings.stack, settings.cluster
    allow = f"python -m stacks {ALLOW_COMMAND} {stack}"
    found = [Reach("note", f"way to the Kubernetes API: {describe_path(settings)}")]
    if problem := placeholder_problem(settings):
        found.append(Reach("blocker", problem.removeprefix("vllm-poc:"), allow))
    if inside_vpc:
        if not private_sources(settings):
            found.append(Reach(
                "blocker", "--inside-vpc, but the EKS cluster security group admits nothing on 443 (it admits only "
                "itself): from inside the VPC `pulumi up` would time out at the first Kubernetes resource",
                "list this runner's security group in vllm-poc:cluster.privateAccessSecurityGroups (or its CIDR in "
                "privateAccessCidrs)"))
        return found
    real = [c for c in cluster.public_access_cidrs if not is_placeholder(c)]
    if not cluster.public_access_cidrs:
        found.append(Reach(
            "blocker", "the endpoint is private: `pulumi up` reaches it only from the private sources "
            f"({', '.join(private_sources(settings))}), and from here would time out at the first Kubernetes resource",
            f"run from one of them and pass --inside-vpc, or add this machine: {allow}"))
        return found
    if not real or lookup is None:
        return found
    try:
        address = lookup()
    except AccessError as exc:
        found.append(Reach("blocker" if strict else "warning",
                           f"could not tell whether this machine may reach the public endpoint: {exc}",
                           "check that this machine's egress address is in vllm-poc:cluster.publicAccessCidrs"))
        return found
    if through := covered(address, real):
        found.append(Reach("note", f"this machine's egress address {address} is in publicAccessCidrs ({', '.join(through)})"))
    else:
        found.append(Reach(
            "blocker", f"this machine's egress address {address} is not in vllm-poc:cluster.publicAccessCidrs "
            f"({', '.join(real)}): `pulumi up` from here would time out at the first Kubernetes resource",
            f"{allow} (adds {address}/32), or run where a listed address or a private source applies (--inside-vpc)"))
    return found


# --------------------------------------------------------------------------------------------------
# Editing the stack file


def _child(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    return next(((k, v) for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _end(node: yaml.Node) -> int:
    """Where a node's own text ends: a block collection's end mark lies at the next token, past any
    comment lines that follow it, so take its last item's end instead."""
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        return _end(last[1] if isinstance(node, yaml.MappingNode) else last)
    return node.end_mark.index


def _after_line(text: str, index: int) -> int:
    """The start of the line after `index` (where a block node's end mark may already be)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def set_public_cidrs(text: str, cidrs: list[str]) -> str:
    """`text` (a stack file) with vllm-poc:cluster.publicAccessCidrs set to `cidrs`; comments and the
    rest of the file kept as written."""
    return set_list_entry(text, CLUSTER_KEY, "publicAccessCidrs", cidrs)


def set_list_entry(text: str, namespace_key: str, entry_key: str, values: list[str]) -> str:
    """`text` (a stack file) with `<namespace_key>.<entry_key>` set to the flow list `values`; comments
    and the rest of the file kept as written. Refuses (AccessError) when the result would read back
    with anything else changed."""
    flow = "[" + ", ".join(values) + "]"
    root = yaml.compose(text)
    found = _child(root, "config") if isinstance(root, yaml.MappingNode) else None
    if found is None or not isinstance(found[1], yaml.MappingNode):
        raise AccessError("the stack file has no `config:` mapping")
    config = found[1]
    namespace = _child(config, namespace_key)
    if namespace is None:
        at = _after_line(text, _end(config))
        indent = " " * config.value[0][0].start_mark.column
        lead = "" if at == 0 or text[at - 1] == "\n" else "\n"
        new = text[:at] + f"{lead}{indent}{namespace_key}:\n{indent}  {entry_key}: {flow}\n" + text[at:]
    elif not isinstance(namespace[1], yaml.MappingNode) or namespace[1].flow_style:
        raise AccessError(f"{namespace_key} is not written as a block mapping; set {entry_key}: {flow} by hand")
    else:
        entry = _child(namespace[1], entry_key)
        if entry is None:
            at = _after_line(text, _end(namespace[1]))
            indent = " " * namespace[1].value[0][0].start_mark.column
            new = text[:at] + f"{indent}{entry_key}: {flow}\n" + text[at:]
        else:
            key, value = entry
            new = text[:key.end_mark.index] + f": {flow}" + text[_end(value):]
    # What was meant, and nothing else: the file reads back with only this key changed.
    before, after = yaml.safe_load(text), yaml.safe_load(new)
    expected = dict(before["config"])
    expected[namespace_key] = {**(expected.get(namespace_key) or {}), entry_key: list(values)}
    if after.get("config") != expected or {k: v for k, v in after.items() if k != "config"} != \
            {k: v for k, v in before.items() if k != "config"}:
        raise AccessError(f"could not edit the stack file safely; set {namespace_key}.{entry_key}: {flow} by hand")
    return new


def write_stack_file(path: Path, text: str) -> None:
    """Replace the file in one step: an interrupted write never leaves half a stack file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def allow_address(stack: str, address: str, directory: Path) -> tuple[list[str], list[str], Path]:
    """Put `address`/32 into the stack file's publicAccessCidrs, dropping placeholders.

    Returns (before, after, path); before == after when nothing had to change.
    """
    path = loader.stack_path(stack, directory)
    text = path.read_text()
    settings = loader.load_settings(stack, directory, scope="cluster")
    before = list(settings.cluster.public_access_cidrs)
    kept = [c for c in before if not is_placeholder(c)]
    after = kept if covered(address, kept) else [*kept, f"{address}/32"]
    if after != before:
        write_stack_file(path, set_public_cidrs(text, after))
        loader.load_settings(stack, directory, scope="cluster")  # still a valid stack file
    return before, after, path


# --------------------------------------------------------------------------------------------------
# CLI


def add_parser(subparsers) -> None:
    allow = subparsers.add_parser(
        ALLOW_COMMAND,
        help="put this machine's egress address into the stack's publicAccessCidrs (the way to the Kubernetes API)",
        description="Read this machine's public IPv4 address (or take --address) and write it as a /32 into "
        "vllm-poc:cluster.publicAccessCidrs of Pulumi.<stack>.yaml, replacing the shipped documentation "
        "placeholder; other entries and every comment are kept. Commit the stack file afterwards.",
    )
    allow.add_argument("stack", help="stack name (edits Pulumi.<stack>.yaml)")
    allow.add_argument("--address", help="the egress IPv4 address to allow, instead of looking it up")
    allow.add_argument("--lookup-url", default=EGRESS_LOOKUP_URL,
                       help=f"where the address is read from (default {EGRESS_LOOKUP_URL})")
    allow.add_argument("--dir", type=Path, help="directory holding the stack files (default: the project)")
    allow.set_defaults(func=run_allow)

    check = subparsers.add_parser(
        PATH_COMMAND,
        help="say how the stack reaches its Kubernetes API and whether this machine can (exit 1 if not)",
        description="Print the stack's way to the Kubernetes API (public CIDRs, private sources) and check that "
        "this machine can use it: its egress address is in publicAccessCidrs, or, with --inside-vpc, the "
        "cluster security group admits private sources. Reads only the cluster and network keys, so a "
        "teardown is never blocked by other settings.",
    )
    check.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    check.add_argument("--inside-vpc", action="store_true",
                       help="this machine reaches the endpoint's private address (a runner in the VPC or a peered network)")
    check.add_argument("--address", help="this machine's egress IPv4 address, instead of looking it up (offline, "
                       "or where the lookup service is blocked)")
    check.add_argument("--lookup-url", default=EGRESS_LOOKUP_URL,
                       help=f"where this machine's egress address is read from (default {EGRESS_LOOKUP_URL})")
    check.add_argument("--dir", type=Path, help="directory holding the stack files (default: the project)")
    check.set_defaults(func=run_path)


def egress_lookup(args: argparse.Namespace) -> Callable[[], str]:
    """This machine's egress address: --address as given (checked now: a bad one is bad input, exit 2,
    raised as AccessError), else a lookup at --lookup-url when a check needs it."""
    if getattr(args, "address", None):
        address = public_ipv4(args.address, "--address is")
        return lambda: address
    url = getattr(args, "lookup_url", None) or EGRESS_LOOKUP_URL
    return lambda: egress_address(url)


def _directory(args: argparse.Namespace) -> Path:
    return args.dir or REPO


def run_allow(args: argparse.Namespace) -> int:
    try:
        address = public_ipv4(args.address, "--address is") if args.address else egress_address(args.lookup_url)
        before, after, path = allow_address(args.stack, address, _directory(args))
    except (AccessError, ConfigError) as exc:
        print(f"{ALLOW_COMMAND}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{ALLOW_COMMAND}: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 2
    if before == after:
        print(f"{path.name}: {address} is already in {CLUSTER_KEY}.publicAccessCidrs ({', '.join(after)}); nothing changed")
        return 0
    shown = lambda cidrs: "[" + ", ".join(cidrs) + "]"  # noqa: E731
    print(f"{path.name}: {CLUSTER_KEY}.publicAccessCidrs {shown(before)} -> {shown(after)}")
    dropped = [c for c in before if is_placeholder(c)]
    if dropped:
        print(f"  removed the documentation placeholder {', '.join(dropped)}")
    print("  commit the stack file; a CI runner that deploys needs its own address there, or a private path "
          "(docs/operations.md, \"A way to the Kubernetes API\")")
    return 0


def run_path(args: argparse.Namespace) -> int:
    try:
        lookup = egress_lookup(args)
        settings = loader.load_settings(args.stack, _directory(args), scope="cluster")
    except (AccessError, ConfigError) as exc:
        print(f"{PATH_COMMAND}: error: {exc}", file=sys.stderr)
        return 2
    problems = api_path_problems(settings)
    findings = reach_findings(settings, args.inside_vpc, lookup, strict=True)
    findings += [Reach("blocker", p.removeprefix("vllm-poc:")) for p in problems]
    print(f"{settings.cluster.name} ({args.stack}):")
    for finding in findings:
        print(f"  {'' if finding.level == 'note' else finding.level.upper() + ': '}{finding.message}")
        if finding.fix:
            print(f"      fix: {finding.fix}")
    return 1 if any(f.level == "blocker" for f in findings) else 0
