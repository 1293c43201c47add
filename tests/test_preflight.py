"""preflight against moto over HTTP (offerings, subnets, Spot prices, running instances).

moto 5.2.5 serves Service Quotas only for the `vpc` service code (EC2 codes answer NoSuchResource and
GetAWSDefaultServiceQuota is not implemented) and has no Price List API at all, so those two clients are
small fakes below; everything EC2 comes from moto.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
from pathlib import Path
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from stacks.loader import load_settings
from stacks.ops import api_access, preflight
from stacks.ops.preflight.account import session_findings
from stacks.ops.preflight.aws import latest_by_az, on_demand_price
from stacks.ops.preflight.capacity import evaluate, run_preflight
from stacks.ops.preflight.report import Pool, PoolReport, SystemNodes, format_report
from stacks.settings import REPO
from stacks.versions import pins

SEOUL = "ap-northeast-2"
L40S = Pool("l40s", "g6e.2xlarge", ("on-demand",), 4)  # 4 x 8 vCPU
L40S_X4 = Pool("l40s-x4", "g6e.12xlarge", ("on-demand",), 8)  # 2 x 48 vCPU
G7E_SPOT = Pool("g7e-spot", "g7e.2xlarge", ("spot",), 4)  # 4 x 8 vCPU
G7E_OD = Pool("g7e-od", "g7e.2xlarge", ("on-demand",), 2)  # 2 x 8 vCPU


class FakeQuotas:
    """Service Quotas stand-in (moto lacks EC2 quotas): applied values, else AWS defaults, else errors."""

    def __init__(self, applied: dict[str, float] | None = None, defaults: dict[str, float] | None = None, deny: bool = False):
        self.applied, self.defaults, self.deny = applied or {}, defaults or {}, deny

    def _answer(self, table, code, op):
        if self.deny:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, op)
        if code in table:
            return {"Quota": {"QuotaCode": code, "Value": table[code]}}
        raise ClientError({"Error": {"Code": "NoSuchResourceException", "Message": "none"}}, op)

    def get_service_quota(self, ServiceCode, QuotaCode):
        assert ServiceCode == "ec2"
        return self._answer(self.applied, QuotaCode, "GetServiceQuota")

    def get_aws_default_service_quota(self, ServiceCode, QuotaCode):
        return self._answer(self.defaults, QuotaCode, "GetAWSDefaultServiceQuota")


class FakePricing:
    """Price List API stand-in (moto has none): one Linux on-demand product per (region, type)."""

    def __init__(self, prices: dict[tuple[str, str], float]):
        self.prices = prices
        self.calls = []

    def get_products(self, ServiceCode, Filters, MaxResults):
        f = {x["Field"]: x["Value"] for x in Filters}
        self.calls.append(f)
        price = self.prices.get((f["regionCode"], f["instanceType"]))
        if price is None:
            return {"PriceList": []}
        item = {
            "product": {"attributes": {"instanceType": f["instanceType"], "regionCode": f["regionCode"]}},
            "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": f"{price:.7f}"}}}}}},
        }
        return {"PriceList": [json.dumps(item)]}


SEOUL_PRICES = {(SEOUL, "g6e.2xlarge"): 2.76, (SEOUL, "g6e.12xlarge"): 12.9, (SEOUL, "g7e.2xlarge"): 4.13}


def _ec2(region: str = SEOUL):
    return boto3.client("ec2", region_name=region)


def _run(region=SEOUL, pools=(L40S, L40S_X4, G7E_SPOT), quotas=None, pricing=None, **kw):
    return run_preflight(
        region, "vllm-poc-dev", list(pools), ec2=_ec2(region),
        quotas=quotas or FakeQuotas({"L-DB2E81BA": 128, "L-3819A6DF": 32}),
        pricing=pricing or FakePricing(SEOUL_PRICES), **kw,
    )


def _levels(report, level):
    return [f for f in report.findings if f.level == level]


def test_seoul_stack_with_enough_quota_is_ready(aws):
    report = _run()
    assert not report.blockers
    by_name = {p.name: p for p in report.pools}
    assert by_name["l40s"].offered_azs == ["ap-northeast-2a", "ap-northeast-2b"]  # moto's Seoul offerings
    assert by_name["l40s-x4"].max_vcpus == 2 * 48
    assert by_name["g7e-spot"].spot_usd_hour.keys() == {"ap-northeast-2a", "ap-northeast-2b"}
    assert by_name["g7e-spot"].on_demand_usd_hour == 4.13 and by_name["g7e-spot"].on_demand_source == "price-list-api"
    quotas = {q.code: q for q in report.quotas}
    # no servers on these pools: nothing is required, their limits are headroom
    assert quotas["L-DB2E81BA"].required_vcpus == 0
    assert quotas["L-DB2E81BA"].headroom_vcpus == 4 * 8 + 2 * 48  # on-demand pools share one quota
    assert quotas["L-DB2E81BA"].headroom_pools == ["l40s", "l40s-x4"]
    assert quotas["L-3819A6DF"].headroom_vcpus == 32
    spot_warning = [f for f in _levels(report, "warning") if f.subject == "g7e-spot"]
    assert any("single instance type" in f.message and "pool(s) l40s, l40s-x4 (another GPU" in f.message for f in spot_warning)


def test_spot_pool_names_its_same_gpu_on_demand_fallback(aws):
    report = _run(pools=(L40S, G7E_SPOT, G7E_OD))
    spot = next(f for f in _levels(report, "warning") if f.subject == "g7e-spot" and "single instance type" in f.message)
    assert spot.message.endswith("fallback: the on-demand pool(s) g7e-od")
    od = next(q for q in report.quotas if q.code == "L-DB2E81BA")
    assert (od.headroom_vcpus, od.headroom_pools) == (4 * 8 + 2 * 8, ["l40s", "g7e-od"])


def test_low_on_demand_quota_is_a_blocker_with_the_exact_fix(aws):
    # The account never raised it: GetServiceQuota has no applied value, the AWS default (8) applies.
    # Two 1-GPU servers on g6e.2xlarge need 2 x 8 vCPUs; the pools' limits are only headroom.
    servers = dataclasses.replace(L40S, server_gpus=2)
    report = _run(pools=(servers, L40S_X4, G7E_SPOT), quotas=FakeQuotas(applied={"L-3819A6DF": 64}, defaults={"L-DB2E81BA": 8}))
    [blocker] = report.blockers
    assert blocker.subject == "L-DB2E81BA"
    assert blocker.fix == (
        "raise L-DB2E81BA in ap-northeast-2 from 8 to 16 vCPUs: aws service-quotas request-service-quota-increase "
        "--service-code ec2 --quota-code L-DB2E81BA --desired-value 16 --region ap-northeast-2"
    )
    text = format_report(report)
    assert "TOO LOW" in text and "RESULT: 1 blocker(s)" in text


def test_unreadable_quota_is_unknown_and_fails_under_strict(aws):
    servers = (dataclasses.replace(L40S, server_gpus=1), L40S_X4, G7E_SPOT)
    report = _run(pools=servers, quotas=FakeQuotas(deny=True))
    assert not report.blockers
    assert {f.subject for f in _levels(report, "warning")} >= {"L-DB2E81BA", "L-3819A6DF"}
    assert all(q.applied_vcpus is None and "AccessDenied" in q.error and q.status == "unknown" for q in report.quotas)
    assert "unknown" in format_report(report)

    strict = _run(pools=servers, quotas=FakeQuotas(deny=True), strict=True)
    [blocker] = strict.blockers  # the quota the servers need; the Spot pool has none, so it stays a warning
    assert blocker.subject == "L-DB2E81BA" and "is unknown: AccessDeniedException" in blocker.message


def test_running_gpu_instances_eat_into_the_quota(aws):
    ec2 = _ec2()
    ami = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=ami, MinCount=2, MaxCount=2, InstanceType="g6e.2xlarge")  # 16 vCPU on-demand
    ec2.run_instances(ImageId=ami, MinCount=3, MaxCount=3, InstanceType="m5.large")  # other quota
    report = _run(pools=(dataclasses.replace(L40S, server_gpus=4), G7E_SPOT),
                  quotas=FakeQuotas({"L-DB2E81BA": 40, "L-3819A6DF": 32}))
    od = next(q for q in report.quotas if q.code == "L-DB2E81BA")
    assert od.in_use_vcpus == 16
    warning = next(f for f in _levels(report, "warning") if f.subject == "L-DB2E81BA" and "in use" in f.message)
    assert "--desired-value 48" in warning.fix  # 16 in use + 4 servers x 8 vCPUs


def test_g7e_missing_in_region_falls_back_to_the_on_demand_pool(aws):
    # moto's Osaka (ap-northeast-3) offerings have g6e but no g7e.
    report = _run(region="ap-northeast-3", pools=(L40S, G7E_SPOT), pricing=FakePricing({}))
    assert not report.blockers
    g7e = next(f for f in _levels(report, "warning") if f.subject == "g7e-spot" and "not offered" in f.message)
    assert "can only go to the on-demand pool(s) l40s (another GPU" in g7e.message
    assert "describe-instance-type-offerings" in g7e.fix
    # a pool that cannot launch anywhere asks nothing of the Spot quota
    assert [q.code for q in report.quotas] == ["L-DB2E81BA"]
    # no Price List answer: the catalog's Seoul figure, said so
    assert any("catalog" in f.message and "ap-northeast-2 figure" in f.message for f in _levels(report, "note"))


def test_nothing_offered_blocks_a_pool_with_servers_and_warns_for_one_without(aws):
    report = _run(region="af-south-1", pools=(dataclasses.replace(L40S, server_gpus=1), G7E_SPOT))
    assert {f.subject for f in report.blockers} == {"l40s"}
    [g7e] = [f for f in _levels(report, "warning") if f.subject == "g7e-spot" and "not offered" in f.message]
    assert "no server runs on pool g7e-spot" in g7e.message and "describe-instance-type-offerings" in g7e.fix
    assert not _run(region="af-south-1", pools=(L40S, G7E_SPOT)).blockers


def test_subnet_azs_limit_where_pools_can_launch(aws):
    ec2 = _ec2()
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    tag = [{"ResourceType": "subnet", "Tags": [{"Key": "karpenter.sh/discovery", "Value": "vllm-poc-dev"}]}]
    for az, cidr in (("ap-northeast-2a", "10.40.0.0/20"), ("ap-northeast-2c", "10.40.16.0/20")):
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az, TagSpecifications=tag)
    ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.32.0/20", AvailabilityZone="ap-northeast-2b")  # public, untagged

    report = _run(pools=(L40S, G7E_SPOT), vpc_id=vpc)
    g7e = next(p for p in report.pools if p.name == "g7e-spot")
    assert g7e.subnet_azs == ["ap-northeast-2a", "ap-northeast-2c"] and g7e.usable_azs == ["ap-northeast-2a"]
    assert any("one AZ only" in f.message for f in _levels(report, "warning") if f.subject == "g7e-spot")

    only_c = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["ap-northeast-2c"]}])["Subnets"]
    report = _run(pools=(dataclasses.replace(L40S, server_gpus=1),), subnet_ids=[only_c[0]["SubnetId"]])
    [blocker] = report.blockers
    assert "offered in ap-northeast-2a, ap-northeast-2b but the stack's subnets are in ap-northeast-2c" in blocker.message


def test_pricing_falls_back_when_the_price_list_api_fails(aws):
    # Against moto the Price List endpoint errors out, as it would without pricing:GetProducts.
    moto_pricing = boto3.client("pricing", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    price, source, err = on_demand_price(moto_pricing, SEOUL, "g6e.2xlarge")
    assert (price, source) == (2.76, "catalog") and err
    assert on_demand_price(None, SEOUL, "g6e.12xlarge")[1] == "unavailable"


def test_latest_spot_price_per_az_and_dear_spot_warning():
    now = datetime.now(timezone.utc)
    history = [
        {"AvailabilityZone": "a", "Timestamp": now - timedelta(hours=2), "SpotPrice": "9.0"},
        {"AvailabilityZone": "a", "Timestamp": now, "SpotPrice": "1.5"},
        {"AvailabilityZone": "b", "Timestamp": now - timedelta(hours=1), "SpotPrice": "5.0"},
    ]
    assert latest_by_az(history) == {"a": 1.5, "b": 5.0}

    pool = PoolReport(
        "g7e-spot", "g7e.2xlarge", ["spot"], 4, 1, 8, 4, 32, ["a", "b"], None, ["a", "b"],
        4.13, "price-list-api", {"a": 1.5, "b": 5.0},
    )
    findings = evaluate(SEOUL, "c", [pool], [])
    assert any("at or above on-demand" in f.message and f.message.endswith("in b") for f in findings)
    assert pool.cost_at_limit_usd_hour == 6.0


def test_gpu_limit_below_one_instance_blocks():
    pool = PoolReport("x4", "g6e.12xlarge", ["on-demand"], 2, 4, 48, 0, 0, ["a"], None, ["a"], 12.9, "catalog")
    [blocker] = [f for f in evaluate(SEOUL, "c", [pool], []) if f.level == "blocker"]
    assert "multiple of 4" in blocker.fix


class FakeSSM:
    """SSM stand-in: the public AMI parameters moto does not carry, present or not."""

    def __init__(self, present: set[str] = frozenset(), deny: bool = False):
        self.present, self.deny = set(present), deny

    def get_parameter(self, Name):
        if self.deny:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetParameter")
        if Name not in self.present:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": ""}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": "ami-0123456789abcdef0"}}


AMI_PARAMETER = pins().nvidia_ami_parameter("1.36")


EGRESS = "52.78.10.20"  # this machine's address, as the stubbed lookup reports it


@pytest.fixture(scope="module")
def dev_dir(tmp_path_factory) -> Path:
    """Pulumi.dev.yaml with the operator's address in place of the shipped placeholder (allow-my-address)."""
    directory = tmp_path_factory.mktemp("stack")
    shutil.copy(REPO / "Pulumi.dev.yaml", directory / "Pulumi.dev.yaml")
    api_access.allow_address("dev", EGRESS, directory)
    return directory


