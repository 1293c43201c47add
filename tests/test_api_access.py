"""The way to the Kubernetes API: every stack has one, each path renders its rules, the shipped
placeholder renders offline and is refused in a real account, and `allow-my-address` / `api-path`
against an address lookup on 127.0.0.1."""

from __future__ import annotations

import http.server
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from pulumi.errors import RunError

from stacks.__main__ import main as stacks_main
from stacks.api_path import api_path_problems
from stacks.loader import load_settings
from stacks.ops import api_access, mocks
from stacks.settings import REPO, ConfigError
from tests.fixtures.pulumi_stack import render_with

RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EXISTING_VPC = {"vpcId": "vpc-0123abcd", "privateSubnets": {"ap-northeast-2b": "subnet-0123abcd",
                                                             "ap-northeast-2c": "subnet-0123abce"}}
EGRESS = "52.78.10.20"  # what the lookup on loopback answers: a public address, not a documentation one


@pytest.fixture
def lookup():
    """An address lookup like checkip.amazonaws.com on 127.0.0.1; `answer` is what it says next."""
    state = {"answer": f"{EGRESS}\n", "calls": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            state["calls"] += 1
            body = state["answer"].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def stack_dir(tmp_path) -> Path:
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    return tmp_path


# -- every stack has a path; each path renders its rules -------------------------------------------------


def test_every_shipped_stack_names_a_path_and_renders(all_stacks):
    for stack, rendered in all_stacks.items():
        settings = load_settings(stack)
        assert api_path_problems(settings) == [], stack
        cluster = rendered.one("eks:index:Cluster").inputs
        assert cluster["endpointPublicAccess"] is True
        assert cluster["publicAccessCidrs"] == ["203.0.113.10/32"], stack
        assert rendered.of_type(RULE) == []


def test_no_path_is_refused_before_anything_is_declared():
    with pytest.raises(ConfigError) as err:
        render_with(cluster={"name": "vllm-poc-dev"})
    text = str(err.value)
    assert "vllm-poc:cluster: no way to the Kubernetes API" in text
    assert "python -m stacks allow-my-address dev-test" in text and "privateAccessSecurityGroups" in text


def test_private_sources_become_443_rules_on_the_cluster_security_group():
    rendered = render_with(network=EXISTING_VPC, cluster={
        "name": "vllm-poc-dev", "privateAccessSecurityGroups": ["sg-0a1b2c3d4e5f60718"],
        "privateAccessCidrs": ["10.80.0.0/16"]})
    cluster = rendered.one("eks:index:Cluster")
    group = cluster.outputs["clusterSecurityGroupId"]
    rules = {r.name: r.inputs for r in rendered.of_type(RULE)}
    assert set(rules) == {"cluster-api-from-sg-0a1b2c3d4e5f60718", "cluster-api-from-10-80-0-0-16"}
    for rule in rules.values():
        assert rule["securityGroupId"] == group
        assert (rule["ipProtocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 443, 443)
    assert rules["cluster-api-from-sg-0a1b2c3d4e5f60718"]["referencedSecurityGroupId"] == "sg-0a1b2c3d4e5f60718"
    assert rules["cluster-api-from-10-80-0-0-16"]["cidrIpv4"] == "10.80.0.0/16"
    assert "privateAccessCidrs" in rules["cluster-api-from-10-80-0-0-16"]["description"]
    assert cluster.inputs["endpointPublicAccess"] is False


def test_both_paths_at_once():
    rendered = render_with(network=EXISTING_VPC, cluster={
        "name": "vllm-poc-dev", "publicAccessCidrs": ["52.78.10.20/32"], "privateAccessSecurityGroups": ["sg-0123abcd"]})
    assert rendered.one("eks:index:Cluster").inputs["publicAccessCidrs"] == ["52.78.10.20/32"]
    assert [r.inputs["referencedSecurityGroupId"] for r in rendered.of_type(RULE)] == ["sg-0123abcd"]


def test_the_placeholder_renders_offline_and_is_refused_in_a_real_account(monkeypatch):
    # Offline the mocks answer as AWS's documentation account: the shipped file renders (test above).
    monkeypatch.setattr(mocks, "ACCOUNT_ID", "210987654321")
    with pytest.raises(RunError) as err:
        render_with()
    text = str(err.value)
    assert "vllm-poc:cluster.publicAccessCidrs: 203.0.113.10/32 is a documentation address" in text
    assert "python -m stacks allow-my-address dev-test" in text
    # a real address passes in the same account
    render_with(cluster={"name": "vllm-poc-dev", "kubernetesVersion": "1.36", "publicAccessCidrs": [f"{EGRESS}/32"]})


# -- allow-my-address ------------------------------------------------------------------------------------


def test_allow_my_address_replaces_the_placeholder_and_keeps_the_file(stack_dir, lookup, capsys):
    path = stack_dir / "Pulumi.dev.yaml"
    before = path.read_text()
    assert stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--lookup-url", lookup["url"]]) == 0
    out = capsys.readouterr().out
    assert "[203.0.113.10/32] -> [52.78.10.20/32]" in out and "removed the documentation placeholder" in out
    after = path.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert changed == [("    publicAccessCidrs: [203.0.113.10/32]", "    publicAccessCidrs: [52.78.10.20/32]")]
    assert len(before.splitlines()) == len(after.splitlines())  # every comment kept
    assert load_settings("dev", stack_dir).cluster.public_access_cidrs == ["52.78.10.20/32"]

    # the same address again: nothing to do
    assert stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--lookup-url", lookup["url"]]) == 0
    assert "already in vllm-poc:cluster.publicAccessCidrs" in capsys.readouterr().out
    assert path.read_text() == after
    # another machine is added next to it
    assert stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--address", "3.36.1.2"]) == 0
    assert load_settings("dev", stack_dir).cluster.public_access_cidrs == ["52.78.10.20/32", "3.36.1.2/32"]


@pytest.mark.parametrize("answer, expected", [
    ("10.0.3.4", "not a public IPv4 address"),
    ("203.0.113.9", "not a public IPv4 address"),
    ("<html>blocked</html>", "not an IP address"),
])
def test_allow_my_address_refuses_what_is_not_a_public_address(answer, expected, stack_dir, lookup, capsys):
    lookup["answer"] = answer
    before = (stack_dir / "Pulumi.dev.yaml").read_text()
    assert stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--lookup-url", lookup["url"]]) == 2
    err = capsys.readouterr().err
    assert expected in err and "--address" in err and "Traceback" not in err
    assert (stack_dir / "Pulumi.dev.yaml").read_text() == before


def test_allow_my_address_without_a_lookup_says_how_to_give_it(stack_dir, capsys):
    assert stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir),
                        "--lookup-url", "http://127.0.0.1:9/"]) == 2
    assert "could not read this machine's address" in capsys.readouterr().err


