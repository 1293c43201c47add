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
* the way to the Kubernetes API from this machine (stacks.api_access): the shipped placeholder
  address, an egress address missing from publicAccessCidrs, or `--inside-vpc` without private
  sources are blockers, each with the command that fixes it;
* prices: the latest Spot price per AZ against the on-demand price (AWS Price List API, else the
  catalog's PoC figure, marked as such).

Blockers exit 1, each with its fix; warnings do not fail the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from stacks import api_access, catalog, s3_ranges

COMMAND = "preflight"

# Service Quotas codes (EC2), values in vCPUs. Every G and VT family (g4dn ... g7e, gr6, vt1) shares one pair.
QUOTA_GROUP_FAMILIES = ("g", "vt")
QUOTAS = {
    "on-demand": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "spot": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
}
# The system node group's on-demand instances count against this one.
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
# Families with quotas of their own although their names start with a standard letter.
_OWN_QUOTA_FAMILIES = ("inf", "dl", "hpc", "mac", "trn", "u-")
# A first `up` (cluster ~15 min, weight sync, GPU node, cold start) runs up to about 3 hours; a session
# that ends sooner leaves a half-created stack.
FIRST_UP_SESSION_S = 3 * 3600
# Karpenter logs a warning below this many types when a NodePool is flexible to Spot and on-demand
# (pkg/providers/instance/instance.go, instanceTypeFlexibilityThreshold).
FLEXIBILITY_THRESHOLD = 5
LINUX_SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


@dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    capacity_types: tuple[str, ...]
    gpu_limit: int
    server_gpus: int = 0  # GPUs the stack's servers on this pool run: TP x replicas, summed


@dataclass(frozen=True)
class SystemNodes:
    instance_types: tuple[str, ...]
    desired_size: int
    max_size: int

    @property
    def vcpus_per_node(self) -> int:
        # The node group may launch any listed type: count the largest.
        return max(catalog.system_vcpus(t) for t in self.instance_types)

    @property
    def describe(self) -> str:
        return f"the system node group ({self.desired_size} x {'/'.join(self.instance_types)})"


@dataclass
class Finding:
    level: str  # "blocker" | "warning" | "note"
    subject: str
    message: str
    fix: str | None = None


@dataclass
class PoolReport:
    name: str
    instance_type: str
    capacity_types: list[str]
    gpu_limit: int
    gpus_per_instance: int
    vcpus_per_instance: int
    max_instances: int
    max_vcpus: int
    offered_azs: list[str]
    subnet_azs: list[str] | None  # None: the stack's subnets are not known yet (new VPC)
    usable_azs: list[str]
    on_demand_usd_hour: float | None
    on_demand_source: str  # "price-list-api" | "catalog" | "unavailable"
    spot_usd_hour: dict[str, float] = field(default_factory=dict)  # latest per AZ
    server_gpus: int = 0
    server_instances: int = 0
    server_vcpus: int = 0

    @property
    def quota_capacity(self) -> str:
        """The quota the pool's servers count against: on-demand where allowed, else Spot."""
        return "on-demand" if "on-demand" in self.capacity_types else "spot"

    @property
    def spot_min(self) -> float | None:
        return min(self.spot_usd_hour.values()) if self.spot_usd_hour else None

    @property
    def cost_at_limit_usd_hour(self) -> float | None:
        """The pool at its GPU limit, on-demand where allowed (the dearer case), else Spot."""
        price = self.on_demand_usd_hour if "on-demand" in self.capacity_types else self.spot_min
        return None if price is None else round(price * self.max_instances, 4)


@dataclass
class QuotaReport:
    capacity_type: str
    code: str
    name: str
    required_vcpus: int  # what the servers run
    applied_vcpus: float | None
    in_use_vcpus: int | None
    pools: list[str]  # pools with servers counting against this quota
    error: str | None = None
    headroom_vcpus: int = 0  # every pool that can use this capacity type, at its GPU limit
    headroom_pools: list[str] = field(default_factory=list)
    required_for: str = ""  # who needs required_vcpus, in words
    headroom_for: str = ""  # who could take headroom_vcpus, in words

    @property
    def status(self) -> str:
        if self.applied_vcpus is None:
            return "unknown"
        if self.applied_vcpus < self.required_vcpus:
            return "TOO LOW"
        return "OK" if self.applied_vcpus >= self.headroom_vcpus else "OK (no headroom)"


@dataclass
class PreflightReport:
    region: str
    cluster: str
    pools: list[PoolReport]
    quotas: list[QuotaReport]
    findings: list[Finding]

    @property
    def blockers(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "blocker"]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ok"] = not self.blockers
        for pool, raw in zip(self.pools, data["pools"]):
            raw["spot_min_usd_hour"] = pool.spot_min
            raw["cost_at_limit_usd_hour"] = pool.cost_at_limit_usd_hour
        return data


# --------------------------------------------------------------------------------------------------
# AWS reads (boto3 clients passed in; tests give moto-backed clients, or fakes where moto lacks the API)


def in_quota_group(instance_type: str) -> bool:
    return instance_type.split(".", 1)[0].startswith(QUOTA_GROUP_FAMILIES)


def in_standard_group(instance_type: str) -> bool:
    """Counted against the standard on-demand quota (A, C, D, H, I, M, R, T, Z families)."""
    family = instance_type.split(".", 1)[0]
    return family[:1] in tuple("acdhimrtz") and not family.startswith(_OWN_QUOTA_FAMILIES)


def offered_azs(ec2, instance_types: Iterable[str]) -> dict[str, list[str]]:
    types = sorted(set(instance_types))
    found: dict[str, set[str]] = {t: set() for t in types}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}]
    )
    for page in pages:
        for offer in page["InstanceTypeOfferings"]:
            found.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return {t: sorted(azs) for t, azs in found.items()}