def _clients(quota=64, ssm=None, quotas=None, egress=EGRESS):
    return {"ec2": _ec2(), "quotas": quotas or FakeQuotas({"L-DB2E81BA": quota, "L-3819A6DF": 32, "L-1216C47A": 32}),
            "pricing": FakePricing(SEOUL_PRICES), "ssm": ssm or FakeSSM({AMI_PARAMETER}), "sts": boto3.client("sts"),
            "egress": lambda: egress}


@pytest.fixture
def _args(dev_dir):
    def make(json_out=False, strict=False, inside_vpc=False, directory=dev_dir):
        return argparse.Namespace(stack="dev", json=json_out, strict=strict, inside_vpc=inside_vpc, dir=str(directory))
    return make


def _api(data) -> list[dict]:
    return [f for f in data["findings"] if f["subject"] == "cluster API"]


def test_the_shipped_placeholder_is_a_blocker_with_the_command_that_replaces_it(aws, capsys, _args):
    assert preflight.run(_args(json_out=True, directory=REPO), _clients()) == 1
    [blocker] = [f for f in _api(json.loads(capsys.readouterr().out)) if f["level"] == "blocker"]
    assert "203.0.113.10/32 is a documentation address" in blocker["message"]
    assert blocker["fix"] == "python -m stacks allow-my-address dev"


