"""Checks of a stack against the account, made when the program runs (preview or up) through invokes.

Each fails the run in seconds, before any resource is created, with the key to change: the caller's own
role listed as an admin, the stack file's placeholder API address (203.0.113.10/32) or alert receiver URL left
in place, a GPU pool type offered in none of the VPC's zones (a warning for a pool no
server runs on), pinned zones that differ from the live VPC's, a pinned AMI release without an NVIDIA AMI for the cluster's Kubernetes
version, the image mirror's Docker Hub credentials missing. `python -m stacks preflight` makes most of the same checks with boto3.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.network import DISCOVERY_TAG

from stacks.api_path import DOCUMENTATION_ACCOUNT, placeholder_problem
from stacks.identity import admin_role_problems
from stacks.settings import ConfigError, StackSettings, alerts
from stacks.versions import pins
from stacks.zones import choose_zones, live_zones_problem, unpinned_note


def invoke_error(exc: Exception) -> str:
    """The first line of a failed invoke's error (the provider's reason), for a message that adds the fix."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_caller(settings: StackSettings, caller_arn: str) -> None:
    """EKS makes the creator admin; an access entry for the same role would fail the create."""
    problems = admin_role_problems(list(settings.cluster.admin_role_arns), caller_arn)
    if problems:
        raise ConfigError(problems)


def check_placeholders(settings: StackSettings, account_id: str) -> None:
    """A shipped placeholder (the API address, the alert receiver's URL) reaches nothing: fine offline (the
    mocks' documentation account), refused in every real account before anything is created."""
    url = settings.alert_webhook_url.get_secret_value() if settings.alert_webhook_url else None
    problems = [p for p in (placeholder_problem(settings), alerts.placeholder_problem(url, settings.stack)) if p]
    if problems and account_id != DOCUMENTATION_ACCOUNT:
        raise ConfigError(problems)


def live_vpc_zones(settings: StackSettings, provider: aws.Provider) -> list[str]:
    """Zones of the private subnets the stack created on an earlier `up` (found by their tags); none
    before the first."""
    invoke = pulumi.InvokeOptions(provider=provider)
    found = aws.ec2.get_subnets(filters=[
        aws.ec2.GetSubnetsFilterArgs(name=f"tag:{DISCOVERY_TAG}", values=[settings.cluster.name]),
        aws.ec2.GetSubnetsFilterArgs(name="tag:vllm-poc/stack", values=[settings.stack]),
    ], opts=invoke)
    return sorted({aws.ec2.get_subnet(id=subnet, opts=invoke).availability_zone for subnet in found.ids or []})


def stack_zones(settings: StackSettings, provider: aws.Provider) -> list[str]:
    """The created VPC's zones, decided once: network.availabilityZones; else the live VPC's; else where
    every pool's type is offered today (stacks/zones.py)."""
    invoke = pulumi.InvokeOptions(provider=provider)
    pinned = settings.network.availability_zones
    live = live_vpc_zones(settings, provider)
    problem = live_zones_problem(pinned, live)
    if problem:
        raise ConfigError([problem])
    available = aws.get_availability_zones(state="available", opts=invoke).names
    types = sorted({pool.instance_type for pool in settings.gpu_pools})
    offerings: dict[str, set[str]] = {t: set() for t in types}
    if types:
        found = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=types)],
            opts=invoke,
        )
        for instance_type, zone in zip(found.instance_types, found.locations):
            offerings.setdefault(instance_type, set()).add(zone)
    zones, problems = choose_zones(
        sorted(available), offerings,
        {f"vllm-poc:gpuPools[{i}].instanceType": pool.instance_type for i, pool in enumerate(settings.gpu_pools)},
        settings.network.availability_zone_count, pinned or live or None,
    )
    if not pinned and not live:
        pulumi.log.warn(unpinned_note(settings.stack, zones))
    # A pool no server runs on never has to launch a node: said, not refused (preflight does the same).
    idle = {f"vllm-poc:gpuPools[{i}].instanceType" for i, pool in enumerate(settings.gpu_pools)
            if not any(server.pool == pool.name for server in settings.servers)}
    for problem in problems:
        if problem.split(": ", 1)[0] in idle:
            pulumi.log.warn(f"{problem} (no server runs on this pool, so nothing waits for its nodes)")
    blocking = [p for p in problems if p.split(": ", 1)[0] not in idle]
    if blocking:
        raise ConfigError(blocking)
    return zones


def check_gpu_ami(settings: StackSettings, provider: aws.Provider) -> None:
    """Fail now, not after a 45-minute wait: the pinned AMI release must have an NVIDIA AMI for this version.

    Karpenter skips a missing AMI variant silently and GPU pods stay Pending; the SSM lookup makes a
    preview or `up` stop in seconds instead, naming the parameter.
    """
    if not settings.gpu_pools:
        return
    versions = pins()
    parameter = versions.nvidia_ami_parameter(settings.cluster.kubernetes_version)
    try:
        aws.ssm.get_parameter(name=parameter, opts=pulumi.InvokeOptions(provider=provider))
    except Exception as exc:  # noqa: BLE001 - the invoke's error is reported with the fix
        raise ConfigError([
            f"vllm-poc:cluster.kubernetesVersion: the pinned AMI release {versions.al2023_ami_release} has no NVIDIA "
            f"AL2023 AMI for Kubernetes {settings.cluster.kubernetes_version} in {settings.region} ({parameter}: "
            f"{invoke_error(exc)}); pick a release that has one "
            "(al2023_ami_release in pyproject.toml [tool.vllm-poc.pins]) or another kubernetesVersion"
        ]) from None


def mirror_credential_arn(settings: StackSettings, provider: aws.Provider) -> str:
    """The ARN of the Docker Hub credentials the image mirror's pull-through cache rule uses; a missing
    secret stops a preview or `up` before anything is created, with the command that creates it."""
    secret = settings.cluster.image_mirror.credential_secret
    try:
        return aws.secretsmanager.get_secret(name=secret, opts=pulumi.InvokeOptions(provider=provider)).arn
    except Exception as exc:  # noqa: BLE001 - the invoke's error is reported with the fix
        raise ConfigError([
            f"vllm-poc:cluster.imageMirror.credentialSecret: no secret {secret} in {settings.region} "
            f"({invoke_error(exc)}); store the Docker Hub credentials "
            f"there (aws secretsmanager create-secret --name {secret} --secret-string "
            "'{\"username\":\"<user>\",\"accessToken\":\"<token>\"}'), or set cluster.imageMirror.enabled: false"
        ]) from None
