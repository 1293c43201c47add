"""What preflight checks without an AWS account, and the AWS checks it lists when it has none.

The offline checks read the stack file and this machine only: the stack file itself, the way to the
Kubernetes API (the shipped placeholder address, this machine's egress address), an API open to
0.0.0.0/0, the Hub token and revisions, a fleet's alert receiver (its placeholder URL), and the zones. Each is a function (settings, context) ->
findings in OFFLINE_CHECKS; a check added there runs with and without credentials alike (the stack's
time budgets belong there too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from stacks import catalog
from stacks.ops import api_access
from stacks.ops import time_budget as time_budget_mod
from stacks.ops.credentials import NotRun
from stacks.ops.preflight.report import Finding
from stacks.settings import alerts, is_commit
from stacks.versions import pins


@dataclass(frozen=True)
class Context:
    strict: bool = False
    inside_vpc: bool = False
    # This machine's egress address (a lookup over the network, not an AWS call); None: not looked up.
    egress: Callable[[], str] | None = None
    directory: Path | None = None  # where the stack files are (None: the project's root)


def stack_file(settings, ctx: Context) -> list[Finding]:
    """The stack file read and validated (the loader refuses a bad one before any check runs)."""
    servers = getattr(settings, "servers", None) or []
    return [Finding("note", "stack file",
                    f"Pulumi.{settings.stack}.yaml reads and validates: cluster {settings.cluster.name} in "
                    f"{settings.region}, {len(settings.gpu_pools)} GPU pool(s), {len(servers)} server(s)")]


def api_path(settings, ctx: Context) -> list[Finding]:
    """The way to the Kubernetes API from here; the shipped placeholder address is a blocker."""
    findings = []
    if "0.0.0.0/0" in settings.cluster.public_access_cidrs:
        findings.append(Finding(
            "warning", "cluster.publicAccessCidrs",
            "the Kubernetes API endpoint is reachable from any address (0.0.0.0/0); IAM still guards it",
            "set vllm-poc:cluster.publicAccessCidrs to your office or CI egress ranges"))
    # From where `pulumi up` cannot reach the API it would create the network and the cluster and then
    # time out at the first Kubernetes resource: say so before the 20 minutes, not after.
    for reach in api_access.reach_findings(settings, ctx.inside_vpc, ctx.egress, strict=ctx.strict):
        findings.append(Finding(reach.level, "cluster API", reach.message, reach.fix))
    return findings


def hub_weights(settings, ctx: Context) -> list[Finding]:
    """Hub revisions that follow a branch, and a missing hfToken for gated models."""
    findings = []
    weights = getattr(settings, "weights", None)
    if weights is None or weights.source != "hub":
        return findings
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


def alert_receiver(settings, ctx: Context) -> list[Finding]:
    """A fleet's alert receiver: the shipped placeholder URL is a blocker, as `pulumi up` refuses it."""
    fleet, url = getattr(settings, "fleet", None), getattr(settings, "alert_webhook_url", None)
    if fleet is None or fleet.alerts is None:
        return []
    problem = alerts.placeholder_problem(url.get_secret_value() if url else None, settings.stack)
    if problem:
        return [Finding("blocker", alerts.URL_KEY, problem.split("; set")[0],
                        alerts.SET_COMMAND.replace("<stack>", settings.stack))]
    return [Finding("note", "fleet.alerts", f"the SLO alerts go to {fleet.alerts.receiver} ({fleet.alerts.kind})")]


def zones(settings, ctx: Context) -> list[Finding]:
    """Where the nodes will run: pinned zones, an existing VPC's subnets, or a choice made at `up`."""
    network = getattr(settings, "network", None)
    if network is None:
        return []
    if network.vpc_id:
        where = ", ".join(sorted(network.private_subnets or {}))
        return [Finding("note", "zones", f"the existing VPC {network.vpc_id}'s private subnets set the zones: {where}")]
    if network.availability_zones:
        return [Finding("note", "zones", f"pinned by vllm-poc:network.availabilityZones: "
                        f"{', '.join(network.availability_zones)}")]
    return [Finding(
        "note", "zones",
        f"not pinned: `pulumi up` picks {network.availability_zone_count} zones of {settings.region} offering every "
        "GPU pool's type, read live from AWS (with credentials, preflight shows the same choice)",
        "set vllm-poc:network.availabilityZones to pin them")]


