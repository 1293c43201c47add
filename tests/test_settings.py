"""Stack config -> settings: defaults, and every refusal naming its key and the fix."""

from __future__ import annotations

import dataclasses
import re

import pytest

from stacks import catalog
from stacks.loader import load_settings
from stacks.settings import ConfigError, settings_from_config

POOL = {"name": "l40s", "instanceType": "g6e.2xlarge", "gpuLimit": 4}


def settings(**values):
    config = {"aws:region": "ap-northeast-2"}
    config.update({f"vllm-poc:{k}": v for k, v in values.items()})
    return settings_from_config(config, stack="unit")


def problems(**values) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        settings(**values)
    return caught.value.problems


def test_dev_stack_file_is_valid_and_in_seoul():
    dev = load_settings("dev")
    assert dev.region == "ap-northeast-2"
    assert dev.cluster.kubernetes_version in catalog.EKS_VERSIONS
    assert {p.instance_type for p in dev.gpu_pools} >= {"g6e.2xlarge", "g6e.12xlarge", "g7e.2xlarge"}


def test_defaults_fill_what_is_not_set():
    s = settings(gpuPools=[POOL])
    assert s.region == "ap-northeast-2"
    assert s.cluster.kubernetes_version == "1.36"
    assert s.network.create_vpc and s.network.availability_zone_count == 2
    pool = s.gpu_pools[0]
    assert pool.capacity_types == ["on-demand"]
    assert pool.use_raid0  # g6e.2xlarge has 450 GB of instance store
    assert pool.root_volume == 60


def test_structured_values_arrive_as_json_text_from_pulumi():
    s = settings_from_config(
        {"vllm-poc:gpuPools": '[{"name": "a", "instanceType": "g7e.2xlarge", "gpuLimit": 1}]'}, stack="t"
    )
    assert s.gpu_pools[0].instance.gpu_memory_gib == 96


def test_misspelt_instance_type_suggests_the_right_one():
    (problem,) = problems(gpuPools=[{**POOL, "instanceType": "g6e.12xlarg"}])
    assert problem.startswith("vllm-poc:gpuPools[0].instanceType:")
    assert "'g6e.12xlarge'" in problem


def test_unknown_instance_type_lists_known_ones():
    (problem,) = problems(gpuPools=[{**POOL, "instanceType": "p9.huge"}])
    assert "unknown GPU instance type 'p9.huge'" in problem and "g7e.2xlarge" in problem


def test_raid0_on_an_instance_type_without_instance_store(monkeypatch):
    # Every g6e/g7e size has NVMe; an EBS-only GPU type shows the refusal.
    ebs_only = dataclasses.replace(catalog.GPU_INSTANCE_TYPES["g6e.2xlarge"], name="g6e.ebsonly", nvme_gb=0)
    monkeypatch.setitem(catalog.GPU_INSTANCE_TYPES, "g6e.ebsonly", ebs_only)
    (problem,) = problems(gpuPools=[{**POOL, "instanceType": "g6e.ebsonly", "raid0": True}])
    assert problem.startswith("vllm-poc:gpuPools[0]:") and "no instance-store NVMe" in problem
    # left unset, RAID0 simply stays off on such a type
    assert settings(gpuPools=[{**POOL, "instanceType": "g6e.ebsonly"}]).gpu_pools[0].use_raid0 is False


def test_gpu_limit_below_one_instance():
    (problem,) = problems(gpuPools=[{**POOL, "instanceType": "g6e.12xlarge", "gpuLimit": 2}])
    assert "gpuPools[0]" in problem and "4 GPUs" in problem and "at least 4" in problem


def test_duplicate_pool_names():
    (problem,) = problems(gpuPools=[POOL, {**POOL, "instanceType": "g7e.2xlarge"}])
    assert problem == ("vllm-poc:gpuPools[1].name: pool name 'l40s' is used more than once; names must be unique")


def test_fallback_name_colliding_with_a_pool():
    spot = {"name": "g7e", "instanceType": "g7e.2xlarge", "gpuLimit": 2, "capacityTypes": ["spot"],
            "onDemandFallback": True}
    (problem,) = problems(gpuPools=[spot, {**POOL, "name": "g7e-on-demand"}])
    assert "gpuPools[0].onDemandFallback" in problem


def test_on_demand_fallback_needs_a_spot_pool():
    (problem,) = problems(gpuPools=[{**POOL, "onDemandFallback": True}])
    assert "capacityTypes: [spot]" in problem


def test_existing_subnets_without_vpc_id():
    (problem,) = problems(network={"privateSubnets": {"ap-northeast-2a": "subnet-0123456789abcdef0",
                                                      "ap-northeast-2c": "subnet-0123456789abcdef1"}})
    assert problem.startswith("vllm-poc:network:") and "need vpcId" in problem


