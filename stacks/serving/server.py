"""One vLLM server's settings (`vllm-poc:servers[]`), each key checked on its own, and where its
weights live in S3.

One check per key, shared by the settings model (fails at load) and check_server
(stacks/serving/checks.py, which the stack validator calls with the pool and the bench, and which
re-checks in case a server was built without validation). Each returns the problem, or None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from components.weight_store import model_prefix
from stacks.serving.profiles import MODELS, MTP_DRAFT, TRAFFIC_CLASSES, ModelProfile, TrafficClass
from stacks.versions import pins

VALID_TP = (1, 2, 4, 8)
# gpuMemoryUtilization must stand above this (the setting's bound; the sleep-mode note suggests no lower value)
MIN_GPU_MEMORY_UTILIZATION = 0.5

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
        "TRITON_CACHE_DIR", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "VLLM_SERVER_DEV_MODE",
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


def measures_kv_cache_dtype(origin) -> bool:
    """A variant generated to measure the KV cache dtype (stacks/variants.py)."""
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
        None, gt=MIN_GPU_MEMORY_UTILIZATION, le=0.98,
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
        "wake, as the PoC measured); turns on vLLM's development endpoints. With it, vLLM 0.26's start-up "
        "memory profile can count negative non-torch memory and size the KV cache past "
        "gpuMemoryUtilization (4.6 GiB larger than without sleep mode at full size on an H100, whose pods "
        "from the compile cache then ran out of memory under long prompts at c=16): lower "
        "gpuMemoryUtilization by that much (the server's notes give the value for its pool); the start-up "
        "record warns.",
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
                                             measured=measures_kv_cache_dtype(info.data.get("variant_of"))), v)

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
