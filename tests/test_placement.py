"""Every pod the stacks create has a node it may run on: each Deployment, Job, DaemonSet and StatefulSet of
every stack's render, and each component a Helm release starts (from its values over the chart's
defaults), fits the system node group or a Karpenter NodePool: its taints tolerated, node selectors and
required affinities met, requests within the instance's allocatable (tests/fixtures/placement/ says how
each is read). A pod that fits nowhere fails here with its name and each node's reason: on a cluster it
would stay Pending, and the `pulumi up` waiting for it would time out."""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.placement.charts import chart_pods
from tests.fixtures.placement.model import (GiB, Node, Pod, allocatable, fitting, node_pools, object_pods,
                                            placement_problems, system_nodes)
from tests.fixtures.stack_renders import stack_names


def cluster(rendered, releases=None) -> tuple[list[Node], list[Pod]]:
    objects = rendered.kubernetes_objects()
    nodes = system_nodes(rendered.resources()) + node_pools(objects)
    pods = object_pods(objects) + chart_pods(rendered.helm_releases() if releases is None else releases)
    return nodes, pods


@pytest.mark.parametrize("stack", stack_names())
def test_every_pod_of_the_stack_fits_a_node_group_or_a_node_pool(all_stacks, stack):
    nodes, pods = cluster(all_stacks[stack])
    assert len(nodes) >= 2 and len(pods) >= 5
    problems = placement_problems(pods, nodes)
    assert not problems, "\n".join(problems)


def where(pods: list[Pod], nodes: list[Node], name: str) -> list[str]:
    (pod,) = [p for p in pods if p.name == name or p.name.startswith(name)]
    return [n.name.split(" (")[0] for n in fitting(pod, nodes, pods)]


def test_the_fleets_controllers_run_on_the_system_nodes_and_its_servers_on_their_pools(all_stacks):
    nodes, pods = cluster(all_stacks["fleet"])
    system = ["system node group cluster-system"]
    for name in ("Deployment vllm/vllm-router-interactive", "Deployment vllm/vllm-router-batch",
                 "Helm release keda (keda 2.20.2): operator",
                 "Helm release keda (keda 2.20.2): metricsServer", "Helm release keda (keda 2.20.2): webhooks",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): prometheus-operator",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): admission webhook create-secret Job",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): admission webhook patch Job",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): prometheus (",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): alertmanager",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): grafana",
                 "Helm release kube-prometheus-stack (kube-prometheus-stack 88.4.0): kube-state-metrics",
                 "Helm release karpenter (karpenter 1.14.1): controller"):
        assert where(pods, nodes, name) == system, name
    # the servers: only their own pool (a Spot pool and its on-demand fallback), never the system nodes
    assert where(pods, nodes, "Deployment vllm/chat") == ["NodePool g7e", "NodePool g7e-on-demand"]
    assert where(pods, nodes, "Deployment vllm/batch") == ["NodePool l40s"]
    # the device plugin on every GPU node, or the nodes never report their GPUs
    plugin = "Helm release nvidia-device-plugin (nvidia-device-plugin 0.20.1): device plugin"
    assert where(pods, nodes, plugin) == ["NodePool g7e", "NodePool g7e-on-demand", "NodePool l40s"]


def test_a_chart_left_with_its_default_tolerations_fits_nowhere_and_is_named(all_stacks):
    rendered = all_stacks["fleet"]
    releases = copy.deepcopy(rendered.helm_releases())
    (keda,) = [r for r in releases if r["name"] == "keda"]
    del keda["values"]["tolerations"]  # what the chart does by default: tolerate nothing
    (kps,) = [r for r in releases if r["name"] == "kube-prometheus-stack"]
    del kps["values"]["prometheusOperator"]["admissionWebhooks"]["patch"]["tolerations"]
    nodes, pods = cluster(rendered, releases)
    problems = placement_problems(pods, nodes)
    assert len(problems) == 5, "\n".join(problems)  # KEDA's three pods, the two certificate Jobs
    (operator,) = [p for p in problems if p.startswith("Helm release keda (keda 2.20.2): operator (pod) fits no")]
    assert "system node group cluster-system (m7i.xlarge): taint CriticalAddonsOnly=true:NoSchedule not tolerated" \
        in operator
    assert "NodePool g7e (g7e.2xlarge, spot): taint nvidia.com/gpu=true:NoSchedule not tolerated, nodeSelector " \
           "vllm-poc/role=system (no such label)" in operator
    assert any("admission webhook patch Job (pod) fits no node group" in p for p in problems)


def test_requests_selectors_and_daemonsets_each_give_their_reason(all_stacks):
    nodes, pods = cluster(all_stacks["dev"])
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    huge = Pod("Deployment vllm/huge", {"tolerations": [gpu]}, {"cpu": 64.0, "nvidia.com/gpu": 1.0})
    (problem,) = placement_problems([huge], nodes)
    assert "NodePool l40s (g6e.2xlarge, on-demand): requests 64 CPU cpu, more than the 7." in problem
    assert "requests 1 nvidia.com/gpu, more than the 0 left there" in problem  # the system nodes have none
    nowhere = Pod("Job vllm/typo", {"nodeSelector": {"vllm-poc/pool": "l40z"}, "tolerations": [gpu]})
    assert "nodeSelector vllm-poc/pool=l40z (has vllm-poc/pool=l40s)" in placement_problems([nowhere], nodes)[0]
    # a DaemonSet that selects GPU nodes without tolerating their taint never runs there
    blind = Pod("DaemonSet kube-system/blind", {"nodeSelector": {"nvidia.com/gpu.present": "true"}}, daemonset=True)
    problems = placement_problems([blind], nodes)
    assert any("selects NodePool l40s (g6e.2xlarge, on-demand) but cannot run there: taint nvidia.com/gpu" in p
               for p in problems)
    # a chart the check cannot read is a failure, never a pass
    with pytest.raises(KeyError, match="no placement model for chart 'mystery'"):
        chart_pods([{"name": "x", "chart": "mystery", "version": "1", "values": {}}])


def test_allocatable_follows_the_eks_reservations():
    node = allocatable(4, 16, 0)  # m7i.xlarge
    assert node["cpu"] == pytest.approx(4 - (0.06 + 0.01 + 2 * 0.005) - 0.15)
    assert node["memory"] / GiB == pytest.approx(16 * 0.925 - (255 + 11 * 110 + 100 + 128) / 1024)
    assert allocatable(48, 384, 4)["nvidia.com/gpu"] == 4
