"""`vllm-poc:network`: a VPC the stack creates, or an existing one (vpcId and its subnets)."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from stacks.settings.base import SettingsModel

_AZ = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
# Subnet CIDRs are keyed by zone letter (components/network.py, seven slots).
_LAST_ZONE_LETTER = "g"


class NetworkSettings(SettingsModel):
    vpc_cidr: str = Field("10.40.0.0/16", description="CIDR of the VPC the stack creates.")
    availability_zone_count: int = Field(
        2, ge=2, le=4, description="AZs the created VPC spans (public + private subnet in each)."
    )
    availability_zones: list[str] | None = Field(
        None,
        description="AZs of the created VPC, decided once: `python -m stacks pin-zones <stack>` writes the "
        "choice from today's offerings (availabilityZoneCount zones where every GPU pool's type is offered) "
        "and the shipped stacks carry theirs. Unset, a live VPC keeps the zones of its subnets and a new "
        "one takes the choice. Each zone's subnets and CIDRs follow its letter (a to g), so a change of "
        "this list moves no other zone; EKS keeps the zones its cluster was created in.",
    )
    nat_gateways: Literal["single", "per-az"] = Field(
        "single",
        description="One NAT gateway for the VPC (PoC cost) or one per AZ (no cross-AZ dependency).",
    )
    ecr_endpoints: bool = Field(
        True,
        description="Interface endpoints for ECR (api and dkr) in the VPC the stack creates: image pulls from "
        "ECR (the pull-through cache, EKS add-ons) stay off the NAT gateway's per-GB data processing, as "
        "the S3 gateway endpoint keeps the image layers and weights off it. About $0.013 per endpoint and AZ "
        "hour; false routes pulls through the NAT gateway.",
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
        beyond = [z for z in v if z[-1] > _LAST_ZONE_LETTER]
        if beyond:
            raise ValueError(f"{', '.join(beyond)}: the VPC's address plan has a slot for zones a to "
                             f"{_LAST_ZONE_LETTER} only; pick zones among those")
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
