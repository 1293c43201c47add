"""The created VPC's zones are decided once: pinned in the stack file (pin-zones), read back from the
live VPC when unpinned, never recomputed when offerings change; preflight says when they would be."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml

from stacks.ops import mocks
from stacks.ops.render import render_stack
from stacks.zones import choose_zones, live_zones_problem, offering_notes
from tests.fixtures.pulumi_stack import render_with
from tests.fixtures.stack_renders import REPO, stack_names

SUBNET = "aws:ec2/subnet:Subnet"


@contextlib.contextmanager
def offerings(**zones: str):
    """The mocks' instance-type offerings changed for a while (family -> zone letters)."""
    saved = dict(mocks.OFFERED_ZONES)
    mocks.OFFERED_ZONES.update(zones)
    try:
        yield
    finally:
        mocks.OFFERED_ZONES.clear()
        mocks.OFFERED_ZONES.update(saved)


@contextlib.contextmanager
def live_subnets(zones: list[str]):
    """Private subnets an earlier `up` created in these zones."""
    mocks.LIVE_SUBNETS.update({f"subnet-0live{i:012x}": z for i, z in enumerate(zones)})
    try:
        yield
    finally:
        mocks.LIVE_SUBNETS.clear()


def subnets(rendered) -> dict[str, tuple[str, str]]:
    """{resource name: (zone, CIDR)} of every subnet the render creates."""
    return {s.name: (s.inputs["availabilityZone"], s.inputs["cidrBlock"]) for s in rendered.of_type(SUBNET)}


def test_every_shipped_stack_that_creates_its_vpc_carries_its_zones():
    for stack in stack_names():
        network = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"].get("vllm-poc:network") or {}
        if "vpcId" not in network:
            assert network.get("availabilityZones"), f"Pulumi.{stack}.yaml: pin the zones (python -m stacks pin-zones {stack})"


def test_g7e_offered_in_another_zone_moves_no_subnet(dev):
    # Today g7e is not in zone a, so dev spans b and c. The day it is, a choice from offerings would
    # take a and b; the pinned stack keeps every subnet's name, zone and CIDR.
    assert choose_zones([f"ap-northeast-2{z}" for z in "abcd"], {"g7e.2xlarge": {f"ap-northeast-2{z}" for z in "abcd"},
                        "g6e.2xlarge": {f"ap-northeast-2{z}" for z in "abcd"}},
                        {"p": "g7e.2xlarge", "q": "g6e.2xlarge"}, 2)[0] == ["ap-northeast-2a", "ap-northeast-2b"]
    with offerings(g7e="abcd"):
        later = render_stack("dev")
    assert subnets(later) == subnets(dev)
    assert {z for z, _ in subnets(dev).values()} == {"ap-northeast-2b", "ap-northeast-2c"}


def test_an_unpinned_stack_keeps_the_live_vpcs_zones_when_offerings_change():
    with offerings(g7e="abcd"):
        fresh = render_with(network={"vpcCidr": "10.40.0.0/16"})
        with live_subnets(["ap-northeast-2b", "ap-northeast-2c"]):
            live = render_with(network={"vpcCidr": "10.40.0.0/16"})
    # a first `up` takes today's choice (zone a now offers g7e) ...
    assert {z for z, _ in subnets(fresh).values()} == {"ap-northeast-2a", "ap-northeast-2b"}
    # ... a live VPC keeps its zones, with the CIDRs the pinned dev stack renders
    assert {z for z, _ in subnets(live).values()} == {"ap-northeast-2b", "ap-northeast-2c"}
    assert subnets(live)["network-private-b"] == subnets(fresh)["network-private-b"]


def test_a_pinned_list_that_differs_from_the_live_vpc_is_refused_naming_the_key():
    assert live_zones_problem(["ap-northeast-2b", "ap-northeast-2c"], []) is None
    assert live_zones_problem(None, ["ap-northeast-2b"]) is None
    problem = live_zones_problem(["ap-northeast-2a", "ap-northeast-2b"], ["ap-northeast-2b", "ap-northeast-2c"])
    assert problem.startswith("vllm-poc:network.availabilityZones:") and "[ap-northeast-2b, ap-northeast-2c]" in problem
    # the program refuses it before anything is declared, as `pulumi up` would
    with live_subnets(["ap-northeast-2c", "ap-northeast-2d"]), \
            pytest.raises(Exception, match=r"vllm-poc:network.availabilityZones: lists ap-northeast-2b, ap-northeast-2c"):
        render_stack("dev")


def test_offering_notes_name_the_change_and_keep_the_pinned_zones():
    pinned = ["ap-northeast-2b", "ap-northeast-2c"]
    offers = {"g7e.2xlarge": {f"ap-northeast-2{z}" for z in "abcd"}}
    assert offering_notes(pinned, pinned, offers, {"g7e": "g7e.2xlarge"}) == []
    notes = offering_notes(pinned, ["ap-northeast-2a", "ap-northeast-2b"], offers, {"g7e": "g7e.2xlarge"})
    assert "keeps its pinned zones ap-northeast-2b, ap-northeast-2c" in notes[0]
    assert notes[1].startswith("g7e: g7e.2xlarge is now also offered in ap-northeast-2a, ap-northeast-2d")


