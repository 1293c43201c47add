"""Per-pool start-up settings: the Run:ai streamer measurement Job and the containerd image cache.

Both are off by default. `gpuPools[].streamerJob` runs `python -m bench streamer` once on a node of
the pool and stores streamer.json under the stack's results prefix (`streamer/<pool>/`);
`gpuPools[].imageCache` mounts an EBS volume restored from a snapshot that already holds the vLLM
image as the node's containerd data (docs/startup.md: "Image pre-caching" gives the commands to build it).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from stacks import catalog
from stacks.serving import MODELS
from stacks.settings.base import SettingsModel

_SNAPSHOT = re.compile(r"^snap-[0-9a-f]{8}([0-9a-f]{9})?$")
# Host memory the streamer process needs beside its buffer (Python, torch, boto3).
STREAMER_OVERHEAD_GIB = 6


class StreamerJobSettings(SettingsModel):
    model: str | None = Field(
        None, description="Model profile to stream (its weights must be staged); default: the model of the "
        "first server on the pool.")
    concurrencies: list[int] = Field(
        default_factory=lambda: [8, 16, 32, 64], description="RUNAI_STREAMER_CONCURRENCY values to try.")
    memory_limit_gib: list[int] = Field(
        default_factory=lambda: [8, 24], description="RUNAI_STREAMER_MEMORY_LIMIT values to try, in GiB.")
    repeats: int = Field(1, ge=1, le=5, description="Runs per grid point; the median counts.")

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is not None and v not in MODELS:
            raise ValueError(f"unknown model {v!r}; use one of {', '.join(MODELS)}")
        return v

    @field_validator("concurrencies")
    @classmethod
    def _concurrencies(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 or c > 256 for c in v) or len(set(v)) != len(v):
            raise ValueError("give distinct concurrencies between 1 and 256, e.g. [8, 16, 32, 64]")
        return v

    @field_validator("memory_limit_gib")
    @classmethod
    def _memory(cls, v: list[int]) -> list[int]:
        if not v or any(m < 1 for m in v) or len(set(v)) != len(v):
            raise ValueError("give distinct buffer sizes of at least 1 GiB, e.g. [8, 24]")
        return v

    def memory_request_gib(self) -> int:
        return max(self.memory_limit_gib) + STREAMER_OVERHEAD_GIB


class ImageCacheSettings(SettingsModel):
    snapshot_id: str = Field(description="EBS snapshot holding containerd's data with the vLLM image pulled.")
    volume_gib: int = Field(150, ge=20, le=4000, description="Size of the volume made from the snapshot.")
    initialization_rate: int | None = Field(
        None, ge=100, le=300,
        description="EBS volume initialization rate in MiB/s (blocks are fetched from S3 at this rate "
        "instead of lazily on first read); unset: lazy loading.")

    @field_validator("snapshot_id")
    @classmethod
    def _snapshot(cls, v: str) -> str:
        if not _SNAPSHOT.match(v):
            raise ValueError(f"{v!r} is not an EBS snapshot ID (snap- and 8 or 17 hex digits)")
        return v


def check_pool(streamer: StreamerJobSettings | None, instance: catalog.InstanceType) -> list[str]:
    """Pool-level problems (the caller prefixes the key)."""
    problems = []
    if streamer is not None:
        usable = int(instance.memory_gib * 0.8)
        if streamer.memory_request_gib() > usable:
            problems.append(
                f"streamerJob.memoryLimitGib: the largest buffer ({max(streamer.memory_limit_gib)} GiB) plus "
                f"{STREAMER_OVERHEAD_GIB} GiB does not fit {instance.name}'s ~{usable} GiB allocatable memory; "
                "use smaller values")
    return problems


def streamer_model(streamer: StreamerJobSettings, pool_servers_models: list[str]) -> str | None:
    """The model key the Job streams: configured, else the pool's first server's."""
    return streamer.model or (pool_servers_models[0] if pool_servers_models else None)