def time_budget(settings, ctx: Context) -> list[Finding]:
    """The longest chain of waits a first `pulumi up` may make, from the stack's offline render, against the
    deploy role's session (stacks/ops/time_budget.py; tests/test_time_budget.py checks the shipped stacks)."""
    try:
        chain = time_budget_mod.chain_for_stack(settings.stack, ctx.directory)
    except Exception as exc:  # noqa: BLE001 - a render that fails is said, the other checks still run
        return [Finding("warning", "time budget", f"the stack did not render offline, so its waits were not "
                        f"added up: {type(exc).__name__}: {exc}", "python -m stacks render " + settings.stack)]
    problems = time_budget_mod.budget_problems(chain)
    if problems:
        return [Finding("blocker" if ctx.strict else "warning", "time budget", problem,
                        "lower weights.syncTimeoutMinutes or the servers' deploy timeouts") for problem in problems]
    return [Finding("note", "time budget",
                    f"a first `up` waits at most {time_budget_mod.format_duration(chain.total_s)} plus "
                    f"{time_budget_mod.format_duration(time_budget_mod.WORKFLOW_SETUP_S)} of workflow steps, within "
                    f"the deploy role's {time_budget_mod.format_duration(time_budget_mod.DEPLOY_SESSION_S)} session: "
                    f"{chain.describe()}")]


OFFLINE_CHECKS: tuple[Callable[..., list[Finding]], ...] = (stack_file, api_path, hub_weights, alert_receiver, zones,
                                                            time_budget)


def offline_findings(settings, ctx: Context) -> list[Finding]:
    return [finding for check in OFFLINE_CHECKS for finding in check(settings, ctx)]


def _server_quota(settings) -> str:
    """What the servers need of the GPU vCPU quotas, from the catalog (no AWS call)."""
    need: dict[str, int] = {}
    for pool in settings.gpu_pools:
        gpus = sum(s.tensor_parallel_size * s.replicas for s in getattr(settings, "servers", None) or []
                   if s.pool == pool.name)
        if not gpus:
            continue
        try:
            it = catalog.gpu_instance(pool.instance_type)
        except KeyError:
            continue
        capacity = "on-demand" if "on-demand" in pool.capacity_types else "spot"
        need[capacity] = need.get(capacity, 0) + math.ceil(gpus / it.gpus) * it.vcpus
    return ", ".join(f"{v} vCPU {k}" for k, v in sorted(need.items())) or "no server runs on a GPU pool"


def aws_checks(settings) -> list[NotRun]:
    """The checks that read the account, each with what it answers and what it reads."""
    types = ", ".join(sorted({p.instance_type for p in settings.gpu_pools})) or "no GPU pool"
    k8s = settings.cluster.kubernetes_version
    return [
        NotRun("offerings", f"which zones of {settings.region} offer {types}, and the zones of the stack's subnets",
               "ec2:DescribeInstanceTypeOfferings, ec2:DescribeAvailabilityZones, ec2:DescribeSubnets"),
        NotRun("quotas", f"the G, VT and standard vCPU quotas against what the servers run ({_server_quota(settings)}) "
               "and the pools at their limits",
               "servicequotas:GetServiceQuota, servicequotas:GetAWSDefaultServiceQuota, ec2:DescribeInstances"),
        NotRun("prices", "Spot prices per zone against on-demand prices",
               "ec2:DescribeSpotPriceHistory, pricing:GetProducts"),
        NotRun("ami", f"the pinned AMI release {pins().al2023_ami_release} has an NVIDIA AMI for Kubernetes {k8s} "
               f"in {settings.region}", "ssm:GetParameter"),
        NotRun("caller", "the caller's role is not one of cluster.adminRoleArns, and its sessions last a first `up`",
               "sts:GetCallerIdentity, iam:GetRole"),
        NotRun("s3 ranges", "the NetworkPolicy's S3 ranges against the region's S3 prefix list now",
               "ec2:DescribeManagedPrefixLists, ssm:GetParameter"),
    ]
