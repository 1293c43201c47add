"""What a vLLM server runs: model profiles, traffic classes and the exact `vllm serve` spec.

Everything a reviewer needs to judge a server's flags lives in this package, as data plus one
function, `build_serve_spec`, that turns (server settings, the pool's instance type, the model's S3
URIs) into the argument list, env, resource requests, volumes and probe budgets.
`components/vllm_server.py` only renders that spec as Kubernetes objects.

  profiles   model profiles, traffic classes and weight-loading profiles (data)
  server     ServerSettings (`vllm-poc:servers[]`), each key checked on its own; the models' S3 URIs
  sizing     the pod's share of its node and its start-up budget
  checks     check_server: a server against its pool and the bench
  spec       build_serve_spec, then the compile cache and the server's IAM role

Sources: the PoC's own measurements (startup A/B tests, FP8 vs NVFP4, the MTP draft, its recommended
command) and a public Gemma-4 on EKS throughput and latency write-up (precision, speculative
decoding, prefix caching, max-num-seqs, text-only pools, priority scheduling, pool roles per traffic
kind); each figure used is quoted where it is used.

Flags are kept to those present in both vLLM v0.26.0 (the production image) and v0.32.0 (the CPU
build the serving tests run); tests/test_vllm_cli_args.py parses every argument list with both.
None of the flags vLLM renamed or removed between those releases is used here.
"""

from stacks.serving.checks import check_server
from stacks.serving.profiles import (LOADER_PROFILES, MODELS, MTP_DRAFT, TRAFFIC_CLASSES, DraftProfile, LoaderProfile,
                                     ModelProfile, TrafficClass, loader_profile)
from stacks.serving.server import (MANAGED_FLAGS, VALID_TP, ModelUris, ServerSettings, VariantOrigin,
                                   server_model_ids, server_model_prefixes)
from stacks.serving.sizing import DEPLOY_TIMEOUT_S, STARTUP_BUDGET_S, required_gpu_memory_gib
from stacks.serving.spec import (CACHE_MOUNT, PORT, build_serve_spec, loader_config, server_identity_args, server_notes,
                                 speculative_config, with_compile_cache)

__all__ = [
    "CACHE_MOUNT", "DEPLOY_TIMEOUT_S", "LOADER_PROFILES", "MANAGED_FLAGS", "MODELS", "MTP_DRAFT", "PORT",
    "STARTUP_BUDGET_S", "TRAFFIC_CLASSES", "VALID_TP",
    "DraftProfile", "LoaderProfile", "ModelProfile", "ModelUris", "ServerSettings", "TrafficClass", "VariantOrigin",
    "build_serve_spec", "check_server", "loader_config", "loader_profile", "required_gpu_memory_gib",
    "server_identity_args", "server_model_ids", "server_model_prefixes", "server_notes", "speculative_config",
    "with_compile_cache",
]
