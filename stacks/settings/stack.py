"""The whole stack: `StackSettings`, one field per config namespace, and the checks between keys.

The checks that need more than one namespace (names and pools, GPU limits, bench targets and prices,
variants, streamer models, weight revisions) live here, once: `StackSettings` runs them on a valid
config, and `partial_cross_key_problems` runs them on the entries of a config that are valid on
their own, so that one bad value never hides the problems between the other keys.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator

from stacks import variants
from stacks.serving import ServerSettings, check_server, server_model_ids
from stacks.settings.alerts import alert_problems
from stacks.settings.base import DEFAULT_REGION, PROJECT, SettingsModel
from stacks.settings.bench import BenchSettings, compare_problems
from stacks.settings.cluster import ClusterSettings, SystemNodeSettings
from stacks.settings.fleet import FleetSettings, fleet_problems
from stacks.settings.network import NetworkSettings
from stacks.settings.pools import GpuPoolSettings
from stacks.settings.security import SecuritySettings
from stacks.settings.startup import streamer_model
from stacks.settings.storage import StorageSettings, WeightSettings
from stacks.vllm_flags import server_extra_args_problems


class StackSettings(SettingsModel):
    project: str = Field(PROJECT, exclude=True)
    stack: str = Field("dev", exclude=True)
    region: str = Field(DEFAULT_REGION, description="AWS region (the provider key aws:region).")
    cluster: ClusterSettings = Field(default_factory=ClusterSettings, description="The EKS cluster.")
    network: NetworkSettings = Field(
        default_factory=NetworkSettings, description="A VPC to create, or an existing one (vpcId + subnets)."
    )
    system_nodes: SystemNodeSettings = Field(
        default_factory=SystemNodeSettings, description="Managed node group for Karpenter and add-ons."
    )
    gpu_pools: list[GpuPoolSettings] = Field(
        default_factory=list, description="Karpenter GPU pools, one instance type each."
    )
    storage: StorageSettings = Field(
        default_factory=StorageSettings, description="S3 buckets for weights and bench results."
    )
    servers: list[ServerSettings] = Field(default_factory=list, description="vLLM servers, one Deployment each.")
    weights: WeightSettings = Field(
        default_factory=WeightSettings, description="How model weights reach the weights bucket."
    )
    hf_token: SecretStr | None = Field(
        None,
        description="Hugging Face token for the weight sync (gated repositories such as google/gemma-*): "
        "`pulumi config set --secret vllm-poc:hfToken hf_...`; handed to the Job as a Kubernetes Secret.",
    )
    alert_webhook_url: SecretStr | None = Field(
        None,
        description="URL of the receiver vllm-poc:fleet.alerts names (a webhook, or a Slack incoming webhook), "
        "carrying its token: `pulumi config set --secret vllm-poc:alertWebhookUrl https://...`; refused in plain "
        "text. Alertmanager reads it from a Secret mounted into it, never from the chart's values.",
    )
    bench: BenchSettings = Field(default_factory=BenchSettings, description="The benchmark Jobs run after `pulumi up`.")
    security: SecuritySettings = Field(
        default_factory=SecuritySettings, description="Who may reach the servers, and their API key."
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Extra tags on every AWS resource.")
    fleet: FleetSettings | None = Field(
        None, description="An autoscaled fleet (`bench plan` writes it: fleet.yaml): KEDA, Prometheus, alerts, "
        "dashboard; unset: fixed replicas, no monitoring stack.")

    @model_validator(mode="before")
    @classmethod
    def _variants(cls, data: Any) -> Any:
        return variants.expand_config(data, ServerSettings)

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", v):
            raise ValueError(f"{v!r} is not an AWS region name (e.g. ap-northeast-2)")
        return v

    @model_validator(mode="after")
    def _stack(self) -> StackSettings:
        problems = cross_key_problems(self.gpu_pools, self.servers, self.bench)
        problems += fleet_problems(self.fleet, self.servers, self.gpu_pools, self.bench.targets,
                                   self.cluster.kubernetes_version)
        problems += self._weight_problems()
        problems += alert_problems(self.fleet.alerts if self.fleet else None, self.fleet is not None,
                                   self.alert_webhook_url.get_secret_value() if self.alert_webhook_url else None)
        staged = {server.model for server in self.servers}
        for index, pool in enumerate(self.gpu_pools):
            if pool.streamer_job is None:
                continue
            model = streamer_model(pool.streamer_job, [s.model for s in self.servers if s.pool == pool.name])
            if model is None or model not in staged:
                problems.append(
                    f"gpuPools[{index}].streamerJob.model: {model or 'no model'} is not staged by any server; set "
                    f"it to one of {', '.join(sorted(staged)) or '(no servers defined)'}")
        if not problems:
            problems += variants.variant_problems(self) + variants.gpu_budget_problems(self)
        # After the variant checks, never instead of them: a comparison names the servers they make.
        problems += compare_problems(self.bench)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def model_ids(self) -> list[str]:
        """Hugging Face ids the servers load (targets and MTP drafts), each once."""
        return sorted({m for server in self.servers for m in server_model_ids(server)})

    def _weight_problems(self) -> list[str]:
        problems = []
        models = self.model_ids()
        if self.weights.source == "hub":
            for model in models:
                if model not in self.weights.revisions:
                    problems.append(
                        f"weights.revisions: no revision for {model}, which servers load; pin its commit, e.g. "
                        f'revisions: {{"{model}": "<40-hex commit from huggingface.co/{model}/commits/main>"}}'
                    )
        room = self.system_nodes.disk_size_gib - 20
        if self.weights.source == "hub" and models and self.weights.scratch_gib > room:
            problems.append(
                f"weights.scratchGib: {self.weights.scratch_gib} GiB does not fit on a system node's "
                f"{self.system_nodes.disk_size_gib} GiB disk with 20 GiB for the OS and images; lower it or raise "
                "systemNodes.diskSizeGib"
            )
        return problems

    def pool(self, name: str) -> GpuPoolSettings:
        return next(p for p in self.gpu_pools if p.name == name)

    def server(self, name: str) -> ServerSettings:
        return next(s for s in self.servers if s.name == name)


def cross_key_problems(gpu_pools: list, servers: list, bench: BenchSettings | None,
                       unchecked_pools: frozenset[str] = frozenset(),
                       server_names_as_written: frozenset[str] = frozenset()) -> list[str]:
    """Problems between keys (names, pools, GPU limits, bench targets), one line each naming its key.

    Works on partly valid config too: an entry that failed its own validation is None and is skipped,
    references to a pool named in `unchecked_pools` (written but invalid) are not reported again, so
    a type error never hides the problems between the other keys.
    """
    problems: list[str] = []
    valid_pools = [(index, pool) for index, pool in enumerate(gpu_pools) if pool is not None]
    counts = Counter(pool.name for _, pool in valid_pools)
    seen: set[str] = set()
    for index, pool in valid_pools:
        if pool.name in seen:
            problems.append(f"gpuPools[{index}].name: pool name {pool.name!r} is used more than once; names must be unique")
        seen.add(pool.name)
        if pool.on_demand_fallback and f"{pool.name}-on-demand" in counts:
            problems.append(
                f"gpuPools[{index}].onDemandFallback: would create {pool.name}-on-demand, which another pool already uses"
            )
    pools = {pool.name: pool for _, pool in valid_pools}
    server_names: set[str] = set(server_names_as_written)
    seen_servers: set[str] = set()
    for index, server in enumerate(servers):
        if server is None:
            continue
        key = f"servers[{index}]"
        if server.name in seen_servers:
            problems.append(f"{key}.name: server name {server.name!r} is used more than once")
        seen_servers.add(server.name)
        server_names.add(server.name)
        problems += server_extra_args_problems(server.extra_args, server.image, key=f"{key}.extraArgs")
        pool = pools.get(server.pool)
        if pool is None:
            if server.pool not in unchecked_pools:
                problems.append(
                    f"{key}.pool: no GPU pool named {server.pool!r}; define it in gpuPools or use one of "
                    f"{', '.join(pools) or '(none defined)'}"
                )
            continue
        if bench is not None:
            # Every server is held to the bench's peak: any of them may be benchmarked later, and
            # the policy pack enforces the same floor on every Deployment.
            problems += [
                p.removeprefix(f"{PROJECT}:")
                for p in check_server(
                    server, pool.instance, bench.max_concurrency, key=f"{PROJECT}:{key}",
                    bench_max_tokens=bench.max_request_tokens,
                )
            ]
        gpus_needed = server.tensor_parallel_size * server.replicas
        if gpus_needed > pool.gpu_limit:
            problems.append(
                f"{key}.replicas: {server.replicas} replica(s) x {server.tensor_parallel_size} GPU(s) exceed "
                f"gpuPools {pool.name!r} gpuLimit {pool.gpu_limit}; raise the limit or lower replicas"
            )
    if bench is None:
        return problems
    servers_by_name = {server.name: server for server in servers if server is not None}
    for target, price in bench.price_per_hour.items():
        prices = list(price.values()) if isinstance(price, dict) else [price]
        if target not in bench.targets or not prices or min(prices) <= 0:
            problems.append(f"bench.pricePerHour.{target}: give a positive price for a server in bench.targets")
            continue
        pool = pools.get(servers_by_name[target].pool) if target in servers_by_name else None
        if pool and not isinstance(price, dict) and (len(pool.capacity_types) > 1 or pool.on_demand_fallback):
            problems.append(
                f"bench.pricePerHour.{target}: pool {pool.name!r} may run on spot or on-demand capacity, "
                "so one number cannot be its price; give {spot: X, on-demand: Y}")
    for index, target in enumerate(bench.targets):
        if target not in server_names:
            problems.append(
                f"bench.targets[{index}]: no server named {target!r}; use one of {', '.join(sorted(server_names)) or '(none defined)'}"
            )
    return problems


def partial_cross_key_problems(data: dict[str, Any]) -> list[str]:
    """Cross-key problems among the entries that are valid on their own (see cross_key_problems)."""

    def each(model: type[BaseModel], raw: Any) -> BaseModel | None:
        try:
            return model.model_validate(raw)
        except (ValidationError, ValueError, TypeError):
            return None

    def items(raw: Any) -> list[Any]:
        return raw if isinstance(raw, list) else []

    raw_pools, raw_servers = items(data.get("gpuPools")), items(data.get("servers"))
    pools = [each(GpuPoolSettings, p) for p in raw_pools]
    servers = [each(ServerSettings, s) for s in raw_servers]
    bench = each(BenchSettings, data.get("bench", {}))
    unchecked = frozenset(str(raw.get("name")) for raw, pool in zip(raw_pools, pools)
                          if pool is None and isinstance(raw, dict))
    written = frozenset(str(raw.get("name")) for raw in raw_servers if isinstance(raw, dict) and raw.get("name"))
    # A whole section of the wrong shape: what refers to it cannot be checked, and is not blamed.
    if "gpuPools" in data and not isinstance(data["gpuPools"], list):
        unchecked |= frozenset(str(raw.get("pool")) for raw in raw_servers if isinstance(raw, dict))
    if "servers" in data and not isinstance(data["servers"], list) and isinstance(data.get("bench"), dict):
        written |= frozenset(str(t) for t in data["bench"].get("targets") or [] if isinstance(t, (str, int)))
    problems = cross_key_problems(pools, servers, bench, unchecked, written)
    if bench is not None and isinstance(data.get("servers"), list) and None not in servers:
        problems += compare_problems(bench)
    return [f"{PROJECT}:{p}" for p in problems]