class FakeEc2:
    """describe_* answers for pin-zones and preflight: zones a-d, offerings per type, live subnets."""

    def __init__(self, offers: dict[str, str], live: list[str] | None = None):
        self.offers, self.live = offers, live or []

    def describe_availability_zones(self, **_):
        return {"AvailabilityZones": [{"ZoneName": f"ap-northeast-2{z}"} for z in "abcd"]}

    def describe_subnets(self, **_):
        return {"Subnets": [{"AvailabilityZone": z} for z in self.live]}

    def get_paginator(self, name):
        assert name == "describe_instance_type_offerings"
        offers = self.offers

        class Pages:
            def paginate(self, Filters, **_):
                types = Filters[0]["Values"]
                yield {"InstanceTypeOfferings": [{"InstanceType": t, "Location": f"ap-northeast-2{z}"}
                                                 for t in types for z in offers.get(t.split(".")[0], "abcd")]}
        return Pages()


def _stack_dir(tmp_path: Path, stack: str = "dev", drop_zones: bool = True) -> Path:
    text = (REPO / f"Pulumi.{stack}.yaml").read_text()
    if drop_zones:
        text = "\n".join(line for line in text.splitlines() if "availabilityZones:" not in line) + "\n"
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    return tmp_path


def test_pin_zones_writes_todays_choice_once_and_keeps_the_file(tmp_path, capsys):
    from stacks.__main__ import main as stacks_main
    from stacks.ops import pin_zones

    directory = _stack_dir(tmp_path)
    before = (directory / "Pulumi.dev.yaml").read_text()
    args = stacks_main.__globals__["build_parser"]().parse_args(["pin-zones", "dev", "--dir", str(directory)])
    assert pin_zones.run(args, ec2=FakeEc2({"g7e": "bcd"})) == 0
    after = (directory / "Pulumi.dev.yaml").read_text()
    network = yaml.safe_load(after)["config"]["vllm-poc:network"]
    assert network["availabilityZones"] == ["ap-northeast-2b", "ap-northeast-2c"]
    # every comment kept, only the one key added
    assert [line for line in after.splitlines() if "availabilityZones" not in line] == before.splitlines()
    assert "from today's offerings" in capsys.readouterr().out
    # decided once: new offerings change nothing
    assert pin_zones.run(args, ec2=FakeEc2({"g7e": "abcd"})) == 0
    assert (directory / "Pulumi.dev.yaml").read_text() == after
    assert "nothing changed" in capsys.readouterr().out


def test_pin_zones_takes_the_live_vpcs_zones(tmp_path, capsys):
    from stacks.ops import pin_zones

    directory = _stack_dir(tmp_path)
    before, after, source, _ = pin_zones.pin("dev", directory, FakeEc2({"g7e": "abcd"}, live=["ap-northeast-2c", "ap-northeast-2b"]))
    assert before is None and after == ["ap-northeast-2b", "ap-northeast-2c"] and source == "the live VPC's subnets"


def test_pin_zones_refuses_an_existing_vpc_with_exit_2(tmp_path, capsys):
    from stacks.__main__ import main as stacks_main

    directory = _stack_dir(tmp_path)
    path = directory / "Pulumi.dev.yaml"
    path.write_text(path.read_text().replace(
        "    vpcCidr: 10.40.0.0/16\n",
        "    vpcId: vpc-0123456789abcdef0\n    privateSubnets: {ap-northeast-2a: subnet-0aaaaaaaaaaaaaaa1, "
        "ap-northeast-2c: subnet-0aaaaaaaaaaaaaaa2}\n"))
    assert stacks_main(["pin-zones", "dev", "--dir", str(directory)]) == 2
    assert "vllm-poc:network.vpcId" in capsys.readouterr().err


def test_preflight_warns_about_unpinned_zones_and_notes_changed_offerings():
    from stacks.ops.preflight.capacity import zone_choice_findings
    from stacks.ops.preflight.report import Pool

    pools = [Pool("g7e", "g7e.2xlarge", ("spot",), 2, 1), Pool("l40s", "g6e.2xlarge", ("on-demand",), 4, 1)]
    offers = {"g7e.2xlarge": [f"ap-northeast-2{z}" for z in "abcd"], "g6e.2xlarge": [f"ap-northeast-2{z}" for z in "abcd"]}
    ec2 = FakeEc2({"g7e": "abcd"})
    (unpinned,) = zone_choice_findings(ec2, pools, offers, 2, None, "dev")
    assert unpinned.level == "warning" and unpinned.fix == "python -m stacks pin-zones dev"
    notes = zone_choice_findings(ec2, pools, offers, 2, ["ap-northeast-2b", "ap-northeast-2c"], "dev")
    assert [f.level for f in notes] == ["note"] * len(notes) and len(notes) == 3
    assert "ap-northeast-2a" in notes[1].message
    same = {t: [f"ap-northeast-2{z}" for z in "bcd"] for t in offers}
    assert zone_choice_findings(FakeEc2({"g7e": "bcd", "g6e": "bcd"}), pools, same, 2,
                                ["ap-northeast-2b", "ap-northeast-2c"], "dev") == []
