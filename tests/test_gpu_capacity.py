"""GPU capacity: EC2NodeClasses and NodePools per pool, device plugin, teardown ordering."""

from __future__ import annotations

import pytest

from components.gpu_capacity import POOL_LABEL
from stacks.versions import pins
from tests.fixtures.k8s.schemas import validate_object


def by_name(objects):
    return {o["metadata"]["name"]: o for o in objects}


@pytest.fixture(scope="module")
def classes(dev):
    return by_name(dev.k8s("EC2NodeClass"))


@pytest.fixture(scope="module")
def pools(dev):
    return by_name(dev.k8s("NodePool"))


def requirement(pool, key):
    (req,) = [r for r in pool["spec"]["template"]["spec"]["requirements"] if r["key"] == key]
    return req


def test_raid0_on_the_nvme_pools(classes):
    for name in ("l40s-x4", "g7e", "l40s"):
        assert classes[name]["spec"]["instanceStorePolicy"] == "RAID0"


def test_raid0_can_be_turned_off_and_the_root_volume_grows():
    from tests.fixtures.pulumi_stack import render_with

    rendered = render_with(gpuPools=[{"name": "ebs", "instanceType": "g6e.2xlarge", "gpuLimit": 1, "raid0": False}],
                           servers=None, bench=None)
    (node_class,) = rendered.k8s("EC2NodeClass")
    assert "instanceStorePolicy" not in node_class["spec"]
    assert node_class["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "200Gi"


def test_node_class_basics(classes, dev):
    node_role = dev.one("aws:iam/role:Role", "karpenter-node").outputs["name"]
    for node_class in classes.values():
        spec = node_class["spec"]
        assert spec["amiSelectorTerms"] == [{"alias": f"al2023@{pins().al2023_ami_release}"}]
        assert "latest" not in spec["amiSelectorTerms"][0]["alias"]
        assert spec["role"] == node_role
        assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert spec["metadataOptions"]["httpTokens"] == "required"
        (root,) = spec["blockDeviceMappings"]
        assert root["rootVolume"] is True and root["ebs"]["encrypted"] is True
        assert spec["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "vllm-poc-dev"}}]
        assert spec["securityGroupSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "vllm-poc-dev"}}]
        assert spec["tags"]["vllm-poc/stack"] == "dev"


def test_instance_types_and_capacity(pools):
    expected = {
        "l40s": ("g6e.2xlarge", ["on-demand"]),
        "l40s-x4": ("g6e.12xlarge", ["on-demand"]),
        "g7e": ("g7e.2xlarge", ["spot"]),
        "g7e-on-demand": ("g7e.2xlarge", ["on-demand"]),
    }
    assert set(pools) == set(expected)
    for name, (instance_type, capacity) in expected.items():
        assert requirement(pools[name], "node.kubernetes.io/instance-type")["values"] == [instance_type]
        assert requirement(pools[name], "karpenter.sh/capacity-type")["values"] == capacity


def test_g7e_spot_falls_back_to_a_lower_weight_on_demand_pool_with_the_same_label(pools):
    spot, fallback = pools["g7e"], pools["g7e-on-demand"]
    assert fallback["spec"]["weight"] < spot["spec"]["weight"]
    labels = lambda p: p["spec"]["template"]["metadata"]["labels"]  # noqa: E731
    assert labels(spot)[POOL_LABEL] == labels(fallback)[POOL_LABEL] == "g7e"
    assert spot["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "g7e"


def test_gpu_taint_labels_limits_and_disruption(pools):
    for name, pool in pools.items():
        template = pool["spec"]["template"]
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in template["spec"]["taints"]
        assert template["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
        assert template["metadata"]["labels"][POOL_LABEL] == name.removesuffix("-on-demand")
        # dev runs no benchmark on g7e: its on-demand fallback gives way to Spot (below)
        assert pool["spec"]["disruption"]["consolidationPolicy"] == (
            "WhenEmptyOrUnderutilized" if name == "g7e-on-demand" else "WhenEmpty")
        assert pool["spec"]["disruption"]["consolidateAfter"] == "10m"
        assert template["spec"]["expireAfter"] == "720h"
        assert template["spec"]["nodeClassRef"]["group"] == "karpenter.k8s.aws"
    assert pools["l40s"]["spec"]["limits"] == {"nvidia.com/gpu": "4"}
    assert pools["l40s-x4"]["spec"]["limits"] == {"nvidia.com/gpu": "8"}


def test_device_plugin_chart_is_pinned_and_lands_on_gpu_nodes(dev):
    (plugin,) = [r for r in dev.helm_releases() if r["name"] == "nvidia-device-plugin"]
    assert plugin["version"] == pins().nvidia_device_plugin_chart
    assert plugin["repository"] == "https://nvidia.github.io/k8s-device-plugin"
    assert plugin["values"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in plugin["values"]["tolerations"]


def test_node_pools_and_classes_are_deleted_first_and_wait_for_karpenter(dev):
    for registration in dev.of_type("kubernetes:karpenter.sh/v1:NodePool"):
        names = {d.rsplit("::", 1)[-1] for d in registration.dependencies}
        assert {"karpenter", "karpenter-crd"} <= names
        assert any(n.endswith("-class") for n in names), "NodePool must depend on its EC2NodeClass"
        assert registration.options["customTimeouts"]["delete"] == "30m"
    for registration in dev.of_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"):
        names = {d.rsplit("::", 1)[-1] for d in registration.dependencies}
        assert {"karpenter", "karpenter-crd"} <= names
        assert registration.options["customTimeouts"]["delete"] == "30m"


def _budgets_for(pool: dict, reason: str) -> list[str]:
    """The `nodes` of every budget that applies to a disruption reason (no `reasons`: all of them)."""
    return [b["nodes"] for b in pool["spec"]["disruption"].get("budgets", [{"nodes": "10%"}])
            if reason in b.get("reasons", [reason])]


def test_every_gpu_node_pool_of_every_stack_allows_no_drift_or_underutilized_disruption(all_stacks, karpenter_crds):
    # A drifting `up` (an AMI bump, a tag, a subnet change) must never evict a running server and its
    # sweep: terminationGracePeriod overrides do-not-disrupt, so the budgets hold drift at 0 nodes. The one
    # exception to "no Underutilized": the on-demand fallback of a pool without benchmark targets, which
    # gives way to Spot one node at a time (the next test).
    seen = 0
    for stack, rendered in all_stacks.items():
        for pool in rendered.k8s("NodePool"):
            name = f"{stack}/{pool['metadata']['name']}"
            assert validate_object(pool, crds=karpenter_crds).errors == [], name
            gives_way = pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
            label = pool["spec"]["template"]["metadata"]["labels"]["vllm-poc/pool"]
            benchmarked = [d for d in rendered.k8s("Deployment") if d["spec"]["template"]["metadata"].get(
                "annotations", {}).get("karpenter.sh/do-not-disrupt") == "true"
                and d["spec"]["template"]["spec"].get("nodeSelector", {}).get("vllm-poc/pool") == label]
            assert not gives_way or (pool["metadata"]["name"].endswith("-on-demand") and not benchmarked), name
            for reason in ("Drifted",) if gives_way else ("Drifted", "Underutilized"):
                allowed = _budgets_for(pool, reason)
                # Karpenter takes the most restrictive budget that applies: one of 0 holds the reason.
                assert "0" in allowed, f"{name}: {reason} disruption is allowed ({allowed})"
            assert _budgets_for(pool, "Empty") and "0" not in _budgets_for(pool, "Empty"), \
                f"{name}: an empty GPU node must still be removed"
            # The grace period stays: it bounds a drain at expiry and at teardown.
            assert pool["spec"]["template"]["spec"]["terminationGracePeriod"] == "1h", name
            seen += 1
    assert seen >= len(all_stacks)


def test_the_fleets_on_demand_fallback_gives_way_to_spot_and_a_benchmarks_never_does(all_stacks):
    """The fleet's g7e replicas land on on-demand g7e when Spot is short; once Spot is back, Karpenter
    consolidates those nodes (underutilized: a cheaper Spot node of the pool takes the replica), one node
    at a time, the server's PodDisruptionBudget holding the pool to one replica moving. The g7e stack runs
    its benchmark targets on the same kind of pool: there the fallback stays WhenEmpty, so a sweep is never
    moved (its pods are do-not-disrupt as well)."""
    fleet = {p["metadata"]["name"]: p for p in all_stacks["fleet"].k8s("NodePool")}
    fallback = fleet["g7e-on-demand"]["spec"]["disruption"]
    assert fallback["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert _budgets_for(fleet["g7e-on-demand"], "Underutilized") == ["1"]
    assert _budgets_for(fleet["g7e-on-demand"], "Drifted") == ["0"]
    assert fleet["g7e"]["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"  # Spot stays where it is
    assert {p["metadata"]["name"] for p in all_stacks["fleet"].k8s("PodDisruptionBudget")} == {"chat", "batch"}
    g7e = {p["metadata"]["name"]: p for p in all_stacks["g7e"].k8s("NodePool")}
    targets = {d["metadata"]["name"] for d in all_stacks["g7e"].k8s("Deployment")
               if d["spec"]["template"]["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == "true"}
    assert "g7e" in {d["spec"]["template"]["spec"]["nodeSelector"]["vllm-poc/pool"]
                     for d in all_stacks["g7e"].k8s("Deployment") if d["metadata"]["name"] in targets}
    assert g7e["g7e-on-demand"]["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert _budgets_for(g7e["g7e-on-demand"], "Underutilized") == ["0"]


def test_the_drift_budget_check_can_fail():
    pool = {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}}
    assert _budgets_for(pool, "Drifted") == ["1"]
    pool = {"spec": {"disruption": {}}}
    assert _budgets_for(pool, "Drifted") == ["10%"]