def subnet_azs(
    ec2, cluster: str, subnet_ids: list[str] | None, vpc_id: str | None, new_vpc_az_count: int | None = None
) -> list[str] | None:
    """AZs Karpenter can launch into: the given subnets, else the VPC's discovery-tagged subnets, else
    (a VPC the stack creates) the first N available AZs, as the stack picks them."""
    if subnet_ids:
        subnets = ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
    elif vpc_id:
        vpc = [{"Name": "vpc-id", "Values": [vpc_id]}]
        subnets = ec2.describe_subnets(Filters=vpc + [{"Name": "tag:karpenter.sh/discovery", "Values": [cluster]}])["Subnets"]
        subnets = subnets or ec2.describe_subnets(Filters=vpc)["Subnets"]
    elif new_vpc_az_count:
        zones = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
        return sorted(z["ZoneName"] for z in zones["AvailabilityZones"])[:new_vpc_az_count]
    else:
        return None
    return sorted({s["AvailabilityZone"] for s in subnets})


def latest_by_az(history: Iterable[dict[str, Any]]) -> dict[str, float]:
    latest: dict[str, tuple[datetime, float]] = {}
    for rec in history:
        az, ts, price = rec["AvailabilityZone"], rec["Timestamp"], float(rec["SpotPrice"])
        if az not in latest or ts > latest[az][0]:
            latest[az] = (ts, price)
    return {az: price for az, (_, price) in sorted(latest.items())}


def spot_prices(ec2, instance_type: str) -> dict[str, float]:
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type],
        ProductDescriptions=LINUX_SPOT_PRODUCTS,
        StartTime=datetime.now(timezone.utc),  # "now" returns the price in effect in each AZ
    )
    return latest_by_az(rec for page in pages for rec in page["SpotPriceHistory"])


def _error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)


def _error_text(exc: Exception) -> str:
    """Code plus the first line of the message, short enough for a table note."""
    message = getattr(exc, "response", {}).get("Error", {}).get("Message") or str(exc)
    first = next((line.strip() for line in message.splitlines() if line.strip() and "<" not in line), "")
    return f"{_error_code(exc)}: {first[:120]}" if first else _error_code(exc)


def quota_value(quotas, code: str) -> tuple[float | None, str | None]:
    """Applied quota in vCPUs; falls back to the AWS default where the account never changed it."""
    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), None
    except Exception as exc:  # noqa: BLE001 - classified below, never fatal
        if _error_code(exc) != "NoSuchResourceException":
            return None, _error_text(exc)
    try:
        return float(quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), None
    except Exception as exc:  # noqa: BLE001
        return None, _error_text(exc)