def test_this_machine_must_be_in_the_public_list(aws, capsys, _args):
    assert preflight.run(_args(json_out=True), _clients()) == 0
    notes = [f["message"] for f in _api(json.loads(capsys.readouterr().out))]
    assert notes == [f"way to the Kubernetes API: public endpoint for {EGRESS}/32",
                     f"this machine's egress address {EGRESS} is in publicAccessCidrs ({EGRESS}/32)"]
    # a GitHub-hosted runner, say: another address every time
    assert preflight.run(_args(json_out=True), _clients(egress="4.227.1.2")) == 1
    [blocker] = [f for f in _api(json.loads(capsys.readouterr().out)) if f["level"] == "blocker"]
    assert "4.227.1.2 is not in vllm-poc:cluster.publicAccessCidrs" in blocker["message"]
    assert "allow-my-address dev" in blocker["fix"] and "--inside-vpc" in blocker["fix"]


def test_inside_the_vpc_the_cluster_security_group_must_admit_the_runner(aws, capsys, _args):
    assert preflight.run(_args(json_out=True, inside_vpc=True), _clients()) == 1
    [blocker] = [f for f in _api(json.loads(capsys.readouterr().out)) if f["level"] == "blocker"]
    assert "admits nothing on 443" in blocker["message"] and "privateAccessSecurityGroups" in blocker["fix"]


