"""Preflight a stack's GPU capacity before `pulumi up`: `python -m stacks preflight <stack> [--json]`.

GPU quotas and regional availability are the usual first blockers (g7e.2xlarge is not offered in every
region; new accounts start with low G and VT vCPU quotas). For each GPU pool this checks, in the stack's
region:

* offerings: which AZs offer the instance type, against the AZs of the stack's subnets where known;
* quotas: the account's G and VT vCPU quotas (Service Quotas, values in vCPUs) against what the
  servers run: per server, ceil(TP x replicas / GPUs per instance) instances x vCPUs, counted against
  its pool's on-demand quota (or Spot, for a Spot-only pool). What the NodePool limits could launch
  beyond that is headroom: a warning when the quota does not cover it, never a blocker. The standard
  on-demand quota against the system node group (desiredSize x the vCPUs of its largest type; maxSize
  is headroom). A quota that cannot be read is "unknown": a warning, or a blocker with the reason
  under `--strict`;
* the stack: the pinned AMI release's NVIDIA AMI for the cluster's Kubernetes version (SSM; missing is
  a blocker), an admin role that is the caller's own (blocker), the caller role's maximum session
  shorter than a first `up` (3 h), a public API open to 0.0.0.0/0 and Hub revisions that are
  branches rather than commits (warnings);
* S3 ranges: those the NetworkPolicy allows (recorded at the last `up`) against the region's S3
  prefix list now (stacks.s3_ranges): a range AWS added since is a warning naming the `up` that
  fixes it;
* the way to the Kubernetes API from this machine (stacks/ops/api_access.py): the shipped placeholder
  address, an egress address missing from publicAccessCidrs, or `--inside-vpc` without private
  sources are blockers, each with the command that fixes it;
* prices: the latest Spot price per AZ against the on-demand price (AWS Price List API, else the
  catalog's PoC figure, marked as such).

Without AWS credentials it still runs every check that needs no account (offline.py: the stack file,
the way to the API and its placeholder address, hfToken and revisions, the zones), lists each AWS check
it could not run with what it reads and how to provide credentials, and exits 3 (incomplete).

Exit codes: 0 every check ran and found no blocker; 1 a blocker, each with its fix (warnings do not fail
the run); 2 bad input (the stack file, an argument); 3 incomplete: no blocker in what could run, but the
AWS checks could not (no credentials). The JSON form carries the same as `result`, `complete`,
`not_run` and `exit_code`. This module is the command; the package holds its parts: aws (what is read
from AWS), capacity (the pools and quotas, and their findings), account (the stack against the
account), offline (the checks that need no account) and report (the data and the table).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common.interrupts import exit_code, rerun_command, signal_name
from stacks.loader import load_settings
from stacks.ops import api_access
from stacks.ops.credentials import credentials_problem, missing_credentials
from stacks.ops.preflight.account import stack_findings
from stacks.ops.preflight.capacity import run_preflight
from stacks.ops.preflight.offline import Context, aws_checks, offline_findings
from stacks.ops.preflight.report import Pool, PreflightReport, SystemNodes, format_report
from stacks.settings import REPO

COMMAND = "preflight"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        COMMAND,
        help="check GPU offerings, vCPU quotas, the way to the Kubernetes API and prices for a stack before `pulumi up`",
        description="Check each GPU pool's instance offerings, the G and VT and standard vCPU quotas, the stack "
        "against the account (AMI, caller role and its session length, the way to the Kubernetes API, S3 ranges) "
        "and Spot/on-demand prices.",
    )
    p.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--dir", help="directory holding the stack files (default: the project)")
    p.add_argument("--strict", action="store_true",
                   help="a check that cannot be answered (a quota or the AMI unreadable) is a blocker, not a warning "
                   "(the workflows use it)")
    p.add_argument("--inside-vpc", action="store_true",
                   help="this machine reaches the API endpoint's private address (a runner inside the cluster's VPC or "
                   "a peered network), admitted by cluster.privateAccessSecurityGroups or privateAccessCidrs; without "
                   "it, this machine's egress address must be in cluster.publicAccessCidrs")
    p.add_argument("--address", help="this machine's egress IPv4 address, instead of looking it up at "
                   f"{api_access.EGRESS_LOOKUP_URL} (offline, or where the lookup is blocked)")
    p.set_defaults(func=run)
    return p


def _load_settings(stack: str, directory: str | None = None):
    return load_settings(stack, Path(directory) if directory else REPO)


def pools_from_settings(settings) -> list[Pool]:
    """One entry per NodePool: a Spot pool with onDemandFallback also gets `<name>-on-demand` (headroom only).

    A pool's servers need TP x replicas GPUs each (`server_gpus`); the rest of its limit is headroom.
    """
    pools = []
    for p in settings.gpu_pools:
        gpus = sum(s.tensor_parallel_size * s.replicas for s in getattr(settings, "servers", []) or []
                   if s.pool == p.name)
        pools.append(Pool(p.name, p.instance_type, tuple(p.capacity_types), int(p.gpu_limit), gpus))
        if getattr(p, "on_demand_fallback", False):
            pools.append(Pool(f"{p.name}-on-demand", p.instance_type, ("on-demand",), int(p.gpu_limit)))
    return pools


def system_nodes_from_settings(settings) -> SystemNodes | None:
    nodes = getattr(settings, "system_nodes", None)
    if nodes is None:
        return None
    return SystemNodes(tuple(nodes.instance_types), nodes.desired_size, nodes.max_size)


def make_clients(region: str) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    quick = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=10, read_timeout=30)
    return {
        "ec2": boto3.client("ec2", region_name=region, config=quick),
        "quotas": boto3.client("service-quotas", region_name=region, config=quick),
        "ssm": boto3.client("ssm", region_name=region, config=quick),
        "sts": boto3.client("sts", region_name=region, config=quick),
        "iam": boto3.client("iam", config=quick),
        # The Price List API answers from us-east-1 for every region's prices.
        "pricing": boto3.client("pricing", region_name="us-east-1", config=quick),
    }


def run(args: argparse.Namespace, clients: dict[str, Any] | None = None) -> int:
    strict = getattr(args, "strict", False)
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
        # Every check that needs no account runs first, with or without credentials.
        offline = offline_findings(settings, Context(
            strict=strict, inside_vpc=getattr(args, "inside_vpc", False),
            egress=_egress(args, clients), directory=Path(args.dir) if getattr(args, "dir", None) else None))
        missing = None if clients is not None else missing_credentials()
        if missing:
            report = _incomplete(settings, offline, missing)
        else:
            try:
                report = _with_account(settings, clients or make_clients(settings.region), strict, args.stack)
                report.findings += offline
            except Exception as exc:  # noqa: BLE001 - credentials refused mid-run: the same as none
                if (problem := credentials_problem(exc)) is None:
                    raise
                report = _incomplete(settings, offline, problem)
    except KeyboardInterrupt as exc:
        print(f"{COMMAND}: stopped by {signal_name(exc)}; preflight only reads, nothing was changed. "
              f"Rerun: {rerun_command('stacks')}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # noqa: BLE001 - settings or AWS access errors: one clear message
        print(f"{COMMAND}: error: {exc if isinstance(exc, ValueError) else f'{type(exc).__name__}: {exc}'}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return report.exit_code


def _egress(args: argparse.Namespace, clients: dict[str, Any] | None):
    """This machine's egress address: --address (a bad one is bad input), else the clients' or the live lookup."""
    if getattr(args, "address", None) or clients is None:
        return api_access.egress_lookup(args)
    return clients.get("egress")


def _with_account(settings, clients: dict[str, Any], strict: bool, stack: str | None = None) -> PreflightReport:
    network = getattr(settings, "network", None)
    report = run_preflight(
        settings.region,
        settings.cluster.name,
        pools_from_settings(settings),
        ec2=clients["ec2"],
        quotas=clients["quotas"],
        pricing=clients.get("pricing"),
        system=system_nodes_from_settings(settings),
        subnet_ids=sorted((getattr(network, "private_subnets", None) or {}).values()) or None,
        vpc_id=getattr(network, "vpc_id", None),
        new_vpc_az_count=None if getattr(network, "vpc_id", None) else getattr(network, "availability_zone_count", None),
        new_vpc_zones=getattr(network, "availability_zones", None),
        stack=stack,
        strict=strict,
    )
    report.findings += stack_findings(settings, clients, strict=strict)
    return report


def _incomplete(settings, offline: list, why: str) -> PreflightReport:
    """The offline checks' findings, and the AWS checks that could not run (no usable credentials)."""
    return PreflightReport(settings.region, settings.cluster.name, [], [], offline,
                           not_run=aws_checks(settings), credentials=why)


def main(argv: list[str] | argparse.Namespace | None = None) -> int:
    if isinstance(argv, argparse.Namespace):
        return run(argv)
    parser = argparse.ArgumentParser(prog="python -m stacks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)]))
