"""What preflight reads from AWS: offerings, subnets' zones, Spot and on-demand prices, vCPU quotas
and what runs against them. boto3 clients are passed in; the tests give moto-backed clients, or
fakes where moto lacks the API."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable

from stacks import catalog

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
LINUX_SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


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


def error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)


def error_text(exc: Exception) -> str:
    """Code plus the first line of the message, short enough for a table note."""
    message = getattr(exc, "response", {}).get("Error", {}).get("Message") or str(exc)
    first = next((line.strip() for line in message.splitlines() if line.strip() and "<" not in line), "")
    return f"{error_code(exc)}: {first[:120]}" if first else error_code(exc)


def quota_value(quotas, code: str) -> tuple[float | None, str | None]:
    """Applied quota in vCPUs; falls back to the AWS default where the account never changed it."""
    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), None
    except Exception as exc:  # noqa: BLE001 - classified below, never fatal
        if error_code(exc) != "NoSuchResourceException":
            return None, error_text(exc)
    try:
        return float(quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), None
    except Exception as exc:  # noqa: BLE001
        return None, error_text(exc)


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
            err = f"{error_code(exc)}"
    try:
        fallback = catalog.gpu_instance(instance_type).on_demand_usd_hour
    except KeyError:
        fallback = None
    if fallback is not None:
        return fallback, "catalog", err
    return None, "unavailable", err
