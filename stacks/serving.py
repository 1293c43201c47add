"""What a vLLM server runs: model profiles, traffic classes and the exact `vllm serve` spec.

Everything a reviewer needs to judge a server's flags lives here, as data plus one function,
`build_serve_spec`, that turns (server settings, the pool's instance type, the model's S3 URIs) into
the argument list, env, resource requests, volumes and probe budgets. `components/vllm_server.py`
only renders that spec as Kubernetes objects.

Sources: the PoC's own measurements (startup A/B tests, FP8 vs NVFP4, the MTP draft, its recommended
command) and a public Gemma-4 on EKS throughput and latency write-up (precision, speculative
decoding, prefix caching, max-num-seqs, text-only pools, priority scheduling, pool roles per traffic
kind); each figure used is quoted where it is used.

Flags are kept to those present in both vLLM v0.26.0 (the production image) and v0.32.0 (the CPU
build the serving tests run); tests/test_vllm_cli_args.py parses every argument list with both.
Reference vllm.md 1.13 lists what changed between them; none of it is used here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from collections.abc import Sequence

import pulumi

from components import compile_cache as cc
from components.vllm_server import Probe, ServeSpec, selector_labels
from components.weight_store import model_prefix
from components.workload_identity import WorkloadIdentityArgs, server_statements
from stacks import catalog, job_code
from stacks.versions import pins

GIB = 1024**3
PORT = 8000

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


# -- pod sizing ------------------------------------------------------------------------------------

# Share of a GPU's slice of the host that a server pod requests; the rest covers kubelet/system
# reservations, Karpenter's VM overhead estimate and daemonsets.
_CPU_SHARE = 0.75
_MEMORY_SHARE = 0.80
# Host memory a loading process needs beside the streamer buffer (engine, tokenizer, CUDA context,
# /dev/shm pages); the streamer buffer is capped so that both fit the pod's memory limit.
_PROCESS_OVERHEAD_GIB = 12
# Minimum GPU memory left after weights for activations, CUDA graphs and a usable KV cache.
_GPU_HEADROOM_GIB = 4.0
# Ephemeral storage per pod: logs, HOME, /tmp and the compile/asset cache volume (an emptyDir,
# counted by the kubelet). The cache is larger where the pool stripes instance-store NVMe.
_EPHEMERAL_GIB_RAID0 = 50
_EPHEMERAL_GIB_ROOT = 30
_CACHE_GIB_RAID0 = 36
_CACHE_GIB_ROOT = 16
_SHM_GIB_PER_RANK = 4

# Startup: the PoC's worst measured case is a 537 s cold start (node, image pull, load, compile);
# a first TP=4 compile or a slow S3 day can exceed it several times. The engine gives up first,
# with a log line, instead of being killed silently by the kubelet.
STARTUP_BUDGET_S = 1800
ENGINE_READY_TIMEOUT_S = 1500
# Pulumi waits for the Deployment to become available: node provisioning and image pull
# (48 + 82 s measured) come before the startup probe's own budget.
DEPLOY_TIMEOUT_S = STARTUP_BUDGET_S + 900

VALID_TP = (1, 2, 4, 8)
CACHE_MOUNT = "/var/cache/vllm"

# -- settings ----------------------------------------------------------------------------------------

# Flags the spec sets itself. extraArgs may not repeat them: argparse keeps the last value, so a
# duplicate would silently override a measured setting.
MANAGED_FLAGS: frozenset[str] = frozenset(
    {
        "--model", "--host", "--port", "--served-model-name", "--load-format",
        "--model-loader-extra-config", "--tensor-parallel-size", "-tp", "--max-model-len",
        "--max-num-seqs", "--gpu-memory-utilization", "--kv-cache-dtype", "-sc",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--speculative-config",
        "--scheduling-policy", "--limit-mm-per-prompt", "--enable-sleep-mode",
        "--no-enable-sleep-mode", "--tool-call-parser", "--reasoning-parser",
        "--enable-auto-tool-choice", "--no-enable-auto-tool-choice", "--tokenizer",
        "--download-dir",
    }
)
# Removed upstream; a copied recipe with them keeps the server from starting.
REMOVED_FLAGS: dict[str, str] = {
    "--disable-log-requests": "removed in vLLM 0.12; request logging is off by default "
    "(--enable-log-requests turns it on)",
}
MANAGED_ENV: frozenset[str] = frozenset(
    {
        "AWS_REGION", "AWS_DEFAULT_REGION", "VLLM_CACHE_ROOT", "VLLM_ASSETS_CACHE",
        "TRITON_CACHE_DIR", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_SERVER_DEV_MODE",
        "HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
    }
)
# Credentials come from the Pod Identity association; static keys in env would bypass it.
FORBIDDEN_ENV: frozenset[str] = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
     "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
)

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _flag_name(arg: str) -> str:
    # vLLM's FlexibleArgumentParser accepts --max_num_seqs for --max-num-seqs, --flag=value, and
    # --json-flag.key value for one key of a JSON option.
    name = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


# One check per key, shared by the settings model (fails at load) and check_server (which the
# stack validator calls with the pool and the bench, and which re-checks in case a server was
# built without validation). Each returns the problem, or None.


def model_problem(model: str) -> str | None:
    if model not in MODELS:
        return f"unknown model {model!r}; use one of {', '.join(MODELS)}"
    return None


def traffic_class_problem(traffic_class: str) -> str | None:
    if traffic_class not in TRAFFIC_CLASSES:
        return f"unknown traffic class {traffic_class!r}; use one of {', '.join(TRAFFIC_CLASSES)}"
    return None


def tensor_parallel_problem(tp: int) -> str | None:
    if tp not in VALID_TP:
        return f"{tp} is not a supported tensor parallel size; use one of {', '.join(map(str, VALID_TP))}"
    return None


# A variant that exists to measure the KV cache dtype may use the checkpoint's own (BF16) KV cache,
# the PoC's "FP8 (BF16 KV)" measurement; nothing else may.
MEASURED_KV_CACHE_DTYPES = ("auto", "bfloat16")


def _measures_kv(origin) -> bool:
    return origin is not None and "kvCacheDtype" in origin.settings


def kv_cache_dtype_problem(model: str, kv_cache_dtype: str | None, *, measured: bool = False) -> str | None:
    profile = MODELS.get(model)
    if profile is None or kv_cache_dtype is None or kv_cache_dtype in profile.allowed_kv_cache_dtypes:
        return None
    if measured and kv_cache_dtype in MEASURED_KV_CACHE_DTYPES:
        return None
    if model == "fp8-dynamic":
        return (f"{kv_cache_dtype!r} is refused for fp8-dynamic: the checkpoint needs "
                "--kv-cache-dtype fp8, without it the KV cache stays BF16 (12,150 instead of "
                "23,320 tokens on L40S, as the PoC measured); remove kvCacheDtype or set it to fp8")
    return (f"{kv_cache_dtype!r} is not allowed for model {model}; use one of "
            f"{', '.join(profile.allowed_kv_cache_dtypes)} or leave it unset")


def extra_args_problem(args: list[str]) -> str | None:
    if args and not args[0].startswith("-"):
        return f"must start with a flag (--name), got {args[0]!r}"
    for arg in args:
        if not arg.startswith("-"):
            continue  # a value of the previous flag
        name = _flag_name(arg)
        if name in REMOVED_FLAGS:
            return f"{arg}: {REMOVED_FLAGS[name]}; remove it"
        if name in MANAGED_FLAGS:
            return (f"{arg} is set by the server profile; remove it from extraArgs and use the "
                    "server's own keys (model, trafficClass, tensorParallelSize, maxModelLen, "
                    "maxNumSeqs, gpuMemoryUtilization, speculative, kvCacheDtype, sleepMode)")
    return None


def env_problem(env: dict[str, str]) -> str | None:
    for key in env:
        if not _ENV_NAME.match(key):
            return f"{key!r} is not a valid environment variable name"
        if key in FORBIDDEN_ENV:
            return (f"{key} is not allowed: S3 access comes from the Pod Identity role and weights "
                    "from S3, so no static credentials or tokens go into the pod")
        if key in MANAGED_ENV:
            return f"{key} is set by the server profile; remove it from env"
    return None


def _raise(problem: str | None, value):
    if problem:
        raise ValueError(problem)
    return value


class VariantOrigin(BaseModel):
    """Where a generated variant comes from (stacks/variants.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str = Field(description="Base server name.")
    settings: list[str] = Field(description="Config keys the variant changes.")
    cross: bool = Field(False, description="Part of a declared cross product.")


class ServerSettings(BaseModel):
    """One vLLM server (a Deployment and its Service): `vllm-poc:servers[]` in the stack config."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    name: str = Field(description="Server name: names the Deployment, Service and ServiceAccount "
                      "(DNS label, at most 40 characters).")
    pool: str = Field(description="GPU pool (gpuPools[].name) the server runs on.")
    model: str = Field(description=f"Model profile: one of {', '.join(MODELS)}.")
    traffic_class: str = Field(
        "interactive",
        description="Pool role by traffic kind: interactive (no speculative decoding), "
        "batch (MTP n=4 + priority scheduling) or text-only (image encoder off, "
        "gpu-memory-utilization 0.95).",
    )
    tensor_parallel_size: int = Field(
        1, description="GPUs per replica (1, 2, 4 or 8; at most the pool instance's GPUs)."
    )
    max_model_len: int = Field(8192, ge=1024, le=262144,
                               description="Context length in tokens (the PoC measured 8K).")
    max_num_seqs: int = Field(
        64, ge=1, le=4096,
        description="Most concurrent sequences; a hard cap, so at least the bench's highest "
        "concurrency (16 at concurrency 32 lost 29% throughput in a public Gemma-4 measurement).",
    )
    gpu_memory_utilization: float | None = Field(
        None, gt=0.5, le=0.98,
        description="GPU memory share for vLLM; default from the traffic class (0.90, text-only 0.95).",
    )
    speculative: bool | None = Field(
        None, description="MTP speculative decoding on/off; default from the traffic class."
    )
    num_speculative_tokens: int = Field(
        4, ge=1, le=8,
        description="MTP draft tokens per step (PoC measured 4; 4 vs 8 is an open sweep).",
    )
    variants: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Variants of this server, one change at a time: {setting: [values]} (e.g. "
        "numSpeculativeTokens: [8], kvCacheDtype: [auto], tensorParallelSize: [4]); each value makes "
        "its own server, bench Job and results prefix, named <name>-<change> (stacks/variants.py).",
    )
    cross_product: bool = Field(
        False, description="With variants: the full cross product of the listed values instead of "
        "one change at a time.",
    )
    variant_of: VariantOrigin | None = Field(
        None, description="Set by the stack on generated variants (never by hand): base server and "
        "the settings changed.",
    )
    kv_cache_dtype: str | None = Field(
        None,
        description="KV cache dtype override; fp8-dynamic only accepts fp8 (its BF16 KV cache halves the KV "
        "tokens, as the PoC measured), nvfp4 "
        "also auto, bf16 auto/bfloat16/fp8.",
    )
    sleep_mode: bool = Field(
        False,
        description="Enable /sleep and /wake_up to hand idle GPU memory back (26.8 s sleep, 3.6 s "
        "wake, as the PoC measured); turns on vLLM's development endpoints.",
    )
    image: str = Field(default_factory=lambda: pins().vllm_image,
                       description="vLLM server image, pinned (default from pyproject pins).")
    compile_cache: bool = Field(
        True,
        description="Carry the compile cache through S3 (compile-cache/<key>/ in the weights bucket): the "
        "pod restores it before vLLM starts and pushes its own once healthy, so a new node skips most "
        "of the compile; false keeps it on the pod's volume only.",
    )
    replicas: int = Field(1, ge=0, le=16, description="Deployment replicas.")
    extra_args: list[str] = Field(
        default_factory=list,
        description="More `vllm serve` flags, checked at config time against the flags of the "
        "image's vLLM (stacks/vllm_flags.json); may not repeat a flag the profile sets.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="More container env vars.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DNS_LABEL.match(v) or len(v) > 40:
            raise ValueError(
                f"{v!r} must be a lowercase DNS label of at most 40 characters, starting with a "
                "letter (a-z, 0-9, '-')"
            )
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return _raise(model_problem(v), v)

    @field_validator("traffic_class")
    @classmethod
    def _traffic_class(cls, v: str) -> str:
        return _raise(traffic_class_problem(v), v)

    @field_validator("tensor_parallel_size")
    @classmethod
    def _tp(cls, v: int) -> int:
        return _raise(tensor_parallel_problem(v), v)

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _raise(kv_cache_dtype_problem(info.data.get("model", ""), v,
                                             measured=_measures_kv(info.data.get("variant_of"))), v)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if "@sha256:" not in v and (":" not in v.rsplit("/", 1)[-1] or v.endswith(":latest")):
            raise ValueError(f"image {v!r} must be pinned to a tag other than latest, or a digest")
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, v: list[str]) -> list[str]:
        return _raise(extra_args_problem(v), v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return _raise(env_problem(v), v)

    # Resolved values --------------------------------------------------------------------------
    @property
    def profile(self) -> ModelProfile:
        return MODELS[self.model]

    @property
    def traffic(self) -> TrafficClass:
        return TRAFFIC_CLASSES[self.traffic_class]

    @property
    def uses_speculative(self) -> bool:
        return self.traffic.speculative if self.speculative is None else self.speculative

    @property
    def effective_kv_cache_dtype(self) -> str:
        return self.kv_cache_dtype or self.profile.default_kv_cache_dtype

    @property
    def effective_gpu_memory_utilization(self) -> float:
        return self.gpu_memory_utilization or self.traffic.gpu_memory_utilization


# -- S3 layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelUris:
    model: str
    draft: str | None = None

    @classmethod
    def for_bucket(cls, bucket: str, server: ServerSettings) -> ModelUris:
        draft = f"s3://{bucket}/{model_prefix(MTP_DRAFT.hf_id)}" if server.uses_speculative else None
        return cls(model=f"s3://{bucket}/{model_prefix(server.profile.hf_id)}", draft=draft)


def server_model_ids(server: ServerSettings) -> list[str]:
    """Hugging Face ids a server loads (target, and the MTP draft when it speculates)."""
    return [server.profile.hf_id, *([MTP_DRAFT.hf_id] if server.uses_speculative else [])]


def server_model_prefixes(server: ServerSettings) -> list[str]:
    """Weights bucket prefixes a server reads models from (target and draft)."""
    return [model_prefix(hf_id) for hf_id in server_model_ids(server)]


# -- the serve spec -----------------------------------------------------------------------------


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _per_gpu(instance: catalog.InstanceType) -> tuple[int, int]:
    cpu = max(1, math.floor(instance.vcpus * _CPU_SHARE / instance.gpus))
    memory = math.floor(instance.memory_gib * _MEMORY_SHARE / instance.gpus)
    return cpu, memory


def loader_config(server: ServerSettings, instance: catalog.InstanceType) -> dict[str, int]:
    """`--model-loader-extra-config` for runai_streamer, per loading process.

    Without distributed streaming each tensor-parallel rank streams the checkpoint itself, so the
    ranks of one pod share the node's NIC (concurrency split between them) and each keeps its own
    buffer (capped to what fits beside the engine in the rank's share of host memory).
    """
    profile = loader_profile(instance)
    tp = server.tensor_parallel_size
    # The PoC's per-pod figure stays for TP=1; TP ranks of one pod split it.
    concurrency = max(16, profile.concurrency // tp)
    _, memory_per_gpu = _per_gpu(instance)
    memory_gib = max(1, min(profile.memory_limit_gib, memory_per_gpu - _PROCESS_OVERHEAD_GIB))
    return {"concurrency": concurrency, "memory_limit": memory_gib * GIB}


def speculative_config(server: ServerSettings, uris: ModelUris) -> dict | None:
    if not server.uses_speculative:
        return None
    if not uris.draft:
        raise ValueError(f"server {server.name!r} uses MTP speculative decoding but no draft URI was given")
    return {"method": MTP_DRAFT.method, "model": uris.draft,
            "num_speculative_tokens": server.num_speculative_tokens}


def variant_labels(server: ServerSettings) -> dict[str, str]:
    """Labels that say a server is a variant, of which base, changing which settings."""
    if server.variant_of is None:
        return {}
    return {"vllm-poc/variant-of": server.variant_of.base,
            "vllm-poc/variant": ".".join(server.variant_of.settings)}


def build_serve_spec(
    server: ServerSettings,
    instance: catalog.InstanceType,
    uris: ModelUris,
    *,
    region: str,
    raid0: bool | None = None,
) -> ServeSpec:
    """The exact `vllm serve` invocation and pod shape of one server on one instance type.

    `raid0` says whether the pool stripes instance-store NVMe under /mnt/k8s-disks/0 (default: the
    instance has instance store). Call `check_server` first: this function assumes a valid pairing.
    """
    profile, traffic = server.profile, server.traffic
    raid0 = instance.has_instance_store if raid0 is None else raid0
    tp = server.tensor_parallel_size

    args: list[str] = [
        uris.model,
        "--served-model-name", profile.hf_id,
        "--host", "0.0.0.0",
        "--port", str(PORT),
        # Direct S3 streaming: 29-32 s vs 149 s through Mountpoint FUSE (PoC startup A/B test).
        "--load-format", "runai_streamer",
        "--model-loader-extra-config", _json(loader_config(server, instance)),
        "--tensor-parallel-size", str(tp),
        "--max-model-len", str(server.max_model_len),
        "--max-num-seqs", str(server.max_num_seqs),
        "--gpu-memory-utilization", f"{server.effective_gpu_memory_utilization:.2f}",
        "--kv-cache-dtype", server.effective_kv_cache_dtype,
        # On by default for Gemma 4, stated so a later default change cannot flip it: +40.5%
        # throughput and 2.1x lower TTFT p99 with shared prefixes (public Gemma-4 measurement).
        "--enable-prefix-caching",
        "--tool-call-parser", "gemma4",
        "--reasoning-parser", "gemma4",
        "--enable-auto-tool-choice",
    ]
    spec_config = speculative_config(server, uris)
    if spec_config is not None:
        args += ["--speculative-config", _json(spec_config)]
    if traffic.priority_scheduling:
        args += ["--scheduling-policy", "priority"]
    if traffic.text_only:
        args += ["--limit-mm-per-prompt", _json({"image": 0})]
    if server.sleep_mode:
        args += ["--enable-sleep-mode"]
    args += list(server.extra_args)

    env = {
        # Pod Identity injects credentials but not the region (reference karpenter.md 4).
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        # Compile and asset caches on the cache volume survive container restarts: torch.compile
        # 73 s -> 8.5 s (PoC). VLLM_ASSETS_CACHE does not follow VLLM_CACHE_ROOT, so both are set.
        "VLLM_CACHE_ROOT": CACHE_MOUNT,
        "VLLM_ASSETS_CACHE": f"{CACHE_MOUNT}/assets",
        "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
        # The 600 s default is shorter than a cold TP compile after a slow load.
        "VLLM_ENGINE_READY_TIMEOUT_S": str(ENGINE_READY_TIMEOUT_S),
        # Weights, config and tokenizer all come from S3; nothing may fall back to the Hub.
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if server.sleep_mode:
        # /sleep and /wake_up are only routed in development mode (reference vllm.md 1.5).
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.update(server.env)

    cpu_per_gpu, memory_per_gpu = _per_gpu(instance)
    memory_gib = memory_per_gpu * tp
    requests = {
        "cpu": str(cpu_per_gpu * tp),
        "memory": f"{memory_gib}Gi",
        "ephemeral-storage": f"{_EPHEMERAL_GIB_RAID0 if raid0 else _EPHEMERAL_GIB_ROOT}Gi",
        "nvidia.com/gpu": str(tp),
    }
    # No CPU limit (throttling the tokenizer and scheduler hurts TTFT); memory limit = request so a
    # leak is contained to the pod; GPUs as extended resources need limit = request.
    limits = {"memory": requests["memory"], "nvidia.com/gpu": str(tp)}

    notes: list[str] = []
    fallback = profile.fallback_notes.get(instance.gpu_name)
    if fallback:
        notes.append(fallback)
    if server.sleep_mode:
        notes.append("sleep mode exposes vLLM's development endpoints (/sleep, /wake_up, "
                     "/collective_rpc, ...): keep the Service cluster-internal.")
    if server.uses_speculative and server.num_speculative_tokens != 4:
        notes.append(f"num_speculative_tokens {server.num_speculative_tokens}: the PoC measured 4; "
                     "4 vs 8 with fp8 KV at high concurrency is an open sweep.")
    if _measures_kv(server.variant_of) and server.effective_kv_cache_dtype in MEASURED_KV_CACHE_DTYPES \
            and server.effective_kv_cache_dtype not in profile.allowed_kv_cache_dtypes:
        notes.append(f"measurement variant of {server.variant_of.base}: {server.model} with a "
                     f"{server.effective_kv_cache_dtype} KV cache (about half the KV tokens, as the PoC measured); "
                     "not a configuration to serve with.")
    loader = loader_profile(instance)
    if instance.name not in LOADER_PROFILES:
        notes.append(f"{instance.name}: Run:ai loader settings {loader.basis}.")

    return ServeSpec(
        name=server.name,
        pool=server.pool,
        replicas=server.replicas,
        labels={"vllm-poc/model": server.model, "vllm-poc/traffic-class": server.traffic_class,
                **variant_labels(server)},
        image=server.image,
        # Explicit: the image's ENTRYPOINT is not relied on.
        command=("vllm", "serve"),
        args=tuple(args),
        env=env,
        requests=requests,
        limits=limits,
        gpus=tp,
        cache_size_gib=_CACHE_GIB_RAID0 if raid0 else _CACHE_GIB_ROOT,
        cache_mount_path=CACHE_MOUNT,
        shm_size_gib=_SHM_GIB_PER_RANK * tp,
        startup_probe=Probe("/health", period_s=10, timeout_s=5,
                            failure_threshold=STARTUP_BUDGET_S // 10),
        readiness_probe=Probe("/health", period_s=10, timeout_s=5, failure_threshold=3),
        # Generous: a saturated server (c=64) answers /health late, and a restart costs minutes.
        liveness_probe=Probe("/health", period_s=15, timeout_s=10, failure_threshold=6),
        termination_grace_s=120,
        deploy_timeout_s=DEPLOY_TIMEOUT_S,
        served_model_name=profile.hf_id,
        port=PORT,
        notes=tuple(notes),
    )


# The compile cache may fill at most this share of the cache volume; the rest is for the assets and
# whatever the server compiles beyond it.
_CACHE_SHARE_OF_VOLUME = 0.5


def compile_cache_code() -> tuple[dict[str, str], dict[str, str]]:
    """(the weights package, the bench modules it imports) as the server pod mounts them."""
    return job_code.weights_code(), job_code.weights_helpers()


def with_compile_cache(spec: ServeSpec, server: ServerSettings, instance: catalog.InstanceType, *,
                       weights_bucket: str, revisions: dict[str, str], region: str) -> ServeSpec:
    """The spec with its compile cache in S3 (components/compile_cache.py), keyed by what decides
    whether a cache applies; unchanged when the server's compileCache is off."""
    if not server.compile_cache:
        return spec
    key, inputs = cc.cache_key(
        image=spec.image, models=[(m, revisions.get(m, "main")) for m in server_model_ids(server)],
        args=spec.args, env=spec.env, gpu=instance.gpu_name, tensor_parallel_size=server.tensor_parallel_size)
    code, helpers = compile_cache_code()
    cache = cc.CompileCache(key=key, uri=f"s3://{weights_bucket}/{cc.cache_prefix(key)}", inputs=inputs,
                            region=region, max_gib=round(spec.cache_size_gib * _CACHE_SHARE_OF_VOLUME, 1),
                            code=code, helpers=helpers)
    return dataclasses.replace(spec, compile_cache=cache)


def server_identity_args(
    server: ServerSettings,
    spec: ServeSpec,
    *,
    cluster_name: pulumi.Input[str],
    cluster_arn: pulumi.Input[str],
    account_id: pulumi.Input[str],
    namespace: str,
    weights_bucket_arn: pulumi.Input[str],
    kms_key_arn: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
    tags: dict[str, str] | None = None,
) -> WorkloadIdentityArgs:
    """The server's own role: read its model prefixes (target and draft) and the caches."""
    return WorkloadIdentityArgs(
        cluster_name=cluster_name,
        cluster_arn=cluster_arn,
        account_id=account_id,
        namespace=namespace,
        service_account=server.name,
        statements=server_statements(weights_bucket_arn, server_model_prefixes(server), kms_key_arn,
                                     compile_cache_key=spec.compile_cache.key if spec.compile_cache else None),
        labels=selector_labels(spec),
        tags=dict(tags or {}),
        depends_on=list(depends_on),
    )



# -- cross-checks against the pool and the bench ---------------------------------------------


def required_gpu_memory_gib(server: ServerSettings, tensor_parallel_size: int | None = None) -> float:
    """Weights per GPU (target plus draft, split over the TP ranks) plus minimum headroom."""
    tp = tensor_parallel_size or server.tensor_parallel_size
    weights = server.profile.weights_gib + (MTP_DRAFT.weights_gib if server.uses_speculative else 0)
    return weights / tp + _GPU_HEADROOM_GIB


def check_server(
    server: ServerSettings,
    pool_instance_type: str | catalog.InstanceType,
    bench_max_concurrency: int | None,
    *,
    key: str = "vllm-poc:servers[0]",
    bench_max_tokens: int | None = None,
) -> list[str]:
    """Problems of a server on its pool and under the bench, one line each naming its key.

    Empty list = fine. `key` is the server's config path (e.g. `vllm-poc:servers[1]`).
    `bench_max_tokens` (optional) is the longest request the bench sends, input plus output.
    """
    problems = [
        f"{key}.{field_key}: {problem}"
        for field_key, problem in (
            ("model", model_problem(server.model)),
            ("trafficClass", traffic_class_problem(server.traffic_class)),
            ("tensorParallelSize", tensor_parallel_problem(server.tensor_parallel_size)),
            ("kvCacheDtype", kv_cache_dtype_problem(server.model, server.kv_cache_dtype,
                                                     measured=_measures_kv(server.variant_of))),
            ("extraArgs", extra_args_problem(list(server.extra_args))),
            ("env", env_problem(dict(server.env))),
        )
        if problem
    ]
    try:
        instance = (pool_instance_type if isinstance(pool_instance_type, catalog.InstanceType)
                    else catalog.gpu_instance(pool_instance_type))
    except KeyError as err:
        problems.append(f"{key}.pool: {err.args[0]}")
        return problems
    if server.model not in MODELS or server.traffic_class not in TRAFFIC_CLASSES:
        return problems  # nothing below can be judged without a profile

    tp = server.tensor_parallel_size
    tp_fits = tp in VALID_TP and tp <= instance.gpus
    if tp in VALID_TP and tp > instance.gpus:
        fits = [t for t in VALID_TP if t <= instance.gpus]
        problems.append(
            f"{key}.tensorParallelSize: {tp} GPUs do not fit one {instance.name} ({instance.gpus} "
            f"GPU{'s' if instance.gpus > 1 else ''}); use {' or '.join(map(str, fits))}, or a pool "
            "of g6e.12xlarge (4 GPUs)"
        )

    usable = instance.gpu_memory_gib * server.effective_gpu_memory_utilization
    if tp_fits and required_gpu_memory_gib(server) > usable:
        fits = [t for t in VALID_TP if t <= instance.gpus
                and required_gpu_memory_gib(server, tensor_parallel_size=t) <= usable]
        fix = (f"set tensorParallelSize to {fits[0]}" if fits else
               "use a pool with more GPU memory (g7e.2xlarge: 96 GiB per GPU, or TP on "
               "g6e.12xlarge) or a quantized model (fp8-dynamic, nvfp4)")
        problems.append(
            f"{key}.tensorParallelSize: {server.model} needs {required_gpu_memory_gib(server):.1f} "
            f"GiB per GPU at tensorParallelSize {tp} (weights {server.profile.weights_gib:g} GiB"
            f"{' + MTP draft' if server.uses_speculative else ''} split over {tp} GPU"
            f"{'s' if tp > 1 else ''} + {_GPU_HEADROOM_GIB:g} GiB headroom) but {instance.name} "
            f"offers {usable:.1f} GiB ({instance.gpu_memory_gib} GiB x "
            f"{server.effective_gpu_memory_utilization:.2f}); {fix}"
        )

    if bench_max_concurrency is not None and server.max_num_seqs < bench_max_concurrency:
        problems.append(
            f"{key}.maxNumSeqs: {server.max_num_seqs} is below the bench's highest concurrency "
            f"{bench_max_concurrency}; vLLM would silently cap throughput there; "
            f"set maxNumSeqs to at least {bench_max_concurrency}"
        )
    if bench_max_tokens is not None and server.max_model_len < bench_max_tokens:
        problems.append(
            f"{key}.maxModelLen: {server.max_model_len} is shorter than the bench's longest request "
            f"({bench_max_tokens} tokens); set maxModelLen to at least {bench_max_tokens}"
        )

    if server.sleep_mode and tp_fits:
        _, memory_per_gpu = _per_gpu(instance)
        host = memory_per_gpu * tp
        # Level-1 sleep moves the weights into host memory, inside the pod's memory limit.
        need = server.profile.weights_gib + _PROCESS_OVERHEAD_GIB
        if host < need:
            problems.append(
                f"{key}.sleepMode: level-1 sleep offloads {server.profile.weights_gib:g} GiB of "
                f"weights to host memory, but the pod gets {host} GiB on {instance.name}; turn "
                "sleepMode off or use a larger instance"
            )
    return problems


def server_notes(server: ServerSettings, pool_instance_type: str) -> list[str]:
    """Warnings that are not errors (fallback kernels, unmeasured settings)."""
    instance = catalog.gpu_instance(pool_instance_type)
    return list(build_serve_spec(server, instance, ModelUris.for_bucket("b", server),
                                 region="unused").notes)
