"""Network reach in the workload namespace: deny by default, then allow what each workload needs.

Every pod in the namespace:
  egress   DNS (CoreDNS pods and the Service range), the EKS Pod Identity agent on its node
           (169.254.170.23:80, where AWS credentials come from), and S3 over HTTPS. S3 is reached
           through the VPC's gateway endpoint, whose routes point at the region's S3 prefix list:
           its CIDRs are read at deploy time (`s3_cidrs`), since a NetworkPolicy takes addresses,
           not a prefix-list id. The same list is recorded in an SSM parameter (for preflight) and
           a ConfigMap (for the Jobs' start check), so a range AWS adds later is noticed
           (stacks/s3_ranges.py).
A vLLM server:
  ingress  its API port, from the namespaces `client_namespaces` names and from its own bench
           Job. /metrics and, with sleep mode, the development endpoints (/sleep, /wake_up,
           /reset_prefix_cache, /collective_rpc) share that port: a NetworkPolicy sees ports,
           not paths, so a sleep-mode server accepts only the namespaces config names for the
           development endpoints.
A bench Job:
  egress   its server's API port (requests and /metrics), the DCGM exporter (9400) and kubelet
           (10250) for telemetry, and, when the sweep reads the Kubernetes API, the API server.
           The mixed-traffic check (bench.compare.mixedTraffic) gets its server's API port only.
Pods labelled `vllm-poc/egress: internet` (a weight sync from the Hugging Face Hub):
  egress   HTTPS to public addresses. The Hub and its CDN have no fixed addresses, so this is as
           narrow as a NetworkPolicy can say it; the label is set only on pods that download.

Enforcement needs a NetworkPolicy engine: the cluster turns on the VPC CNI's (`enableNetworkPolicy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.labels import PART_OF

POD_IDENTITY_AGENT = ("169.254.170.23/32", 80)
DCGM_EXPORTER_PORT = 9400
KUBELET_PORT = 10250
INTERNET_EGRESS_LABEL = ("vllm-poc/egress", "internet")
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# The S3 ranges the policy allows, for pods to compare with where S3 resolves (key `cidrs`).
S3_RANGES_CONFIG_MAP = "vllm-poc-s3-ranges"


def service_cidr(vpc_cidr: str) -> str:
    """The Service range EKS picks when none is given: 172.20.0.0/16 for a VPC in 10.0.0.0/8,
    else 10.100.0.0/16."""
    return "172.20.0.0/16" if vpc_cidr.startswith("10.") else "10.100.0.0/16"


def _first_ip(cidr: str) -> str:
    # The `kubernetes` Service (the API server) takes the first address of the Service range.
    base = cidr.split("/")[0].rsplit(".", 1)[0]
    return f"{base}.1/32"


@dataclass(frozen=True)
class ServerReach:
    name: str
    pod_labels: dict[str, str]
    port: int
    client_namespaces: list[str]
    bench_pod_labels: dict[str, str] | None = None
    startup_pod_labels: dict[str, str] | None = None  # the start-up Job times /sleep and /wake_up
    mixcheck_pod_labels: dict[str, str] | None = None  # the mixed-traffic check sends the plan's mix


@dataclass(frozen=True)
class BenchReach:
    name: str
    pod_labels: dict[str, str]
    server_pod_labels: dict[str, str]
    port: int
    kubernetes_api: bool = False
    telemetry: bool = True  # the DCGM exporter and kubelet (the sweep's per-run samples)


@dataclass(frozen=True)
class NetworkPoliciesArgs:
    namespace: str
    vpc_cidr: str  # where nodes (kubelet, DCGM exporter on the host network) and the API server's ENIs are
    s3_cidrs: list[str]
    s3_prefix_list: str = ""  # the prefix list's name, recorded beside its ranges
    ranges_parameter: str | None = None  # SSM parameter the ranges are recorded in, for preflight
    servers: list[ServerReach] = field(default_factory=list)
    benches: list[BenchReach] = field(default_factory=list)
    # Pods that only talk to the Kubernetes API (the GPU release Jobs): {policy name: pod labels}
    api_clients: dict[str, dict[str, str]] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = ()


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _policy(name: str, namespace: str, pod_selector: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {"podSelector": pod_selector, **spec},
    }


def policy_manifests(args: NetworkPoliciesArgs, s3_cidrs: list[str]) -> list[dict[str, Any]]:
    """Every NetworkPolicy of the namespace, as applied."""
    ns, services = args.namespace, service_cidr(args.vpc_cidr)
    everyone: dict[str, Any] = {}
    policies = [
        _policy("default-deny", ns, everyone, {"policyTypes": ["Ingress", "Egress"]}),
        _policy("allow-dns", ns, everyone, {"policyTypes": ["Egress"], "egress": [{
            "to": [
                {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
                # The kube-dns Service address, for engines that judge the packet before the
                # Service address is translated to a pod's.
                {"ipBlock": {"cidr": services}},
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }]}),
        _policy("allow-aws-credentials-and-s3", ns, everyone, {"policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT[0]}}], "ports": _tcp(POD_IDENTITY_AGENT[1])},
            {"to": [{"ipBlock": {"cidr": cidr}} for cidr in s3_cidrs], "ports": _tcp(443)},
        ]}),
        _policy("allow-internet-https", ns,
                {"matchLabels": {INTERNET_EGRESS_LABEL[0]: INTERNET_EGRESS_LABEL[1]}},
                {"policyTypes": ["Egress"], "egress": [{
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}],
                    "ports": _tcp(443),
                }]}),
    ]
    for server in args.servers:
        sources: list[dict[str, Any]] = []
        if server.client_namespaces:
            sources.append({"namespaceSelector": {"matchExpressions": [{
                "key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(server.client_namespaces)}]}})
        if server.bench_pod_labels:
            sources.append({"podSelector": {"matchLabels": dict(server.bench_pod_labels)}})
        if server.startup_pod_labels:
            sources.append({"podSelector": {"matchLabels": dict(server.startup_pod_labels)}})
        if server.mixcheck_pod_labels:
            sources.append({"podSelector": {"matchLabels": dict(server.mixcheck_pod_labels)}})
        spec: dict[str, Any] = {"policyTypes": ["Ingress"]}
        if sources:
            spec["ingress"] = [{"from": sources, "ports": _tcp(server.port)}]
        policies.append(_policy(f"server-{server.name}", ns, {"matchLabels": dict(server.pod_labels)}, spec))
        if ns in server.client_namespaces:
            # Clients in this namespace are under its default deny too: their way out to the server.
            policies.append(_policy(f"clients-to-{server.name}", ns, everyone, {"policyTypes": ["Egress"], "egress": [{
                "to": [{"podSelector": {"matchLabels": dict(server.pod_labels)}}], "ports": _tcp(server.port)}]}))
    for bench in args.benches:
        egress = [
            {"to": [{"podSelector": {"matchLabels": dict(bench.server_pod_labels)}}], "ports": _tcp(bench.port)},
        ]
        if bench.telemetry:
            egress += [
                # Telemetry: the DCGM exporter (a pod, or on the node's network) and the kubelet.
                {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
                    "app.kubernetes.io/name": "dcgm-exporter"}}}], "ports": _tcp(DCGM_EXPORTER_PORT)},
                {"to": [{"ipBlock": {"cidr": args.vpc_cidr}}], "ports": _tcp(DCGM_EXPORTER_PORT, KUBELET_PORT)},
            ]
        if bench.kubernetes_api:
            # The API server: its ENIs in the cluster's subnets, and the `kubernetes` Service address.
            egress.append({"to": [{"ipBlock": {"cidr": args.vpc_cidr}}, {"ipBlock": {"cidr": _first_ip(services)}}],
                           "ports": _tcp(443)})
        policies.append(_policy(f"bench-{bench.name}", ns, {"matchLabels": dict(bench.pod_labels)},
                                {"policyTypes": ["Egress"], "egress": egress}))
    for name, labels in sorted(args.api_clients.items()):
        # The API server (its ENIs in the cluster's subnets, the `kubernetes` Service address); nothing else.
        policies.append(_policy(name, ns, {"matchLabels": dict(labels)}, {"policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": args.vpc_cidr}}, {"ipBlock": {"cidr": _first_ip(services)}}],
             "ports": _tcp(443)}]}))
    return policies


class NetworkPolicies(pulumi.ComponentResource):
    """The namespace's NetworkPolicies (see the module docstring)."""

    policies: list[k8s.networking.v1.NetworkPolicy]

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:network:NetworkPolicies", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.manifests = policy_manifests(args, sorted(args.s3_cidrs))
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{manifest['metadata']['name']}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=child,
            )
            for manifest in self.manifests
        ]
        cidrs = ",".join(sorted(args.s3_cidrs))
        self.s3_ranges = k8s.core.v1.ConfigMap(
            f"{name}-s3-ranges",
            metadata={"name": S3_RANGES_CONFIG_MAP, "namespace": args.namespace, "labels": dict(PART_OF)},
            data={"cidrs": cidrs, "prefixList": args.s3_prefix_list},
            opts=child,
        )
        if args.ranges_parameter:
            aws.ssm.Parameter(
                f"{name}-s3-ranges-record",
                name=args.ranges_parameter,
                type="String",
                insecure_value=cidrs,  # not a secret: reviewable in the render and the console
                description=f"S3 ranges the {args.namespace} NetworkPolicy allows, copied from "
                            f"{args.s3_prefix_list} at the last pulumi up",
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"policies": [m["metadata"]["name"] for m in self.manifests]})
