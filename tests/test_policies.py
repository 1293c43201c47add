"""The policy pack: the node, storage and IAM rules on hand-built engine arguments, then the pack
itself over gRPC. The rules on workloads are tests/test_policies_workloads.py."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UNKNOWN_STRING_VALUE

from policy import policies as pp
from tests.fixtures.policy_args import FP8_MODEL, deployment, policy_urn, resource, validate, validate_stack, vllm

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# EC2NodeClass IMDS

def nodeclass(metadata_options: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"role": "KarpenterNodeRole-vllm-poc-dev",
                            "amiSelectorTerms": [{"alias": "al2023@v20260709"}],
                            "instanceStorePolicy": "RAID0"}
    if metadata_options is not None:
        spec["metadataOptions"] = metadata_options
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "gpu"}, "spec": spec}


@pytest.mark.parametrize("options, violations", [
    ({"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}, 0),
    ({"httpTokens": "required", "httpPutResponseHopLimit": 1.0}, 0),  # numbers arrive as floats
    (None, 1),
    ({"httpTokens": "required", "httpPutResponseHopLimit": 2}, 1),
    ({"httpTokens": "optional", "httpPutResponseHopLimit": 1}, 1),
    ({"httpTokens": "optional"}, 2),
    ({"httpTokens": UNKNOWN_STRING_VALUE, "httpPutResponseHopLimit": 1}, 0),
])
def test_ec2nodeclass_imds(options, violations):
    messages = validate(pp.EC2NODECLASS_IMDS, pp.EC2_NODE_CLASS, nodeclass(options))
    assert len(messages) == violations, messages


# ---------------------------------------------------------------------------------------------
# GPU NodePool taint

def nodepool(requirements: list[dict[str, Any]], taints: Any = None, labels: dict | None = None,
             limits: dict | None = None) -> dict[str, Any]:
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
        "requirements": requirements}
    if taints is not None:
        template_spec["taints"] = taints
    spec: dict[str, Any] = {"template": {"metadata": {"labels": labels or {}}, "spec": template_spec}}
    if limits:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"}, "spec": spec}


INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]


@pytest.mark.parametrize("requirements, labels, limits", [
    ([{"key": INSTANCE_TYPE, "operator": "In", "values": ["g6e.2xlarge"]}], None, None),
    ([{"key": INSTANCE_TYPE, "operator": "In", "values": ["p5.48xlarge"]}], None, None),
    ([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g7e"]}], None, None),
    ([{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["g"]}], None, None),
    ([{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}], None, None),
    ([], {"nvidia.com/gpu.present": "true"}, None),
    ([], None, {"nvidia.com/gpu": "4"}),
])
def test_gpu_nodepool_without_taint_fails(requirements, labels, limits):
    props = nodepool(requirements, labels=labels, limits=limits)
    assert len(validate(pp.GPU_NODEPOOL_TAINT, pp.NODE_POOL, props)) == 1
    props = nodepool(requirements, taints=GPU_TAINT, labels=labels, limits=limits)
    assert validate(pp.GPU_NODEPOOL_TAINT, pp.NODE_POOL, props) == []


def test_gpu_nodepool_taint_needs_noschedule():
    taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": "PreferNoSchedule"}]
    props = nodepool([{"key": INSTANCE_TYPE, "operator": "In", "values": ["g6e.12xlarge"]}], taints)
    assert len(validate(pp.GPU_NODEPOOL_TAINT, pp.NODE_POOL, props)) == 1


@pytest.mark.parametrize("requirements", [
    [{"key": INSTANCE_TYPE, "operator": "In", "values": ["m7i.xlarge"]}],
    [{"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["g6e", "g7e"]}],
    [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}],
])
def test_cpu_nodepool_needs_no_taint(requirements):
    assert validate(pp.GPU_NODEPOOL_TAINT, pp.NODE_POOL, nodepool(requirements)) == []


def test_gpu_nodepool_unknown_taints_are_not_violations():
    props = nodepool([{"key": INSTANCE_TYPE, "operator": "In", "values": ["g6e.2xlarge"]}],
                     taints=UNKNOWN_ARRAY_VALUE)
    assert validate(pp.GPU_NODEPOOL_TAINT, pp.NODE_POOL, props) == []


# ---------------------------------------------------------------------------------------------
# S3: public-access block and TLS-only policy (stack rule)

BUCKET = "aws:s3/bucket:Bucket"


def tls_policy(bucket_arn: str = "arn:aws:s3:::vllm-poc-dev-weights") -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]})


def block(bucket: Any, **flags: Any) -> dict[str, Any]:
    props = {flag: True for flag in pp.PUBLIC_ACCESS_FLAGS}
    props.update(flags)
    props["bucket"] = bucket
    return props


def s3_stack(block_props: dict | None, policy_props: dict | None, bucket_type: str = BUCKET,
             deps: bool = False) -> list[PolicyResource]:
    bucket = resource(bucket_type, "weights", {"bucket": "vllm-poc-dev-weights", "forceDestroy": True})
    found = [bucket]
    link = {"bucket": [bucket]} if deps else None
    if block_props is not None:
        found.append(resource(pp.PUBLIC_ACCESS_BLOCK, "weights-public-access", block_props, link))
    if policy_props is not None:
        found.append(resource(pp.BUCKET_POLICY, "weights-tls-only", policy_props, link))
    return found


@pytest.mark.parametrize("bucket_type", [BUCKET, "aws:s3/bucketV2:BucketV2"])
def test_s3_protected_bucket_passes(bucket_type):
    stack = s3_stack(block("vllm-poc-dev-weights"),
                     {"bucket": "vllm-poc-dev-weights", "policy": tls_policy()}, bucket_type)
    assert validate_stack(pp.S3_BUCKET_PROTECTION, stack) == []


def test_s3_bucket_without_companions_fails_twice():
    found = validate_stack(pp.S3_BUCKET_PROTECTION, s3_stack(None, None))
    assert len(found) == 2
    assert all(urn == policy_urn(BUCKET, "weights") for _, urn in found)
    assert "BucketPublicAccessBlock" in found[0][0] and "aws:SecureTransport" in found[1][0]


def test_s3_block_with_a_false_flag_fails():
    stack = s3_stack(block("vllm-poc-dev-weights", restrictPublicBuckets=False),
                     {"bucket": "vllm-poc-dev-weights", "policy": tls_policy()})
    [(message, _)] = validate_stack(pp.S3_BUCKET_PROTECTION, stack)
    assert "restrictPublicBuckets" in message


@pytest.mark.parametrize("policy", [
    json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                               "Resource": "arn:aws:s3:::vllm-poc-dev-weights/*"}]}),
    # Denies plain HTTP only on the bucket ARN, not on its objects.
    json.dumps({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                               "Resource": "arn:aws:s3:::vllm-poc-dev-weights",
                               "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}),
    # Condition on the wrong value.
    tls_policy().replace('"false"', '"true"'),
])
def test_s3_policy_that_is_not_tls_only_fails(policy):
    stack = s3_stack(block("vllm-poc-dev-weights"), {"bucket": "vllm-poc-dev-weights", "policy": policy})
    assert len(validate_stack(pp.S3_BUCKET_PROTECTION, stack)) == 1


def test_s3_policy_as_dict_with_boolean_false_passes():
    doc = json.loads(tls_policy())
    doc["Statement"][0]["Condition"] = {"Bool": {"aws:SecureTransport": False}}
    stack = s3_stack(block("vllm-poc-dev-weights"), {"bucket": "vllm-poc-dev-weights", "policy": doc})
    assert validate_stack(pp.S3_BUCKET_PROTECTION, stack) == []


def test_s3_companions_found_through_dependencies_when_the_name_is_unknown():
    # Preview of a new stack: bucket.id is unknown, but the engine records where `bucket` came from.
    stack = s3_stack(block(UNKNOWN_STRING_VALUE), {"bucket": UNKNOWN_STRING_VALUE, "policy": tls_policy()},
                     deps=True)
    assert validate_stack(pp.S3_BUCKET_PROTECTION, stack) == []
    stack = s3_stack(block(UNKNOWN_STRING_VALUE, blockPublicAcls=False), None, deps=True)
    assert len(validate_stack(pp.S3_BUCKET_PROTECTION, stack)) == 2


def test_s3_unknown_links_and_documents_are_not_violations():
    # Companion target unknown and no dependency recorded: cannot tell which bucket it protects.
    stack = s3_stack(block(UNKNOWN_STRING_VALUE), {"bucket": UNKNOWN_STRING_VALUE, "policy": tls_policy()})
    assert validate_stack(pp.S3_BUCKET_PROTECTION, stack) == []
    # Policy document built from the bucket ARN in an apply: unknown during preview.
    stack = s3_stack(block("vllm-poc-dev-weights"),
                     {"bucket": "vllm-poc-dev-weights", "policy": UNKNOWN_STRING_VALUE})
    assert validate_stack(pp.S3_BUCKET_PROTECTION, stack) == []


def test_s3_other_buckets_are_checked_separately():
    stack = s3_stack(block("vllm-poc-dev-weights"),
                     {"bucket": "vllm-poc-dev-weights", "policy": tls_policy()})
    stack.append(resource(BUCKET, "results", {"bucket": "vllm-poc-dev-results"}))
    found = validate_stack(pp.S3_BUCKET_PROTECTION, stack)
    assert len(found) == 2 and {urn for _, urn in found} == {policy_urn(BUCKET, "results")}


# ---------------------------------------------------------------------------------------------
# IAM: wildcard actions on workload roles (stack rule)

ROLE = "aws:iam/role:Role"


def trust(service: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service},
        "Action": ["sts:AssumeRole", "sts:TagSession"]}]})


def doc(*actions: str, effect: str = "Allow", resource_arn: str = "*") -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": effect, "Action": list(actions), "Resource": resource_arn}]})


def role(name: str = "vllm-s3", service: str = pp.POD_IDENTITY_PRINCIPAL,
         tags: dict | None = None, **props: Any) -> PolicyResource:
    values = {"name": name, "assumeRolePolicy": trust(service), **props}
    if tags is not None:
        values["tags"] = tags
    return resource(ROLE, name, values)


def role_policy(role_ref: Any, policy: Any, deps: list[PolicyResource] | None = None) -> PolicyResource:
    return resource(pp.ROLE_POLICY, "vllm-s3-read", {"role": role_ref, "policy": policy},
                    {"role": deps} if deps else None)


@pytest.mark.parametrize("actions", [("s3:*",), ("*",), ("s3:Get*",), ("s3:GetObjec?",)])
def test_iam_wildcard_on_pod_identity_role_fails(actions):
    found = validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy("vllm-s3", doc(*actions))])
    assert len(found) == 1
    message, urn = found[0]
    assert urn == policy_urn(pp.ROLE_POLICY, "vllm-s3-read") and actions[0] in message


def test_iam_explicit_actions_with_resource_wildcard_pass():
    policy = doc("s3:GetObject", "s3:ListBucket", resource_arn="*")
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy("vllm-s3", policy)]) == []


def test_iam_deny_with_wildcards_passes():
    policy = doc("s3:*", effect="Deny")
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy("vllm-s3", policy)]) == []


def test_iam_not_action_counts_as_wildcard():
    policy = json.dumps({"Statement": [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]})
    assert len(validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy("vllm-s3", policy)])) == 1


def test_iam_non_workload_role_may_use_wildcards():
    node_role = role("node", service="ec2.amazonaws.com")
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [node_role, role_policy("node", doc("s3:*"))]) == []


def test_iam_tagged_workload_role_fails():
    tagged = role("bench", service="ec2.amazonaws.com", tags={"vllm-poc/workload": "true"})
    found = validate_stack(pp.IAM_WILDCARD_ACTIONS, [tagged, role_policy("bench", doc("ec2:Describe*"))])
    assert len(found) == 1 and "ec2:Describe*" in found[0][0]


def test_iam_managed_policy_attached_to_workload_role_fails():
    policy = resource(pp.IAM_POLICY, "results-write", {"name": "results-write-1a2b", "policy": doc("s3:Put*"),
                                                      "arn": "arn:aws:iam::111122223333:policy/results-write-1a2b"})
    attach = resource(pp.ROLE_POLICY_ATTACHMENT, "results-write-attach",
                      {"role": "vllm-s3", "policyArn": "arn:aws:iam::111122223333:policy/results-write-1a2b"})
    found = validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), policy, attach])
    assert len(found) == 1 and found[0][1] == policy_urn(pp.IAM_POLICY, "results-write")


def test_iam_managed_policy_linked_through_dependencies():
    workload = role()
    policy = resource(pp.IAM_POLICY, "results-write", {"policy": doc("s3:*")})
    attach = resource(pp.ROLE_POLICY_ATTACHMENT, "attach",
                      {"role": UNKNOWN_STRING_VALUE, "policyArn": UNKNOWN_STRING_VALUE},
                      {"role": [workload], "policyArn": [policy]})
    assert len(validate_stack(pp.IAM_WILDCARD_ACTIONS, [workload, policy, attach])) == 1


def test_iam_inline_policy_on_role_fails():
    workload = role(inlinePolicies=[{"name": "s3", "policy": doc("s3:*")}])
    assert len(validate_stack(pp.IAM_WILDCARD_ACTIONS, [workload])) == 1


def test_iam_karpenter_reference_controller_policy_passes():
    # Action list of the upstream ResourceDiscovery/NodeLifecycle policies: explicit actions,
    # `*` only in resources and condition values.
    controller = role("karpenter-controller")
    policy = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Resource": "*", "Action": [
            "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
            "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes", "ec2:DescribeSubnets",
            "ec2:DescribeSpotPriceHistory"]},
        {"Effect": "Allow", "Resource": "arn:aws:ec2:ap-northeast-2:*:launch-template/*",
         "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
         "Condition": {"StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
        {"Effect": "Allow", "Resource": "*", "Action": "pricing:GetProducts"}]})
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS,
                          [controller, role_policy("karpenter-controller", policy)]) == []


def test_iam_unknown_links_and_documents_are_not_violations():
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy(UNKNOWN_STRING_VALUE, doc("s3:*"))]) == []
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [role(), role_policy("vllm-s3", UNKNOWN_STRING_VALUE)]) == []
    unknown_trust = resource(ROLE, "vllm-s3", {"name": "vllm-s3", "assumeRolePolicy": UNKNOWN_STRING_VALUE})
    assert validate_stack(pp.IAM_WILDCARD_ACTIONS, [unknown_trust, role_policy("vllm-s3", doc("s3:*"))]) == []


# ---------------------------------------------------------------------------------------------
# check_resources: the entry point for the offline render

def test_check_resources_runs_every_rule_and_names_resources():
    bad = [
        (pp.DEPLOYMENT, "gemma-fp8", deployment(vllm([FP8_MODEL, "--max-num-seqs", "32"], image="vllm/vllm-openai"))),
        (pp.EC2_NODE_CLASS, "gpu", nodeclass()),
        (pp.NODE_POOL, "l40s", nodepool([{"key": INSTANCE_TYPE, "operator": "In", "values": ["g6e.2xlarge"]}])),
        (BUCKET, "weights", {"bucket": "vllm-poc-dev-weights"}),
        (ROLE, "vllm-s3", {"name": "vllm-s3", "assumeRolePolicy": trust(pp.POD_IDENTITY_PRINCIPAL)}),
        (pp.ROLE_POLICY, "vllm-s3-read", {"role": "vllm-s3", "policy": doc("s3:*")}),
    ]
    found = {(v.policy, v.resource) for v in pp.check_resources(bad)}
    assert found == {
        ("vllm-fp8-kv-cache", "gemma-fp8"), ("vllm-max-num-seqs", "gemma-fp8"),
        ("container-image-pinned", "gemma-fp8"), ("container-image-digest", "gemma-fp8"),
        ("ec2nodeclass-imdsv2-hop-limit", "gpu"), ("gpu-nodepool-taint", "l40s"), ("s3-bucket-public-access-and-tls", "weights"),
        ("iam-no-wildcard-actions-on-workload-roles", "vllm-s3-read"),
    }
    assert {p.name for p in pp.POLICIES} == {policy for policy, _ in found}


def test_check_resources_compliant_set_and_config_and_ids():
    good = [
        (pp.DEPLOYMENT, "gemma-fp8", deployment(vllm([FP8_MODEL, "--kv-cache-dtype", "fp8",
                                                       "--max-num-seqs", "64"]))),
        # Under mocks the companions point at the bucket's id, passed as the fourth element.
        (BUCKET, "weights", {"bucket": "vllm-poc-dev-weights"}, "weights_id"),
        (pp.PUBLIC_ACCESS_BLOCK, "weights-pab", block("weights_id")),
        (pp.BUCKET_POLICY, "weights-tls", {"bucket": "weights_id", "policy": tls_policy()}),
    ]
    assert pp.check_resources(good) == []
    found = pp.check_resources(good, {"vllm-max-num-seqs": {"benchMaxConcurrency": 128}})
    assert [(v.policy, v.resource) for v in found] == [("vllm-max-num-seqs", "gemma-fp8")]


# ---------------------------------------------------------------------------------------------
# The pack as the CLI runs it: `python -m pulumi.policy <engine> policy`, then gRPC


def test_pack_requirements_match_pyproject_pins():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = set(pyproject["project"]["dependencies"]) | set(pyproject["project"]["optional-dependencies"]["test"])
    lines = [line.strip() for line in (REPO / "policy/requirements.txt").read_text().splitlines()]
    wanted = {line for line in lines if line and not line.startswith("#")}
    assert {line.split("==")[0] for line in wanted} == {"pulumi", "pulumi-policy"}
    assert wanted <= pinned


@pytest.fixture(scope="module")
def analyzer():
    import grpc
    from pulumi.runtime.proto import analyzer_pb2_grpc

    process = subprocess.Popen([sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "policy"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = process.stdout.readline().strip()
        assert port.isdigit(), process.stderr.read() if process.poll() is not None else port
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        process.kill()
        process.wait(timeout=10)


def _struct(data: dict[str, Any]):
    from google.protobuf import struct_pb2

    value = struct_pb2.Struct()
    value.update(data)
    return value


def test_pack_boots_and_lists_every_policy(analyzer):
    from google.protobuf import empty_pb2

    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=20)
    assert info.name == pp.PACK_NAME
    assert [p.name for p in info.policies] == [p.name for p in pp.POLICIES]


def test_pack_analyzes_a_deployment_with_config(analyzer):
    from pulumi.runtime.proto import analyzer_pb2

    props = deployment(vllm([FP8_MODEL, "--kv-cache-dtype", "fp8", "--max-num-seqs", "64"]))
    request = analyzer_pb2.AnalyzeRequest(type=pp.DEPLOYMENT, properties=_struct(props),
                                          urn=policy_urn(pp.DEPLOYMENT, "gemma-fp8"), name="gemma-fp8")
    assert [d.policyName for d in analyzer.Analyze(request, timeout=20).diagnostics] == []

    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={
        "vllm-max-num-seqs": analyzer_pb2.PolicyConfig(
            enforcementLevel=analyzer_pb2.MANDATORY,
            properties=_struct({"benchMaxConcurrency": 128}))}), timeout=20)
    diagnostics = analyzer.Analyze(request, timeout=20).diagnostics
    assert [(d.policyName, d.enforcementLevel) for d in diagnostics] == \
        [("vllm-max-num-seqs", analyzer_pb2.MANDATORY)]


def test_pack_analyzes_the_stack_with_unknown_values(analyzer):
    from pulumi.runtime.proto import analyzer_pb2

    bucket_urn = policy_urn(BUCKET, "weights")
    resources = [
        analyzer_pb2.AnalyzerResource(type=BUCKET, urn=bucket_urn, name="weights",
                                      properties=_struct({"bucket": UNKNOWN_STRING_VALUE})),
        analyzer_pb2.AnalyzerResource(
            type=pp.BUCKET_POLICY, urn=policy_urn(pp.BUCKET_POLICY, "tls"), name="tls",
            properties=_struct({"bucket": UNKNOWN_STRING_VALUE, "policy": UNKNOWN_STRING_VALUE}),
            propertyDependencies={"bucket": analyzer_pb2.AnalyzerPropertyDependencies(urns=[bucket_urn])}),
    ]
    diagnostics = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=resources),
                                        timeout=20).diagnostics
    # No public-access block at all is a finding even in preview; the unknown policy is not.
    assert [(d.policyName, d.urn) for d in diagnostics] == \
        [("s3-bucket-public-access-and-tls", bucket_urn)]
    assert "BucketPublicAccessBlock" in diagnostics[0].message
