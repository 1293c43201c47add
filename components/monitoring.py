"""Monitoring: an in-cluster Prometheus, Alertmanager and Grafana (the kube-prometheus-stack chart)
scraping the vLLM servers and the DCGM exporter, with the SLO's rules and the fleet dashboard.

In-cluster rather than Amazon Managed Service for Prometheus: KEDA's triggers query it at every
polling interval from inside the cluster with no SigV4 signing or extra IAM, the same rule file that
`promtool` checks here is what it loads, and nothing leaves the VPC (docs/serving.md, Fleet).

Alerts: the chart routes every alert to its 'null' receiver; here the fleet's alerts go to the receiver
the stack file names (`vllm-poc:fleet.alerts`), a webhook or a Slack incoming webhook whose URL, a Pulumi
secret, reaches Alertmanager in a Secret of its own (RECEIVER_SECRET), never in the chart's values.

Scrape jobs (plain Prometheus scrape configs, no ServiceMonitor objects): `vllm`, every server pod
of the workload namespace on its API port's /metrics, labelled `namespace`, `server` (the
Deployment's instance label), `traffic_class` and `pod`; `dcgm`, the DCGM exporter pods on every GPU
node. Rules come in as the chart's additionalPrometheusRulesMap; the dashboard as a ConfigMap the
chart's Grafana sidecar loads (label grafana_dashboard). A NetworkPolicy lets Prometheus, and only
it, reach the servers' port past the namespace's default deny.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import system_placement
from components.labels import PART_OF

REPOSITORY = "https://prometheus-community.github.io/helm-charts"
FULLNAME = "kps"
PROMETHEUS_PORT = 9090
DASHBOARD_LABEL = "grafana_dashboard"


def prometheus_url(namespace: str) -> str:
    """Where the chart's Prometheus answers inside the cluster (fullnameOverride: kps)."""
    return f"http://{FULLNAME}-prometheus.{namespace}.svc.cluster.local:{PROMETHEUS_PORT}"


@dataclass(frozen=True)
class AlertReceiver:
    """Where the SLO alerts go (stacks/settings/alerts.py): a named webhook or Slack incoming webhook."""

    name: str
    kind: str  # webhook | slack
    url: pulumi.Input[str]  # a Pulumi secret: it carries the receiver's token
    channel: str | None = None
    repeat_interval: str = "4h"
    send_resolved: bool = True


# The receiver's URL: a Secret of the monitoring namespace that the operator mounts into Alertmanager
# (alertmanagerSpec.secrets, at /etc/alertmanager/secrets/<name>/); the configuration names the file, so
# the chart's values hold no secret and stay readable in a render and a preview.
RECEIVER_SECRET = "alertmanager-receiver"
RECEIVER_URL_KEY = "url"
RECEIVER_URL_FILE = f"/etc/alertmanager/secrets/{RECEIVER_SECRET}/{RECEIVER_URL_KEY}"
# The fleet's alerts (bench/common/fleet_queries.py) are all named Vllm*: they go to the receiver; the
# chart's own (Kubernetes, Prometheus, the Watchdog that always fires) stay with the 'null' receiver.
SLO_ALERTS = 'alertname =~ "Vllm.+"'


def alertmanager_config(receiver: AlertReceiver) -> dict[str, Any]:
    """Alertmanager's whole configuration (every top-level key, so Helm's merge with the chart's default
    keeps nothing of it): the fleet's alerts to the stack's receiver, the rest to 'null'. The URL is read
    from the mounted Secret (`url_file`: Alertmanager 0.26 and later; the chart runs 0.34)."""
    if receiver.kind == "slack":
        target = {"slack_configs": [{
            "api_url_file": RECEIVER_URL_FILE, "send_resolved": receiver.send_resolved,
            **({"channel": receiver.channel} if receiver.channel else {}),
            "title": "{{ .Status | toUpper }}: {{ .CommonLabels.alertname }} on {{ .CommonLabels.server }}",
            "text": "{{ range .Alerts }}{{ .Annotations.summary }} {{ .Annotations.description }} {{ end }}",
        }]}
    else:
        target = {"webhook_configs": [{"url_file": RECEIVER_URL_FILE, "send_resolved": receiver.send_resolved}]}
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "null",
            "group_by": ["alertname", "namespace", "server"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "12h",
            "routes": [
                {"receiver": receiver.name, "matchers": [SLO_ALERTS], "repeat_interval": receiver.repeat_interval},
                {"receiver": "null", "matchers": ['alertname = "Watchdog"']},
            ],
        },
        "receivers": [{"name": "null"}, {"name": receiver.name, **target}],
        "inhibit_rules": [],
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }


@dataclass(frozen=True)
class MonitoringArgs:
    chart_version: str
    namespace: str
    workload_namespace: str
    server_port: int
    server_pod_labels: dict[str, str]
    rules: dict[str, Any]  # a Prometheus rule file: {"groups": [...]}
    dashboard: dict[str, Any]  # Grafana dashboard JSON
    kubernetes_version: str
    alerts: AlertReceiver
    depends_on: list[pulumi.Resource] = field(default_factory=list)


def _label(name: str) -> str:
    """A pod label as Kubernetes service discovery exposes it."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in name)


def scrape_configs(workload_namespace: str, server_port: int, server_pod_labels: dict[str, str]) -> list[dict]:
    keep = [{"source_labels": [_label(k)], "regex": v, "action": "keep"} for k, v in sorted(server_pod_labels.items())
            if k != "app.kubernetes.io/instance"]
    return [
        {
            "job_name": "vllm",
            "scrape_interval": "15s",
            "metrics_path": "/metrics",
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [workload_namespace]}}],
            "relabel_configs": keep + [
                {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(server_port),
                 "action": "keep"},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": [_label("app.kubernetes.io/instance")], "target_label": "server"},
                {"source_labels": [_label("vllm-poc/traffic-class")], "target_label": "traffic_class"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            ],
        },
        {
            "job_name": "dcgm",
            "scrape_interval": "15s",
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": ["kube-system"]}}],
            "relabel_configs": [
                {"source_labels": [_label("app.kubernetes.io/name")], "regex": "dcgm-exporter", "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": "9400", "action": "keep"},
                {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
            ],
        },
    ]


def chart_values(args: MonitoringArgs) -> dict:
    # Every pod the chart starts goes to the system nodes: each component reads its own nodeSelector
    # and tolerations (the chart's defaults tolerate no taint, and every node here has one), including
    # the admission webhook's certificate Jobs, which Helm runs before and after the install.
    placed = system_placement()
    return {
        "fullnameOverride": FULLNAME,
        # Node metrics are not what the fleet is judged by; the node exporter needs host access.
        "nodeExporter": {"enabled": False},
        "prometheusOperator": {**placed, "admissionWebhooks": {"patch": dict(placed)}},
        "prometheus": {"prometheusSpec": {
            **placed,
            "retention": "15d",
            "scrapeInterval": "15s",
            "evaluationInterval": "30s",
            "additionalScrapeConfigs": scrape_configs(args.workload_namespace, args.server_port,
                                                      args.server_pod_labels),
            "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        }},
        "alertmanager": {"alertmanagerSpec": {**placed, "secrets": [RECEIVER_SECRET]},
                         "config": alertmanager_config(args.alerts)},
        "kube-state-metrics": dict(placed),
        "additionalPrometheusRulesMap": {"vllm-slo": args.rules},
        "grafana": {**placed, "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL,
                                                         "searchNamespace": args.namespace}}},
    }


def network_policy(args: MonitoringArgs) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "prometheus-scrapes-servers", "namespace": args.workload_namespace, "labels": PART_OF},
        "spec": {
            "podSelector": {"matchLabels": {k: v for k, v in args.server_pod_labels.items()
                                            if k != "app.kubernetes.io/instance"}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": args.namespace}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
                "ports": [{"protocol": "TCP", "port": args.server_port}],
            }],
        },
    }


class Monitoring(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    url: str

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:fleet:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            # The chart's Grafana and operator run as non-root but not all at `restricted`.
            metadata={"name": args.namespace, "labels": {
                **PART_OF, "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/enforce-version": f"v{args.kubernetes_version}"}},
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        # Before the release: the operator mounts it into Alertmanager, which reads the URL from it.
        self.receiver_secret = k8s.core.v1.Secret(
            f"{name}-alert-receiver",
            metadata={"name": RECEIVER_SECRET, "namespace": args.namespace, "labels": dict(PART_OF)},
            type="Opaque",
            string_data={RECEIVER_URL_KEY: pulumi.Output.secret(args.alerts.url)},
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.namespace])),
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack",
            name="kube-prometheus-stack",
            chart="kube-prometheus-stack",
            version=args.chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=args.namespace,
            values=chart_values(args),
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.namespace, self.receiver_secret])),
        )
        self.dashboard = k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata={"name": "vllm-poc-fleet-dashboard", "namespace": args.namespace,
                      "labels": {DASHBOARD_LABEL: "1", **PART_OF}},
            data={"vllm-poc-fleet.json": json.dumps(args.dashboard, indent=1, sort_keys=True)},
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.namespace])),
        )
        policy = network_policy(args)
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-scrape-servers", metadata=policy["metadata"], spec=policy["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        self.url = prometheus_url(args.namespace)
        self.register_outputs({"prometheus": self.url})
