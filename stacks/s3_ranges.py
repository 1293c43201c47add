"""The S3 addresses in the workload NetworkPolicy, and telling when they have gone stale.

A NetworkPolicy takes CIDRs, not a prefix-list id, so each `pulumi up` copies the region's S3 prefix
list (com.amazonaws.<region>.s3, where the S3 gateway endpoint routes) into the policy, and records
the same list in an SSM parameter and a ConfigMap beside it. When AWS adds a range, pods' traffic to
it (weight loads, syncs, result uploads) is dropped until the next `up` rewrites the policy. Nothing
in the cluster would say why; two checks do:

* `python -m stacks preflight` compares the recorded list with the prefix list as it is now and names
  the `pulumi up` that fixes it;
* the bench Job, before its sweep, compares the addresses S3 resolves to with the ranges it was given
  (bench/run/s3reach.py) and stops with the same explanation instead of timing out on its first upload.

Rules that do not depend on today's addresses were the other choice (0.0.0.0/0 on 443 for every pod,
or an S3 interface endpoint whose addresses are the VPC's own): the first gives every pod the whole
internet, the second costs per hour and per GB and changes the path the PoC's load times were
measured on. The ranges stay narrow, and drift is detected.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


def prefix_list_name(region: str) -> str:
    return f"com.amazonaws.{region}.s3"


def parameter_name(cluster: str) -> str:
    """The SSM parameter holding the ranges the policy allows (comma-separated CIDRs)."""
    return f"/vllm-poc/{cluster}/s3-ranges"


def parse(text: str | None) -> list[str]:
    return sorted({c.strip() for c in (text or "").split(",") if c.strip()})


def current_ranges(ec2, region: str) -> list[str]:
    """The region's S3 prefix list as it is now."""
    name = prefix_list_name(region)
    lists = ec2.describe_managed_prefix_lists(
        Filters=[{"Name": "prefix-list-name", "Values": [name]}])["PrefixLists"]
    if not lists:
        raise LookupError(f"no managed prefix list {name} in {region}")
    pages = ec2.get_paginator("get_managed_prefix_list_entries").paginate(PrefixListId=lists[0]["PrefixListId"])
    return sorted({entry["Cidr"] for page in pages for entry in page.get("Entries", [])})


@dataclass(frozen=True)
class Drift:
    level: str  # "warning" | "note"
    message: str
    fix: str | None = None


def _code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)


def drift(ec2, ssm, region: str, cluster: str, stack: str) -> list[Drift]:
    """The recorded ranges (the last `up`) against the prefix list now."""
    parameter = parameter_name(cluster)
    try:
        recorded = parse(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    except Exception as exc:  # noqa: BLE001 - classified: not deployed yet vs unreadable
        if _code(exc) == "ParameterNotFound":
            return [Drift("note", f"no record of the NetworkPolicy's S3 ranges ({parameter}): the stack is not "
                                  "deployed yet; `pulumi up` writes the current prefix list")]
        return [Drift("warning", f"could not read {parameter} ({_code(exc)}), so whether the NetworkPolicy's S3 "
                                 "ranges are current is unknown",
                      f"let the preflight identity call ssm:GetParameter on {parameter}")]
    try:
        now = current_ranges(ec2, region)
    except Exception as exc:  # noqa: BLE001
        return [Drift("warning", f"could not read the S3 prefix list {prefix_list_name(region)} ({_code(exc)})",
                      "let the preflight identity call ec2:DescribeManagedPrefixLists and "
                      "ec2:GetManagedPrefixListEntries")]
    added = [c for c in now if not any(ipaddress.ip_network(c).subnet_of(ipaddress.ip_network(r))
                                       for r in recorded if ipaddress.ip_network(r).version == ipaddress.ip_network(c).version)]
    removed = [r for r in recorded if r not in now]
    findings = []
    if added:
        findings.append(Drift(
            "warning",
            f"AWS's S3 prefix list {prefix_list_name(region)} now has {', '.join(added)}, which the NetworkPolicy "
            "written at the last `pulumi up` does not allow: pods' S3 traffic to those addresses (weight loads, "
            "syncs, result uploads) is dropped",
            f"`pulumi up -s {stack}` rewrites the policy from the current list"))
    if removed:
        findings.append(Drift("note", f"the NetworkPolicy still allows {', '.join(removed)}, no longer in "
                                      f"{prefix_list_name(region)}; the next `pulumi up -s {stack}` drops them"))
    if not findings:
        findings.append(Drift("note", f"the NetworkPolicy's S3 ranges match {prefix_list_name(region)} "
                                      f"({len(now)} ranges)"))
    return findings
