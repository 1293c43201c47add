"""What a server is made of, as data: model profiles, traffic classes and weight-loading profiles.

Sources: the PoC's own measurements (startup A/B tests, FP8 vs NVFP4, the MTP draft) and a public
Gemma-4 on EKS throughput and latency write-up (precision, speculative decoding, text-only pools,
priority scheduling, pool roles per traffic kind); each figure used is quoted where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stacks import catalog

# -- model profiles ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelProfile:
    key: str  # as written in config: servers[].model
    hf_id: str  # Hugging Face repo id; also the S3 prefix models/<hf_id>/ and the served model name
    weights_gib: float  # checkpoint size, all shards
    quantization: str
    default_kv_cache_dtype: str
    # kvCacheDtype overrides that keep the profile's measured behaviour; anything else is refused
    allowed_kv_cache_dtypes: tuple[str, ...]
    # GPU (catalog gpu_name) -> note shown when the checkpoint runs there on a fallback kernel
    fallback_notes: dict[str, str] = field(default_factory=dict)


# Sizes: the public Gemma-4 measurements put the NVFP4 weights at about 31 GiB and FP8 within 2% of
# it; the PoC loaded both together as 66 GB. BF16 is the 31B parameters at 2 bytes.
MODELS: dict[str, ModelProfile] = {
    p.key: p
    for p in [
        ModelProfile(
            key="fp8-dynamic",
            hf_id="RedHatAI/gemma-4-31B-it-FP8-dynamic",
            weights_gib=31.6,
            quantization="FP8 W8A8 dynamic (native on Ada and Blackwell FP8 tensor cores)",
            # The checkpoint has no kv_cache_scheme, so vLLM would keep a BF16 KV cache: 12,150 vs
            # 23,320 KV tokens on L40S, and FP8 loses S2/S4 to NVFP4 (the PoC calls it the most common
            # mistake). fp8 is therefore not a default but a requirement.
            default_kv_cache_dtype="fp8",
            allowed_kv_cache_dtypes=("fp8", "fp8_e4m3"),
        ),
        ModelProfile(
            key="nvfp4",
            hf_id="nvidia/Gemma-4-31B-IT-NVFP4",
            weights_gib=31.0,
            quantization="NVFP4 (native FP4 tensor cores on Blackwell)",
            # The vLLM recipe runs the NVFP4 variant with fp8 KV as well; `auto` keeps the
            # checkpoint's own KV setting for runs that must match an earlier measurement.
            default_kv_cache_dtype="fp8",
            allowed_kv_cache_dtypes=("fp8", "fp8_e4m3", "auto"),
            fallback_notes={
                "l40s": "NVFP4 on L40S (SM89, no FP4 tensor cores) runs on the Marlin W4A16 "
                "fallback kernel, as in the PoC's L40S baseline; it is not comparable with "
                "native FP4 on g7e (the PoC warns against comparing the two).",
            },
        ),
        ModelProfile(
            key="bf16",
            hf_id="google/gemma-4-31B-it",
            weights_gib=58.0,
            quantization="BF16 (unquantized; for comparisons)",
            default_kv_cache_dtype="auto",
            allowed_kv_cache_dtypes=("auto", "bfloat16", "fp8", "fp8_e4m3"),
        ),
    ]
}


@dataclass(frozen=True)
class DraftProfile:
    hf_id: str
    weights_gib: float
    method: str


# The official MTP assistant: 56% acceptance on Korean prompts vs 5.6% for a 32K-vocab EAGLE3,
# 0.94 GB (PoC measurements). It shares the target's KV cache.
MTP_DRAFT = DraftProfile(hf_id="google/gemma-4-31B-it-assistant", weights_gib=0.88, method="mtp")


# -- traffic classes (pool roles per traffic kind, from public Gemma-4 measurements) -------------


@dataclass(frozen=True)
class TrafficClass:
    key: str
    speculative: bool  # MTP draft by default
    priority_scheduling: bool
    text_only: bool
    gpu_memory_utilization: float
    summary: str


TRAFFIC_CLASSES: dict[str, TrafficClass] = {
    c.key: c
    for c in [
        # MTP n=4 raised ITL p99 at c=4 from 27.0 to 112.4 ms (public measurement): no speculation
        # where the ITL p99 <= 50 ms SLO applies. 0.90 is the utilization that measurement used.
        TrafficClass(
            key="interactive",
            speculative=False,
            priority_scheduling=False,
            text_only=False,
            gpu_memory_utilization=0.90,
            summary="latency SLO traffic: no speculative decoding",
        ),
        # MTP n=4: up to 2.13x throughput (public measurement), 2.3x c8 throughput on Korean (PoC);
        # priority scheduling lets a router demote latency-insensitive requests (public measurement:
        # the slowest workload's e2e p99 fell 24%, the demoted requests' rose 1%).
        TrafficClass(
            key="batch",
            speculative=True,
            priority_scheduling=True,
            text_only=False,
            gpu_memory_utilization=0.90,
            summary="throughput traffic: MTP n=4 and priority scheduling",
        ),
        # No image encoder reservation and 0.95 utilization: +12.6% KV tokens (public measurement). Image
        # requests must go to another pool.
        TrafficClass(
            key="text-only",
            speculative=False,
            priority_scheduling=False,
            text_only=True,
            gpu_memory_utilization=0.95,
            summary="text-only traffic: image encoder off, KV cache widened",
        ),
    ]
}


# -- weight loading per instance type -----------------------------------------------------------


@dataclass(frozen=True)
class LoaderProfile:
    concurrency: int  # Run:ai streamer S3 clients per loading process
    memory_limit_gib: int  # Run:ai streamer CPU buffer per loading process
    basis: str


LOADER_PROFILES: dict[str, LoaderProfile] = {
    # 29-32 s, 8.2 Gbps effective, vs 149 s through Mountpoint (PoC startup A/B test).
    "g6e.2xlarge": LoaderProfile(64, 24, "measured: 29-32 s load (PoC)"),
    # 19 s even with two models loading on the node at once (PoC).
    "g6e.12xlarge": LoaderProfile(128, 64, "measured: 19 s load (PoC)"),
    # Not broken down in the PoC (18 s load, no loader settings recorded for g7e). Chosen from the
    # hardware: S3 delivers roughly 85-90 MB/s per connection, so a 50 Gbps NIC (6.25 GB/s) fills
    # at about 70 streams; 64 streams reach ~90% of it and the 12xlarge's 128 would only
    # oversubscribe a NIC half as wide from 8 vCPUs. The host has 64 GiB like g6e.2xlarge, where
    # a 24 GiB buffer was measured fine next to the engine's own host memory.
    "g7e.2xlarge": LoaderProfile(64, 24, "chosen for the 50 Gbps NIC and 64 GiB host memory"),
}


def loader_profile(instance: catalog.InstanceType) -> LoaderProfile:
    """The PoC's measured values where it measured them, else a rule that follows their scaling."""
    if instance.name in LOADER_PROFILES:
        return LOADER_PROFILES[instance.name]
    concurrency = 128 if instance.network_gbps >= 100 else 64
    memory = 64 if instance.memory_gib // instance.gpus >= 96 else 24
    return LoaderProfile(concurrency, memory, "derived from the PoC's g6e values (not measured)")