def running_quota_vcpus(ec2) -> dict[str, int]:
    """vCPUs running now against each quota: G and VT by capacity type ("on-demand", "spot"), and the
    standard families' on-demand instances ("standard")."""
    used = {"on-demand": 0, "spot": 0, "standard": 0}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                spot = inst.get("InstanceLifecycle") == "spot"
                if in_quota_group(inst["InstanceType"]):
                    key = "spot" if spot else "on-demand"
                elif in_standard_group(inst["InstanceType"]) and not spot:
                    key = "standard"
                else:
                    continue
                cpu = inst.get("CpuOptions") or {}
                if cpu.get("CoreCount"):
                    vcpus = cpu["CoreCount"] * cpu.get("ThreadsPerCore", 1)
                else:
                    vcpus = _catalog_vcpus(inst["InstanceType"])
                used[key] += vcpus
    return used


def _catalog_vcpus(instance_type: str) -> int:
    try:
        return catalog.gpu_instance(instance_type).vcpus
    except KeyError:
        pass
    try:
        return catalog.system_vcpus(instance_type)
    except KeyError:
        return 0


def price_list_on_demand(pricing, region: str, instance_type: str) -> float | None:
    """Linux, shared tenancy, no pre-installed software, in USD/hour, from the AWS Price List API.

    Filters on `regionCode` rather than the `location` display name: the names differ between the
    Price List and the endpoint data for some regions, the code does not.
    """
    filters = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    resp = pricing.get_products(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
        MaxResults=10,
    )
    for raw in resp.get("PriceList", []):
        item = json.loads(raw) if isinstance(raw, str) else raw
        for term in item.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = float(dim.get("pricePerUnit", {}).get("USD", 0) or 0)
                if usd > 0 and dim.get("unit", "Hrs") in ("Hrs", "Hours"):
                    return usd
    return None


def on_demand_price(pricing, region: str, instance_type: str) -> tuple[float | None, str, str | None]:
    err = None
    if pricing is not None:
        try:
            price = price_list_on_demand(pricing, region, instance_type)
            if price is not None:
                return price, "price-list-api", None
            err = "no matching product"
        except Exception as exc:  # noqa: BLE001 - pricing is informative; fall back
            err = f"{_error_code(exc)}"
    try:
        fallback = catalog.gpu_instance(instance_type).on_demand_usd_hour
    except KeyError:
        fallback = None
    if fallback is not None:
        return fallback, "catalog", err
    return None, "unavailable", err


# --------------------------------------------------------------------------------------------------
# Evaluation (plain data in, findings out)


def quota_fix_command(code: str, region: str, desired: int) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {desired} --region {region}"
    )


def required_vcpus(pools: list[PoolReport]) -> dict[str, tuple[int, list[str]]]:
    """vCPUs each quota must allow for the servers: their instances, on their pools' quota."""
    need: dict[str, tuple[int, list[str]]] = {}
    for cap in QUOTAS:
        users = [p for p in pools if p.server_vcpus and p.quota_capacity == cap and in_quota_group(p.instance_type)]
        need[cap] = (sum(p.server_vcpus for p in users), [p.name for p in users])
    return need


def headroom_vcpus(pools: list[PoolReport]) -> dict[str, tuple[int, list[str]]]:
    """vCPUs every pool that can launch somewhere could take at its GPU limit, per capacity type."""
    room: dict[str, tuple[int, list[str]]] = {}
    for cap in QUOTAS:
        users = [p for p in pools if cap in p.capacity_types and p.usable_azs and in_quota_group(p.instance_type)]
        room[cap] = (sum(p.max_vcpus for p in users), [p.name for p in users])
    return room


def _gpu_name(instance_type: str) -> str | None:
    try:
        return catalog.gpu_instance(instance_type).gpu_name
    except KeyError:
        return None