def test_an_unanswered_address_lookup_is_unknown(aws, capsys, _args):
    def fail():
        raise api_access.AccessError("could not read this machine's address from https://checkip.amazonaws.com")

    clients = {**_clients(), "egress": fail}
    assert preflight.run(_args(json_out=True), clients) == 0
    [warning] = [f for f in _api(json.loads(capsys.readouterr().out)) if f["level"] == "warning"]
    assert "could not tell whether this machine may reach the public endpoint" in warning["message"]
    assert preflight.run(_args(strict=True), clients) == 1
    capsys.readouterr()


@pytest.mark.parametrize("quota, rc", [(64, 0), (4, 1)])
def test_cli_dev_stack_needs_one_g6e_2xlarge_server(aws, capsys, quota, rc, _args):
    clients = _clients(quota)
    assert preflight.run(_args(), clients) == rc
    text = capsys.readouterr().out
    assert "g7e.2xlarge" in text and "L-3819A6DF" in text and "required" in text
    assert preflight.run(_args(json_out=True), clients) == rc
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is (rc == 0)
    # the Spot pool's onDemandFallback NodePool is a NodePool too (headroom only)
    assert [p["name"] for p in data["pools"]] == ["l40s", "l40s-x4", "g7e", "g7e-on-demand"]
    od = next(q for q in data["quotas"] if q["code"] == "L-DB2E81BA")
    # dev runs one TP=1 server on g6e.2xlarge: one instance of 8 vCPUs, not every pool at its limit
    assert od["required_vcpus"] == 8 and od["pools"] == ["l40s"]
    assert od["headroom_vcpus"] == 4 * 8 + 2 * 48 + 2 * 8
    spot = next(q for q in data["quotas"] if q["code"] == "L-3819A6DF")
    assert spot["required_vcpus"] == 0 and spot["headroom_vcpus"] == 2 * 8
    # pools without servers are headroom warnings, never blockers
    levels = {f["subject"]: f["level"] for f in data["findings"] if "headroom" in f["message"]}
    assert set(levels.values()) <= {"warning"} and ("L-DB2E81BA" in levels) is (rc == 0)
    # the created VPC's zones are the stack file's, decided once (network.availabilityZones)
    assert data["pools"][0]["subnet_azs"] == ["ap-northeast-2b", "ap-northeast-2c"]
    # branch revisions are warnings
    subjects = {f["subject"]: f["level"] for f in data["findings"]}
    assert subjects["weights.revisions"] == "warning"


