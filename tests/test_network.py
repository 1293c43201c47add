"""Network: a new VPC across AZs with an S3 gateway endpoint, or an existing VPC by id."""

from __future__ import annotations

import ipaddress

from components.network import DISCOVERY_TAG, subnet_cidrs
from tests.fixtures.pulumi_stack import render_with

SUBNET = "aws:ec2/subnet:Subnet"


def test_subnets_never_overlap_and_stay_inside_the_vpc():
    for cidr, letters in (("10.40.0.0/16", "ab"), ("10.40.0.0/16", "abcd"), ("172.20.0.0/20", "aceg")):
        plan = subnet_cidrs(cidr, [f"ap-northeast-2{z}" for z in letters])
        nets = [ipaddress.ip_network(n) for pair in plan.values() for n in pair]
        assert len(plan) == len(letters)
        assert all(n.subnet_of(ipaddress.ip_network(cidr)) for n in nets)
        assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])


def test_a_zone_keeps_its_cidrs_whatever_the_other_zones():
    # Keyed by the zone's letter, not its place in the list: adding zone a in front of b and c moves
    # neither b nor c (a positional plan would give a the CIDRs b had).
    before = subnet_cidrs("10.40.0.0/16", ["ap-northeast-2b", "ap-northeast-2c"])
    after = subnet_cidrs("10.40.0.0/16", ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"])
    assert {z: after[z] for z in before} == before
    assert subnet_cidrs("10.40.0.0/16", ["ap-northeast-2c"]) == {"ap-northeast-2c": before["ap-northeast-2c"]}


def test_new_vpc_spans_two_zones_with_public_and_private_subnets(dev):
    subnets = dev.of_type(SUBNET)
    zones = {s.inputs["availabilityZone"] for s in subnets}
    # the mocks offer g7e in zones b-d only (stacks/ops/mocks.py OFFERED_ZONES): both zones offer every pool
    assert zones == {"ap-northeast-2b", "ap-northeast-2c"}
    private = [s for s in subnets if "private" in s.name]
    public = [s for s in subnets if "public" in s.name]
    assert len(private) == len(public) == 2
    assert all(s.parent_name == "network" for s in subnets)
    # Karpenter discovers node subnets by tag: private ones only
    assert all(s.inputs["tags"][DISCOVERY_TAG] == "vllm-poc-dev" for s in private)
    assert not any(DISCOVERY_TAG in s.inputs["tags"] for s in public)
    assert all(s.inputs["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)
    assert not any(s.inputs.get("mapPublicIpOnLaunch") for s in subnets)


def test_one_nat_gateway_by_default_and_one_per_zone_on_request(dev):
    assert len(dev.of_type("aws:ec2/natGateway:NatGateway")) == 1
    per_az = render_with(network={"availabilityZoneCount": 3, "natGateways": "per-az"})
    assert len(per_az.of_type("aws:ec2/natGateway:NatGateway")) == 3
    assert len(per_az.of_type(SUBNET)) == 6


def test_s3_gateway_endpoint_serves_every_private_route_table(dev):
    (endpoint,) = [e for e in dev.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
                   if e.inputs["serviceName"] == "com.amazonaws.ap-northeast-2.s3"]
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    private_tables = {r.outputs["id"] for r in dev.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name}
    assert len(private_tables) == 2 and private_tables <= set(endpoint.inputs["routeTableIds"])


def test_existing_vpc_creates_no_network_but_tags_the_node_subnets():
    rendered = render_with(network={
        "vpcId": "vpc-0123456789abcdef0",
        "privateSubnets": {"ap-northeast-2a": "subnet-0aaaaaaaaaaaaaaa1", "ap-northeast-2c": "subnet-0aaaaaaaaaaaaaaa2"},
        "publicSubnets": {"ap-northeast-2a": "subnet-0bbbbbbbbbbbbbbb1", "ap-northeast-2c": "subnet-0bbbbbbbbbbbbbbb2"},
    })
    assert not rendered.of_type("aws:ec2/vpc:Vpc") and not rendered.of_type(SUBNET)
    tags = {t.inputs["resourceId"]: t.inputs for t in rendered.of_type("aws:ec2/tag:Tag")
            if t.parent_name == "network"}
    assert set(tags) == {"subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"}
    assert all(t["key"] == DISCOVERY_TAG and t["value"] == "vllm-poc-dev" for t in tags.values())
    cluster = rendered.one("eks:index:Cluster")
    assert cluster.inputs["vpcId"] == "vpc-0123456789abcdef0"
    assert cluster.inputs["privateSubnetIds"] == ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]


def test_ecr_interface_endpoints_keep_image_pulls_off_the_nat_gateway(dev):
    endpoints = {e.inputs["serviceName"]: e.inputs for e in dev.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
                 if e.inputs["vpcEndpointType"] == "Interface"}
    assert set(endpoints) == {"com.amazonaws.ap-northeast-2.ecr.api", "com.amazonaws.ap-northeast-2.ecr.dkr"}
    private = {s.outputs["id"] for s in dev.of_type(SUBNET) if "private" in s.name}
    group = dev.one("aws:ec2/securityGroup:SecurityGroup", "network-ecr-endpoints")
    assert group.inputs["ingress"] == [{"protocol": "tcp", "fromPort": 443, "toPort": 443,
                                        "cidrBlocks": ["10.40.0.0/16"], "description": "HTTPS from the VPC"}]
    for endpoint in endpoints.values():
        # private DNS: the nodes' ordinary ECR host names resolve to the endpoints
        assert endpoint["privateDnsEnabled"] is True
        assert set(endpoint["subnetIds"]) == private
        assert endpoint["securityGroupIds"] == [group.outputs["id"]]
