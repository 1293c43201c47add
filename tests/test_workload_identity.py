"""WorkloadIdentity under Pulumi mocks: trust, least-privilege policies, ServiceAccount, association."""

from __future__ import annotations

import fnmatch
import json

import kubernetes_validate
import pytest

from components.workload_identity import (
    WorkloadIdentity,
    WorkloadIdentityArgs,
    bench_statements,
    server_statements,
    statement_problems,
)
from policy import policies
from stacks import serving
from stacks.ops import mocks as mocks_module

K8S_VERSION = "1.34.0"
WEIGHTS_ARN = "arn:aws:s3:::vllm-poc-test-weights-123456789012-ap-northeast-2"
RESULTS_ARN = "arn:aws:s3:::vllm-poc-test-results-123456789012-ap-northeast-2"
CLUSTER_ARN = "arn:aws:eks:ap-northeast-2:123456789012:cluster/vllm-poc-test"
KMS = "arn:aws:kms:ap-northeast-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
FP8 = "RedHatAI/gemma-4-31B-it-FP8-dynamic"
DRAFT = "google/gemma-4-31B-it-assistant"


def render(build) -> list[mocks_module.Registration]:
    return mocks_module.run(build).registrations


def identity_args(statements, **kw) -> WorkloadIdentityArgs:
    return WorkloadIdentityArgs(cluster_name="vllm-poc-test", cluster_arn=CLUSTER_ARN,
                                account_id="123456789012", namespace="vllm",
                                service_account=kw.pop("service_account", "gemma-fp8"),
                                statements=statements, **kw)


def server_policy_statements(kms=None):
    prefixes = serving.server_model_prefixes(
        serving.ServerSettings(name="gemma-fp8", pool="l40s", model="fp8-dynamic", traffic_class="batch"))
    return server_statements(WEIGHTS_ARN, prefixes, kms)


def bench_policy_statements(kms=None):
    return bench_statements(WEIGHTS_ARN, [FP8], RESULTS_ARN, "runs/dev/", kms)


@pytest.fixture(scope="module")
def server_identity():
    return render(lambda: WorkloadIdentity("srv", identity_args(server_policy_statements())))


def one(regs, suffix):
    [reg] = [r for r in regs if r.type.endswith(suffix)]
    return reg


def policy_of(regs) -> dict:
    return json.loads(one(regs, "iam/rolePolicy:RolePolicy").inputs["policy"])


# -- a tiny IAM evaluator: enough to prove what a document allows and what it does not -------------


def allowed(document: dict, action: str, resource: str, prefix: str | None = None) -> bool:
    for st in document["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if st["Effect"] != "Allow" or action not in actions:
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
            continue
        condition = st.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if condition is not None and (prefix is None or not any(fnmatch.fnmatchcase(prefix, c) for c in condition)):
            continue
        return True
    return False


# -- trust and wiring ---------------------------------------------------------------------------


def test_trust_is_pod_identity_for_one_service_account(server_identity):
    trust = json.loads(one(server_identity, "iam/role:Role").inputs["assumeRolePolicy"])
    [st] = trust["Statement"]
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert st["Condition"]["StringEquals"] == {
        "aws:SourceAccount": "123456789012",
        "aws:RequestTag/eks-cluster-arn": CLUSTER_ARN,
        "aws:RequestTag/kubernetes-namespace": "vllm",
        "aws:RequestTag/kubernetes-service-account": "gemma-fp8",
    }


def test_association_binds_the_service_account_after_its_permissions(server_identity):
    regs = server_identity
    association = one(regs, "PodIdentityAssociation")
    role = one(regs, "iam/role:Role")
    assert association.inputs["clusterName"] == "vllm-poc-test"
    assert association.inputs["namespace"] == "vllm"
    assert association.inputs["serviceAccount"] == "gemma-fp8"
    assert association.inputs["roleArn"] == role.outputs["arn"]
    assert one(regs, "RolePolicy").urn in association.dependencies
    assert one(regs, "ServiceAccount").urn in association.dependencies


def test_service_account_validates_against_kubernetes_1_34(server_identity):
    sa = one(server_identity, "core/v1:ServiceAccount").inputs
    assert sa["metadata"]["name"] == "gemma-fp8" and sa["metadata"]["namespace"] == "vllm"
    kubernetes_validate.validate({k: sa[k] for k in ("apiVersion", "kind", "metadata")},
                                 K8S_VERSION, strict=True)


def test_children_are_parented_and_named_after_the_component(server_identity):
    component = one(server_identity, "identity:WorkloadIdentity")
    for reg in server_identity:
        if reg is not component:
            assert reg.parent_urn == component.urn and reg.name.startswith("srv-")


# -- the server's policy ---------------------------------------------------------------------------


def test_server_reads_its_models_and_caches_only(server_identity):
    doc = policy_of(server_identity)
    for key in (f"models/{FP8}/model-00001-of-00007.safetensors", f"models/{DRAFT}/config.json",
                "compile-cache/torch_compile_cache/abc/rank_0_0/model", "assets/model_streamer/x"):
        assert allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/{key}"), key
    for key in ("models/nvidia/Gemma-4-31B-IT-NVFP4/model.safetensors",
                "models/google/gemma-4-31B-it/config.json", "runs/dev/x.json", "other/x"):
        assert not allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/{key}"), key
    assert allowed(doc, "s3:ListBucket", WEIGHTS_ARN, prefix=f"models/{FP8}/")
    assert allowed(doc, "s3:ListBucket", WEIGHTS_ARN, prefix="compile-cache/")
    assert not allowed(doc, "s3:ListBucket", WEIGHTS_ARN, prefix="models/")
    assert not allowed(doc, "s3:ListBucket", WEIGHTS_ARN, prefix=None)
    for action in ("s3:PutObject", "s3:DeleteObject"):
        assert not allowed(doc, action, f"{WEIGHTS_ARN}/models/{FP8}/x")


def test_bf16_prefix_does_not_open_the_assistant_prefix():
    bf16 = serving.ServerSettings(name="b", pool="p", model="bf16", traffic_class="interactive")
    regs = render(lambda: WorkloadIdentity("b", identity_args(
        server_statements(WEIGHTS_ARN, serving.server_model_prefixes(bf16)), service_account="b")))
    doc = policy_of(regs)
    assert allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/models/google/gemma-4-31B-it/model.safetensors")
    assert not allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/models/google/gemma-4-31B-it-assistant/x")


# -- the bench's policy ------------------------------------------------------------------------------


def test_bench_reads_tokenizers_and_writes_its_results_prefix_only():
    regs = render(lambda: WorkloadIdentity("bench", identity_args(bench_policy_statements(),
                                                                  service_account="bench")))
    doc = policy_of(regs)
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "chat_template.jinja",
                 "config.json"):
        assert allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/models/{FP8}/{name}"), name
    assert not allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/models/{FP8}/model-00001-of-00007.safetensors")
    assert not allowed(doc, "s3:GetObject", f"{WEIGHTS_ARN}/compile-cache/x")
    assert allowed(doc, "s3:ListBucket", WEIGHTS_ARN, prefix=f"models/{FP8}/")
    run = f"{RESULTS_ARN}/runs/dev/gemma-fp8/20261130T0530/S1_chat_c64.json"
    for action in ("s3:PutObject", "s3:GetObject"):
        assert allowed(doc, action, run)
        assert not allowed(doc, action, f"{RESULTS_ARN}/runs/prod/gemma-fp8/x.json")
    assert allowed(doc, "s3:ListBucket", RESULTS_ARN, prefix="runs/dev/gemma-fp8/")
    assert not allowed(doc, "s3:ListBucket", RESULTS_ARN, prefix="runs/")
    assert not allowed(doc, "s3:DeleteObject", run)
    assert not allowed(doc, "s3:PutObject", f"{WEIGHTS_ARN}/models/{FP8}/tokenizer.json")