def test_cli_unknown_quota_fails_only_under_strict(aws, capsys, _args):
    clients = _clients(quotas=FakeQuotas(deny=True))
    assert preflight.run(_args(), clients) == 0
    assert "unknown" in capsys.readouterr().out
    assert preflight.run(_args(strict=True), clients) == 1
    out = capsys.readouterr().out
    assert "BLOCKERS" in out and "L-DB2E81BA" in out and "AccessDeniedException" in out


def test_cli_missing_ami_parameter_is_a_blocker(aws, capsys, _args):
    assert preflight.run(_args(json_out=True), _clients(ssm=FakeSSM())) == 1
    data = json.loads(capsys.readouterr().out)
    [blocker] = [f for f in data["findings"] if f["level"] == "blocker"]
    assert blocker["subject"] == "ami" and AMI_PARAMETER in blocker["message"] and "v20260930" in blocker["message"]
    # unreadable is not missing: a warning, a blocker under --strict
    assert preflight.run(_args(), _clients(ssm=FakeSSM(deny=True))) == 0
    assert preflight.run(_args(strict=True), _clients(ssm=FakeSSM(deny=True))) == 1
    capsys.readouterr()


def test_cli_refuses_the_callers_role_as_an_admin_role(aws, monkeypatch, capsys, _args):
    settings = load_settings("dev", Path(_args().dir))
    caller = boto3.client("sts").get_caller_identity()["Arn"]  # moto: an IAM user
    role_session = {"Arn": "arn:aws:sts::123456789012:assumed-role/ci-deploy/gh-1"}
    cluster = settings.cluster.model_copy(update={"admin_role_arns": ["arn:aws:iam::123456789012:role/ci-deploy"]})
    monkeypatch.setattr(preflight, "_load_settings", lambda *_: settings.model_copy(update={"cluster": cluster}))
    clients = _clients()
    assert preflight.run(_args(), clients) == 0, caller  # a user is not that role
    capsys.readouterr()
    clients["sts"] = SimpleNamespace(get_caller_identity=lambda: role_session)
    assert preflight.run(_args(), clients) == 1
    assert "role running `pulumi up`" in capsys.readouterr().out


def test_cli_reports_settings_errors(monkeypatch, capsys):
    def boom(stack, directory=None):
        raise FileNotFoundError(f"Pulumi.{stack}.yaml")

    monkeypatch.setattr(preflight, "_load_settings", boom)
    assert preflight.main(["nope"]) == 2
    assert "Pulumi.nope.yaml" in capsys.readouterr().err


SYSTEM = SystemNodes(("m7i.xlarge",), desired_size=2, max_size=3)


