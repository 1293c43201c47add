"""Clean teardown: `python -m stacks pre-destroy <stack>` and `python -m stacks teardown-check <stack>`.

Orphaned Karpenter nodes are the usual teardown bill: once the Karpenter controller is uninstalled
nothing terminates the instances it launched (aws/karpenter-provider-aws #1955, #3179, #6870).

* pre-destroy (before `pulumi destroy`): deletes the stack's bench Jobs, then its vLLM Deployments, then
  its Karpenter NodePools and EC2NodeClasses, through kubectl with the stack's labels
  (`app.kubernetes.io/part-of=vllm-poc`), then waits, bounded, until no EC2 instance that Karpenter
  launched for the cluster is left. Jobs go first because bench pods carry
  `karpenter.sh/do-not-disrupt`, which holds their node's drain.
* teardown-check (after `pulumi destroy`): lists what would be left behind and billed: Karpenter's
  instances, launch templates and instance profiles for this cluster, available ENIs and EBS volumes
  tagged for it (or ENIs in the stack's own VPC), load balancers the AWS Load Balancer Controller or
  the in-tree service controller made for it, and non-empty buckets tagged with the stack. Exit 1 when
  anything unexpected remains. `--delete` removes the orphans after confirmation, in a safe order,
  only ever resources tagged for this cluster; buckets are never deleted (the data decides).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from components.labels import PART_OF_SELECTOR

PRE_DESTROY = "pre-destroy"
TEARDOWN_CHECK = "teardown-check"

STACK_TAG = "vllm-poc/stack"  # default tag on every AWS resource of a stack (stacks/environment.py)
BUCKET_ROLE_TAG = "vllm-poc/data"  # weights | results (components/weight_store.py)

# Tag keys only Karpenter writes; `karpenter.sh/discovery` is ours (subnets, security group) and excluded.
KARPENTER_KEYS = (
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.sh/managed-by",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/cluster",
)
LIVE_INSTANCE_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


# --------------------------------------------------------------------------------------------------
# Ownership predicates (plain functions: what may be listed and deleted)


def tag_dict(tags: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or []}


def tagged_for_cluster(tags: dict[str, str], cluster: str) -> bool:
    return (
        f"kubernetes.io/cluster/{cluster}" in tags
        or tags.get("eks:eks-cluster-name") == cluster
        or tags.get("karpenter.k8s.aws/cluster") == cluster
        or tags.get("karpenter.sh/managed-by") == cluster
        or tags.get("cluster.k8s.amazonaws.com/name") == cluster  # VPC CNI's ENIs
        or tags.get("elbv2.k8s.aws/cluster") == cluster
        or tags.get("KubernetesCluster") == cluster  # in-tree cloud provider, EBS CSI volumes
    )


def karpenter_owned(tags: dict[str, str], cluster: str) -> bool:
    """Made by Karpenter, for this cluster: both a Karpenter-only key and this cluster's tag."""
    return any(k in tags for k in KARPENTER_KEYS) and tagged_for_cluster(tags, cluster)


# --------------------------------------------------------------------------------------------------
# pre-destroy: kubectl commands built from the stack's labels


@dataclass(frozen=True)
class Step:
    description: str
    argv: list[str]
    timeout_s: int
    missing_type_ok: bool = True  # the CRD may already be gone: nothing to delete


def kubectl(kubeconfig: str | None, context: str | None, *args: str) -> list[str]:
    argv = ["kubectl"]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    return argv + list(args)


def update_kubeconfig_step(cluster: str, region: str, path: str) -> Step:
    return Step(
        f"write a kubeconfig for EKS cluster {cluster}",
        ["aws", "eks", "update-kubeconfig", "--name", cluster, "--region", region, "--kubeconfig", path],
        timeout_s=120,
        missing_type_ok=False,
    )


