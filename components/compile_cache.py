"""A server's compile cache through S3: which servers share one (the key) and the pod's pull and push
steps. The one write grant the server's role gets is components/workload_identity.py's
(`compile_cache_write_statements`); the bucket policy that keeps everyone else out is
components/weight_store.py's.

A new pod on a new Spot node starts with an empty cache volume and compiles its model; the PoC
measured torch.compile at 73 s without a cache and 8.5 s with one (engine init 93 s and 25 s). The
pod carries the cache through the weights bucket instead (`python -m weights.compile_cache`):

  compile-cache-pull   init container, before vLLM: restores s3://<weights>/compile-cache/<key>/ into
                       the cache volume, every file checked against the manifest's SHA-256; a
                       missing, rejected or unreachable cache lets vLLM start cold (exit 0).
  compile-cache-push   native sidecar (an init container with restartPolicy Always, so it runs beside
                       vLLM and stops after it): waits for /health on the pod's own loopback, pushes
                       once if the key has no cache yet or the local one completes it, then idles.

Both run in the server's own image, already on the node (python3 and boto3 come with it: the Run:ai
streamer's S3 backend uses boto3), with the `weights` package and the `bench` modules it imports
(bench/common/: progress, interrupts) from immutable ConfigMaps, the way the weight-sync Job gets its code:
only the modules `python -m weights.compile_cache` imports, so the ConfigMaps' names (in the pod
template) change with that code alone.

The key: a short hash over what decides whether a compiled cache applies. `cache_key` says which
inputs and why. vLLM keeps its own hash of the compile inputs inside the cache (a cache that does not
match is a miss and is compiled again, never used wrongly), so the key decides which servers share
one; a key wider than needed only costs an extra cold start, a narrower one would let two
configurations fight over one prefix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import code_volume
from components.weight_store import COMPILE_CACHE_PREFIX

PULL_CONTAINER = "compile-cache-pull"
PUSH_CONTAINER = "compile-cache-push"
KEY_ANNOTATION = "vllm-poc/compile-cache-key"
INPUTS_ANNOTATION = "vllm-poc/compile-cache-inputs"
CODE_DIR = "/opt/vllm-poc"
CODE_VOLUME = "compile-cache-code"
HELPERS_VOLUME = "compile-cache-helpers"
KEY_VERSION = 1
# What the steps run: that module and its imports are all the code they mount (stacks/job_code.py),
# so an edit to the weight sync's code (weights/hub.py) leaves the server's pod template unchanged.
MODULE = "weights.compile_cache"

# `vllm serve` flags that cannot change what vLLM compiles (its own compile hash leaves them out, or
# they live in the API server, not in the engine). Every other flag, those from extraArgs included,
# goes into the key.
COMPILE_IRRELEVANT_FLAGS: Mapping[str, str] = {
    "--host": "the listening address",
    "--port": "the listening port",
    "--served-model-name": "the name in API responses",
    "--load-format": "how the weights are read (vLLM's load config adds nothing to its compile hash)",
    "--model-loader-extra-config": "the Run:ai streamer's concurrency and buffer, chosen per instance type",
    "--tool-call-parser": "API server output parsing",
    "--reasoning-parser": "API server output parsing",
    "--enable-auto-tool-choice": "API server request handling",
}
# Environment of the server that is not about compiling: credentials' region, timeouts, telemetry.
COMPILE_IRRELEVANT_ENV: frozenset[str] = frozenset({
    "AWS_REGION", "AWS_DEFAULT_REGION", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "VLLM_SERVER_DEV_MODE",
})
# The cache volume's folder for Python's bytecode (PYTHONPYCACHEPREFIX, components/vllm_server.py).
BYTECODE_FOLDER = "pycache"
# Top-level folders of the cache volume that are not compile output: the model's own config and
# tokenizer files (streamed from models/ on every start), the Hugging Face home, and Python's bytecode
# (thousands of small files, about 120 MB for vLLM's CPU build: a new pod compiles it once, in its
# first process, instead of pulling it).
PUSH_EXCLUDES: tuple[str, ...] = ("assets", "huggingface", BYTECODE_FOLDER)
# The push's uploads at once: files up to 64 MiB go up whole, so this bounds the sidecar's memory.
PUSH_CONCURRENCY = 4
# A pull that takes longer than this costs more than the compile it saves (73 + 93 s cold against
# 8.5 + 25 s warm in the PoC): the server then starts cold.
PULL_BUDGET_S = 120


@dataclass(frozen=True)
class CompileCache:
    """Where a server's cache lives in S3 and how the pod moves it (plain data)."""

    key: str
    uri: str  # s3://<weights bucket>/compile-cache/<key>/
    inputs: dict[str, Any]  # what the key hashes (rendered as a pod annotation)
    region: str
    max_gib: float  # the cache volume minus room for the server's other files
    code: dict[str, str] = field(repr=False, compare=False)  # the weights package: file -> source
    helpers: dict[str, str] = field(repr=False, compare=False)  # the bench modules it imports: path -> source


