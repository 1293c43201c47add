"""The serving stack's server settings that do not depend on the 31B model, as `gpu-check` uses them.

The bench imports nothing of the Pulumi side, so the few settings are written here as data, and
tests/test_gpu_check.py keeps them equal to what stacks/serving/spec.py renders for a server with sleep
mode: the compile-cache environment (VLLM_CACHE_ROOT, the assets and Triton caches inside it), the
engine's start-up timeout, the idle-connection keep-alive, the offline Hub and no usage reporting, the
development mode that routes /sleep and /wake_up, and the model-independent `vllm serve` flags (prefix
caching, sleep mode).

Left out because they depend on the model or the pool: the Run:ai loader and its extra config, the
tensor-parallel size, the context length, the number of sequences, the memory utilisation, the KV
cache dtype, the tool and reasoning parsers, the speculative config (its draft is the model's MTP
head) and the region. The number of sequences' default is kept as MAX_NUM_SEQS for the one experiment
whose question is a queue (priority): the cap decides when requests wait.
"""

from __future__ import annotations

# The serve spec's env keys whose value is not a path under the cache root (copied as they are).
PLAIN_ENV: dict[str, str] = {
    "VLLM_ENGINE_READY_TIMEOUT_S": "1500",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "120",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_SERVER_DEV_MODE": "1",  # with sleep mode only
}
# Paths inside the cache root, as the stack mounts the cache volume at VLLM_CACHE_ROOT.
CACHE_ENV: dict[str, str] = {
    "VLLM_CACHE_ROOT": "",
    "VLLM_ASSETS_CACHE": "assets",
    "TRITON_CACHE_DIR": "triton",
}
# The top-level names of the cache root that the push leaves out (components/compile_cache.py).
PUSH_EXCLUDES: tuple[str, ...] = ("assets", "huggingface", "pycache")
SERVE_FLAGS: tuple[str, ...] = ("--enable-prefix-caching", "--enable-sleep-mode")
# The stack's default cap on the sequences a server runs at once (ServerSettings.max_num_seqs); requests past
# it wait in vLLM's queue, the only place a scheduling policy orders them.
MAX_NUM_SEQS = 64
# The stack's env keys that gpu-check does not set, and why.
NOT_SET: dict[str, str] = {
    "AWS_REGION": "the region of the cluster's buckets",
    "AWS_DEFAULT_REGION": "the region of the cluster's buckets",
}


def server_env(cache_root: str) -> dict[str, str]:
    """The stack's server environment with the compile cache at `cache_root`."""
    env = dict(PLAIN_ENV)
    for key, sub in CACHE_ENV.items():
        env[key] = f"{cache_root.rstrip('/')}/{sub}" if sub else cache_root
    return env
