"""API exposure: the EKS endpoint, node metadata, and the vLLM servers' API key."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from bench.run import server as bench_server
from components.cluster import ADDON_CONFIGURATION
from stacks.settings import ConfigError, settings_from_config
from tests.fixtures.pulumi_stack import render_with, stack_config


def inputs(rendered, typ: str) -> dict:
    return rendered.one(typ).inputs


# -- EKS API endpoint -----------------------------------------------------------------------------


EXISTING_VPC = {"vpcId": "vpc-0123abcd", "privateSubnets": {"ap-northeast-2b": "subnet-0123abcd",
                                                             "ap-northeast-2c": "subnet-0123abce"}}


def test_api_endpoint_is_private_unless_the_stack_file_names_cidrs(dev):
    # The shipped file names its placeholder: the endpoint answers those CIDRs only.
    cluster = inputs(dev, "eks:index:Cluster")
    assert cluster["endpointPublicAccess"] is True and cluster["endpointPrivateAccess"] is True
    assert cluster["publicAccessCidrs"] == ["203.0.113.10/32"]

    rendered = render_with("dev", network=EXISTING_VPC,
                           cluster={"name": "vllm-poc-dev", "privateAccessSecurityGroups": ["sg-0123abcd"]})
    cluster = inputs(rendered, "eks:index:Cluster")
    assert cluster["endpointPublicAccess"] is False and cluster["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in cluster


def test_whole_internet_needs_an_explicit_acknowledgement():
    config = stack_config("dev")
    config["vllm-poc:cluster"] = {"name": "vllm-poc-dev", "publicAccessCidrs": ["0.0.0.0/0"]}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="dev")
    assert "vllm-poc:cluster" in str(err.value) and "publicEndpointFromAnywhere" in str(err.value)
    config["vllm-poc:cluster"]["publicEndpointFromAnywhere"] = True
    assert settings_from_config(config, stack="dev").cluster.public_access_cidrs == ["0.0.0.0/0"]


# -- nodes and the CNI ----------------------------------------------------------------------------


def test_system_nodes_use_imdsv2_with_hop_limit_one(dev):
    template = inputs(dev, "aws:ec2/launchTemplate:LaunchTemplate")
    assert template["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                           "httpPutResponseHopLimit": 1}
    (volume,) = template["blockDeviceMappings"]
    assert volume["deviceName"] == "/dev/xvda" and volume["ebs"]["volumeSize"] == 50
    assert volume["ebs"]["encrypted"] == "true"
    group = inputs(dev, "eks:index:ManagedNodeGroup")
    assert "diskSize" not in group  # EKS refuses a disk size next to a launch template
    assert group["launchTemplate"]["id"] == dev.one("aws:ec2/launchTemplate:LaunchTemplate").outputs["id"]


def test_vpc_cni_enforces_network_policies(dev):
    addon = next(r for r in dev.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "vpc-cni")
    assert json.loads(addon.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert set(ADDON_CONFIGURATION) == {"vpc-cni"}


# -- vLLM API key -------------------------------------------------------------------------------


def _env(container) -> dict:
    return {e["name"]: e for e in container["env"]}


def _bench_job(rendered) -> dict:
    (job,) = [j for j in rendered.k8s("Job") if j["metadata"]["name"].startswith("bench-")]
    return job


def test_no_api_key_by_default(dev):
    for obj in (*dev.k8s("Deployment"), _bench_job(dev)):
        env = _env(obj["spec"]["template"]["spec"]["containers"][0])
        assert "VLLM_API_KEY" not in env and "OPENAI_API_KEY" not in env


def test_api_key_from_a_secret_reaches_server_and_bench():
    rendered = render_with("dev", security={"apiKeySecret": "vllm-api-key"})
    ref = {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}
    (server,) = rendered.k8s("Deployment")
    container = server["spec"]["template"]["spec"]["containers"][0]
    assert _env(container)["VLLM_API_KEY"]["valueFrom"] == ref
    # never on the command line, where `ps` and the bench's recorded server args would show it
    assert "--api-key" not in container["args"]
    job = _bench_job(rendered)
    assert _env(job["spec"]["template"]["spec"]["containers"][0])["OPENAI_API_KEY"]["valueFrom"] == ref


def test_bad_api_key_secret_name_names_the_key():
    config = stack_config("dev")
    config["vllm-poc:security"] = {"apiKeySecret": "Not_A_Name"}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="dev")
    assert "vllm-poc:security.apiKeySecret" in str(err.value)


class _KeyedServer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = not self.path.startswith("/v1") or self.headers.get("Authorization") == "Bearer s3cret"
        body = json.dumps({"data": [{"id": "m", "max_model_len": 8192}]} if ok else {"error": "Unauthorized"})
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_bench_probes_send_the_api_key(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _KeyedServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        assert bench_server._get(url + "/v1/models")[0] == 401
        monkeypatch.setenv("OPENAI_API_KEY", "s3cret")
        assert bench_server._get(url + "/v1/models")[0] == 200
        assert bench_server.probe_server(url, "m")["served_models"] == ["m"]
    finally:
        server.shutdown()
