"""Network reach in the workload namespace, judged by a small NetworkPolicy evaluator.

The evaluator follows the NetworkPolicy semantics: a pod selected by no policy of a direction is
open in that direction; a selected pod allows only what some rule of a selecting policy allows.
Traffic flows when the source's egress and the destination's ingress both allow it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from components.network_policy import service_cidr
from tests.fixtures.pulumi_stack import render_with

NS_LABEL = "kubernetes.io/metadata.name"
S3 = "192.0.2.10"  # inside the offline render's stand-in S3 prefix list


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.40.1.7"


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        present, value = expr["key"] in labels, labels.get(expr["key"])
        op = expr["operator"]
        if (op == "In" and value not in expr["values"]) or (op == "NotIn" and value in expr["values"]) \
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def _peer_matches(peer: dict[str, Any], here: str, other: Pod | str) -> bool:
    if "ipBlock" in peer:
        if isinstance(other, Pod):
            return False  # pod IPs in these tests are never named by an ipBlock
        ip = ipaddress.ip_address(other)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except", []))
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], {NS_LABEL: other.namespace}):
            return False
    elif other.namespace != here:
        return False
    return _selects(peer.get("podSelector"), other.labels)


def _allowed(policies, pod: Pod, direction: str, other: Pod | str, port: int, protocol: str) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                 and direction in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports):
                continue
            peers = rule.get(peers_key)
            if not peers or any(_peer_matches(peer, pod.namespace, other) for peer in peers):
                return True
    return False


def can_reach(policies, src: Pod, dst: Pod | str, port: int, protocol: str = "TCP") -> bool:
    if not _allowed(policies, src, "Egress", dst, port, protocol):
        return False
    return not isinstance(dst, Pod) or _allowed(policies, dst, "Ingress", src, port, protocol)


def pods(rendered) -> dict[str, Pod]:
    """Server and bench pods of the render, by object name."""
    found = {}
    for obj in rendered.kubernetes_objects():
        if obj["kind"] in ("Deployment", "Job"):
            found[obj["metadata"]["name"]] = Pod(obj["metadata"]["namespace"],
                                                 obj["spec"]["template"]["metadata"]["labels"])
    return found


def policies_of(rendered) -> list[dict[str, Any]]:
    return rendered.k8s("NetworkPolicy")


def test_default_deny_then_explicit_allows(dev):
    policies = policies_of(dev)
    deny = next(p for p in policies if p["metadata"]["name"] == "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    stranger = Pod("vllm", {"app": "debug"})
    assert not can_reach(policies, stranger, "203.0.113.9", 443)
    assert not can_reach(policies, stranger, "169.254.169.254", 80)  # node metadata
    assert can_reach(policies, stranger, S3, 443)
    assert can_reach(policies, stranger, "169.254.170.23", 80)  # Pod Identity agent
    assert can_reach(policies, stranger, "172.20.0.10", 53, "UDP")  # kube-dns Service


def test_bench_reaches_its_server_and_telemetry_and_nothing_else(dev):
    policies, found = policies_of(dev), pods(dev)
    server = found["gemma-fp8"]
    bench = next(p for name, p in found.items() if name.startswith("bench-"))
    assert can_reach(policies, bench, server, 8000)
    assert not can_reach(policies, bench, server, 9000)
    assert can_reach(policies, bench, Pod("gpu-operator", {"app.kubernetes.io/name": "dcgm-exporter"}), 9400)
    assert can_reach(policies, bench, "10.40.3.4", 10250)  # kubelet on a node
    assert not can_reach(policies, bench, "203.0.113.9", 443)
    assert not can_reach(policies, server, bench, 8000)


def test_servers_take_clients_only_from_the_configured_namespaces(dev):
    policies, server = policies_of(dev), pods(dev)["gemma-fp8"]
    assert can_reach(policies, Pod("vllm", {"app": "client"}), server, 8000)
    assert not can_reach(policies, Pod("default", {"app": "client"}), server, 8000)
    assert not can_reach(policies, server, "203.0.113.9", 443)  # no internet: weights come from S3

    rendered = render_with("dev", security={"clientNamespaces": ["apps"]})
    policies, found = policies_of(rendered), pods(rendered)
    server = found["gemma-fp8"]
    bench = next(p for name, p in found.items() if name.startswith("bench-"))
    assert can_reach(policies, Pod("apps", {"app": "client"}), server, 8000)
    assert not can_reach(policies, Pod("vllm", {"app": "client"}), server, 8000)
    assert can_reach(policies, bench, server, 8000)  # its bench always may


def test_sleep_mode_server_only_from_the_dev_endpoint_namespaces():
    def config(security: dict) -> Any:
        servers = [{"name": "gemma-fp8", "pool": "l40s", "model": "fp8-dynamic", "trafficClass": "batch",
                    "sleepMode": True}]
        return render_with("dev", servers=servers, security=security)

    rendered = config({})
    policies, found = policies_of(rendered), pods(rendered)
    server = found["gemma-fp8"]
    bench = next(p for name, p in found.items() if name.startswith("bench-"))
    assert not can_reach(policies, Pod("vllm", {"app": "client"}), server, 8000)
    assert can_reach(policies, bench, server, 8000)

    rendered = config({"devEndpointNamespaces": ["ops"], "clientNamespaces": ["vllm", "apps"]})
    policies = policies_of(rendered)
    server = pods(rendered)["gemma-fp8"]
    assert can_reach(policies, Pod("ops", {}), server, 8000)
    assert not can_reach(policies, Pod("apps", {}), server, 8000)


def test_internet_https_only_for_pods_labelled_for_it(dev):
    policies = policies_of(dev)
    downloader = Pod("vllm", {"vllm-poc/egress": "internet"})
    assert can_reach(policies, downloader, "203.0.113.9", 443)
    assert not can_reach(policies, downloader, "203.0.113.9", 80)
    assert not can_reach(policies, downloader, "10.40.3.4", 443)  # private ranges stay closed
    assert not can_reach(policies, downloader, "169.254.169.254", 443)


def test_s3_cidrs_come_from_the_prefix_list(dev):
    policy = next(p for p in policies_of(dev) if p["metadata"]["name"] == "allow-aws-credentials-and-s3")
    cidrs = [peer["ipBlock"]["cidr"] for peer in policy["spec"]["egress"][1]["to"]]
    assert cidrs == ["192.0.2.0/24", "198.51.100.0/24"]  # the mock's prefix list


@pytest.mark.parametrize("vpc, services", [("10.40.0.0/16", "172.20.0.0/16"), ("172.31.0.0/16", "10.100.0.0/16")])
def test_service_cidr_follows_eks_default(vpc, services):
    assert service_cidr(vpc) == services