def fallback_pools(pool: PoolReport, pools: list[PoolReport]) -> tuple[list[str], bool]:
    """Usable on-demand pools that can take this pool's work: same GPU first, else any (flag False)."""
    others = [p for p in pools if p is not pool and p.usable_azs and "on-demand" in p.capacity_types]
    same_gpu = [p.name for p in others if _gpu_name(p.instance_type) == _gpu_name(pool.instance_type)]
    return (same_gpu, True) if same_gpu else ([p.name for p in others], False)


def _fallback_phrase(names: list[str], same_gpu: bool) -> str:
    pools = ", ".join(names)
    return f"on-demand pool(s) {pools}" if same_gpu else f"on-demand pool(s) {pools} (another GPU, if the servers may move there)"


def evaluate(region: str, cluster: str, pools: list[PoolReport], quotas: list[QuotaReport],
             strict: bool = False) -> list[Finding]:
    findings: list[Finding] = []

    for p in pools:
        if p.max_instances == 0:
            findings.append(Finding(
                "blocker", p.name,
                f"gpuLimit {p.gpu_limit} is below one {p.instance_type}'s {p.gpus_per_instance} GPUs: the NodePool can never launch a node",
                f"set gpuLimit of pool {p.name} to a multiple of {p.gpus_per_instance}",
            ))
        if not p.usable_azs:
            if not p.offered_azs:
                why = f"{p.instance_type} is not offered in {region}"
                fix = (f"choose an instance type offered in {region} for pool {p.name}, or another region; list offers with "
                       f"`aws ec2 describe-instance-type-offerings --location-type availability-zone "
                       f"--filters Name=instance-type,Values={p.instance_type} --region {region}`")
            else:
                why = (f"{p.instance_type} is offered in {', '.join(p.offered_azs)} but the stack's subnets are in "
                       f"{', '.join(p.subnet_azs or [])}")
                fix = (f"add a private subnet in one of {', '.join(p.offered_azs)} tagged karpenter.sh/discovery={cluster}")
            fallbacks, same_gpu = fallback_pools(p, pools)
            if fallbacks:
                findings.append(Finding(
                    "warning", p.name,
                    f"{why}; its work can only go to the {_fallback_phrase(fallbacks, same_gpu)}; "
                    f"servers pinned to pool {p.name} stay Pending",
                    fix,
                ))
            elif not p.server_gpus:
                # Nothing runs there: the NodePool never launches a node, and nothing waits for one.
                findings.append(Finding(
                    "warning", p.name,
                    f"{why}; no server runs on pool {p.name}, so nothing waits for it, but a server moved there "
                    "would stay Pending", fix,
                ))
            else:
                findings.append(Finding("blocker", p.name, f"{why}; no other pool can take its work", fix))
        elif len(p.usable_azs) == 1:
            findings.append(Finding(
                "warning", p.name,
                f"{p.instance_type} can launch in one AZ only ({p.usable_azs[0]}): a capacity shortage there has no other zone",
                f"offered in {', '.join(p.offered_azs)}; add subnets in more of them" if len(p.offered_azs) > 1 else None,
            ))
        if "spot" in p.capacity_types and p.usable_azs:
            others, same_gpu = fallback_pools(p, pools)
            fallback = (f"fallback: the {_fallback_phrase(others, same_gpu)}" if others else
                        "add a lower-weight on-demand fallback pool or allow more sizes")
            findings.append(Finding(
                "warning", p.name,
                f"Spot pool with a single instance type ({p.instance_type}): an insufficient-capacity error leaves pods "
                f"Pending until Karpenter's ICE cache expires (aws/karpenter-provider-aws#9554); {fallback}",
            ))
            if "on-demand" in p.capacity_types:
                findings.append(Finding(
                    "warning", p.name,
                    f"pool allows Spot and on-demand with 1 instance type; Karpenter recommends at least "
                    f"{FLEXIBILITY_THRESHOLD} types for on-demand fallback inside one NodePool",
                ))
            if p.on_demand_usd_hour is not None:
                dear = [az for az, price in p.spot_usd_hour.items() if price >= p.on_demand_usd_hour]
                if dear:
                    findings.append(Finding(
                        "warning", p.name,
                        f"Spot price is at or above on-demand (${p.on_demand_usd_hour:.4f}/h) in {', '.join(dear)}",
                    ))
        if p.on_demand_source == "catalog":
            where = "" if region == "ap-northeast-2" else f"; it is the ap-northeast-2 figure, {region} may differ"
            findings.append(Finding("note", p.name, f"on-demand price of {p.instance_type} from the catalog (Price List API unavailable){where}"))
        elif p.on_demand_source == "unavailable":
            findings.append(Finding("note", p.name, f"no on-demand price for {p.instance_type} (Price List API unavailable, none in the catalog)"))

    for q in quotas:
        if q.applied_vcpus is None:
            need = (f"{q.required_for} needs {q.required_vcpus} vCPUs" if q.required_vcpus else
                    f"{q.headroom_for} could take {q.headroom_vcpus} vCPUs")
            findings.append(Finding(
                "blocker" if strict and q.required_vcpus else "warning", q.code,
                f"quota {q.code} ({q.name}) is unknown: {q.error}; {need}",
                f"let the preflight identity call servicequotas:GetServiceQuota, or check by hand: aws service-quotas "
                f"get-service-quota --service-code ec2 --quota-code {q.code} --region {region}",
            ))
        elif q.applied_vcpus < q.required_vcpus:
            findings.append(Finding(
                "blocker", q.code,
                f"{q.name} is {q.applied_vcpus:g} vCPUs in {region}; {q.required_for} "
                f"needs {q.required_vcpus} vCPUs",
                f"raise {q.code} in {region} from {q.applied_vcpus:g} to {q.required_vcpus} vCPUs: "
                + quota_fix_command(q.code, region, q.required_vcpus),
            ))
        else:
            if q.in_use_vcpus and q.applied_vcpus - q.in_use_vcpus < q.required_vcpus:
                desired = q.in_use_vcpus + q.required_vcpus
                findings.append(Finding(
                    "warning", q.code,
                    f"{q.in_use_vcpus} of {q.applied_vcpus:g} {q.name} vCPUs are in use now; "
                    f"{q.applied_vcpus - q.in_use_vcpus:g} left for the {q.required_vcpus} that {q.required_for} needs",
                    f"raise {q.code} to {desired} vCPUs: " + quota_fix_command(q.code, region, desired),
                ))
            if q.applied_vcpus < q.headroom_vcpus:
                findings.append(Finding(
                    "warning", q.code,
                    f"headroom: {q.headroom_for} could launch {q.headroom_vcpus} vCPUs, {q.name} allows "
                    f"{q.applied_vcpus:g}; nodes added later may stay Pending",
                    "raise it before you grow: " + quota_fix_command(q.code, region, q.headroom_vcpus),
                ))
    return findings


