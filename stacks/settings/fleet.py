"""`vllm-poc:fleet`: an autoscaled fleet, per serving pool (a traffic class), as `bench plan` writes it
(fleet.yaml). With it the stack runs KEDA (a ScaledObject per server of each pool, on vLLM's own
metrics), an in-cluster Prometheus with the SLO's rules and alerts, and the Grafana dashboard."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from stacks.serving import TRAFFIC_CLASSES
from stacks.settings.alerts import FleetAlerts
from stacks.settings.base import SettingsModel
from stacks.versions import pins

# A pool whose requests may wait for a cold start (a node, the image, the weights: minutes).
COLD_START_TOLERANT = frozenset({"batch"})


class FleetSlo(SettingsModel):
    ttft_p99_ms: float = Field(500.0, gt=0, description="TTFT p99 limit (ms) of the alerts and the dashboard.")
    itl_p99_ms: float = Field(50.0, gt=0, description="ITL p99 limit (ms) of the alerts and the dashboard.")


class FleetPool(SettingsModel):
    min_replicas: int = Field(description="Fewest replicas per server (0: scale to zero, batch only).", ge=0)
    max_replicas: int = Field(description="Most replicas per server (the plan's high end).", ge=1)
    running_per_replica: float = Field(
        description="Target of running requests per replica (vllm:num_requests_running, averaged).", gt=0)
    waiting_per_replica: int = Field(
        description="Target of waiting requests per replica (vllm:num_requests_waiting, averaged).", ge=1)
    kv_cache_usage: float = Field(
        description="Target KV-cache usage, 0-1 (vllm:kv_cache_usage_perc, averaged over replicas).", gt=0, le=1)
    startup_seconds: float = Field(description="Measured start-up, pod created to /health (s).", gt=0)
    scale_down_window_seconds: int = Field(
        description="Scale-down stabilisation window (s): at least two start-ups.", ge=0, le=3600)
    scale_down_period_seconds: int = Field(
        description="Seconds per replica removed (scale-down policy): at least one start-up.", ge=15, le=3600)
    wake_query: str | None = Field(
        None, description="With minReplicas 0: a PromQL query over a series that exists while the pool has no "
        "replica (e.g. a router's queue of batch requests, or kube-state-metrics' active batch Jobs); a value "
        "above 0 starts the first replica. vLLM's own metrics vanish with the last replica.")

    @model_validator(mode="after")
    def _bounds(self) -> FleetPool:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}")
        if self.min_replicas == 0 and not self.wake_query:
            raise ValueError("minReplicas 0 needs wakeQuery: with no replica left, vLLM's metrics are gone and "
                             "nothing would start the first one; give a query over a series that outlives the "
                             "pool (a router's queue, active batch Jobs), or set minReplicas 1")
        return self


class FleetSettings(SettingsModel):
    slo: FleetSlo = Field(default_factory=FleetSlo, description="The SLO the fleet was sized for.")
    polling_interval_seconds: int = Field(15, ge=5, le=300, description="KEDA's polling interval (s).")
    pools: dict[str, FleetPool] = Field(
        default_factory=dict, description="Per traffic class (interactive, batch, ...): the servers of that "
        "trafficClass scale within these bounds on these targets.")
    namespace: str = Field("monitoring", description="Namespace of Prometheus, Grafana and KEDA.")
    alerts: FleetAlerts | None = Field(
        None, description="Who the SLO alerts reach: the receiver Alertmanager sends them to (its URL is "
        "vllm-poc:alertWebhookUrl, a secret). Required with a fleet.")

    @field_validator("pools")
    @classmethod
    def _pools(cls, v: dict[str, FleetPool]) -> dict[str, FleetPool]:
        for name, pool in v.items():
            if name not in TRAFFIC_CLASSES:
                raise ValueError(f"pools.{name}: not a traffic class; use one of {', '.join(TRAFFIC_CLASSES)}")
            if pool.min_replicas == 0 and name not in COLD_START_TOLERANT:
                raise ValueError(
                    f"pools.{name}.minReplicas: 0 puts a cold start ({pool.startup_seconds:g} s measured) in front "
                    f"of {name} requests; only {', '.join(sorted(COLD_START_TOLERANT))} tolerates it: set 1 or more")
        return v


def keda_version_problems(kubernetes_version: str) -> list[str]:
    """The fleet's autoscaler against the cluster: KEDA is tested with a few Kubernetes minors only."""
    versions = pins()
    if kubernetes_version in versions.keda_kubernetes_versions:
        return []
    return [f"cluster.kubernetesVersion: {kubernetes_version} is outside the Kubernetes versions KEDA {versions.keda_chart} "
            f"(the fleet's autoscaler) is tested with, {versions.keda_kubernetes}; set "
            f"{versions.keda_kubernetes_versions[-1]}, or move keda_chart and keda_kubernetes in pyproject.toml to a "
            f"KEDA release that lists {kubernetes_version}"]


def fleet_problems(fleet: FleetSettings | None, servers: list, pools: list, bench_targets: list[str],
                   kubernetes_version: str | None = None) -> list[str]:
    """Problems between vllm-poc:fleet and the servers, pools, bench targets and the cluster's version
    (one line each)."""
    if fleet is None:
        return []
    problems = keda_version_problems(kubernetes_version) if kubernetes_version else []
    gpu_pools = {p.name: p for p in pools if p is not None}
    for name, pool in fleet.pools.items():
        members = [s for s in servers if s is not None and s.traffic_class == name]
        if not members:
            problems.append(f"fleet.pools.{name}: no server has trafficClass {name}; add one, or remove the pool")
        for server in members:
            if server.name in bench_targets:
                problems.append(f"fleet.pools.{name}: server {server.name} is a bench target, and a sweep needs its "
                                "fixed replica count; serve the fleet from other servers or drop it from bench.targets")
            gpu_pool = gpu_pools.get(server.pool)
            needed = pool.max_replicas * server.tensor_parallel_size
            if gpu_pool is not None and needed > gpu_pool.gpu_limit:
                problems.append(
                    f"fleet.pools.{name}.maxReplicas: {pool.max_replicas} replicas of {server.name} x "
                    f"{server.tensor_parallel_size} GPU(s) exceed gpuPools {gpu_pool.name!r} gpuLimit "
                    f"{gpu_pool.gpu_limit}: Karpenter would stop the scale-up there; raise the limit")
    return problems
