"""A stack's Pulumi config, turned into typed, validated settings: one module per config namespace.

  base       the project's names, ConfigError, the model base every namespace shares
  cluster    vllm-poc:cluster and vllm-poc:systemNodes
  network    vllm-poc:network
  pools      vllm-poc:gpuPools (with startup: a pool's streamer Job and image cache)
  storage    vllm-poc:storage and vllm-poc:weights
  security   vllm-poc:security
  bench      vllm-poc:bench (and bench.compare, the report Job's question)
  fleet      vllm-poc:fleet (an autoscaled fleet, as bench plan writes it)
  stack      StackSettings, one field per namespace, and every check between keys
  reading    {"<namespace>:<key>": value} -> StackSettings, problems named as the user wrote the key

The servers (vllm-poc:servers[]) are stacks/serving's ServerSettings, next to the model profiles their
checks read. Validation runs once, before any resource is declared; stacks.loader reads the stack file
and calls `settings_from_config`. What other modules use is imported here.
"""

from stacks.settings.base import DEFAULT_REGION, PROJECT, REPO, ConfigError, SettingsModel
from stacks.settings.bench import BenchSettings, CompareSettings, compare_problems
from stacks.settings.cluster import LOG_RETENTION_DAYS, ClusterSettings, SystemNodeSettings
from stacks.settings.fleet import FleetPool, FleetSettings
from stacks.settings.network import NetworkSettings
from stacks.settings.pools import GpuPoolSettings
from stacks.settings.reading import TOP_LEVEL_KEYS, settings_from_config
from stacks.settings.security import SecuritySettings
from stacks.settings.stack import StackSettings, cross_key_problems
from stacks.settings.startup import ImageCacheSettings, StreamerJobSettings
from stacks.settings.storage import StorageSettings, WeightSettings, is_commit

__all__ = [
    "DEFAULT_REGION", "LOG_RETENTION_DAYS", "PROJECT", "REPO", "TOP_LEVEL_KEYS",
    "BenchSettings", "ClusterSettings", "CompareSettings", "FleetPool", "FleetSettings", "ConfigError", "GpuPoolSettings", "ImageCacheSettings",
    "NetworkSettings", "SecuritySettings", "SettingsModel", "StackSettings", "StorageSettings",
    "StreamerJobSettings", "SystemNodeSettings", "WeightSettings",
    "compare_problems", "cross_key_problems", "is_commit", "settings_from_config",
]
