"""preflight, teardown-check and pre-destroy on a machine without AWS credentials.

preflight runs every check that needs no account (the stack file, the way to the API and its
placeholder address, hfToken and revisions, the zones), lists each AWS check it could not run with
what it reads and how to provide credentials, and exits 3 (incomplete) when nothing offline blocks;
its JSON says the same. teardown-check and pre-destroy say which credentials they need. No request
leaves the machine: the SDK's instance-metadata lookup is switched off and every address is given.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from stacks.__main__ import main as stacks_main
from stacks.ops import preflight
from stacks.ops.credentials import INCOMPLETE
from stacks.settings import REPO
from tests.test_preflight import EGRESS, dev_dir  # noqa: F401 - dev_dir is a fixture

ADDRESS = EGRESS  # this machine's egress address, passed with --address (no lookup)
AWS_CHECKS = ["offerings", "quotas", "prices", "ami", "caller", "s3 ranges"]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """A shell with no AWS credentials anywhere the SDK looks (and no instance-metadata request)."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return dict(os.environ)


@pytest.fixture
def stack_dir(dev_dir) -> Path:
    """Pulumi.dev.yaml with an operator's address (ADDRESS) in place of the shipped placeholder."""
    return dev_dir


def test_without_credentials_preflight_runs_the_offline_checks_and_exits_incomplete(no_credentials, stack_dir, capsys):
    rc = stacks_main(["preflight", "dev", "--dir", str(stack_dir), "--address", ADDRESS])
    out = capsys.readouterr()
    assert rc == INCOMPLETE == 3 and out.err == ""
    text = out.out
    # the offline checks ran
    assert "[stack file] Pulumi.dev.yaml reads and validates: cluster vllm-poc-dev in ap-northeast-2" in text
    assert f"this machine's egress address {ADDRESS} is in publicAccessCidrs ({ADDRESS}/32)" in text
    assert "[hfToken] no vllm-poc:hfToken" in text
    assert "[zones] pinned by vllm-poc:network.availabilityZones: ap-northeast-2b, ap-northeast-2c" in text
    # the stack's waits added up from its offline render, against the deploy role's session
    assert "[time budget] a first `up` waits at most 2 h 42 min plus 15 min of workflow steps, within the deploy " \
           "role's 3 h session" in text
    # each AWS check is listed with what it reads, then how to give credentials
    assert "NOT RUN, no AWS credentials found" in text
    for check in AWS_CHECKS:
        assert f"  [{check}] " in text
    assert "reads: servicequotas:GetServiceQuota" in text and "(8 vCPU on-demand)" in text
    assert "to run them: give this shell AWS credentials" in text and "export AWS_PROFILE=<profile>" in text
    assert text.rstrip().endswith("RESULT: INCOMPLETE - 0 blocker(s), 2 warning(s) from the checks that need no "
                                  "AWS account; 6 AWS check(s) not run (exit 3)")


def test_the_shipped_placeholder_still_blocks_without_credentials(no_credentials, capsys):
    assert stacks_main(["preflight", "dev"]) == 1
    text = capsys.readouterr().out
    assert "BLOCKERS:\n  [cluster API] cluster.publicAccessCidrs: 203.0.113.10/32 is a documentation address" in text
    assert "fix: python -m stacks allow-my-address dev" in text
    assert "NOT RUN, no AWS credentials found" in text and "(exit 1)" in text


