"""`vllm-poc:cluster` (the EKS cluster, its API endpoint and who may reach it) and `vllm-poc:systemNodes`
(the managed node group that runs Karpenter and the add-ons)."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, ValidationInfo, field_validator, model_validator

from stacks import catalog
from stacks.settings.base import SettingsModel

# The control-plane log types EKS sends to CloudWatch Logs (UpdateClusterConfig logging.clusterLogging).
EKS_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# The values CloudWatch Logs accepts for a log group's retention (PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                      2922, 3288, 3653)


# ECR pull-through cache rules: the secret's name prefix AWS requires, and the repository prefix's form.
PULL_THROUGH_SECRET_PREFIX = "ecr-pullthroughcache/"
_ECR_PREFIX = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")


class ImageMirrorSettings(SettingsModel):
    enabled: bool = Field(
        True,
        description="Pull the Docker Hub images (vLLM, Python) through an ECR pull-through cache in the "
        "stack's account and region, by the same digests: authenticated Docker Hub pulls, fetched once, "
        "instead of anonymous pulls limited per NAT address. Needs the credentialSecret; false pulls "
        "from Docker Hub directly.",
    )
    credential_secret: str = Field(
        "ecr-pullthroughcache/docker-hub",
        description="Name of the Secrets Manager secret (same account and region) holding the Docker Hub "
        "credentials as JSON {\"username\": ..., \"accessToken\": ...}; AWS requires the "
        "ecr-pullthroughcache/ prefix. One secret serves every stack of the account and region "
        "(docs/operations.md, \"Images through the pull-through cache\").",
    )
    repository_prefix: str | None = Field(
        None,
        description="ECR repository prefix of the cache (2-30 characters, lower case); default the "
        "cluster name. Unique per account and region, like the cluster.",
    )

    @field_validator("credential_secret")
    @classmethod
    def _secret(cls, v: str) -> str:
        if not v.startswith(PULL_THROUGH_SECRET_PREFIX) or len(v) == len(PULL_THROUGH_SECRET_PREFIX):
            raise ValueError(f"{v!r}: ECR takes Docker Hub credentials only from a secret named "
                             f"{PULL_THROUGH_SECRET_PREFIX}<name>")
        return v

    @field_validator("repository_prefix")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        if v is not None and (not 2 <= len(v) <= 30 or not _ECR_PREFIX.fullmatch(v)):
            raise ValueError(f"{v!r} is not an ECR repository prefix: 2-30 lower-case letters, digits, '.', '_', "
                             "'-' or '/'")
        return v


class ClusterSettings(SettingsModel):
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
        default_factory=lambda: ["api", "authenticator"],
        description="Control-plane log types sent to CloudWatch (api, audit, authenticator, controllerManager, "
        "scheduler). The audit log is off by default: Karpenter and the bench's API readers make it the "
        "largest stream, billed per GB ingested, for a PoC that needs none of it; auditLogs turns it on.",
    )
    audit_logs: bool = Field(
        False,
        description="Send the control-plane audit log to CloudWatch too (adds `audit` to logTypes): for a "
        "stack that must keep a record of who did what through the Kubernetes API.",
    )
    image_mirror: ImageMirrorSettings = Field(
        default_factory=ImageMirrorSettings,
        description="Where the nodes pull the Docker Hub images from: an ECR pull-through cache (default) or "
        "Docker Hub directly.",
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

    @property
    def mirror_prefix(self) -> str | None:
        """The pull-through cache's repository prefix; None with the mirror off."""
        if not self.image_mirror.enabled:
            return None
        return self.image_mirror.repository_prefix or self.name.lower()

    @model_validator(mode="after")
    def _mirror_prefix(self) -> ClusterSettings:
        if self.image_mirror.enabled and self.image_mirror.repository_prefix is None and len(self.name) > 30:
            raise ValueError(f"imageMirror.repositoryPrefix: the cluster name {self.name!r} is longer than the 30 "
                             "characters of an ECR repository prefix; set imageMirror.repositoryPrefix")
        return self

    @property
    def enabled_log_types(self) -> list[str]:
        """What the cluster sends to CloudWatch: logTypes, plus audit with auditLogs."""
        return [*self.log_types, *(["audit"] if self.audit_logs and "audit" not in self.log_types else [])]

    @field_validator("log_types")
    @classmethod
    def _log_types(cls, v: list[str]) -> list[str]:
        unknown = [t for t in v if t not in EKS_LOG_TYPES]
        if unknown:
            raise ValueError(f"{', '.join(map(repr, unknown))} not EKS control-plane log types; use some of "
                             f"{', '.join(EKS_LOG_TYPES)} (auditLogs: true turns the audit log on)")
        if len(set(v)) != len(v):
            raise ValueError("lists a log type more than once")
        return v

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


class SystemNodeSettings(SettingsModel):
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
