"""The fleet stack, rendered: a ScaledObject per server with the fleet's thresholds (checked against
what KEDA's ScaledObject v1alpha1 requires), the pinned KEDA and kube-prometheus-stack releases, the
SLO's rules in Prometheus, the dashboard for Grafana, the scrape reach, the router in front of the
pools (discovery by the servers' labels, its RBAC and reach); a stack without a fleet
renders none of it."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from bench.common import fleet_queries as Q
from stacks.loader import load_settings
from stacks.ops.render import render_stack
from stacks.versions import extra, pins
from tests.fixtures.k8s.schemas import validate_object


@pytest.fixture(scope="module")
def fleet():
    return render_stack("fleet")


# What KEDA's ScaledObject (keda.sh/v1alpha1) requires and allows, from its specification: a target by
# name (Deployment by default), one trigger or more, each with a type and a metadata map of strings;
# the Prometheus scaler needs serverAddress, query and threshold; metricType is AverageValue,
# Value or Utilization (not for external scalers); counts are non-negative integers, min <= max;
# idleReplicaCount below minReplicaCount; the HPA behaviour takes scaleUp/scaleDown rules.
SPEC_FIELDS = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
               "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers"}
TRIGGER_FIELDS = {"type", "name", "metadata", "metricType", "authenticationRef", "useCachedMetrics"}
PROMETHEUS_REQUIRED = {"serverAddress", "query", "threshold"}
PROMETHEUS_FIELDS = PROMETHEUS_REQUIRED | {"activationThreshold", "namespace", "customHeaders", "ignoreNullValues",
                                           "queryParameters", "unsafeSsl", "timeout", "authModes"}


def scaled_object_problems(obj: dict) -> list[str]:
    problems = []
    if obj.get("apiVersion") != "keda.sh/v1alpha1" or obj.get("kind") != "ScaledObject":
        problems.append("apiVersion/kind: keda.sh/v1alpha1 ScaledObject")
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not meta.get("name") or not meta.get("namespace"):
        problems.append("metadata: name and namespace")
    problems += [f"spec.{k}: unknown field" for k in set(spec) - SPEC_FIELDS]
    target = spec.get("scaleTargetRef") or {}
    if not isinstance(target.get("name"), str) or not target["name"]:
        problems.append("spec.scaleTargetRef.name: required")
    if target.get("kind", "Deployment") != "Deployment" or target.get("apiVersion", "apps/v1") != "apps/v1":
        problems.append("spec.scaleTargetRef: a Deployment (apps/v1)")
    for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount", "idleReplicaCount"):
        if key in spec and (not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0):
            problems.append(f"spec.{key}: a non-negative integer")
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
        problems.append("spec.minReplicaCount above maxReplicaCount")
    if "idleReplicaCount" in spec and spec["idleReplicaCount"] >= spec.get("minReplicaCount", 0):
        problems.append("spec.idleReplicaCount: below minReplicaCount")
    behavior = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
    problems += [f"behavior.{k}: unknown" for k in set(behavior) - {"scaleUp", "scaleDown"}]
    for direction, rules in behavior.items():
        for policy in rules.get("policies", []):
            if policy.get("type") not in ("Pods", "Percent") or policy.get("value", 0) <= 0 \
                    or not 0 < policy.get("periodSeconds", 0) <= 1800:
                problems.append(f"behavior.{direction}.policies: {policy}")
        if not 0 <= rules.get("stabilizationWindowSeconds", 0) <= 3600:
            problems.append(f"behavior.{direction}.stabilizationWindowSeconds: 0-3600")
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        problems.append("spec.triggers: at least one")
        return problems
    names = [t.get("name") for t in triggers if t.get("name")]
    if len(names) != len(set(names)):
        problems.append("spec.triggers: names must be unique")
    for i, trigger in enumerate(triggers):
        problems += [f"triggers[{i}].{k}: unknown field" for k in set(trigger) - TRIGGER_FIELDS]
        if not trigger.get("type"):
            problems.append(f"triggers[{i}].type: required")
        if trigger.get("metricType", "AverageValue") not in ("AverageValue", "Value"):
            problems.append(f"triggers[{i}].metricType: AverageValue or Value for an external scaler")
        metadata = trigger.get("metadata")
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            problems.append(f"triggers[{i}].metadata: a map of strings")
            continue
        if trigger.get("type") == "prometheus":
            problems += [f"triggers[{i}].metadata.{k}: required" for k in PROMETHEUS_REQUIRED - set(metadata)]
            problems += [f"triggers[{i}].metadata.{k}: unknown" for k in set(metadata) - PROMETHEUS_FIELDS]
            try:
                float(metadata.get("threshold", "x"))
            except ValueError:
                problems.append(f"triggers[{i}].metadata.threshold: a number")
    return problems


def test_one_scaled_object_per_server_with_the_fleets_thresholds(fleet):
    settings = load_settings("fleet")
    objects = {o["metadata"]["name"]: o for o in fleet.k8s("ScaledObject")}
    deployments = {o["metadata"]["name"]: o for o in fleet.k8s("Deployment") if o["metadata"]["namespace"] == "vllm"}
    assert set(objects) == {s.name for s in settings.servers} and set(objects) <= set(deployments)
    for name, obj in objects.items():
        assert scaled_object_problems(obj) == [], name
        pool = settings.fleet.pools[settings.server(name).traffic_class]
        spec = obj["spec"]
        assert spec["scaleTargetRef"]["name"] == name and obj["metadata"]["namespace"] == "vllm"
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (pool.min_replicas, pool.max_replicas)
        # the Deployment starts at the pool's floor, and `pulumi up` leaves its count to KEDA
        assert deployments[name]["spec"]["replicas"] == pool.min_replicas
        triggers = {t["name"]: t for t in spec["triggers"]}
        assert float(triggers["running"]["metadata"]["threshold"]) == pool.running_per_replica
        assert float(triggers["waiting"]["metadata"]["threshold"]) == pool.waiting_per_replica
        assert float(triggers["kv-cache"]["metadata"]["threshold"]) == pool.kv_cache_usage
        assert triggers["kv-cache"]["metricType"] == "Value" and triggers["running"]["metricType"] == "AverageValue"
        queries = Q.trigger_queries("vllm", name)
        for key in ("running", "waiting", "kv-cache"):
            assert triggers[key]["metadata"]["query"] == queries[key]
            assert triggers[key]["metadata"]["serverAddress"] == "http://kps-prometheus.monitoring.svc.cluster.local:9090"
        assert not any("DCGM" in t["metadata"]["query"] for t in spec["triggers"]), "never GPU utilisation"
        down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        assert down["stabilizationWindowSeconds"] == pool.scale_down_window_seconds
        assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": pool.scale_down_period_seconds}]
        # scale to zero only where a cold start is tolerated, and then with a wake trigger
        assert (pool.min_replicas == 0) == (settings.server(name).traffic_class == "batch") == ("wake" in triggers)
    deployment = fleet.one("kubernetes:apps/v1:Deployment", "server-chat-deployment")
    assert deployment.options.get("ignoreChanges") == ["spec.replicas"]


def test_the_shape_check_names_what_keda_would_refuse(fleet):
    good = fleet.k8s("ScaledObject")[0]
    broken = json.loads(json.dumps(good))
    del broken["spec"]["scaleTargetRef"]["name"]
    broken["spec"]["triggers"][0]["metadata"]["threshold"] = 3
    del broken["spec"]["triggers"][1]["metadata"]["query"]
    broken["spec"]["minReplicaCount"] = 9
    broken["spec"]["maxReplicas"] = 9
    assert sorted(scaled_object_problems(broken)) == sorted([
        "spec.scaleTargetRef.name: required", "triggers[0].metadata: a map of strings",
        "triggers[1].metadata.query: required", "spec.minReplicaCount above maxReplicaCount",
        "spec.maxReplicas: unknown field"])


def test_keda_and_the_monitoring_stack_are_pinned_releases_with_the_rules_and_scrapes(fleet):
    releases = {r["name"]: r for r in fleet.helm_releases()}
    assert releases["keda"]["version"] == pins().keda_chart
    assert releases["keda"]["repository"] == "https://kedacore.github.io/charts"
    kps = releases["kube-prometheus-stack"]
    assert kps["version"] == pins().kube_prometheus_stack_chart
    values = kps["values"]
    settings = load_settings("fleet")
    assert values["additionalPrometheusRulesMap"]["vllm-slo"] == json.loads(json.dumps(
        Q.rule_groups(settings.fleet.slo.ttft_p99_ms, settings.fleet.slo.itl_p99_ms)))
    jobs = {c["job_name"]: c for c in values["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]}
    assert set(jobs) == {"vllm", "dcgm"}
    targets = {r.get("target_label") for r in jobs["vllm"]["relabel_configs"]}
    assert {"namespace", "server", "traffic_class"} <= targets  # the labels every query selects on


def test_the_dashboard_and_the_scrape_reach_are_valid_objects(fleet, karpenter_crds):
    (config_map,) = [o for o in fleet.k8s("ConfigMap") if o["metadata"]["name"] == "vllm-poc-fleet-dashboard"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["vllm-poc-fleet.json"])
    assert [p["targets"][0]["expr"] for p in dashboard["panels"]] == [expr for _, _, expr, _ in Q.PANELS]
    (policy,) = [o for o in fleet.k8s("NetworkPolicy") if o["metadata"]["name"] == "prometheus-scrapes-servers"]
    version = load_settings("fleet").cluster.kubernetes_version
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8000}]
    others = [o for o in fleet.kubernetes_objects() if o["kind"] != "ScaledObject"]  # checked above, by field
    assert config_map in others and policy in others
    for obj in others:
        report = validate_object(obj, kubernetes_version=version, crds=karpenter_crds)
        assert report.ok, report.errors


def test_each_pool_has_a_router_that_finds_only_that_pools_servers(fleet):
    """A router per traffic class, cache-aware, discovering the servers whose labels include the pool's: the
    batch router's list can never hold an interactive server (and the other way round), and each pool's
    servers accept only their own router (tests/test_fleet_router_pools.py runs the pinned router on the
    rendered arguments against a Kubernetes API serving both pools' pods)."""
    routers = {o["metadata"]["name"]: o for o in fleet.k8s("Deployment")
               if o["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm-router"}
    assert set(routers) == {"vllm-router-batch", "vllm-router-interactive"}
    servers = {o["metadata"]["name"]: o for o in fleet.k8s("Deployment")
               if o["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm"}
    assert set(servers) == {"chat", "batch"}
    pools = {"interactive": "chat", "batch": "batch"}
    for pool, server in pools.items():
        (container,) = routers[f"vllm-router-{pool}"]["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        assert args[args.index("--policy") + 1] == "cache_aware" and "--enable-igw" in args
        assert "--service-discovery" in args and args[args.index("--service-discovery-namespace") + 1] == "vllm"
        selector = dict(a.split("=", 1) for a in args[args.index("--selector") + 1:args.index("--prometheus-host")])
        assert selector == {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/component": "server",
                            "vllm-poc/traffic-class": pool}
        for name, deployment in servers.items():
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert (selector.items() <= labels.items()) == (name == server), (pool, name)
        # the namespace denies by default: this pool's servers accept this router's pods, and it reaches no other
        (reach,) = [o for o in fleet.k8s("NetworkPolicy") if o["metadata"]["name"] == f"vllm-router-{pool}-to-servers"]
        assert reach["spec"]["podSelector"]["matchLabels"] == selector
        (egress,) = [o for o in fleet.k8s("NetworkPolicy") if o["metadata"]["name"] == f"vllm-router-{pool}-egress"]
        assert egress["spec"]["egress"][0]["to"] == [{"podSelector": {"matchLabels": selector}}]
        (service,) = [o for o in fleet.k8s("Service") if o["metadata"]["name"] == f"vllm-router-{pool}"]
        template = routers[f"vllm-router-{pool}"]["spec"]["template"]
        assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert reach["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == service["spec"]["selector"]
        assert template["spec"]["automountServiceAccountToken"] is True
        assert fleet.outputs["fleet"]["routers"][pool] == f"http://vllm-router-{pool}.vllm.svc:8000"
    # discovery may read pods in the servers' namespace only
    (role,) = [o for o in fleet.k8s("Role") if o["metadata"]["name"] == "vllm-router"]
    assert role["metadata"]["namespace"] == "vllm"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [o for o in fleet.k8s("RoleBinding") if o["metadata"]["name"] == "vllm-router"]
    assert {r["spec"]["template"]["spec"]["serviceAccountName"] for r in routers.values()} == {
        binding["subjects"][0]["name"]}
    # the batch servers schedule by priority, the priority a batch request carries in its body
    words = " ".join(servers["batch"]["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "--scheduling-policy priority" in words


def test_every_router_start_installs_the_committed_hashed_lock(fleet):
    """The router pod installs locks/router.txt as committed (every package pinned, each of its files by
    sha256) with pip's hash checking, nothing resolved beside it; the lock reaches the pod in an immutable
    ConfigMap named after its content, so a new lock rolls the routers."""
    from stacks.versions import lock_text, read_lock

    lock = lock_text("router.txt")
    pinned, _ = read_lock(lock)
    (pin,) = extra("router")
    assert pin == f"vllm-router=={pinned['vllm-router']}" and len(pinned) >= 10
    # every requirement carries at least one sha256 (pip refuses the whole install otherwise)
    entries = [e for e in lock.replace("\\\n", " ").splitlines() if e and not e.startswith((" ", "#"))]
    assert len(entries) == len(pinned)
    assert all(re.search(r"--hash=sha256:[0-9a-f]{64}", e) for e in entries), entries[:3]
    (config_map,) = [o for o in fleet.k8s("ConfigMap") if o["metadata"]["name"].startswith("vllm-router-lock-")]
    assert config_map["data"] == {"requirements.txt": lock} and config_map["immutable"] is True
    assert config_map["metadata"]["name"] == f"vllm-router-lock-{hashlib.sha256(lock.encode()).hexdigest()[:10]}"
    for router in (o for o in fleet.k8s("Deployment") if o["metadata"]["name"].startswith("vllm-router-")):
        pod = router["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        script = container["command"][2]
        install = [line for line in script.splitlines() if "pip install" in line]
        assert len(install) == 1 and script.startswith("set -e\n")
        for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "-r /opt/router-lock/requirements.txt"):
            assert flag in install[0], flag
        assert "vllm-router==" not in script  # nothing named beside the lock
        (volume,) = [v for v in pod["volumes"] if v["name"] == "lock"]
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]


def test_a_stack_without_a_fleet_renders_none_of_it():
    dev = render_stack("dev")
    assert not dev.k8s("ScaledObject")
    assert not [o for o in dev.k8s("Deployment") if o["metadata"]["name"] == "vllm-router"]
    assert not {"keda", "kube-prometheus-stack"} & {r["name"] for r in dev.helm_releases()}


def test_the_policy_pack_finds_nothing_in_the_fleet(fleet):
    from policy import policies
    from stacks.ops.render import _plain

    settings = load_settings("fleet")
    resources = [(r.type, r.name, {**_plain(r.outputs), **_plain(r.inputs)}, r.outputs.get("id"))
                 for r in fleet.registrations]
    config = {"vllm-max-num-seqs": {"benchMaxConcurrency": settings.bench.max_concurrency}}
    assert policies.check_resources(resources, config) == []


def test_the_fleets_kubernetes_version_is_one_keda_is_tested_with():
    """Both pins read from where they live: KEDA's chart and its tested range (pyproject.toml), the fleet's
    cluster version (Pulumi.fleet.yaml); config refuses a fleet stack outside the range, naming the key."""
    from stacks.settings import ConfigError, settings_from_config
    from stacks.loader import load_config

    versions = pins()
    assert versions.keda_chart.startswith("2.20.") and versions.keda_kubernetes == "1.33-1.35"
    assert versions.keda_kubernetes_versions == ("1.33", "1.34", "1.35")
    assert load_settings("fleet").cluster.kubernetes_version in versions.keda_kubernetes_versions
    config = load_config("fleet")
    config["vllm-poc:cluster"] = {**config["vllm-poc:cluster"], "kubernetesVersion": "1.36"}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="fleet")
    (problem,) = [p for p in err.value.problems if "KEDA" in p]
    assert problem.startswith("vllm-poc:cluster.kubernetesVersion: 1.36 is outside") and "set 1.35" in problem
    # a stack without a fleet runs no KEDA: 1.36 stays allowed there
    assert load_settings("dev").cluster.kubernetes_version == "1.36"


def test_autoscaled_servers_roll_one_replica_at_a_time_and_benchmark_targets_recreate(fleet):
    """A new pod template (an image pin, a flag, the compile-cache key) reaches an autoscaled pool a replica
    at a time: with room in the GPU pool's limit the new replica starts before an old one goes (chat: g7e
    holds 8 GPUs, the pool at most 6), else one goes down at a time (batch: l40s holds 4, the pool at most
    4). Pulumi waits for the whole rollout; a PodDisruptionBudget holds drains and consolidation to one."""
    deployments = {o["metadata"]["name"]: o for o in fleet.k8s("Deployment") if o["metadata"]["namespace"] == "vllm"}
    assert deployments["chat"]["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployments["batch"]["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    settings = load_settings("fleet")
    for name in ("chat", "batch"):
        resource = fleet.one("kubernetes:apps/v1:Deployment", f"server-{name}-deployment")
        timeout = int(deployments[name]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])
        pool = settings.fleet.pools[settings.server(name).traffic_class]
        assert resource.options["customTimeouts"] == {"create": f"{timeout}s",
                                                      "update": f"{pool.max_replicas * timeout}s"}
    budgets = {o["metadata"]["name"]: o for o in fleet.k8s("PodDisruptionBudget")}
    assert set(budgets) == {"chat", "batch"}
    for name, budget in budgets.items():
        assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {
            "app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}}}
    # a benchmark target keeps Recreate: a sweep never meets two configurations at once
    dev = render_stack("dev")
    assert {o["spec"]["strategy"]["type"] for o in dev.k8s("Deployment")} == {"Recreate"}
    assert not dev.k8s("PodDisruptionBudget")


def test_a_pool_without_room_for_a_surge_replica_rolls_one_down_at_a_time():
    import dataclasses

    from stacks.environment.fleet import rolling_update

    settings = load_settings("fleet")
    spec = dataclasses.replace(_spec("chat"), deploy_timeout_s=100)
    assert rolling_update(settings, spec).max_surge == 1
    tight = settings.model_copy(update={"gpu_pools": [p.model_copy(update={"gpu_limit": 6}) if p.name == "g7e" else p
                                                      for p in settings.gpu_pools]})
    roll = rolling_update(tight, spec)
    assert (roll.max_surge, roll.max_unavailable, roll.timeout_s) == (0, 1, 600)


def _spec(name: str):
    from components.vllm_server import ServeSpec

    fields = {f: None for f in ServeSpec.__dataclass_fields__}
    return ServeSpec(**{**fields, "name": name, "deploy_timeout_s": 1})
