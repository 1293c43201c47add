"""A server pod's share of its node (CPU, memory, GPU memory, disk) and its start-up budget."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from stacks import catalog
from stacks.serving.profiles import MTP_DRAFT

if TYPE_CHECKING:
    from stacks.serving.server import ServerSettings

# Share of a GPU's slice of the host that a server pod requests; the rest covers kubelet/system
# reservations, Karpenter's VM overhead estimate and daemonsets.
_CPU_SHARE = 0.75
_MEMORY_SHARE = 0.80
# Host memory a loading process needs beside the streamer buffer (engine, tokenizer, CUDA context,
# /dev/shm pages); the streamer buffer is capped so that both fit the pod's memory limit.
PROCESS_OVERHEAD_GIB = 12
# Minimum GPU memory left after weights for activations, CUDA graphs and a usable KV cache.
GPU_HEADROOM_GIB = 4.0
# How much larger vLLM 0.26 made the KV cache with sleep mode on than the same server's without it: the
# sleep-mode experiment at full size on an H100 (docs/records/experiment-sleep-mode-2026-12-06-h100-paired:
# 43.74 against 39.11 GiB on starts from the compile cache, 42.19 against 37.56 on cold ones). Its start-up
# profile counted -4.4 GiB of non-torch memory where the server without sleep mode counted +0.22 GiB.
SLEEP_MODE_EXTRA_KV_GIB = 4.6
# Ephemeral storage per pod: logs, HOME, /tmp and the compile/asset cache volume (an emptyDir,
# counted by the kubelet). The cache is larger where the pool stripes instance-store NVMe.
EPHEMERAL_GIB_RAID0 = 50
EPHEMERAL_GIB_ROOT = 30
CACHE_GIB_RAID0 = 36
CACHE_GIB_ROOT = 16
SHM_GIB_PER_RANK = 4

# Startup: the PoC's worst measured case is a 537 s cold start (node, image pull, load, compile);
# a first TP=4 compile or a slow S3 day can exceed it several times. The engine gives up first,
# with a log line, instead of being killed silently by the kubelet.
STARTUP_BUDGET_S = 1800
ENGINE_READY_TIMEOUT_S = 1500
# Seconds the server keeps an idle HTTP connection open (vLLM's default: 5). A client that reuses a
# pooled connection just as the server closes it gets "connection reset" for that request, which the
# bench counts as failed: on 2026-12-07 one of 267 open-loop requests was lost so on an H100
# (docs/records/experiment-priority-2026-12-07-h100). Clients must give up an idle connection first:
# `vllm bench serve` 0.26 pools them for 60 s, and an HTTP client library's idle pool (the router's)
# commonly for 90 s.
HTTP_KEEP_ALIVE_S = 120
# Pulumi waits for the Deployment to become available: node provisioning and image pull
# (48 + 82 s measured) come before the startup probe's own budget.
DEPLOY_TIMEOUT_S = STARTUP_BUDGET_S + 900


def per_gpu(instance: catalog.InstanceType) -> tuple[int, int]:
    cpu = max(1, math.floor(instance.vcpus * _CPU_SHARE / instance.gpus))
    memory = math.floor(instance.memory_gib * _MEMORY_SHARE / instance.gpus)
    return cpu, memory


def required_gpu_memory_gib(server: ServerSettings, tensor_parallel_size: int | None = None) -> float:
    """Weights per GPU (target plus draft, split over the TP ranks) plus minimum headroom."""
    tp = tensor_parallel_size or server.tensor_parallel_size
    weights = server.profile.weights_gib + (MTP_DRAFT.weights_gib if server.uses_speculative else 0)
    return weights / tp + GPU_HEADROOM_GIB


def sleep_mode_utilization(utilization: float, gpu_memory_gib: float) -> float:
    """The gpuMemoryUtilization, rounded down to a hundredth, whose share less SLEEP_MODE_EXTRA_KV_GIB a
    sleep-mode server gets: its KV cache then about as large as at `utilization` without sleep mode."""
    return math.floor((utilization - SLEEP_MODE_EXTRA_KV_GIB / gpu_memory_gib) * 100 + 1e-9) / 100
