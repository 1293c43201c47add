"""S3 reach that does not go stale unnoticed: the ranges the NetworkPolicy allows are recorded where
preflight (SSM) and the Jobs (a ConfigMap) read them; preflight compares them with AWS's prefix list
now (moto's), and the bench Job stops before its sweep, naming the cause, when S3 resolves outside
them (a real sweep against moto on 127.0.0.1)."""

from __future__ import annotations

import boto3
from botocore.exceptions import ClientError

from bench.run import s3reach
from bench.run import sweep as S
from stacks import s3_ranges
from tests.test_bench_s3 import BUCKET, PREFIX, bucket, sweep_args  # noqa: F401 - fixture

MOCK_RANGES = ["192.0.2.0/24", "198.51.100.0/24"]  # what the offline render's prefix list holds
SEOUL = "ap-northeast-2"


# -- the record, as rendered -------------------------------------------------------------------------------


def test_the_policy_and_both_records_hold_the_same_ranges(dev):
    [policy] = [p for p in dev.k8s("NetworkPolicy") if p["metadata"]["name"] == "allow-aws-credentials-and-s3"]
    allowed = sorted(b["ipBlock"]["cidr"] for b in policy["spec"]["egress"][1]["to"])
    assert allowed == MOCK_RANGES
    [config_map] = [c for c in dev.k8s("ConfigMap") if c["metadata"]["name"] == "vllm-poc-s3-ranges"]
    assert config_map["data"] == {"cidrs": ",".join(MOCK_RANGES), "prefixList": f"com.amazonaws.{SEOUL}.s3"}
    [record] = dev.of_type("aws:ssm/parameter:Parameter")
    assert record.inputs["name"] == s3_ranges.parameter_name("vllm-poc-dev") == "/vllm-poc/vllm-poc-dev/s3-ranges"
    assert s3_ranges.parse(record.inputs["insecureValue"]) == MOCK_RANGES


def test_every_job_running_the_bench_package_reads_the_ranges(all_stacks):
    seen = set()
    for rendered in all_stacks.values():
        for job in rendered.k8s("Job"):
            kind = job["metadata"]["labels"]["app.kubernetes.io/name"]
            if kind not in ("vllm-bench", "vllm-startup", "vllm-streamer"):
                continue
            seen.add(kind)
            [env] = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
                     if e["name"] == s3reach.RANGES_ENV]
            assert env["valueFrom"]["configMapKeyRef"] == {"name": "vllm-poc-s3-ranges", "key": "cidrs", "optional": True}
    assert {"vllm-bench", "vllm-startup"} <= seen


# -- preflight: the record against the prefix list now (moto) ------------------------------------------


class Parameters:
    def __init__(self, values: dict[str, str] | None = None, deny: bool = False):
        self.values, self.deny = values or {}, deny

    def get_parameter(self, Name):
        if self.deny:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetParameter")
        if Name not in self.values:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": ""}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.values[Name]}}


def _drift(recorded: str | None, deny: bool = False):
    ec2 = boto3.client("ec2", region_name=SEOUL)
    values = {} if recorded is None else {s3_ranges.parameter_name("vllm-poc-dev"): recorded}
    return s3_ranges.drift(ec2, Parameters(values, deny), SEOUL, "vllm-poc-dev", "dev")


def test_a_range_aws_added_since_the_last_up_is_named_with_the_up_that_fixes_it(aws):
    now = s3_ranges.current_ranges(boto3.client("ec2", region_name=SEOUL), SEOUL)
    assert "3.5.0.0/19" in now  # moto's Seoul list
    [warning] = _drift(",".join(c for c in now if c != "3.5.0.0/19"))
    assert warning.level == "warning" and "now has 3.5.0.0/19" in warning.message
    assert "is dropped" in warning.message and warning.fix.startswith("`pulumi up -s dev`")

    [same] = _drift(",".join(now))
    assert same.level == "note" and "match" in same.message
    [gone] = [d for d in _drift(",".join([*now, "52.95.0.0/16"])) if "no longer" in d.message]
    assert gone.level == "note" and "52.95.0.0/16" in gone.message
    [first] = _drift(None)
    assert first.level == "note" and "not deployed yet" in first.message
    [unknown] = _drift("", deny=True)
    assert unknown.level == "warning" and "AccessDeniedException" in unknown.message


# -- the bench Job's start check -----------------------------------------------------------------------


def test_the_check_compares_where_s3_resolves_with_the_allowed_ranges(monkeypatch):
    monkeypatch.delenv("HOSTNAME", raising=False)  # not in a pod: the message names no Job
    resolver = lambda host: {"b.s3.ap-northeast-2.amazonaws.com": ["52.219.60.10"]}[host]  # noqa: E731
    inside = s3reach.check("b", SEOUL, "52.219.56.0/21", resolver=resolver)
    assert inside == s3reach.Reach(False, None)
    outside = s3reach.check("b", SEOUL, "52.219.0.0/20,3.5.0.0/19", resolver=resolver, stack="dev")
    assert outside.blocked
    assert "resolves to 52.219.60.10, outside the S3 ranges" in outside.message
    assert "python -m stacks preflight dev" in outside.message and "pulumi up -s dev" in outside.message
    # a failed bench Job is not replaced by `pulumi up` on its own: the message says how to get a new one
    assert "delete this Job (`kubectl -n vllm delete job <this bench Job>`)" in outside.message
    some = s3reach.check("b", SEOUL, "52.219.56.0/21", resolver=lambda h: ["52.219.60.10", "16.12.1.1"])
    assert not some.blocked and "warning" in some.message
    # no ranges given (a laptop): nothing is checked
    assert s3reach.check("b", SEOUL, None, resolver=resolver) == s3reach.Reach(False, None)


def test_a_sweep_stops_before_it_starts_when_s3_is_outside_the_allowed_ranges(
        bench_stub_server, fake_bench, bucket, tmp_path, monkeypatch, capsys):  # noqa: F811
    # The uploads go to moto on 127.0.0.1: ranges without it are what a stale policy looks like.
    monkeypatch.setenv(s3reach.RANGES_ENV, "52.216.0.0/15,54.231.0.0/16")
    monkeypatch.setenv("HOSTNAME", "bench-gemma-fp8-0123456789-x7k2q")  # the pod's name, as in the cluster
    uri = f"s3://{BUCKET}/{PREFIX}"
    assert S.main(sweep_args(bench_stub_server, tmp_path / "out", fake_bench, "--upload", uri,
                             "--label", "dev/gemma-fp8")) == S.EXIT_UPLOAD
    err = capsys.readouterr().err
    assert "resolves to 127.0.0.1, outside the S3 ranges" in err and "pulumi up -s dev" in err
    assert "kubectl -n vllm delete job bench-gemma-fp8-0123456789`" in err
    assert fake_bench.keys() == [], "no run started"

    monkeypatch.setenv(s3reach.RANGES_ENV, "52.216.0.0/15,127.0.0.0/8")
    assert S.main(sweep_args(bench_stub_server, tmp_path / "out2", fake_bench, "--upload", uri,
                             "--label", "dev/gemma-fp8")) == 0
    assert "outside the S3 ranges" not in capsys.readouterr().err