def test_system_nodes_need_the_standard_on_demand_quota(aws):
    ec2 = _ec2()
    ami = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=ami, MinCount=3, MaxCount=3, InstanceType="m5.large")  # 6 standard vCPUs in use
    ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="g6e.2xlarge")  # G and VT: not counted here
    report = _run(pools=(L40S,), system=SYSTEM, quotas=FakeQuotas({"L-DB2E81BA": 64, "L-1216C47A": 10}))
    std = next(q for q in report.quotas if q.code == "L-1216C47A")
    # two m7i.xlarge at creation (4 vCPUs each), up to three
    assert (std.required_vcpus, std.applied_vcpus, std.in_use_vcpus, std.headroom_vcpus) == (8, 10, 6, 12)
    assert std.name.startswith("Running On-Demand Standard") and std.status == "OK (no headroom)"
    in_use = next(f for f in _levels(report, "warning") if f.subject == "L-1216C47A" and "in use" in f.message)
    assert "system node group (2 x m7i.xlarge)" in in_use.message and "--desired-value 14" in in_use.fix
    text = format_report(report)
    [row] = [line for line in text.splitlines() if line.startswith("L-1216C47A")]
    # applied, in use, required, at limits, for, status
    assert re.search(r"instances\s+10\s+6\s+8\s+12\s+system\s+OK \(no headroom\)$", row), row

    low = _run(pools=(L40S,), system=SYSTEM, quotas=FakeQuotas({"L-DB2E81BA": 64}, defaults={"L-1216C47A": 5}))
    [blocker] = [f for f in low.blockers if f.subject == "L-1216C47A"]
    assert "is 5 vCPUs" in blocker.message and "system node group (2 x m7i.xlarge) needs 8 vCPUs" in blocker.message
    assert "--quota-code L-1216C47A --desired-value 8" in blocker.fix


def test_unreadable_standard_quota_is_unknown_and_blocks_only_under_strict(aws):
    report = _run(pools=(L40S,), system=SYSTEM, quotas=FakeQuotas(deny=True))
    std = next(q for q in report.quotas if q.code == "L-1216C47A")
    assert std.status == "unknown" and not [f for f in report.blockers if f.subject == "L-1216C47A"]
    strict = _run(pools=(L40S,), system=SYSTEM, quotas=FakeQuotas(deny=True), strict=True)
    [blocker] = [f for f in strict.blockers if f.subject == "L-1216C47A"]
    assert "the system node group (2 x m7i.xlarge) needs 8 vCPUs" in blocker.message


def test_the_dev_stack_reports_its_system_nodes_quota(aws, capsys, _args):
    assert preflight.run(_args(json_out=True), _clients(64)) == 0
    data = json.loads(capsys.readouterr().out)
    std = next(q for q in data["quotas"] if q["code"] == "L-1216C47A")
    assert std["required_vcpus"] == 2 * 4 and std["headroom_vcpus"] == 3 * 4


def test_a_deploy_role_with_short_sessions_is_named_with_the_fix(aws, capsys, _args):
    iam = boto3.client("iam")
    for name, seconds in (("deploy-1h", 3600), ("deploy-3h", 10800)):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}", MaxSessionDuration=seconds)
    short = session_findings(iam, "arn:aws:sts::123456789012:assumed-role/deploy-1h/gh-1")
    [warning] = short
    assert warning.level == "warning" and "60 min" in warning.message and "3 h" in warning.message
    assert "--role-name deploy-1h --max-session-duration 10800" in warning.fix
    assert session_findings(iam, "arn:aws:sts::123456789012:assumed-role/deploy-3h/gh-1") == []
    # a user's long-term keys have no session to run out; a role that cannot be read is a note
    assert session_findings(iam, "arn:aws:iam::123456789012:user/alice") == []
    [note] = session_findings(iam, "arn:aws:sts::123456789012:assumed-role/gone/gh-1")
    assert note.level == "note" and "aws iam get-role --role-name gone" in note.fix

    clients = {**_clients(), "iam": iam,
               "sts": SimpleNamespace(get_caller_identity=lambda: {"Arn": "arn:aws:sts::123456789012:assumed-role/deploy-1h/s"})}
    assert preflight.run(_args(), clients) == 0
    assert "allows sessions of 60 min" in capsys.readouterr().out



def test_preflight_says_whether_the_s3_ranges_are_recorded(aws, capsys, _args):
    # FakeSSM holds only the AMI parameter: nothing recorded, as before a first `up`.
    assert preflight.run(_args(json_out=True), _clients()) == 0
    [finding] = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["subject"] == "s3 ranges"]
    assert finding["level"] == "note" and "not deployed yet" in finding["message"]