# --------------------------------------------------------------------------------------------------
# Orchestration


def pool_report(pool: Pool, offers: dict[str, list[str]], stack_azs: list[str] | None, ec2, pricing, region: str) -> PoolReport:
    it = catalog.gpu_instance(pool.instance_type)
    max_instances = pool.gpu_limit // it.gpus
    offered = offers.get(pool.instance_type, [])
    usable = offered if stack_azs is None else [az for az in offered if az in stack_azs]
    od_price, od_source, _ = on_demand_price(pricing, region, pool.instance_type)
    spot = spot_prices(ec2, pool.instance_type) if offered else {}
    return PoolReport(
        name=pool.name,
        instance_type=pool.instance_type,
        capacity_types=list(pool.capacity_types),
        gpu_limit=pool.gpu_limit,
        gpus_per_instance=it.gpus,
        vcpus_per_instance=it.vcpus,
        max_instances=max_instances,
        max_vcpus=max_instances * it.vcpus,
        offered_azs=offered,
        subnet_azs=stack_azs,
        usable_azs=usable,
        on_demand_usd_hour=od_price,
        on_demand_source=od_source,
        spot_usd_hour={az: p for az, p in spot.items() if stack_azs is None or az in stack_azs},
        server_gpus=pool.server_gpus,
        server_instances=math.ceil(pool.server_gpus / it.gpus),
        server_vcpus=math.ceil(pool.server_gpus / it.gpus) * it.vcpus,
    )


