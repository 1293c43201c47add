"""teardown-check's findings: what a destroyed stack left behind and billed, and their deletion in a
safe order (only resources tagged for this cluster; buckets never, the data decides)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from stacks.ops.teardown.ownership import (describe_instance, karpenter_instances, karpenter_owned, tag_dict,
                                          tagged_for_cluster)
from stacks.ops.teardown.pre_destroy import wait_for_instances_gone

STACK_TAG = "vllm-poc/stack"  # default tag on every AWS resource of a stack (stacks/environment/)
BUCKET_ROLE_TAG = "vllm-poc/data"  # weights | results (components/weight_store.py)


@dataclass
class Leftover:
    kind: str  # instance | launch-template | instance-profile | eni | volume | load-balancer | classic-load-balancer | bucket | log-group
    id: str
    detail: str
    deletable: bool = True
    expected: bool = False  # kept on purpose (storage.teardown=retain-weights): listed, not a failure
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _pages(client, method: str, key: str, **kwargs) -> Iterable[dict]:
    for page in client.get_paginator(method).paginate(**kwargs):
        yield from page.get(key, [])


def find_instances(ec2, cluster: str) -> list[Leftover]:
    return [Leftover("instance", i["InstanceId"], describe_instance(i).split(" ", 1)[1]) for i in karpenter_instances(ec2, cluster)]


def find_launch_templates(ec2, cluster: str) -> list[Leftover]:
    return [
        Leftover("launch-template", lt["LaunchTemplateId"], lt["LaunchTemplateName"])
        for lt in _pages(ec2, "describe_launch_templates", "LaunchTemplates")
        if karpenter_owned(tag_dict(lt.get("Tags")), cluster)
    ]


def find_instance_profiles(iam, cluster: str) -> list[Leftover]:
    found = []
    for profile in _pages(iam, "list_instance_profiles", "InstanceProfiles"):
        # ListInstanceProfiles does not return tags; GetInstanceProfile does.
        tags = profile.get("Tags") or iam.get_instance_profile(
            InstanceProfileName=profile["InstanceProfileName"])["InstanceProfile"].get("Tags")
        if karpenter_owned(tag_dict(tags), cluster):
            roles = [r["RoleName"] for r in profile.get("Roles", [])]
            found.append(Leftover(
                "instance-profile", profile["InstanceProfileName"],
                f"roles: {', '.join(roles) or 'none'}", extra={"roles": roles},
            ))
    return found


def find_enis(ec2, cluster: str, vpc_id: str | None) -> list[Leftover]:
    found = []
    for eni in _pages(ec2, "describe_network_interfaces", "NetworkInterfaces",
                      Filters=[{"Name": "status", "Values": ["available"]}]):
        tags = tag_dict(eni.get("TagSet"))
        detail = f"{eni.get('VpcId')}, {eni.get('AvailabilityZone')}, {eni.get('Description') or 'no description'}"
        if tagged_for_cluster(tags, cluster):
            found.append(Leftover("eni", eni["NetworkInterfaceId"], detail))
        elif vpc_id and eni.get("VpcId") == vpc_id:
            found.append(Leftover(
                "eni", eni["NetworkInterfaceId"], detail, deletable=False,
                note="in the stack's VPC but not tagged for the cluster: check, then "
                     f"aws ec2 delete-network-interface --network-interface-id {eni['NetworkInterfaceId']}",
            ))
    return found


def find_volumes(ec2, cluster: str) -> list[Leftover]:
    return [
        Leftover("volume", v["VolumeId"], f"{v.get('Size')} GiB {v.get('VolumeType')}, {v.get('AvailabilityZone')}")
        for v in _pages(ec2, "describe_volumes", "Volumes", Filters=[{"Name": "status", "Values": ["available"]}])
        if tagged_for_cluster(tag_dict(v.get("Tags")), cluster)
    ]


def _chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def find_load_balancers(elbv2, elb, cluster: str) -> list[Leftover]:
    found = []
    lbs = list(_pages(elbv2, "describe_load_balancers", "LoadBalancers"))
    by_arn = {lb["LoadBalancerArn"]: lb for lb in lbs}
    for chunk in _chunks(list(by_arn), 20):
        for desc in elbv2.describe_tags(ResourceArns=chunk)["TagDescriptions"]:
            tags = tag_dict(desc.get("Tags"))
            if tags.get("elbv2.k8s.aws/cluster") == cluster or f"kubernetes.io/cluster/{cluster}" in tags:
                lb = by_arn[desc["ResourceArn"]]
                found.append(Leftover("load-balancer", lb["LoadBalancerArn"], f"{lb['LoadBalancerName']} ({lb.get('Type')})"))
    if elb is not None:
        names = [lb["LoadBalancerName"] for lb in _pages(elb, "describe_load_balancers", "LoadBalancerDescriptions")]
        for chunk in _chunks(names, 20):
            for desc in elb.describe_tags(LoadBalancerNames=chunk)["TagDescriptions"]:
                if f"kubernetes.io/cluster/{cluster}" in tag_dict(desc.get("Tags")):
                    found.append(Leftover("classic-load-balancer", desc["LoadBalancerName"], "classic ELB"))
    return found


def _bucket_tags(s3, bucket: str) -> dict[str, str]:
    try:
        return tag_dict(s3.get_bucket_tagging(Bucket=bucket)["TagSet"])
    except Exception as exc:  # noqa: BLE001 - NoSuchTagSet, or a bucket we may not read: not ours
        if getattr(exc, "response", {}).get("Error", {}).get("Code") in ("NoSuchTagSet", "NoSuchBucket", "AccessDenied"):
            return {}
        raise


def _bucket_usage(s3, bucket: str, cap: int = 100_000) -> tuple[int, int, bool]:
    count = size = 0
    for obj in _pages(s3, "list_objects_v2", "Contents", Bucket=bucket):
        count += 1
        size += obj.get("Size", 0)
        if count >= cap:
            return count, size, True
    return count, size, False


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def find_buckets(s3, stack: str, teardown: str) -> list[Leftover]:
    found = []
    for bucket in s3.list_buckets().get("Buckets", []):
        name = bucket["Name"]
        tags = _bucket_tags(s3, name)
        if tags.get(STACK_TAG) != stack:
            continue
        count, size, capped = _bucket_usage(s3, name)
        if not count:
            continue
        role = tags.get(BUCKET_ROLE_TAG, "?")
        retained = teardown == "retain-weights" and role == "weights"
        detail = f"{role} bucket, {count}{'+' if capped else ''} objects, {_human(size)}{'+' if capped else ''} stored (billed monthly)"
        found.append(Leftover(
            "bucket", name, detail, deletable=False, expected=retained,
            note=("kept by storage.teardown=retain-weights" if retained
                  else f"empty and delete it if the data is not needed: aws s3 rb s3://{name} --force"),
        ))
    return found


def find_log_groups(logs, cluster: str) -> list[Leftover]:
    """Control-plane log groups (/aws/eks/<cluster>/...): EKS recreates one if it logs while the cluster is deleted."""
    found = []
    for group in _pages(logs, "describe_log_groups", "logGroups", logGroupNamePrefix=f"/aws/eks/{cluster}/"):
        name = group["logGroupName"]
        retention = group.get("retentionInDays")
        found.append(Leftover(
            "log-group", name,
            f"{_human(group.get('storedBytes') or 0)} stored, "
            + (f"kept {retention} days" if retention else "kept forever (no retention)"),
            deletable=False,
            note=f"delete it if the logs are not needed: aws logs delete-log-group --log-group-name {name}",
        ))
    return found


def find_leftovers(
    cluster: str, stack: str, *, ec2, iam, elbv2, elb, s3, vpc_id: str | None = None, teardown: str = "destroy",
    logs=None,
) -> list[Leftover]:
    return [
        *(find_log_groups(logs, cluster) if logs is not None else []),
        *find_instances(ec2, cluster),
        *find_launch_templates(ec2, cluster),
        *find_instance_profiles(iam, cluster),
        *find_enis(ec2, cluster, vpc_id),
        *find_volumes(ec2, cluster),
        *find_load_balancers(elbv2, elb, cluster),
        *find_buckets(s3, stack, teardown),
    ]


def unexpected(leftovers: list[Leftover]) -> list[Leftover]:
    return [x for x in leftovers if not x.expected]


def delete_leftovers(
    leftovers: list[Leftover], cluster: str, *, ec2, iam, elbv2, elb, wait_timeout_s: float = 600,
    sleep: Callable[[float], None] = time.sleep, log: Callable[[str], None] = print,
) -> list[str]:
    """Delete the deletable orphans in a safe order; returns error lines (empty when all went)."""
    errors: list[str] = []
    by_kind: dict[str, list[Leftover]] = {}
    for x in leftovers:
        if x.deletable and not x.expected:
            by_kind.setdefault(x.kind, []).append(x)

    def attempt(what: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
            log(f"deleted {what}")
        except Exception as exc:  # noqa: BLE001 - keep going, report at the end
            errors.append(f"{what}: {exc}")
            log(f"FAILED {what}: {exc}")

    instances = [x.id for x in by_kind.get("instance", [])]
    if instances:
        attempt(f"instances {', '.join(instances)} (terminate)", lambda: ec2.terminate_instances(InstanceIds=instances))
        left = wait_for_instances_gone(ec2, cluster, wait_timeout_s, sleep=sleep, log=log, ids=instances)
        if left:
            errors.append(f"instances still terminating: {', '.join(i['InstanceId'] for i in left)}")
    for x in by_kind.get("eni", []):
        attempt(f"ENI {x.id}", lambda x=x: ec2.delete_network_interface(NetworkInterfaceId=x.id))
    for x in by_kind.get("volume", []):
        attempt(f"volume {x.id}", lambda x=x: ec2.delete_volume(VolumeId=x.id))
    for x in by_kind.get("launch-template", []):
        attempt(f"launch template {x.id} ({x.detail})", lambda x=x: ec2.delete_launch_template(LaunchTemplateId=x.id))
    for x in by_kind.get("instance-profile", []):
        def drop_profile(x=x):
            for role in x.extra.get("roles", []):
                iam.remove_role_from_instance_profile(InstanceProfileName=x.id, RoleName=role)
            iam.delete_instance_profile(InstanceProfileName=x.id)
        attempt(f"instance profile {x.id}", drop_profile)
    for x in by_kind.get("load-balancer", []):
        attempt(f"load balancer {x.detail}", lambda x=x: elbv2.delete_load_balancer(LoadBalancerArn=x.id))
    for x in by_kind.get("classic-load-balancer", []):
        attempt(f"classic load balancer {x.id}", lambda x=x: elb.delete_load_balancer(LoadBalancerName=x.id))
    return errors


def format_leftovers(leftovers: list[Leftover], cluster: str, region: str) -> str:
    if not leftovers:
        return f"nothing left behind for cluster {cluster} in {region}"
    width = max(len(x.kind) for x in leftovers)
    lines = [f"left behind for cluster {cluster} in {region}:"]
    for x in leftovers:
        flag = "kept " if x.expected else ("     " if x.deletable else "manual")
        lines.append(f"  {flag:6} {x.kind.ljust(width)}  {x.id}  {x.detail}")
        if x.note:
            lines.append(f"         {' ' * width}  {x.note}")
    bad = unexpected(leftovers)
    lines.append(f"{len(bad)} unexpected, {sum(x.deletable for x in bad)} removable with --delete")
    return "\n".join(lines)
