"""A stack's Pulumi config, turned into typed, validated settings.

Every key lives under the project namespace (`vllm-poc:<key>`), except the region, which is the AWS
provider's own `aws:region`. Structured keys hold objects; their fields are camelCase, as a user
writes them in `Pulumi.<stack>.yaml`. Validation runs once, before any resource is declared; a
problem is reported with the key as the user wrote it (`vllm-poc:gpuPools[1].instanceType`) and
what would be accepted. Unknown keys are errors too, so a misspelt key never silently falls back to
a default.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import typing
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator,
                      model_validator)
from pydantic.alias_generators import to_camel

from bench.sweep import DEFAULT_CONCURRENCIES, DEFAULT_SCENARIOS
from bench.workloads import WORKLOADS
from stacks import catalog, variants
from stacks.serving import ServerSettings, check_server, server_model_ids
from stacks.startup_settings import ImageCacheSettings, StreamerJobSettings, check_pool, streamer_model
from stacks.vllm_flags import server_extra_args_problems

PROJECT = "vllm-poc"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_REGION = "ap-northeast-2"

# The values CloudWatch Logs accepts for a log group's retention (PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                      2922, 3288, 3653)
_AZ = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION = re.compile(r"^([0-9]+(s|m|h))+$")


class ConfigError(ValueError):
    """Bad stack config. `problems` holds one line per problem, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack config:\n" + "\n".join(f"  - {p}" for p in problems))


