"""The pools' GPU capacity against the account: each pool's offerings, prices and vCPUs, each quota
against what the servers need and what the pools could take, and the findings (plain data in,
findings out)."""

from __future__ import annotations

import math

from stacks import catalog
from stacks.ops.preflight.aws import (QUOTAS, STANDARD_QUOTA, in_quota_group, offered_azs, on_demand_price,
                                      quota_value, running_quota_vcpus, spot_prices, subnet_azs)
from stacks.ops.preflight.report import Finding, Pool, PoolReport, PreflightReport, QuotaReport, SystemNodes
from stacks.zones import PIN_COMMAND, choose_zones, offering_notes, unpinned_note

# Karpenter logs a warning below this many types when a NodePool is flexible to Spot and on-demand
# (pkg/providers/instance/instance.go, instanceTypeFlexibilityThreshold).
FLEXIBILITY_THRESHOLD = 5


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
    stack: str | None = None,
) -> PreflightReport:
    offers = offered_azs(ec2, [p.instance_type for p in pools])
    zone_findings: list[Finding] = []
    if new_vpc_zones or (new_vpc_az_count and not subnet_ids and not vpc_id):
        stack_azs = new_vpc_azs(ec2, pools, offers, new_vpc_az_count or 2, new_vpc_zones)
        zone_findings = zone_choice_findings(ec2, pools, offers, new_vpc_az_count or 2, new_vpc_zones,
                                             stack or cluster)
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
                           evaluate(region, cluster, reports, quota_reports, strict=strict) + zone_findings)


def new_vpc_azs(ec2, pools: list[Pool], offers: dict[str, list[str]], count: int,
                override: list[str] | None) -> list[str]:
    """The zones the stack will create its VPC in: the same choice as the program (stacks.zones)."""
    zones = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
    available = sorted(z["ZoneName"] for z in zones["AvailabilityZones"])
    chosen, _ = choose_zones(available, {t: set(azs) for t, azs in offers.items()},
                             {p.name: p.instance_type for p in pools}, count, override)
    return chosen


def zone_choice_findings(ec2, pools: list[Pool], offers: dict[str, list[str]], count: int,
                         pinned: list[str] | None, stack: str) -> list[Finding]:
    """The created VPC's zones against today's offerings: unpinned zones are a warning (pin them once);
    pinned zones that today's offerings would choose differently are a note. Nothing moves either way."""
    today = new_vpc_azs(ec2, pools, offers, len(pinned) if pinned else count, None)
    if not pinned:
        return [Finding("warning", "zones", unpinned_note(stack, today), f"{PIN_COMMAND} {stack}")]
    types = {p.name: p.instance_type for p in pools}
    return [Finding("note", "zones", note) for note in
            offering_notes(pinned, today, {t: set(azs) for t, azs in offers.items()}, types)]