def delete_steps(
    kubeconfig: str | None, context: str | None, selector: str = PART_OF_SELECTOR, wait_minutes: int = 15
) -> list[Step]:
    common = ["--selector", selector, "--ignore-not-found", "--wait", f"--timeout={wait_minutes}m"]
    return [
        Step(
            "delete bench Jobs (and their pods)",
            kubectl(kubeconfig, context, "delete", "jobs.batch", "--all-namespaces", "--cascade=foreground", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        Step(
            "delete vLLM Deployments",
            kubectl(kubeconfig, context, "delete", "deployments.apps", "--all-namespaces", "--cascade=foreground", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        Step(
            "delete Karpenter NodePools (Karpenter drains and terminates their nodes)",
            kubectl(kubeconfig, context, "delete", "nodepools.karpenter.sh", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        # The EC2NodeClass finalizer waits for its NodeClaims, then removes the launch templates and
        # instance profiles Karpenter made: done here, while the controller still runs.
        Step(
            "delete EC2NodeClasses (Karpenter removes its launch templates and instance profiles)",
            kubectl(kubeconfig, context, "delete", "ec2nodeclasses.karpenter.k8s.aws", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
    ]


def karpenter_instances(ec2, cluster: str) -> list[dict[str, Any]]:
    """Live instances Karpenter launched for this cluster (either of the cluster tags it writes)."""
    found: dict[str, dict[str, Any]] = {}
    for cluster_filter in (
        {"Name": f"tag:kubernetes.io/cluster/{cluster}", "Values": ["owned"]},
        {"Name": "tag:eks:eks-cluster-name", "Values": [cluster]},
    ):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]},
            cluster_filter,
            {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES},
        ])
        for page in pages:
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    if karpenter_owned(tag_dict(inst.get("Tags")), cluster):
                        found[inst["InstanceId"]] = inst
    return [found[k] for k in sorted(found)]


def describe_instance(inst: dict[str, Any]) -> str:
    tags = tag_dict(inst.get("Tags"))
    return (f"{inst['InstanceId']} ({inst.get('InstanceType')}, {inst['State']['Name']}, "
            f"nodepool {tags.get('karpenter.sh/nodepool', '?')})")


def wait_for_instances_gone(
    ec2,
    cluster: str,
    timeout_s: float,
    interval_s: float = 15,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = print,
    ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Poll until Karpenter's instances for the cluster are gone; return those left at the deadline."""
    deadline = clock() + timeout_s
    while True:
        left = karpenter_instances(ec2, cluster)
        if ids is not None:
            left = [i for i in left if i["InstanceId"] in ids]
        if not left:
            log("no Karpenter instances left for the cluster")
            return []
        remaining = deadline - clock()
        shown = ", ".join(describe_instance(i) for i in left[:5]) + (" ..." if len(left) > 5 else "")
        if remaining <= 0:
            log(f"timed out: {len(left)} Karpenter instance(s) still there: {shown}")
            return left
        log(f"waiting for {len(left)} Karpenter instance(s) to terminate ({remaining:.0f} s left): {shown}")
        sleep(min(interval_s, remaining))


def run_steps(steps: list[Step], runner: Callable[..., subprocess.CompletedProcess], log: Callable[[str], None]) -> bool:
    for step in steps:
        log(f"--> {step.description}\n    $ {shlex.join(step.argv)}")
        try:
            proc = runner(step.argv, capture_output=True, text=True, timeout=step.timeout_s)
        except FileNotFoundError:
            log(f"    {step.argv[0]} is not installed or not on PATH")
            return False
        except subprocess.TimeoutExpired:
            log(f"    timed out after {step.timeout_s} s")
            return False
        out = (proc.stdout or "").strip()
        err = (proc.stderr or "").strip()
        if out:
            log("    " + out.replace("\n", "\n    "))
        if proc.returncode != 0:
            if step.missing_type_ok and "doesn't have a resource type" in err:
                log("    (resource type not installed: nothing to delete)")
                continue
            log(f"    failed (exit {proc.returncode}): {err}")
            return False
    return True


# --------------------------------------------------------------------------------------------------
# teardown-check: what is left


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


# --------------------------------------------------------------------------------------------------
# CLI


def _load_settings(stack: str, directory: str | None = None):
    # Only what teardown needs (region, cluster, network, storage): a serving setting that no longer
    # validates must never block cleaning up.
    from pathlib import Path

    from stacks.loader import load_settings
    from stacks.settings import REPO

    return load_settings(stack, Path(directory) if directory else REPO, scope="cluster")


def make_clients(region: str) -> dict[str, Any]:
    import boto3

    return {name: boto3.client(name, region_name=region) for name in ("ec2", "iam", "elbv2", "elb", "s3", "logs")}


def add_parser(subparsers) -> None:
    pre = subparsers.add_parser(
        PRE_DESTROY,
        help="before `pulumi destroy`: delete bench Jobs, vLLM Deployments, NodePools; wait for Karpenter's nodes",
        description="Delete the stack's bench Jobs, vLLM Deployments, Karpenter NodePools and EC2NodeClasses (by label "
                    f"{PART_OF_SELECTOR}) and wait until Karpenter's EC2 instances are gone.",
    )
    pre.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    pre.add_argument("--kubeconfig", help="kubeconfig of the cluster (default: written by `aws eks update-kubeconfig`)")
    pre.add_argument("--context", help="kubeconfig context to use")
    pre.add_argument("--timeout-minutes", type=float, default=20, help="how long to wait for instances (default %(default)s)")
    pre.add_argument("--poll-seconds", type=float, default=10, help=argparse.SUPPRESS)
    pre.add_argument("--dry-run", action="store_true", help="print the commands, change nothing")
    pre.add_argument("--dir", help="directory holding the stack files (default: the project)")
    pre.set_defaults(func=run_pre_destroy)

    check = subparsers.add_parser(
        TEARDOWN_CHECK,
        help="after `pulumi destroy`: list (and with --delete remove) what is left behind and billed",
        description="List Karpenter instances, launch templates, instance profiles, ENIs, volumes, load "
                    "balancers and non-empty buckets left for the stack; exit 1 if any unexpected remain.",
    )
    check.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    check.add_argument("--delete", action="store_true", help="remove the orphans tagged for this cluster")
    check.add_argument("--yes", action="store_true", help="with --delete: do not ask for confirmation")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    check.add_argument("--dir", help="directory holding the stack files (default: the project)")
    check.add_argument("--wait-minutes", type=float, default=10, help="with --delete: wait for terminations (default %(default)s)")
    check.set_defaults(func=run_teardown_check)


def _on_interrupt(command: str, kept: str) -> Callable:
    """Ctrl-C or SIGTERM: say what stays done and how to go on, exit 130 or 143, no traceback."""
    import functools

    from bench.common.interrupts import exit_code, rerun_command, signal_name

    def wrap(func: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(func)
        def run(*args, **kwargs) -> int:
            try:
                return func(*args, **kwargs)
            except KeyboardInterrupt as exc:
                print(f"{command}: stopped by {signal_name(exc)}; {kept}. Rerun: {rerun_command('stacks')}",
                      file=sys.stderr, flush=True)
                return exit_code(exc)
        return run
    return wrap


@_on_interrupt(PRE_DESTROY, "what was deleted stays deleted and every step is safe to repeat")
def run_pre_destroy(args: argparse.Namespace, clients: dict[str, Any] | None = None,
                    runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                    sleep: Callable[[float], None] = time.sleep) -> int:
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
    except Exception as exc:  # noqa: BLE001
        print(f"{PRE_DESTROY}: error: {exc}", file=sys.stderr)
        return 2
    cluster, region = settings.cluster.name, settings.region
    with tempfile.TemporaryDirectory(prefix="vllm-poc-kube-") as tmp:
        steps: list[Step] = []
        kubeconfig = args.kubeconfig
        if not kubeconfig:
            kubeconfig = os.path.join(tmp, "kubeconfig")
            steps.append(update_kubeconfig_step(cluster, region, kubeconfig))
        steps += delete_steps(kubeconfig, args.context)
        if args.dry_run:
            for step in steps:
                print(f"# {step.description}\n{shlex.join(step.argv)}")
            print(f"# then wait up to {args.timeout_minutes:g} min until no EC2 instance tagged karpenter.sh/nodepool "
                  f"and kubernetes.io/cluster/{cluster}=owned (or eks:eks-cluster-name={cluster}) is left in {region}")
            return 0
        if not run_steps(steps, runner, print):
            print(f"{PRE_DESTROY}: a cleanup command failed; fix it and rerun (it is safe to repeat)", file=sys.stderr)
            return 1
    try:
        ec2 = (clients or make_clients(region))["ec2"]
        left = wait_for_instances_gone(ec2, cluster, args.timeout_minutes * 60, args.poll_seconds, sleep=sleep)
    except Exception as exc:  # noqa: BLE001
        print(f"{PRE_DESTROY}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if left:
        print(f"{PRE_DESTROY}: Karpenter instances remain; check the controller logs, or after `pulumi destroy` run "
              f"`python -m stacks {TEARDOWN_CHECK} {args.stack} --delete`", file=sys.stderr)
        return 1
    return 0


@_on_interrupt(TEARDOWN_CHECK, "deletions already sent stay done, nothing else was changed")
def run_teardown_check(args: argparse.Namespace, clients: dict[str, Any] | None = None,
                       confirm: Callable[[str], str] = input, sleep: Callable[[float], None] = time.sleep) -> int:
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
        cluster, region = settings.cluster.name, settings.region
        clients = clients or make_clients(region)
        aws = {k: clients[k] for k in ("ec2", "iam", "elbv2", "elb")}
        leftovers = find_leftovers(cluster, args.stack, **aws, s3=clients["s3"],
                                   vpc_id=getattr(settings.network, "vpc_id", None),
                                   teardown=settings.storage.teardown, logs=clients.get("logs"))
    except Exception as exc:  # noqa: BLE001
        print(f"{TEARDOWN_CHECK}: error: {exc if isinstance(exc, ValueError) else f'{type(exc).__name__}: {exc}'}",
              file=sys.stderr)
        return 2

    if args.json and not args.delete:
        print(json.dumps({"cluster": cluster, "region": region, "ok": not unexpected(leftovers),
                          "leftovers": [asdict(x) for x in leftovers]}, indent=2))
        return 1 if unexpected(leftovers) else 0
    print(format_leftovers(leftovers, cluster, region))
    removable = [x for x in unexpected(leftovers) if x.deletable]
    if not args.delete or not removable:
        return 1 if unexpected(leftovers) else 0

    if not args.yes:
        if not sys.stdin.isatty() and confirm is input:
            print(f"{TEARDOWN_CHECK}: refusing to delete without a terminal; pass --yes", file=sys.stderr)
            return 2
        answer = confirm(f"Delete the {len(removable)} resource(s) above in {region}? Type the cluster name ({cluster}): ")
        if answer.strip() != cluster:
            print("not confirmed; nothing deleted")
            return 1
    errors = delete_leftovers(leftovers, cluster, **aws, wait_timeout_s=args.wait_minutes * 60, sleep=sleep)
    after = find_leftovers(cluster, args.stack, **aws, s3=clients["s3"],
                           vpc_id=getattr(settings.network, "vpc_id", None), teardown=settings.storage.teardown,
                           logs=clients.get("logs"))
    print()
    print(format_leftovers(after, cluster, region))
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    return 1 if unexpected(after) or errors else 0


def main(argv: list[str] | argparse.Namespace | None = None) -> int:
    """`python -m stacks.teardown pre-destroy|teardown-check <stack> ...`"""
    if isinstance(argv, argparse.Namespace):
        return argv.func(argv)
    parser = argparse.ArgumentParser(prog="python -m stacks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