def _flags(args: Sequence[str]) -> list[str]:
    """The argument list less the model (first, positional) and the compile-irrelevant flags."""
    kept: list[str] = []
    skipping = False
    for arg in list(args)[1:]:
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            skipping = name in COMPILE_IRRELEVANT_FLAGS
            if not skipping:
                kept.append(arg)
        elif not skipping:
            kept.append(arg)
    return kept


def cache_key(*, image: str, models: Sequence[tuple[str, str]], args: Sequence[str], env: Mapping[str, str],
              gpu: str, tensor_parallel_size: int) -> tuple[str, dict[str, Any]]:
    """(16-hex key, the inputs it hashes).

    The inputs: the image (its digest when pinned: vLLM, torch and Triton versions all come with it),
    the models and their Hub revisions (architecture and quantization shape the graph), every `vllm
    serve` flag but COMPILE_IRRELEVANT_FLAGS (dtype, KV cache dtype, max model length and sequences,
    speculative config, multimodal limits, compilation config, ...), the environment but
    COMPILE_IRRELEVANT_ENV, the GPU (kernels are compiled for its architecture) and the tensor
    parallel size (one compiled graph per rank).
    """
    digest = image.split("@", 1)[1] if "@" in image else image
    inputs = {
        "version": KEY_VERSION,
        "image": digest,
        "models": [{"id": model, "revision": revision} for model, revision in models],
        "flags": _flags(args),
        "env": {k: v for k, v in sorted(env.items()) if k not in COMPILE_IRRELEVANT_ENV},
        "gpu": gpu,
        "tensor_parallel_size": tensor_parallel_size,
    }
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    return key, inputs


def code_digest(cache: CompileCache) -> str:
    files = {**{f"weights/{k}": v for k, v in cache.code.items()}, **{f"bench/{k}": v for k, v in cache.helpers.items()}}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:10]


def config_map_names(server: str, cache: CompileCache) -> tuple[str, str]:
    """Names of the two immutable ConfigMaps (weights package, bench helpers); new code, new names."""
    digest = code_digest(cache)
    return f"{server}-cache-code-{digest}", f"{server}-cache-bench-{digest}"


def _env(cache: CompileCache) -> list[dict[str, str]]:
    return [
        {"name": "PYTHONPATH", "value": CODE_DIR},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "AWS_REGION", "value": cache.region},
        {"name": "AWS_DEFAULT_REGION", "value": cache.region},
    ]


def _mounts(cache_volume: str, cache_mount: str) -> list[dict[str, Any]]:
    return [
        {"name": cache_volume, "mountPath": cache_mount},
        {"name": CODE_VOLUME, "mountPath": f"{CODE_DIR}/weights", "readOnly": True},
        {"name": HELPERS_VOLUME, "mountPath": f"{CODE_DIR}/bench", "readOnly": True},
    ]


def _excludes() -> list[str]:
    return [arg for name in PUSH_EXCLUDES for arg in ("--exclude", name)]


def pull_command(cache: CompileCache, cache_mount: str) -> list[str]:
    # The excluded folders are not another cache: Python's bytecode, written by this very step's imports.
    return ["python3", "-m", MODULE, "pull", "--dir", cache_mount, "--uri", cache.uri, *_excludes(),
            "--max-gib", f"{cache.max_gib:g}", "--budget-s", str(PULL_BUDGET_S), "--region", cache.region]


def push_command(cache: CompileCache, cache_mount: str, port: int) -> list[str]:
    return ["python3", "-m", MODULE, "push", "--dir", cache_mount, "--uri", cache.uri,
            *_excludes(), "--wait-for", f"http://127.0.0.1:{port}/health", "--stay",
            "--concurrency", str(PUSH_CONCURRENCY), "--region", cache.region]


def init_containers(cache: CompileCache, *, image: str, cache_volume: str, cache_mount: str,
                    port: int) -> list[dict[str, Any]]:
    """The pull (runs to completion before vLLM starts) and the push sidecar, in that order."""
    pull = {
        "name": PULL_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": pull_command(cache, cache_mount)[:4],
        "args": pull_command(cache, cache_mount)[4:],
        "env": _env(cache),
        # Hashing and moving files: a short burst before vLLM needs the CPU itself.
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        "volumeMounts": _mounts(cache_volume, cache_mount),
    }
    push = {
        "name": PUSH_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # A native sidecar: started before vLLM, stopped after it, never blocks the pod's start.
        "restartPolicy": "Always",
        "command": push_command(cache, cache_mount, port)[:4],
        "args": push_command(cache, cache_mount, port)[4:],
        "env": _env(cache),
        # Idle but for one push (PUSH_CONCURRENCY files of at most 64 MiB in memory at a time).
        "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": _mounts(cache_volume, cache_mount),
    }
    return [pull, push]


def volumes(server: str, cache: CompileCache) -> list[dict[str, Any]]:
    code, helpers = config_map_names(server, cache)
    return [
        {"name": CODE_VOLUME, "configMap": {"name": code}},
        {"name": HELPERS_VOLUME, "configMap": {"name": helpers, "items": code_volume.items(cache.helpers)}},
    ]


def annotations(cache: CompileCache) -> dict[str, str]:
    return {KEY_ANNOTATION: cache.key, INPUTS_ANNOTATION: json.dumps(cache.inputs, sort_keys=True)}