def test_strict_json_without_credentials_says_incomplete(no_credentials, stack_dir):
    """The command as the workflows and a person run it: a real process, no traceback, JSON on stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "stacks", "preflight", "dev", "--dir", str(stack_dir), "--address", ADDRESS,
         "--strict", "--json"], capture_output=True, text=True, cwd=REPO, env=no_credentials, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["result"] == "incomplete" and data["complete"] is False and data["ok"] is False
    assert data["exit_code"] == 3 and data["pools"] == [] and data["quotas"] == []
    assert [c["check"] for c in data["not_run"]] == AWS_CHECKS
    assert all(c["answers"] and c["reads"] for c in data["not_run"])
    assert data["credentials"].startswith("no AWS credentials found")
    assert "AWS_PROFILE" in data["how_to_provide_credentials"]
    subjects = {f["subject"] for f in data["findings"]}
    assert {"stack file", "cluster API", "hfToken", "weights.revisions", "zones"} <= subjects
    assert not [f for f in data["findings"] if f["level"] == "blocker"]


def test_pinned_zones_are_named(no_credentials, tmp_path, capsys):
    text = (REPO / "Pulumi.dev.yaml").read_text()
    pinned = "    availabilityZones: [ap-northeast-2b, ap-northeast-2c]\n"
    assert pinned in text
    (tmp_path / "Pulumi.dev.yaml").write_text(text.replace(pinned, "    availabilityZones: [ap-northeast-2a, "
                                                                   "ap-northeast-2c]\n", 1))
    stacks_main(["preflight", "dev", "--dir", str(tmp_path), "--json"])
    [zones] = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["subject"] == "zones"]
    assert zones["message"] == "pinned by vllm-poc:network.availabilityZones: ap-northeast-2a, ap-northeast-2c"


def test_unpinned_zones_are_said_with_the_fix(no_credentials, tmp_path, capsys):
    text = (REPO / "Pulumi.dev.yaml").read_text()
    pinned = "    availabilityZones: [ap-northeast-2b, ap-northeast-2c]\n"
    assert pinned in text
    (tmp_path / "Pulumi.dev.yaml").write_text(text.replace(pinned, "", 1))
    stacks_main(["preflight", "dev", "--dir", str(tmp_path), "--json"])
    [zones] = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["subject"] == "zones"]
    assert zones["message"].startswith("not pinned: `pulumi up` picks 2 zones of ap-northeast-2")
    assert zones["fix"] == "set vllm-poc:network.availabilityZones to pin them"


class Refused:
    """An AWS client whose every call is refused for expired keys."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise ClientError({"Error": {"Code": "ExpiredToken", "Message": "The security token included in the "
                                         "request is expired"}}, name)
        return refuse


def test_keys_refused_mid_run_read_as_incomplete_not_as_an_error(stack_dir, capsys):
    args = argparse.Namespace(
        stack="dev", json=True, strict=False, inside_vpc=False, dir=str(stack_dir), address=ADDRESS)
    clients = {name: Refused() for name in ("ec2", "quotas", "pricing", "ssm", "sts", "iam")}
    assert preflight.run(args, clients) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["result"] == "incomplete" and "ExpiredToken" in data["credentials"]


def test_a_bad_address_is_bad_input(no_credentials, stack_dir, capsys):
    assert stacks_main(["preflight", "dev", "--dir", str(stack_dir), "--address", "10.1.2.3"]) == 2
    assert "--address is 10.1.2.3, which is not a public IPv4 address" in capsys.readouterr().err


def test_teardown_check_says_which_credentials_it_needs(no_credentials, capsys):
    assert stacks_main(["teardown-check", "dev"]) == 3
    text = capsys.readouterr().out
    assert text.startswith("teardown-check vllm-poc-dev in ap-northeast-2: NOT RUN, no AWS credentials found")
    assert "reads: ec2:DescribeInstances" in text and "s3:ListAllMyBuckets" in text
    assert "to run it: give this shell AWS credentials" in text
    assert text.rstrip().endswith("RESULT: INCOMPLETE - nothing was checked (exit 3)")
    assert stacks_main(["teardown-check", "dev", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["complete"] is False and data["result"] == "incomplete" and data["leftovers"] == []
    assert data["not_run"][0]["check"] == "leftovers" and "ec2:DescribeInstances" in data["not_run"][0]["reads"]


def test_pre_destroy_says_what_it_needs_and_dry_run_works_without(no_credentials, capsys):
    assert stacks_main(["pre-destroy", "dev"]) == 3
    err = capsys.readouterr().err
    assert "pre-destroy vllm-poc-dev in ap-northeast-2: NOT RUN, no AWS credentials found" in err
    assert "`--dry-run` prints its steps without them" in err
    assert stacks_main(["pre-destroy", "dev", "--dry-run"]) == 0
    assert "aws eks update-kubeconfig" in capsys.readouterr().out
