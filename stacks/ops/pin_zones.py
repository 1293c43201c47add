"""Decide a created VPC's zones once: `python -m stacks pin-zones <stack>` writes them into the stack file.

The zones come from the live VPC when the stack already has one (its private subnets, found by their
tags), else from today's offerings, by the same choice the program makes (stacks/zones.py). They are
written as `vllm-poc:network.availabilityZones`; every comment and other key of the file is kept.
From then on no offering change moves a subnet: preflight says when the offerings would choose
otherwise, and the render keeps the pinned zones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from components.network import DISCOVERY_TAG
from stacks import loader
from stacks.ops.api_access import AccessError, set_list_entry, write_stack_file
from stacks.ops.preflight.aws import error_text, offered_azs
from stacks.settings import REPO, ConfigError
from stacks.zones import choose_zones

COMMAND = "pin-zones"
NETWORK_KEY = "vllm-poc:network"


def live_zones(ec2, cluster: str, stack: str) -> list[str]:
    """Zones of the private subnets an earlier `up` of this stack created (the program's own lookup)."""
    subnets = ec2.describe_subnets(Filters=[
        {"Name": f"tag:{DISCOVERY_TAG}", "Values": [cluster]},
        {"Name": "tag:vllm-poc/stack", "Values": [stack]},
    ])["Subnets"]
    return sorted({s["AvailabilityZone"] for s in subnets})


def decide_zones(settings, ec2) -> tuple[list[str], str, list[str]]:
    """(zones, where they came from, problems): the live VPC's zones, else today's choice."""
    live = live_zones(ec2, settings.cluster.name, settings.stack)
    pool_types = {f"vllm-poc:gpuPools[{i}].instanceType": p.instance_type for i, p in enumerate(settings.gpu_pools)}
    offers = {t: set(azs) for t, azs in offered_azs(ec2, pool_types.values()).items()} if pool_types else {}
    if live:
        zones, problems = choose_zones(live, offers, pool_types, len(live), live)
        return zones, "the live VPC's subnets", problems
    available = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
    names = sorted(z["ZoneName"] for z in available["AvailabilityZones"])
    zones, problems = choose_zones(names, offers, pool_types, settings.network.availability_zone_count)
    return zones, "today's offerings", problems


def pin(stack: str, directory: Path, ec2) -> tuple[list[str] | None, list[str], str, list[str]]:
    """Write the zones into the stack file unless it has them. Returns (before, after, source, problems)."""
    settings = loader.load_settings(stack, directory)  # the GPU pools' types decide the zones
    if not settings.network.create_vpc:
        raise ConfigError([f"vllm-poc:network.vpcId: {stack} uses an existing VPC; its subnets "
                           "(privateSubnets) already fix the zones"])
    before = settings.network.availability_zones
    if before:
        return before, before, "the stack file", []
    zones, source, problems = decide_zones(settings, ec2)
    path = loader.stack_path(stack, directory)
    write_stack_file(path, set_list_entry(path.read_text(), NETWORK_KEY, "availabilityZones", zones))
    loader.load_settings(stack, directory, scope="cluster")  # still a valid stack file
    return None, zones, source, problems


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        COMMAND,
        help="write a created VPC's zones into the stack file (network.availabilityZones), once",
        description="Decide the zones of the VPC the stack creates, once: the live VPC's zones when the stack "
        "already has one, else today's choice from the GPU pools' offerings; write them as "
        "vllm-poc:network.availabilityZones into Pulumi.<stack>.yaml (comments kept). A stack file that "
        "already lists them is left as it is. Commit the stack file afterwards.",
    )
    p.add_argument("stack", help="stack name (edits Pulumi.<stack>.yaml)")
    p.add_argument("--dir", type=Path, help="directory holding the stack files (default: the project)")
    p.set_defaults(func=run)
    return p


def _ec2(region: str) -> Any:
    import boto3  # local import: the AWS SDK, only for commands that call AWS
    from botocore.config import Config  # local import: with boto3

    return boto3.client("ec2", region_name=region,
                        config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=10))


def run(args: argparse.Namespace, ec2: Any = None) -> int:
    directory = args.dir or REPO
    try:
        if ec2 is None:
            ec2 = _ec2(loader.load_settings(args.stack, directory, scope="cluster").region)
        before, after, source, problems = pin(args.stack, directory, ec2)
    except (ConfigError, AccessError) as exc:
        print(f"{COMMAND}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{COMMAND}: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - AWS access errors: one line with the reason
        print(f"{COMMAND}: error: could not read zones from AWS ({error_text(exc)}); check the credentials "
              "and region, or write network.availabilityZones by hand", file=sys.stderr)
        return 2
    if before:
        print(f"Pulumi.{args.stack}.yaml: network.availabilityZones is already [{', '.join(after)}]; nothing changed")
        return 0
    print(f"Pulumi.{args.stack}.yaml: network.availabilityZones [{', '.join(after)}] (from {source})")
    for problem in problems:
        print(f"  warning: {problem}")
    print("  commit the stack file: every later preview and `up` keeps these zones")
    return 0