def run_preflight(
    region: str,
    cluster: str,
    pools: list[Pool],
    *,
    ec2,
    quotas,
    pricing,
    subnet_ids: list[str] | None = None,
    vpc_id: str | None = None,
    new_vpc_az_count: int | None = None,
    new_vpc_zones: list[str] | None = None,
    strict: bool = False,
    system: SystemNodes | None = None,
) -> PreflightReport:
    offers = offered_azs(ec2, [p.instance_type for p in pools])
    if new_vpc_zones or (new_vpc_az_count and not subnet_ids and not vpc_id):
        stack_azs = new_vpc_azs(ec2, pools, offers, new_vpc_az_count or 2, new_vpc_zones)
    else:
        stack_azs = subnet_azs(ec2, cluster, subnet_ids, vpc_id, new_vpc_az_count)
    reports = [pool_report(p, offers, stack_azs, ec2, pricing, region) for p in pools]
    need, room = required_vcpus(reports), headroom_vcpus(reports)
    in_use = running_quota_vcpus(ec2) if system or any(n for n, _ in room.values()) else {}
    quota_reports = []
    for cap, (code, name) in QUOTAS.items():
        required, users = need[cap]
        headroom, headroom_pools = room[cap]
        if not required and not headroom:
            continue
        applied, error = quota_value(quotas, code)
        quota_reports.append(QuotaReport(
            cap, code, name, required, applied, in_use.get(cap), users, error, headroom, headroom_pools,
            required_for=f"the servers on {', '.join(users)}" if users else "no server",
            headroom_for=f"pools {', '.join(headroom_pools)} at their GPU limits"))
    if system:
        code, name = STANDARD_QUOTA
        applied, error = quota_value(quotas, code)
        per_node = system.vcpus_per_node
        quota_reports.append(QuotaReport(
            "on-demand", code, name, system.desired_size * per_node, applied, in_use.get("standard"),
            ["system"], error, system.max_size * per_node, ["system"],
            required_for=system.describe,
            headroom_for=f"the system node group at its maxSize {system.max_size}"))
    return PreflightReport(region, cluster, reports, quota_reports,
                           evaluate(region, cluster, reports, quota_reports, strict=strict))


def new_vpc_azs(ec2, pools: list[Pool], offers: dict[str, list[str]], count: int,
                override: list[str] | None) -> list[str]:
    """The zones the stack will create its VPC in: the same choice as the program (stacks.zones)."""
    from stacks.zones import choose_zones

    zones = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
    available = sorted(z["ZoneName"] for z in zones["AvailabilityZones"])
    chosen, _ = choose_zones(available, {t: set(azs) for t, azs in offers.items()},
                             {p.name: p.instance_type for p in pools}, count, override)
    return chosen


# --------------------------------------------------------------------------------------------------
# Output


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _usd(v: float | None, suffix: str = "") -> str:
    return "-" if v is None else f"${v:,.4f}{suffix}" if v < 1 else f"${v:,.2f}{suffix}"


def _short_azs(azs: list[str] | None, region: str) -> str:
    if azs is None:
        return "(unknown)"
    return ",".join(az[len(region):] if az.startswith(region) else az for az in azs) or "none"