def test_existing_subnets_in_one_availability_zone():
    (problem,) = problems(network={"vpcId": "vpc-0123456789abcdef0",
                                   "privateSubnets": {"ap-northeast-2a": "subnet-0123456789abcdef0"}})
    assert "at least 2 AZs" in problem


def test_vpc_id_without_private_subnets():
    (problem,) = problems(network={"vpcId": "vpc-0123456789abcdef0"})
    assert "needs privateSubnets" in problem


def test_existing_network_is_accepted_with_two_zones():
    s = settings(network={"vpcId": "vpc-0123456789abcdef0",
                          "privateSubnets": {"ap-northeast-2a": "subnet-0123456789abcdef0",
                                             "ap-northeast-2c": "subnet-0123456789abcdef1"}})
    assert not s.network.create_vpc


def test_kubernetes_version_eks_does_not_offer():
    (problem,) = problems(cluster={"kubernetesVersion": "1.29"})
    assert problem.startswith("vllm-poc:cluster.kubernetesVersion:")
    assert "1.36" in problem  # says what would be accepted


def test_misspelt_key_is_refused_not_ignored():
    (problem,) = problems(cluster={"kubernetesVerison": "1.36"})
    assert problem.startswith("vllm-poc:cluster.kubernetesVerison:") and "unknown key" in problem


def test_unknown_top_level_key():
    (problem,) = problems(gpuPool=[POOL])
    assert problem.startswith("vllm-poc:gpuPool:") and "vllm-poc:gpuPools" in problem


def test_region_must_be_a_region():
    with pytest.raises(ConfigError) as caught:
        settings_from_config({"aws:region": "seoul"}, stack="t")
    assert caught.value.problems[0].startswith("aws:region:")


@pytest.mark.parametrize(
    ("values", "key", "fragment"),
    [
        ({"gpuPools": [{**POOL, "capacityTypes": ["spot", "spot"]}]}, "gpuPools[0].capacityTypes", "at most once"),
        ({"gpuPools": [{**POOL, "capacityTypes": ["reserved"]}]}, "gpuPools[0].capacityTypes[0]", "'on-demand'"),
        ({"gpuPools": [{**POOL, "weight": 0}]}, "gpuPools[0].weight", "greater than or equal to 1"),
        ({"gpuPools": [{**POOL, "name": "L40S"}]}, "gpuPools[0].name", "DNS label"),
        ({"gpuPools": [{**POOL, "expireAfter": "30 days"}]}, "gpuPools[0].expireAfter", "duration"),
        ({"network": {"vpcCidr": "10.0.0.0/8"}}, "network.vpcCidr", "/16 to /20"),
        ({"network": {"availabilityZoneCount": 1}}, "network.availabilityZoneCount", "greater than or equal to 2"),
        ({"systemNodes": {"instanceTypes": ["g6e.2xlarge"]}}, "systemNodes.instanceTypes", "general-purpose"),
        ({"systemNodes": {"minSize": 3, "desiredSize": 2}}, "systemNodes", "minSize <= desiredSize"),
        ({"cluster": {"name": "has_underscore"}}, "cluster.name", "usable cluster name"),
        ({"cluster": {"adminRoleArns": ["arn:aws:iam::123:user/x"]}}, "cluster.adminRoleArns", "role ARN"),
        ({"storage": {"teardown": "keep"}}, "storage.teardown", "'destroy'"),
        ({"storage": {"kmsKeyArn": "alias/x"}}, "storage.kmsKeyArn", "KMS key ARN"),
        ({"cluster": {"logRetentionDays": 10}}, "cluster.logRetentionDays", "CloudWatch Logs retention"),
        ({"network": {"availabilityZones": ["ap-northeast-2a"]}}, "network.availabilityZones", "2 to 4 distinct"),
        ({"network": {"availabilityZones": ["zone-a", "zone-b"]}}, "network.availabilityZones", "not availability zone"),
        ({"weights": {"source": "laptop"}}, "weights.source", "'stage-weights'"),
        ({"weights": {"revisions": {"not a repo": "main"}}}, "weights.revisions", "Hugging Face repo id"),
    ],
)
def test_refusals_name_the_key(values, key, fragment):
    found = problems(**values)
    assert any(p.startswith(f"vllm-poc:{key}:") and fragment in p for p in found), found


def test_every_problem_is_reported_at_once():
    found = problems(
        cluster={"kubernetesVersion": "1.20"},
        gpuPools=[{**POOL, "instanceType": "g6e.2xlarg"}],
        storage={"teardown": "keep"},
    )
    keys = {re.match(r"(vllm-poc:[^:]+):", p).group(1) for p in found}
    assert keys == {"vllm-poc:cluster.kubernetesVersion", "vllm-poc:gpuPools[0].instanceType",
                    "vllm-poc:storage.teardown"}