class _Settings(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ClusterSettings(_Settings):
    name: str = Field(
        "vllm-poc",
        description="EKS cluster name; also names the Karpenter interruption queue and IAM roles.",
    )
    kubernetes_version: str = Field(
        "1.36", description="Kubernetes minor version, pinned; one EKS offers for new clusters."
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs allowed to reach the API endpoint from the internet: the deploying machine's "
        "egress /32 (`python -m stacks allow-my-address <stack>` writes it), a CI runner's. Empty: the "
        "endpoint is private. 0.0.0.0/0 also needs publicEndpointFromAnywhere: true. An address reserved "
        "for examples (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) is a placeholder: rendered offline, "
        "refused by preflight and by a preview or `up` in a real account.",
    )
    public_endpoint_from_anywhere: bool = Field(
        False,
        description="Acknowledge that publicAccessCidrs opens the API endpoint to the whole internet.",
    )
    private_access_security_groups: list[str] = Field(
        default_factory=list,
        description="Security groups (sg-...) admitted to the API endpoint's private address on 443, as "
        "ingress rules on the EKS cluster security group: a self-hosted runner or bastion inside the "
        "VPC. Needs an existing VPC (network.vpcId): nothing is inside a VPC the stack creates before "
        "its first `up`.",
    )
    private_access_cidrs: list[str] = Field(
        default_factory=list,
        description="IPv4 CIDRs admitted to the API endpoint's private address on 443, as ingress rules on "
        "the EKS cluster security group: a peered network or VPN that routes into the VPC. Needs an "
        "existing VPC (network.vpcId), like privateAccessSecurityGroups.",
    )
    admin_role_arns: list[str] = Field(
        default_factory=list,
        description="IAM role ARNs given cluster-admin access entries, for people and roles other than the "
        "one running `pulumi up` (EKS already makes that identity cluster admin; listing it fails).",
    )
    log_types: list[str] = Field(
        default_factory=lambda: ["api", "audit", "authenticator"],
        description="Control-plane log types sent to CloudWatch.",
    )
    log_retention_days: int = Field(
        14,
        description="Retention of the control-plane log group /aws/eks/<name>/cluster, which the stack "
        "creates before the cluster (and `pulumi destroy` deletes).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # The SQS interruption queue is named after the cluster (80 chars max) and IAM role names
        # carry it with a prefix (64 chars max).
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]{0,37}", v):
            raise ValueError(
                f"{v!r} is not a usable cluster name: use 1-38 letters, digits or '-', starting with a letter"
            )
        return v

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if v not in catalog.EKS_VERSIONS:
            raise ValueError(
                f"EKS does not offer Kubernetes {v!r} for new clusters; use one of {', '.join(catalog.EKS_VERSIONS)}"
            )
        return v

    @field_validator("public_access_cidrs", "private_access_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str], info: ValidationInfo) -> list[str]:
        for cidr in v:
            try:
                net = ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR such as 198.51.100.7/32 (host bits must be zero)") from None
            if net.version != 4 and info.field_name == "private_access_cidrs":
                raise ValueError(f"{cidr}: security group rules for the private endpoint take IPv4 CIDRs here")
        if len(set(v)) != len(v):
            raise ValueError("lists a CIDR more than once")
        return v

    @field_validator("private_access_security_groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        for group in v:
            if not re.fullmatch(r"sg-[0-9a-f]{8,17}", group):
                raise ValueError(f"{group!r} is not a security group id (sg-0123abcd...)")
        if len(set(v)) != len(v):
            raise ValueError("lists a security group more than once")
        return v

    @model_validator(mode="after")
    def _anywhere(self) -> ClusterSettings:
        anywhere = [c for c in self.public_access_cidrs if ipaddress.ip_network(c).prefixlen == 0]
        if anywhere and not self.public_endpoint_from_anywhere:
            raise ValueError(
                f"publicAccessCidrs: {anywhere[0]} opens the Kubernetes API endpoint to the whole "
                "internet; list the CIDRs that deploy (e.g. the CI runner's egress /32), leave it empty "
                "for a private endpoint, or set publicEndpointFromAnywhere: true to accept the exposure"
            )
        wide = [c for c in self.private_access_cidrs if ipaddress.ip_network(c).prefixlen == 0]
        if wide:
            raise ValueError(
                f"privateAccessCidrs: {wide[0]} admits every address that routes into the VPC; list the runner's "
                "or the peered network's CIDRs")
        return self

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        if v not in LOG_RETENTION_DAYS:
            raise ValueError(f"{v} is not a CloudWatch Logs retention; use one of {', '.join(map(str, LOG_RETENTION_DAYS))}")
        return v

    @field_validator("admin_role_arns")
    @classmethod
    def _arns(cls, v: list[str]) -> list[str]:
        for arn in v:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/.+", arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
        return v


class NetworkSettings(_Settings):
    vpc_cidr: str = Field("10.40.0.0/16", description="CIDR of the VPC the stack creates.")
    availability_zone_count: int = Field(
        2, ge=2, le=4, description="AZs the created VPC spans (public + private subnet in each)."
    )
    availability_zones: list[str] | None = Field(
        None,
        description="AZs of the created VPC, overriding the choice from offerings (by default the first "
        "availabilityZoneCount AZs where every GPU pool's instance type is offered).",
    )
    nat_gateways: Literal["single", "per-az"] = Field(
        "single",
        description="One NAT gateway for the VPC (PoC cost) or one per AZ (no cross-AZ dependency).",
    )
    vpc_id: str | None = Field(None, description="Use this existing VPC instead of creating one.")
    private_subnets: dict[str, str] | None = Field(
        None,
        description="Existing private subnets as {availability zone: subnet id}; nodes run here.",
    )
    public_subnets: dict[str, str] | None = Field(
        None, description="Existing public subnets as {availability zone: subnet id} (load balancers)."
    )

    @property
    def create_vpc(self) -> bool:
        return self.vpc_id is None

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        net = ipaddress.ip_network(v, strict=True)
        if not 16 <= net.prefixlen <= 20:
            raise ValueError(f"{v} must be a /16 to /20 so that each AZ gets room for GPU nodes and pods")
        return v

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        bad = [z for z in v if not _AZ.match(z)]
        if bad:
            raise ValueError(f"{', '.join(bad)} not availability zone names (e.g. ap-northeast-2a)")
        if len(set(v)) != len(v) or not 2 <= len(v) <= 4:
            raise ValueError("list 2 to 4 distinct availability zones (EKS needs subnets in at least 2)")
        return v

    @field_validator("vpc_id")
    @classmethod
    def _vpc(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"vpc-[0-9a-f]{8,17}", v):
            raise ValueError(f"{v!r} is not a VPC id (vpc-0123abcd...)")
        return v

    @field_validator("private_subnets", "public_subnets")
    @classmethod
    def _subnets(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        for az, subnet in v.items():
            if not re.fullmatch(r"[a-z]{2}-[a-z]+-\d[a-z]", az):
                raise ValueError(f"key {az!r} is not an availability zone name (e.g. ap-northeast-2a)")
            if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", subnet):
                raise ValueError(f"{subnet!r} is not a subnet id (subnet-0123abcd...)")
        return v

    @model_validator(mode="after")
    def _existing(self) -> NetworkSettings:
        given = self.private_subnets is not None or self.public_subnets is not None
        if given and self.vpc_id is None:
            raise ValueError(
                "privateSubnets/publicSubnets need vpcId: set vpcId to the VPC that holds them, "
                "or remove the subnets to let the stack create a VPC"
            )
        if self.vpc_id is not None and self.availability_zones is not None:
            raise ValueError("availabilityZones applies to a VPC the stack creates; with vpcId the subnets set the zones")
        if self.vpc_id is not None:
            if not self.private_subnets:
                raise ValueError("vpcId needs privateSubnets ({availability zone: subnet id}) for the nodes")
            for key, subnets in (("privateSubnets", self.private_subnets),
                                 ("publicSubnets", self.public_subnets)):
                if subnets is not None and len(subnets) < 2:
                    raise ValueError(
                        f"{key} spans {len(subnets)} availability zone; EKS and the system node group "
                        "need subnets in at least 2 AZs"
                    )
        return self


class SystemNodeSettings(_Settings):
    instance_types: list[str] = Field(
        default_factory=lambda: ["m7i.xlarge"],
        description="Instance types of the managed node group for Karpenter and cluster add-ons.",
    )
    min_size: int = Field(2, ge=2, description="At least 2: Karpenter runs 2 replicas spread over AZs.")
    desired_size: int = Field(2, ge=2, description="Nodes at creation.")
    max_size: int = Field(3, ge=2, description="Upper bound of the node group.")
    disk_size_gib: int = Field(50, ge=20, le=500, description="Root volume of each system node.")

    @field_validator("instance_types")
    @classmethod
    def _types(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("needs at least one instance type")
        for name in v:
            if not catalog.is_system_instance_type(name):
                raise ValueError(
                    f"{name!r} is not a supported system node type; use a general-purpose type from "
                    f"families {', '.join(catalog.SYSTEM_INSTANCE_FAMILIES)} (e.g. m7i.xlarge)"
                )
        return v

    @model_validator(mode="after")
    def _sizes(self) -> SystemNodeSettings:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"need minSize <= desiredSize <= maxSize, got {self.min_size}, {self.desired_size}, {self.max_size}"
            )
        return self


class GpuPoolSettings(_Settings):
    name: str = Field(description="Pool name: names the NodePool and the `vllm-poc/pool` node label.")
    instance_type: str = Field(description="One GPU instance type, e.g. g6e.2xlarge.")
    capacity_types: list[Literal["on-demand", "spot"]] = Field(
        default_factory=lambda: ["on-demand"], description="Karpenter capacity types for the pool."
    )
    gpu_limit: int = Field(description="Most GPUs the pool may run at once (NodePool limit).", ge=1)
    weight: int = Field(50, ge=1, le=100, description="Karpenter NodePool weight (higher is tried first).")
    on_demand_fallback: bool = Field(
        False,
        description="With spot: add `<name>-on-demand`, a lower-weight on-demand NodePool with the same "
        "pool label, used when Spot capacity is short.",
    )
    raid0: bool | None = Field(
        None,
        description="Stripe the instance-store NVMe disks (RAID0) under kubelet and containerd; "
        "default: on where the instance type has instance store.",
    )
    root_volume_gib: int | None = Field(
        None, ge=20, le=2000,
        description="Root EBS volume; default 60 with RAID0 (images live on NVMe), 200 without "
        "(a ~25 GB vLLM image unpacks to more than the 20 GiB default).",
    )
    consolidate_after: str = Field("10m", description="Empty GPU nodes are removed after this delay.")
    expire_after: str = Field("720h", description="Nodes are replaced after this age.")
    streamer_job: StreamerJobSettings | None = Field(
        None, description="Run `bench streamer` once on a node of this pool (Run:ai streamer throughput over "
        "concurrency x memory limit); result under the results prefix, streamer/<pool>/. Off when unset.")
    image_cache: ImageCacheSettings | None = Field(
        None, description="Mount an EBS volume made from a snapshot holding the vLLM image as the nodes' "
        "containerd data, so the image is not pulled at boot. Off when unset.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DNS_LABEL.match(v) or len(v) > 40:
            raise ValueError(f"{v!r} must be a lowercase DNS label of at most 40 characters (a-z, 0-9, '-')")
        return v

    @field_validator("instance_type")
    @classmethod
    def _instance(cls, v: str) -> str:
        try:
            catalog.gpu_instance(v)
        except KeyError as err:
            raise ValueError(err.args[0]) from None
        return v

    @field_validator("capacity_types")
    @classmethod
    def _capacity(cls, v: list[str]) -> list[str]:
        if not v or len(set(v)) != len(v):
            raise ValueError("list each of 'on-demand' and 'spot' at most once, and at least one")
        return v

    @field_validator("consolidate_after", "expire_after")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise ValueError(f"{v!r} is not a duration like 10m, 1h or 720h")
        return v

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.gpu_instance(self.instance_type)

    @property
    def use_raid0(self) -> bool:
        return self.instance.has_instance_store if self.raid0 is None else self.raid0

    @property
    def root_volume(self) -> int:
        if self.root_volume_gib is not None:
            return self.root_volume_gib
        return 60 if self.use_raid0 else 200

    @model_validator(mode="after")
    def _pool(self) -> GpuPoolSettings:
        instance = self.instance
        if self.raid0 and not instance.has_instance_store:
            raise ValueError(
                f"raid0 is set but {instance.name} has no instance-store NVMe; remove raid0 or pick a type "
                "with local NVMe (g6e, g7e)"
            )
        if self.gpu_limit < instance.gpus:
            raise ValueError(
                f"gpuLimit {self.gpu_limit} is below one {instance.name} ({instance.gpus} GPUs): Karpenter could "
                f"never launch a node; set gpuLimit to at least {instance.gpus}"
            )
        if self.on_demand_fallback and self.capacity_types != ["spot"]:
            raise ValueError("onDemandFallback applies to spot-only pools: set capacityTypes: [spot]")
        if problems := check_pool(self.streamer_job, instance):
            raise ValueError("\n".join(problems))
        return self


class WeightSettings(_Settings):
    source: Literal["hub", "stage-weights"] = Field(
        "hub",
        description="hub: a Job per model copies the pinned revision from the Hugging Face Hub to S3 on the "
        "system nodes before its servers start; stage-weights: you upload from a laptop with "
        "`python -m stacks stage-weights`, and a Job only checks the model is there (for accounts without "
        "Hub access).",
    )
    revisions: dict[str, str] = Field(
        default_factory=dict,
        description="Hub revision of each model the servers load ({hf id: commit SHA}); required with "
        "source hub. A branch name is accepted but resolved at each sync; pin the commit.",
    )
    scratch_gib: int = Field(
        20, ge=5, le=400,
        description="Scratch disk of a sync Job on a system node: it holds one file at a time, so it must "
        "exceed the largest shard; below systemNodes.diskSizeGib minus 20.",
    )
    sync_timeout_minutes: int = Field(
        120, ge=10, le=1440, description="Deadline of one sync Job; `pulumi up` waits for it."
    )

    @field_validator("revisions")
    @classmethod
    def _revisions(cls, v: dict[str, str]) -> dict[str, str]:
        for model, rev in v.items():
            if not re.fullmatch(r"[\w.-]+/[\w.-]+", model) or not re.fullmatch(r"[\w./-]{1,100}", rev):
                raise ValueError(f"{model!r}: {rev!r} is not a Hugging Face repo id and revision")
        return v


def is_commit(revision: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}", revision) is not None


class StorageSettings(_Settings):
    teardown: Literal["destroy", "retain-weights"] = Field(
        "destroy",
        description="destroy: `pulumi destroy` empties and deletes both buckets (PoC default); "
        "retain-weights: `pulumi destroy` leaves the weights bucket and its contents in place.",
    )
    kms_key_arn: str | None = Field(
        None, description="Encrypt both buckets with this KMS key instead of SSE-S3."
    )

    @field_validator("kms_key_arn")
    @classmethod
    def _kms(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/.+", v):
            raise ValueError(f"{v!r} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>)")
        return v


class SecuritySettings(_Settings):
    client_namespaces: list[str] = Field(
        default_factory=lambda: ["vllm"],
        description="Namespaces whose pods may reach the vLLM servers' API port (default: the "
        "servers' own namespace). A server's bench Job always may.",
    )
    dev_endpoint_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose pods may reach a sleep-mode server. Its development endpoints "
        "(/sleep, /wake_up, /reset_prefix_cache, /collective_rpc) share the API port, so a sleep-mode "
        "server is reachable only from these (and its bench Job), not from clientNamespaces.",
    )
    api_key_secret: str | None = Field(
        None,
        description="Name of a Secret in the servers' namespace whose `api-key` entry the servers "
        "require as a bearer token on /v1 (VLLM_API_KEY); the bench Jobs send it (OPENAI_API_KEY). "
        "Create it before `pulumi up`; unset: no key.",
    )

    @field_validator("client_namespaces", "dev_endpoint_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _DNS_LABEL.match(name) or len(name) > 63:
                raise ValueError(f"{name!r} is not a namespace name (a lowercase DNS label)")
        return v

    @field_validator("api_key_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (not re.fullmatch(r"[a-z0-9]([-.a-z0-9]*[a-z0-9])?", v) or len(v) > 253):
            raise ValueError(f"{v!r} is not a Secret name (lowercase letters, digits, '-' and '.')")
        return v


class CompareSettings(_Settings):
    """What the stack's report Job answers (components/report_job.py): the verdict, the plan, the compare."""

    candidate: str | None = Field(
        None, description="Bench target whose sweep the verdict is about (e.g. the g7e server); unset with "
        "variants only, then the report covers the baseline alone.")
    baseline: str = Field(
        ..., description="Bench target of the hardware serving today: the report's baseline and the plan's "
        "current fleet.")
    variants: list[str] = Field(
        default_factory=list, description="Bench targets compared side by side (`bench compare`, two or more, "
        "e.g. a server and its variants); each is a plan candidate too.")
    current_replicas: int = Field(12, ge=1, description="Replicas of the baseline serving today (the plan's load).")
    threshold: float = Field(1.5, gt=0, description="Verdict threshold on the per-GPU ratio.")
    verdict_basis: Literal["slo", "peak"] = Field(
        "slo", description="slo: throughput under the SLO; peak: peak throughput. For the verdict and the plan.")
    headroom: float = Field(0.0, ge=0, lt=1, description="Plan: share of capacity kept free.")
    spares: int = Field(0, ge=0, description="Plan: replicas added on top (Spot interruptions, rollouts).")
    mix: dict[str, float] = Field(
        default_factory=dict, description="Plan: shares of requests per scenario ({S1_chat: 0.6, S4_rag: 0.4}); "
        "empty: the fleet is sized for its busiest scenario.")
    mixed_traffic: bool = Field(
        False, description="After the plan, run its mix on the candidate's server, every scenario at once at the "
        "planned per-replica rates (`bench mix-check`, a Job on the candidate's node), and plan again saying "
        "whether the scenarios added up. Needs candidate and mix.")

    @model_validator(mode="after")
    def _names(self) -> CompareSettings:
        if self.candidate is None and len(self.variants) < 2:
            raise ValueError("name a candidate (the sweep the verdict is about), or two or more variants")
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants: each server once; got {self.variants}")
        if self.candidate is not None and self.candidate == self.baseline:
            raise ValueError(f"candidate: {self.candidate} is also the baseline; compare two servers")
        if any(share <= 0 for share in self.mix.values()):
            raise ValueError(f"mix: shares must be positive; got {self.mix}")
        if self.mixed_traffic and (self.candidate is None or not self.mix):
            raise ValueError("mixedTraffic: runs the plan's mix on the candidate's server; set candidate and "
                             "mix ({scenario: share of requests}) too")
        return self

    def servers(self) -> list[str]:
        """Every bench target it reads, each once: candidate, baseline, variants."""
        names = [n for n in (self.candidate, self.baseline, *self.variants) if n]
        return list(dict.fromkeys(names))


class BenchSettings(_Settings):
    targets: list[str] = Field(
        default_factory=list,
        description="Servers (servers[].name) to benchmark after `pulumi up`; one Job each.",
    )
    scenarios: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SCENARIOS),
        description="Scenarios to sweep: " + ", ".join(f"{k} {i}/{o}" for k, (i, o) in DEFAULT_SCENARIOS.items())
        + " (input/output tokens, the PoC's four scenarios); also S5_shared_prefix (2048/256, 90% shared "
        "prefix) and K_korean (the Korean marketplace prompt set, outputs <= 256, c=1 and 8).",
    )
    scenario_concurrencies: dict[str, list[int]] = Field(
        default_factory=dict,
        description="A scenario's own concurrencies ({scenario: [c, ...]}), e.g. K_korean: [1, 8, 64]; "
        "default: the scenario's own (K_korean 1 and 8), else concurrencies.",
    )
    concurrencies: list[int] = Field(
        default_factory=lambda: list(DEFAULT_CONCURRENCIES),
        description="Client concurrencies per scenario.",
    )
    prompts_per_concurrency: int = Field(
        8, ge=1, le=100, description="Prompts per run = max(minPrompts, this x concurrency)."
    )
    min_prompts: int = Field(32, ge=1, le=10000, description="Lower bound of prompts per run (p99 needs samples).")
    seed: int = Field(0, description="Random dataset seed; the same seed replays the same prompts.")
    capacity_search: bool = Field(
        False, description="After the grid: SLO capacity search and open-loop runs per scenario "
        "(`bench sweep --capacity-search`, at most 40 % more GPU time).",
    )
    price_per_hour: dict[str, dict[Literal["on-demand", "spot"], float] | float] = Field(
        default_factory=dict,
        description="USD per hour of each target's instance per capacity type ({server: {spot: X, "
        "on-demand: Y}}); the Job records the price of the capacity type its node has. A plain number "
        "is allowed for a pool with one capacity type. Default: the catalog's prices where known.",
    )
    compare: CompareSettings | None = Field(
        None, description="The stack's question: a report Job, created by the same `pulumi up`, waits for these "
        "targets' sweeps in S3, then writes the report, the replica plan and (with variants) the compare under "
        "runs/<stack>/report/<hash>/ (stack output `report`). Off when unset.",
    )

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, v: list[str]) -> list[str]:
        unknown = [name for name in v if name not in WORKLOADS]
        if unknown or not v or len(set(v)) != len(v):
            raise ValueError(
                f"scenarios must be distinct names from {', '.join(WORKLOADS)}; got {v}"
            )
        return v

    @model_validator(mode="after")
    def _scenario_concurrencies(self) -> BenchSettings:
        for name, values in self.scenario_concurrencies.items():
            if name not in self.scenarios:
                raise ValueError(f"scenarioConcurrencies.{name}: not among bench.scenarios ({', '.join(self.scenarios)})")
            if not values or any(c < 1 for c in values) or len(set(values)) != len(values):
                raise ValueError(f"scenarioConcurrencies.{name}: need distinct positive integers; got {values}")
        return self

    def concurrencies_of(self, scenario: str) -> list[int]:
        own = WORKLOADS[scenario].concurrencies
        return sorted(self.scenario_concurrencies.get(scenario) or (own and list(own)) or self.concurrencies)

    @field_validator("concurrencies")
    @classmethod
    def _concurrencies(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v) or len(set(v)) != len(v):
            raise ValueError(f"concurrencies must be distinct positive integers; got {v}")
        return sorted(v)

    @property
    def max_concurrency(self) -> int:
        return max(c for name in self.scenarios for c in self.concurrencies_of(name))

    @property
    def max_request_tokens(self) -> int:
        return max(WORKLOADS[name].max_request_tokens() for name in self.scenarios)


class StackSettings(_Settings):
    project: str = Field(PROJECT, exclude=True)
    stack: str = Field("dev", exclude=True)
    region: str = Field(DEFAULT_REGION, description="AWS region (the provider key aws:region).")
    cluster: ClusterSettings = Field(default_factory=ClusterSettings, description="The EKS cluster.")
    network: NetworkSettings = Field(
        default_factory=NetworkSettings, description="A VPC to create, or an existing one (vpcId + subnets)."
    )
    system_nodes: SystemNodeSettings = Field(
        default_factory=SystemNodeSettings, description="Managed node group for Karpenter and add-ons."
    )
    gpu_pools: list[GpuPoolSettings] = Field(
        default_factory=list, description="Karpenter GPU pools, one instance type each."
    )
    storage: StorageSettings = Field(
        default_factory=StorageSettings, description="S3 buckets for weights and bench results."
    )
    servers: list[ServerSettings] = Field(default_factory=list, description="vLLM servers, one Deployment each.")
    weights: WeightSettings = Field(
        default_factory=WeightSettings, description="How model weights reach the weights bucket."
    )
    hf_token: SecretStr | None = Field(
        None,
        description="Hugging Face token for the weight sync (gated repositories such as google/gemma-*): "
        "`pulumi config set --secret vllm-poc:hfToken hf_...`; handed to the Job as a Kubernetes Secret.",
    )
    bench: BenchSettings = Field(default_factory=BenchSettings, description="The benchmark Jobs run after `pulumi up`.")
    security: SecuritySettings = Field(
        default_factory=SecuritySettings, description="Who may reach the servers, and their API key."
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Extra tags on every AWS resource.")

    @model_validator(mode="before")
    @classmethod
    def _variants(cls, data: Any) -> Any:
        return variants.expand_config(data, ServerSettings)

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", v):
            raise ValueError(f"{v!r} is not an AWS region name (e.g. ap-northeast-2)")
        return v

    @model_validator(mode="after")
    def _stack(self) -> StackSettings:
        problems = cross_key_problems(self.gpu_pools, self.servers, self.bench)
        problems += self._weight_problems()
        staged = {server.model for server in self.servers}
        for index, pool in enumerate(self.gpu_pools):
            if pool.streamer_job is None:
                continue
            model = streamer_model(pool.streamer_job, [s.model for s in self.servers if s.pool == pool.name])
            if model is None or model not in staged:
                problems.append(
                    f"gpuPools[{index}].streamerJob.model: {model or 'no model'} is not staged by any server; set "
                    f"it to one of {', '.join(sorted(staged)) or '(no servers defined)'}")
        if not problems:
            problems += variants.variant_problems(self) + variants.gpu_budget_problems(self)
        # After the variant checks, never instead of them: a comparison names the servers they make.
        problems += compare_problems(self.bench)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def model_ids(self) -> list[str]:
        """Hugging Face ids the servers load (targets and MTP drafts), each once."""
        return sorted({m for server in self.servers for m in server_model_ids(server)})

    def _weight_problems(self) -> list[str]:
        problems = []
        models = self.model_ids()
        if self.weights.source == "hub":
            for model in models:
                if model not in self.weights.revisions:
                    problems.append(
                        f"weights.revisions: no revision for {model}, which servers load; pin its commit, e.g. "
                        f'revisions: {{"{model}": "<40-hex commit from huggingface.co/{model}/commits/main>"}}'
                    )
        room = self.system_nodes.disk_size_gib - 20
        if self.weights.source == "hub" and models and self.weights.scratch_gib > room:
            problems.append(
                f"weights.scratchGib: {self.weights.scratch_gib} GiB does not fit on a system node's "
                f"{self.system_nodes.disk_size_gib} GiB disk with 20 GiB for the OS and images; lower it or raise "
                "systemNodes.diskSizeGib"
            )
        return problems

    def pool(self, name: str) -> GpuPoolSettings:
        return next(p for p in self.gpu_pools if p.name == name)

    def server(self, name: str) -> ServerSettings:
        return next(s for s in self.servers if s.name == name)


def cross_key_problems(gpu_pools: list, servers: list, bench: BenchSettings | None,
                       unchecked_pools: frozenset[str] = frozenset(),
                       server_names_as_written: frozenset[str] = frozenset()) -> list[str]:
    """Problems between keys (names, pools, GPU limits, bench targets), one line each naming its key.

    Works on partly valid config too: an entry that failed its own validation is None and is skipped,
    references to a pool named in `unchecked_pools` (written but invalid) are not reported again, so
    a type error never hides the problems between the other keys.
    """
    problems: list[str] = []
    valid_pools = [(index, pool) for index, pool in enumerate(gpu_pools) if pool is not None]
    counts = Counter(pool.name for _, pool in valid_pools)
    seen: set[str] = set()
    for index, pool in valid_pools:
        if pool.name in seen:
            problems.append(f"gpuPools[{index}].name: pool name {pool.name!r} is used more than once; names must be unique")
        seen.add(pool.name)
        if pool.on_demand_fallback and f"{pool.name}-on-demand" in counts:
            problems.append(
                f"gpuPools[{index}].onDemandFallback: would create {pool.name}-on-demand, which another pool already uses"
            )
    pools = {pool.name: pool for _, pool in valid_pools}
    server_names: set[str] = set(server_names_as_written)
    seen_servers: set[str] = set()
    for index, server in enumerate(servers):
        if server is None:
            continue
        key = f"servers[{index}]"
        if server.name in seen_servers:
            problems.append(f"{key}.name: server name {server.name!r} is used more than once")
        seen_servers.add(server.name)
        server_names.add(server.name)
        problems += server_extra_args_problems(server.extra_args, server.image, key=f"{key}.extraArgs")
        pool = pools.get(server.pool)
        if pool is None:
            if server.pool not in unchecked_pools:
                problems.append(
                    f"{key}.pool: no GPU pool named {server.pool!r}; define it in gpuPools or use one of "
                    f"{', '.join(pools) or '(none defined)'}"
                )
            continue
        if bench is not None:
            # Every server is held to the bench's peak: any of them may be benchmarked later, and
            # the policy pack enforces the same floor on every Deployment.
            problems += [
                p.removeprefix(f"{PROJECT}:")
                for p in check_server(
                    server, pool.instance, bench.max_concurrency, key=f"{PROJECT}:{key}",
                    bench_max_tokens=bench.max_request_tokens,
                )
            ]
        gpus_needed = server.tensor_parallel_size * server.replicas
        if gpus_needed > pool.gpu_limit:
            problems.append(
                f"{key}.replicas: {server.replicas} replica(s) x {server.tensor_parallel_size} GPU(s) exceed "
                f"gpuPools {pool.name!r} gpuLimit {pool.gpu_limit}; raise the limit or lower replicas"
            )
    if bench is None:
        return problems
    servers_by_name = {server.name: server for server in servers if server is not None}
    for target, price in bench.price_per_hour.items():
        prices = list(price.values()) if isinstance(price, dict) else [price]
        if target not in bench.targets or not prices or min(prices) <= 0:
            problems.append(f"bench.pricePerHour.{target}: give a positive price for a server in bench.targets")
            continue
        pool = pools.get(servers_by_name[target].pool) if target in servers_by_name else None
        if pool and not isinstance(price, dict) and (len(pool.capacity_types) > 1 or pool.on_demand_fallback):
            problems.append(
                f"bench.pricePerHour.{target}: pool {pool.name!r} may run on spot or on-demand capacity, "
                "so one number cannot be its price; give {spot: X, on-demand: Y}")
    for index, target in enumerate(bench.targets):
        if target not in server_names:
            problems.append(
                f"bench.targets[{index}]: no server named {target!r}; use one of {', '.join(sorted(server_names)) or '(none defined)'}"
            )
    return problems


def compare_problems(bench: BenchSettings) -> list[str]:
    """bench.compare names bench targets (their sweeps are what it reads) and their scenarios."""
    compare = bench.compare
    if compare is None:
        return []
    problems = []
    targets = ", ".join(bench.targets) or "(none: set bench.targets)"
    named = [("candidate", compare.candidate), ("baseline", compare.baseline)]
    named += [(f"variants[{i}]", v) for i, v in enumerate(compare.variants)]
    for key, name in named:
        if name is not None and name not in bench.targets:
            problems.append(f"bench.compare.{key}: {name!r} is not a bench target, so it has no sweep to report on; "
                            f"use one of {targets}")
    for scenario in compare.mix:
        if scenario not in bench.scenarios:
            problems.append(f"bench.compare.mix.{scenario}: not among bench.scenarios ({', '.join(bench.scenarios)})")
    return problems


# -- reading config -----------------------------------------------------------------------------

_TOP_LEVEL = {
    "cluster": "cluster",
    "network": "network",
    "systemNodes": "systemNodes",
    "gpuPools": "gpuPools",
    "storage": "storage",
    "servers": "servers",
    "bench": "bench",
    "security": "security",
    "weights": "weights",
    "hfToken": "hfToken",
    "tags": "tags",
}
# Plain strings rather than structured (JSON) values.
_STRING_KEYS = {"hfToken"}
TOP_LEVEL_KEYS = tuple(_TOP_LEVEL)


def _key_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings model that holds the last key of `loc` (for did-you-mean on unknown keys)."""
    model: type[BaseModel] = StackSettings
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        found = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if found is None:
            return None
        inner = [found.annotation]
        model = None
        while inner:
            candidate = inner.pop()
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
            inner += list(typing.get_args(candidate))
        if model is None:
            return None
    return model


def _unknown_key_message(loc: tuple[Any, ...]) -> str:
    model = _model_at(loc)
    if model is None:
        return "unknown key (misspelt?); see the config reference in docs/configuration.md"
    known = [f.alias or name for name, f in model.model_fields.items() if not f.exclude]
    word = str(loc[-1])
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6) or [
        k for k in known if k.lower() == word.lower().replace("_", "").replace("-", "")]
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key; {hint}known here: {', '.join(known)} (config reference in docs/configuration.md)"


def _format(error: ValidationError) -> list[str]:
    problems = []
    for err in error.errors():
        loc = tuple(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = _unknown_key_message(loc)
        if loc and loc[0] == "region":
            key = "aws:region"
        elif loc:
            key = f"{PROJECT}:{_key_path(loc)}"
        else:
            key = None
        for line in message.splitlines():
            if key is None:
                # cross-key problems start with their own key path
                problems.append(f"{PROJECT}:{line}")
            else:
                problems.append(f"{key}: {line}")
    return problems


def settings_from_config(values: dict[str, Any], *, stack: str, project: str = PROJECT) -> StackSettings:
    """Build settings from a stack's config, given as {"<namespace>:<key>": value}.

    Values may be JSON strings (as `pulumi.Config` hands them out) or already-parsed objects.
    """
    data: dict[str, Any] = {"project": project, "stack": stack}
    problems: list[str] = []
    for full_key, value in values.items():
        namespace, _, key = full_key.partition(":")
        if namespace == "aws" and key == "region":
            data["region"] = value
        elif namespace == project:
            if key not in _TOP_LEVEL:
                problems.append(f"{full_key}: unknown key; known keys: {', '.join(f'{project}:{k}' for k in _TOP_LEVEL)}")
                continue
            if key in _STRING_KEYS:
                # a `pulumi config set --secret` value in a stack file is ciphertext: known to be set only
                data[key] = "[secret]" if isinstance(value, dict) and "secure" in value else value
                continue
            if isinstance(value, str):
                # pulumi.Config hands structured values over as JSON text
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    problems.append(f"{full_key}: expected a structured value (object or list), got {value!r}")
                    continue
            data[key] = value
    try:
        settings = StackSettings.model_validate(data)
    except ValidationError as err:
        problems += _format(err)
        if any(e["loc"] for e in err.errors()):
            problems += _partial_cross_key_problems(data)
    else:
        if not problems:
            return settings
    raise ConfigError(list(dict.fromkeys(problems)))


def _partial_cross_key_problems(data: dict[str, Any]) -> list[str]:
    """Cross-key problems among the entries that are valid on their own (see cross_key_problems)."""

    def each(model: type[BaseModel], raw: Any) -> BaseModel | None:
        try:
            return model.model_validate(raw)
        except (ValidationError, ValueError, TypeError):
            return None

    def items(raw: Any) -> list[Any]:
        return raw if isinstance(raw, list) else []

    raw_pools, raw_servers = items(data.get("gpuPools")), items(data.get("servers"))
    pools = [each(GpuPoolSettings, p) for p in raw_pools]
    servers = [each(ServerSettings, s) for s in raw_servers]
    bench = each(BenchSettings, data.get("bench", {}))
    unchecked = frozenset(str(raw.get("name")) for raw, pool in zip(raw_pools, pools)
                          if pool is None and isinstance(raw, dict))
    written = frozenset(str(raw.get("name")) for raw in raw_servers if isinstance(raw, dict) and raw.get("name"))
    # A whole section of the wrong shape: what refers to it cannot be checked, and is not blamed.
    if "gpuPools" in data and not isinstance(data["gpuPools"], list):
        unchecked |= frozenset(str(raw.get("pool")) for raw in raw_servers if isinstance(raw, dict))
    if "servers" in data and not isinstance(data["servers"], list) and isinstance(data.get("bench"), dict):
        written |= frozenset(str(t) for t in data["bench"].get("targets") or [] if isinstance(t, (str, int)))
    problems = cross_key_problems(pools, servers, bench, unchecked, written)
    if bench is not None and isinstance(data.get("servers"), list) and None not in servers:
        problems += compare_problems(bench)
    return [f"{PROJECT}:{p}" for p in problems]


def read_stack_file(stack: str, directory: Path = REPO) -> dict[str, Any]:
    """The checked `config:` mapping of `Pulumi.<stack>.yaml` (see stacks.loader)."""
    from stacks import loader

    return loader.load_config(stack, directory)


def load_stack_settings(stack: str, directory: Path = REPO) -> StackSettings:
    """Settings of a stack from its `Pulumi.<stack>.yaml`, as `pulumi up -s <stack>` would see them."""
    from stacks import loader

    return loader.load_settings(stack, directory)