def format_report(r: PreflightReport) -> str:
    out = [f"preflight {r.cluster} in {r.region}", ""]
    rows = []
    for p in r.pools:
        od = _usd(p.on_demand_usd_hour) + ("*" if p.on_demand_source == "catalog" else "")
        spot = _usd(p.spot_min)
        save = (f"{(1 - p.spot_min / p.on_demand_usd_hour) * 100:.0f}%"
                if p.spot_min is not None and p.on_demand_usd_hour else "-")
        rows.append([
            p.name, p.instance_type, "+".join(p.capacity_types), str(p.gpu_limit),
            f"{p.max_instances} x {p.vcpus_per_instance}", _short_azs(p.offered_azs, r.region),
            _short_azs(p.subnet_azs, r.region), _short_azs(p.usable_azs, r.region), od, spot, save,
            _usd(p.cost_at_limit_usd_hour, "/h"),
        ])
    out.append(_table(
        ["pool", "instance", "capacity", "gpus", "nodes x vCPU", "offered AZs", "subnet AZs", "usable",
         "on-demand/h", "spot/h (min)", "spot saves", "at limit"],
        rows,
    ))
    if any(p.on_demand_source == "catalog" for p in r.pools):
        out.append("* catalog price (PoC figure), the Price List API was not reachable")
    if r.quotas:
        out.append("")
        out.append(_table(
            ["quota", "name", "applied vCPU", "in use", "required", "at limits", "for", "status"],
            [[q.code, q.name, "?" if q.applied_vcpus is None else f"{q.applied_vcpus:g}",
              "-" if q.in_use_vcpus is None else str(q.in_use_vcpus), str(q.required_vcpus), str(q.headroom_vcpus),
              ",".join(q.headroom_pools), q.status]
             for q in r.quotas],
        ))
    for level, title in (("blocker", "BLOCKERS"), ("warning", "warnings"), ("note", "notes")):
        items = [f for f in r.findings if f.level == level]
        if items:
            out += ["", f"{title}:"]
            for f in items:
                out.append(f"  [{f.subject}] {f.message}")
                if f.fix:
                    out.append(f"      fix: {f.fix}")
    warnings = sum(f.level == "warning" for f in r.findings)
    out += ["", f"RESULT: {len(r.blockers)} blocker(s), {warnings} warning(s)"
            + ("" if r.blockers else " - no blockers found")]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# CLI


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
    p.set_defaults(func=run)
    return p


def _load_settings(stack: str, directory: str | None = None):
    from stacks.loader import load_settings
    from stacks.settings import REPO

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


def session_findings(iam, caller_arn: str) -> list[Finding]:
    """The caller role's maximum session against a first `up`; nothing for users (long-term keys)."""
    from stacks.identity import caller_role_arn

    role_arn = caller_role_arn(caller_arn)
    if role_arn is None or iam is None:
        return []
    role = role_arn.rsplit("/", 1)[-1]
    try:
        limit = int(iam.get_role(RoleName=role)["Role"].get("MaxSessionDuration", 3600))
    except Exception as exc:  # noqa: BLE001 - unreadable is not a failure: say how to check
        return [Finding(
            "note", "session",
            f"could not read role {role}'s maximum session duration ({_error_text(exc)}); a first `up` needs 3 h",
            f"aws iam get-role --role-name {role} --query Role.MaxSessionDuration")]
    if limit >= FIRST_UP_SESSION_S:
        return []
    return [Finding(
        "warning", "session",
        f"role {role} allows sessions of {limit // 60} min; a first `pulumi up` (cluster, weight sync, GPU node, "
        "cold start) runs up to 3 h, and credentials that expire mid-run leave a half-created stack",
        f"aws iam update-role --role-name {role} --max-session-duration {FIRST_UP_SESSION_S}, and ask for 3 h "
        "sessions (role-duration-seconds: 10800 in the workflows)")]


