"""The fleet of a stack with `vllm-poc:fleet`: Prometheus with the SLO's rules, alerts routed to the
stack's receiver and the dashboard (components/monitoring.py), KEDA with a ScaledObject per server of
each pool (components/autoscaling.py), a router per pool (components/router.py), and how an autoscaled
server rolls, from the targets `bench plan` wrote (bench/analysis/fleet.py) and the queries of
bench/common/fleet_queries.py."""

from __future__ import annotations

import dataclasses

import pulumi

from bench.common import fleet_queries as Q
from components.autoscaling import Autoscaling, AutoscalingArgs, ScaledServer, TriggerSpec
from components.monitoring import AlertReceiver, Monitoring, MonitoringArgs
from components.router import Router, RouterArgs
from components.vllm_server import RollingUpdate, ServeSpec, selector_labels
from stacks.settings import FleetPool, StackSettings
from stacks.versions import lock_text, pins


def pool_of(settings: StackSettings, server_name: str) -> FleetPool | None:
    """The fleet pool that scales a server (its traffic class's), None for a fixed-size server."""
    if settings.fleet is None:
        return None
    return settings.fleet.pools.get(settings.server(server_name).traffic_class)


def fleet_spec(settings: StackSettings, spec: ServeSpec) -> ServeSpec:
    """A server of a fleet pool starts at the pool's floor; the ScaledObject moves it from there."""
    pool = pool_of(settings, spec.name)
    return spec if pool is None else dataclasses.replace(spec, replicas=pool.min_replicas)


def most_gpus(settings: StackSettings, server_name: str) -> int:
    """The GPUs a server may hold at once: its pool's maxReplicas (autoscaled), else its replicas."""
    server = settings.server(server_name)
    pool = pool_of(settings, server_name)
    return (pool.max_replicas if pool is not None else server.replicas) * server.tensor_parallel_size


def rolling_update(settings: StackSettings, spec: ServeSpec) -> RollingUpdate | None:
    """An autoscaled server's rollout (components/vllm_server.py RollingUpdate); None for a fixed server.

    One replica more than the pool's maximum (surge) where the GPU pool's limit holds it beside every
    server of that GPU pool at its own maximum: the pool keeps all its replicas through the rollout.
    Otherwise one replica down at a time. Each replica of the rollout is a start-up, so Pulumi waits for
    maxReplicas of them."""
    pool = pool_of(settings, spec.name)
    if pool is None:
        return None
    server = settings.server(spec.name)
    gpu_pool = settings.pool(server.pool)
    held = sum(most_gpus(settings, s.name) for s in settings.servers if s.pool == server.pool)
    surge = held + server.tensor_parallel_size <= gpu_pool.gpu_limit
    return RollingUpdate(max_surge=1 if surge else 0, max_unavailable=0 if surge else 1,
                         timeout_s=max(1, pool.max_replicas) * spec.deploy_timeout_s)


def alert_receiver(settings: StackSettings) -> AlertReceiver:
    """The receiver the stack file names, with its URL kept a secret."""
    alerts, url = settings.fleet.alerts, settings.alert_webhook_url
    return AlertReceiver(name=alerts.receiver, kind=alerts.kind, url=url.get_secret_value(),
                         channel=alerts.channel, repeat_interval=alerts.repeat_interval,
                         send_resolved=alerts.send_resolved)


def triggers(namespace: str, server: str, pool: FleetPool) -> list[TriggerSpec]:
    queries = Q.trigger_queries(namespace, server)
    out = [TriggerSpec("running", queries["running"], pool.running_per_replica, "AverageValue"),
           TriggerSpec("waiting", queries["waiting"], pool.waiting_per_replica, "AverageValue"),
           TriggerSpec("kv-cache", queries["kv-cache"], pool.kv_cache_usage, "Value")]
    if pool.wake_query:
        out.append(TriggerSpec("wake", pool.wake_query, 1, "AverageValue"))
    return out


def fleet(settings: StackSettings, specs: dict[str, ServeSpec], *, namespace: str, vpc_cidr: str,
          depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions) -> dict[str, object]:
    """Monitoring and autoscaling for the stack's fleet; the stack outputs it adds."""
    config = settings.fleet
    if config is None or not specs:
        return {}
    slo = config.slo
    first = next(iter(specs.values()))
    monitoring = Monitoring("monitoring", MonitoringArgs(
        chart_version=pins().kube_prometheus_stack_chart,
        namespace=config.namespace,
        workload_namespace=namespace,
        server_port=first.port,
        server_pod_labels=selector_labels(first),
        rules=Q.rule_groups(slo.ttft_p99_ms, slo.itl_p99_ms),
        dashboard=Q.dashboard(slo.ttft_p99_ms, slo.itl_p99_ms),
        kubernetes_version=settings.cluster.kubernetes_version,
        alerts=alert_receiver(settings),
        depends_on=depends_on,
    ), opts=opts)
    scaled = []
    for name in specs:
        pool = pool_of(settings, name)
        if pool is None:
            continue
        scaled.append(ScaledServer(
            deployment=name, min_replicas=pool.min_replicas, max_replicas=pool.max_replicas,
            triggers=triggers(namespace, name, pool), scale_down_window_s=pool.scale_down_window_seconds,
            scale_down_period_s=pool.scale_down_period_seconds,
            labels={"vllm-poc/traffic-class": settings.server(name).traffic_class}))
    autoscaling = Autoscaling("autoscaling", AutoscalingArgs(
        chart_version=pins().keda_chart, namespace=config.namespace, workload_namespace=namespace,
        prometheus_url=monitoring.url, polling_interval_s=config.polling_interval_seconds, servers=scaled,
        depends_on=[monitoring.release, *depends_on]), opts=opts)
    # An endpoint per pool: each router finds its pool's servers by the labels they carry and their
    # traffic class, so no request reaches another pool's servers.
    router = Router("router", RouterArgs(
        namespace=namespace, image=pins().weight_sync_image, lock=lock_text("router.txt"),
        server_labels={"app.kubernetes.io/name": "vllm", "app.kubernetes.io/component": "server"},
        pools=sorted({settings.server(name).traffic_class for name in specs}),
        server_port=first.port, vpc_cidr=vpc_cidr, depends_on=depends_on), opts=opts)
    return {"prometheus": monitoring.url, "routers": router.urls, "scaledObjects": sorted(autoscaling.scaled_objects)}
