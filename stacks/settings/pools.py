"""`vllm-poc:gpuPools`: the Karpenter GPU pools, one instance type each, with their optional start-up
Jobs (stacks/settings/startup.py)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from stacks import catalog
from stacks.settings.base import DNS_LABEL, SettingsModel
from stacks.settings.startup import ImageCacheSettings, StreamerJobSettings, check_pool

_DURATION = re.compile(r"^([0-9]+(s|m|h))+$")


class GpuPoolSettings(SettingsModel):
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
        if not DNS_LABEL.match(v) or len(v) > 40:
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