def stack_findings(settings, clients: dict[str, Any], strict: bool = False,
                   inside_vpc: bool = False) -> list[Finding]:
    """Checks of the stack itself against the account: AMI, caller role, API exposure, pinned revisions."""
    from stacks.identity import admin_role_problems
    from stacks.settings import is_commit
    from stacks.versions import pins

    findings: list[Finding] = []
    unknown = "blocker" if strict else "warning"
    if settings.gpu_pools and clients.get("ssm") is not None:
        versions = pins()
        k8s = settings.cluster.kubernetes_version
        parameter = versions.nvidia_ami_parameter(k8s)
        try:
            clients["ssm"].get_parameter(Name=parameter)
        except Exception as exc:  # noqa: BLE001 - classified: missing vs unreadable
            fix = (f"pick an AMI release with an NVIDIA AL2023 AMI for Kubernetes {k8s} in {settings.region} "
                   f"(al2023_ami_release in pyproject.toml), or another cluster.kubernetesVersion")
            if _error_code(exc) == "ParameterNotFound":
                findings.append(Finding(
                    "blocker", "ami",
                    f"the pinned AMI release {versions.al2023_ami_release} has no NVIDIA AMI for Kubernetes {k8s} in "
                    f"{settings.region} ({parameter}): Karpenter would launch no GPU node", fix))
            else:
                findings.append(Finding(
                    unknown, "ami", f"could not look up {parameter}: {_error_text(exc)}",
                    "let the preflight identity call ssm:GetParameter on /aws/service/eks/*"))
    if clients.get("sts") is not None:
        try:
            caller = clients["sts"].get_caller_identity()["Arn"]
            for problem in admin_role_problems(list(settings.cluster.admin_role_arns), caller):
                findings.append(Finding("blocker", "cluster.adminRoleArns", problem.removeprefix("vllm-poc:")))
            findings += session_findings(clients.get("iam"), caller)
        except Exception as exc:  # noqa: BLE001
            findings.append(Finding(unknown, "caller", f"could not read the caller identity: {_error_text(exc)}"))
    if "0.0.0.0/0" in settings.cluster.public_access_cidrs:
        findings.append(Finding(
            "warning", "cluster.publicAccessCidrs",
            "the Kubernetes API endpoint is reachable from any address (0.0.0.0/0); IAM still guards it",
            "set vllm-poc:cluster.publicAccessCidrs to your office or CI egress ranges"))
    # From where `pulumi up` cannot reach the API it would create the network and the cluster and then
    # time out at the first Kubernetes resource: say so before the 20 minutes, not after.
    for reach in api_access.reach_findings(settings, inside_vpc, clients.get("egress"), strict=strict):
        findings.append(Finding(reach.level, "cluster API", reach.message, reach.fix))
    if clients.get("ssm") is not None and clients.get("ec2") is not None:
        # The NetworkPolicy's S3 ranges (recorded at the last `up`) against AWS's list now.
        for d in s3_ranges.drift(clients["ec2"], clients["ssm"], settings.region, settings.cluster.name, settings.stack):
            findings.append(Finding(d.level, "s3 ranges", d.message, d.fix))
    weights = getattr(settings, "weights", None)
    if weights is not None and weights.source == "hub":
        floating = sorted(m for m, rev in weights.revisions.items() if not is_commit(rev))
        if floating:
            findings.append(Finding(
                "warning", "weights.revisions",
                f"{', '.join(floating)} follow a branch, not a commit: a re-created sync Job may copy other weights",
                "pin each to the 40-hex commit you validated (huggingface.co/<id>/commits/main)"))
        if getattr(settings, "hf_token", None) is None:
            findings.append(Finding(
                "warning", "hfToken",
                "no vllm-poc:hfToken: a gated repository (google/gemma-*) fails its sync Job, and `pulumi up` with it",
                "pulumi config set --secret vllm-poc:hfToken hf_... (a token whose account accepted the license)"))
    return findings


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
        # This machine's egress address, against the stack's publicAccessCidrs.
        "egress": api_access.egress_address,
        # The Price List API answers from us-east-1 for every region's prices.
        "pricing": boto3.client("pricing", region_name="us-east-1", config=quick),
    }


def run(args: argparse.Namespace, clients: dict[str, Any] | None = None) -> int:
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
        network = getattr(settings, "network", None)
        clients = clients or make_clients(settings.region)
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
            strict=getattr(args, "strict", False),
        )
        report.findings += stack_findings(settings, clients, strict=getattr(args, "strict", False),
                                          inside_vpc=getattr(args, "inside_vpc", False))
    except KeyboardInterrupt as exc:
        from bench.common.interrupts import exit_code, rerun_command, signal_name

        print(f"{COMMAND}: stopped by {signal_name(exc)}; preflight only reads, nothing was changed. "
              f"Rerun: {rerun_command('stacks')}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # noqa: BLE001 - settings or AWS access errors: one clear message
        print(f"{COMMAND}: error: {exc if isinstance(exc, ValueError) else f'{type(exc).__name__}: {exc}'}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return 1 if report.blockers else 0


def main(argv: list[str] | argparse.Namespace | None = None) -> int:
    if isinstance(argv, argparse.Namespace):
        return run(argv)
    parser = argparse.ArgumentParser(prog="python -m stacks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    raise SystemExit(main())