@pytest.mark.parametrize("cluster, expected_line", [
    ("  vllm-poc:cluster:\n    name: c\n    publicAccessCidrs:\n      - 203.0.113.10/32\n    logRetentionDays: 30\n",
     "    publicAccessCidrs: [52.78.10.20/32]"),
    ("  vllm-poc:cluster:\n    name: c\n", "    publicAccessCidrs: [52.78.10.20/32]"),
    ("  vllm-poc:cluster:\n    name: c\n    publicAccessCidrs: []  # none yet\n", "    publicAccessCidrs: [52.78.10.20/32]  # none yet"),
    ("", "    publicAccessCidrs: [52.78.10.20/32]"),
])
def test_the_stack_file_edit_handles_each_way_of_writing_it(cluster, expected_line):
    text = "# head\nconfig:\n  aws:region: ap-northeast-2\n" + cluster + "  vllm-poc:tags:\n    Owner: me\n# tail\n"
    new = api_access.set_public_cidrs(text, ["52.78.10.20/32"])
    assert expected_line in new.splitlines()
    data = yaml.safe_load(new)["config"]
    assert data["vllm-poc:cluster"]["publicAccessCidrs"] == ["52.78.10.20/32"]
    assert data["vllm-poc:tags"] == {"Owner": "me"} and new.startswith("# head\n") and new.endswith("# tail\n")


# -- api-path and preflight: can this machine use the path? ---------------------------------------------


def test_api_path_checks_this_machines_address(stack_dir, lookup, capsys):
    argv = ["api-path", "dev", "--dir", str(stack_dir), "--lookup-url", lookup["url"]]
    assert stacks_main(argv) == 1
    out = capsys.readouterr().out
    assert "public endpoint for 203.0.113.10/32" in out and "BLOCKER: cluster.publicAccessCidrs: 203.0.113.10/32" in out
    stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--address", "3.36.1.2"])
    capsys.readouterr()
    assert stacks_main(argv) == 1
    out = capsys.readouterr().out
    assert f"this machine's egress address {EGRESS} is not in vllm-poc:cluster.publicAccessCidrs (3.36.1.2/32)" in out
    assert "python -m stacks allow-my-address dev (adds 52.78.10.20/32)" in out
    stacks_main(["allow-my-address", "dev", "--dir", str(stack_dir), "--lookup-url", lookup["url"]])
    capsys.readouterr()
    assert stacks_main(argv) == 0
    assert f"this machine's egress address {EGRESS} is in publicAccessCidrs (52.78.10.20/32)" in capsys.readouterr().out
    # from inside the VPC the public list does not help: the cluster security group must admit the runner
    assert stacks_main([*argv, "--inside-vpc"]) == 1
    assert "privateAccessSecurityGroups" in capsys.readouterr().out