def test_kms_grants_are_scoped_to_the_key():
    assert server_policy_statements(KMS)[-1:] == [{"Sid": "UseBucketKey", "Effect": "Allow",
                                        "Action": ["kms:Decrypt"], "Resource": [KMS]}]
    bench_kms = bench_policy_statements(KMS)[-1]
    assert bench_kms["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"] and bench_kms["Resource"] == [KMS]
    assert not any(s["Sid"] == "UseBucketKey" for s in server_policy_statements())


def test_no_wildcard_actions_and_the_policy_pack_agrees():
    for make, sa in ((server_policy_statements, "gemma-fp8"), (bench_policy_statements, "bench")):
        # Statements hold Outputs, so they are made inside the render's event loop.
        regs = render(lambda: WorkloadIdentity("wi", identity_args(make(KMS), service_account=sa)))
        doc = policy_of(regs)
        for st in doc["Statement"]:
            assert st["Effect"] == "Allow"
            assert all("*" not in a and "?" not in a for a in st["Action"])
            assert "*" not in st["Resource"]
        violations = policies.check_resources([(r.type, r.name, r.inputs, r.outputs.get("id")) for r in regs])
        assert violations == []


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("statement,match", [
    ({"Effect": "Allow", "Action": ["s3:*"], "Resource": [WEIGHTS_ARN]}, "wildcard action 's3:\\*'"),
    ({"Effect": "Allow", "Action": ["s3:Get*"], "Resource": [WEIGHTS_ARN]}, "wildcard action"),
    ({"Effect": "Allow", "Action": "*", "Resource": [WEIGHTS_ARN]}, "wildcard action"),
    ({"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"}, "Resource '\\*'"),
    ({"Effect": "Allow", "NotAction": ["iam:*"], "Resource": [WEIGHTS_ARN]}, "NotAction"),
    ({"Effect": "Deny", "Action": ["s3:GetObject"], "Resource": [WEIGHTS_ARN]}, "only Allow"),
    ({"Effect": "Allow", "Action": ["s3:GetObject"]}, "no Resource"),
])
def test_refused_statements(statement, match):
    with pytest.raises(ValueError, match=match):
        identity_args([statement])


def test_no_statements_is_refused():
    assert statement_problems([]) == ["no statements: a workload role needs at least one grant"]
    with pytest.raises(ValueError, match="results prefix"):
        bench_statements(WEIGHTS_ARN, [FP8], RESULTS_ARN, "runs/*")


def test_shipped_policies_pass_the_component_checks():
    assert statement_problems(server_policy_statements(KMS)) == []
    assert statement_problems(bench_policy_statements(KMS)) == []
