"""The offline Kubernetes validator must reject what an API server would reject.

Each invalid object differs from a valid one in a single place, and the assertion checks that the
error names that place, so a validator that failed everything (or nothing) would not pass.
"""

from __future__ import annotations

import copy

import pytest

from stacks.versions import pins
from tests.fixtures.k8s.schemas import (
    KARPENTER_VERSION,
    CrdRegistry,
    main,
    validate_object,
)


def nodepool() -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu", "labels": {"app.kubernetes.io/part-of": "vllm-poc"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"vllm-poc/pool": "gpu"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6e.2xlarge"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                    "expireAfter": "720h",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                           "budgets": [{"nodes": "1"}]},
            "limits": {"nvidia.com/gpu": "4"},
            "weight": 50,
        },
    }


def nodeclass() -> dict:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "gpu"},
        "spec": {
            "role": "KarpenterNodeRole-vllm-poc-dev",
            "amiSelectorTerms": [{"alias": "al2023@v20260930"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "vllm-poc-dev"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "vllm-poc-dev"}}],
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True,
                                     "ebs": {"volumeSize": "60Gi", "volumeType": "gp3", "encrypted": True}}],
        },
    }


def deployment() -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gemma-fp8", "namespace": "vllm"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "gemma-fp8"}},
            "template": {
                "metadata": {"labels": {"app": "gemma-fp8"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.26.0",
                                         "ports": [{"containerPort": 8000, "name": "http"}]}]},
            },
        },
    }


def service() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "gemma-fp8", "namespace": "vllm"},
        "spec": {"selector": {"app": "gemma-fp8"}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def errors_of(obj: dict, crds, **kw) -> list[str]:
    return validate_object(obj, crds=crds, **kw).errors


@pytest.mark.parametrize("make", [nodepool, nodeclass, deployment, service])
def test_valid_objects_pass_with_every_rule_evaluated(make, karpenter_crds):
    report = validate_object(make(), crds=karpenter_crds)
    assert report.errors == []
    assert report.unevaluated_rules == []


def test_nodepool_without_node_class_ref(karpenter_crds):
    obj = nodepool()
    del obj["spec"]["template"]["spec"]["nodeClassRef"]
    errors = errors_of(obj, karpenter_crds)
    assert any(e.startswith("NodePool/gpu: spec.template.spec:") and "'nodeClassRef' is a required" in e
               for e in errors), errors


def test_requirement_with_unknown_operator(karpenter_crds):
    obj = nodepool()
    obj["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Equals"
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.template.spec.requirements[0].operator: 'Equals' is not one of" in e for e in errors), errors


def test_requirement_gt_needs_an_integer_value(karpenter_crds):
    obj = nodepool()
    obj["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["one"]})
    errors = errors_of(obj, karpenter_crds)
    # int('one') fails at runtime; the API server rejects the object for that too.
    assert any("spec.template.spec.requirements: rule evaluation error" in e for e in errors), errors


def test_consolidate_after_must_be_a_duration(karpenter_crds):
    obj = nodepool()
    obj["spec"]["disruption"]["consolidateAfter"] = "10 minutes"
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.disruption.consolidateAfter: '10 minutes' does not match" in e for e in errors), errors


def test_unknown_field_under_spec_is_reported(karpenter_crds):
    obj = nodepool()
    obj["spec"]["template"]["spec"]["expireAfer"] = "720h"
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.template.spec:" in e and "'expireAfer' was unexpected" in e for e in errors), errors


def test_nodeclass_role_and_instance_profile_are_exclusive(karpenter_crds):
    obj = nodeclass()
    obj["spec"]["instanceProfile"] = "KarpenterNodeInstanceProfile"
    errors = errors_of(obj, karpenter_crds)
    assert any(e.startswith("EC2NodeClass/gpu: spec: must specify exactly one of ['role', 'instanceProfile']")
               for e in errors), errors


def test_nodeclass_alias_cannot_be_combined_with_other_terms(karpenter_crds):
    obj = nodeclass()
    obj["spec"]["amiSelectorTerms"].append({"id": "ami-0123456789abcdef0"})
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.amiSelectorTerms: 'alias' is mutually exclusive, cannot be set with a combination of "
               "other amiSelectorTerms" in e for e in errors), errors


@pytest.mark.parametrize("alias, problem", [
    ("al2023@latest", None),
    ("bottlerocket@v1.40.0", None),
    ("foo@latest", "family is not supported"),
    ("windows2022@v1", "windows families may only specify version 'latest'"),
])
def test_nodeclass_alias_family_and_version(alias, problem, karpenter_crds):
    obj = nodeclass()
    obj["spec"]["amiSelectorTerms"] = [{"alias": alias}]
    errors = errors_of(obj, karpenter_crds)
    if problem is None:
        assert errors == []
    else:
        assert any(e.startswith("EC2NodeClass/gpu: spec.amiSelectorTerms[0].alias: " + problem)
                   for e in errors), errors


def test_nodeclass_hop_limit_minimum(karpenter_crds):
    obj = nodeclass()
    obj["spec"]["metadataOptions"]["httpPutResponseHopLimit"] = 0
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.metadataOptions.httpPutResponseHopLimit: 0 is less than the minimum of 1" in e
               for e in errors), errors


def test_custom_resource_metadata_basics(karpenter_crds):
    obj = nodepool()
    obj["metadata"].update(name="GPU_pool", namespace="karpenter", label={"a": "b"})
    errors = errors_of(obj, karpenter_crds)
    assert any("metadata.name: 'GPU_pool' must be a DNS-1123 subdomain" in e for e in errors), errors
    assert any("metadata.namespace: NodePool is cluster-scoped" in e for e in errors), errors
    assert any("metadata.label: unknown field" in e for e in errors), errors



def namespace() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vllm"}}


def cluster_role() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "vllm-poc-reader"}, "rules": []}


# Each case changes one metadata entry of a valid built-in object; the API server's name and label
# rules (apimachinery's validation) come on top of the schema and differ by kind.
@pytest.mark.parametrize("make, meta, message", [
    (service, {"name": "8000-gemma"}, "metadata.name: '8000-gemma' must be a DNS-1035 label"),
    (namespace, {"name": "vllm.poc"}, "metadata.name: 'vllm.poc' must be a DNS-1123 label"),
    (cluster_role, {"name": "vllm/reader"}, "metadata.name: 'vllm/reader' may not be '.' or '..' nor contain"),
    (deployment, {"name": "gemma_fp8"}, "metadata.name: 'gemma_fp8' must be a DNS-1123 subdomain"),
    (deployment, {"labels": {"app": "gemma fp8"}}, "metadata.labels[app]: value 'gemma fp8' must be at most 63"),
    (deployment, {"labels": {"app": "g" * 64}}, "metadata.labels[app]: value 'ggg"),
    (deployment, {"labels": {"a/b/c": "x"}}, "metadata.labels[a/b/c]: key has more than one '/'"),
    (deployment, {"annotations": {"Example.com/x": "y"}},
     "metadata.annotations[Example.com/x]: key prefix must be a DNS-1123 subdomain"),
    (deployment, {"annotations": {"-x": "y"}}, "metadata.annotations[-x]: key name part must be 1-63"),
    (deployment, {"annotations": {"replicas": 2}}, "metadata.annotations[replicas]: value must be a string, got 2"),
], ids=["service-dns1035", "namespace-label", "rbac-slash", "subdomain", "label-value", "label-value-length",
        "key-slashes", "key-prefix", "key-name", "annotation-value"])
def test_builtin_metadata_rules(make, meta, message, karpenter_crds):
    obj = make()
    obj["metadata"].update(meta)
    errors = errors_of(obj, karpenter_crds)
    assert any(message in e for e in errors), errors


def test_rbac_names_are_path_segments_not_subdomains(karpenter_crds):
    obj = cluster_role()
    obj["metadata"]["name"] = "vllm-poc:Reader"  # a colon and a capital: fine for RBAC, not for a Deployment
    assert errors_of(obj, karpenter_crds) == []


def test_custom_resource_formats_and_status(karpenter_crds):
    obj = nodeclass()
    obj["spec"]["kubelet"] = {"maxPods": 2**31}  # the CRD's only bound below is minimum 0: format int32 is the check
    obj["status"] = {"conditions": []}
    errors = errors_of(obj, karpenter_crds)
    assert any("spec.kubelet.maxPods: 2147483648 is not a 'int32'" in e for e in errors), errors
    assert any("status: written by the controller" in e for e in errors), errors
    obj["spec"]["kubelet"]["maxPods"] = 2**31 - 1
    del obj["status"]
    assert errors_of(obj, karpenter_crds) == []
    pool = nodepool()
    pool["spec"]["template"]["spec"]["taints"][0]["timeAdded"] = "yesterday"
    errors = errors_of(pool, karpenter_crds)
    assert errors == ["NodePool/gpu: spec.template.spec.taints[0].timeAdded: 'yesterday' is not a 'date-time'"], errors
    pool["spec"]["template"]["spec"]["taints"][0]["timeAdded"] = "2026-12-07T23:30:00Z"
    assert errors_of(pool, karpenter_crds) == []

def test_deployment_with_misspelt_field_fails_strict(karpenter_crds):
    obj = deployment()
    obj["spec"]["replica"] = obj["spec"].pop("replicas")
    errors = errors_of(obj, karpenter_crds)
    assert any(e.startswith("Deployment/vllm/gemma-fp8: spec:") and "'replica' was unexpected" in e
               for e in errors), errors


def test_service_port_must_be_an_integer(karpenter_crds):
    obj = service()
    obj["spec"]["ports"][0]["port"] = "http"
    errors = errors_of(obj, karpenter_crds)
    assert any(e.startswith("Service/vllm/gemma-fp8: spec.ports[0].port: 'http' is not of type")
               for e in errors), errors


def test_unrecognised_kinds_are_errors(karpenter_crds):
    lookalike = deployment()
    lookalike["apiVersion"] = "apps.example.com/v1"  # must not be taken for apps/v1
    unknown = {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": {}}
    for obj in (lookalike, unknown):
        errors = errors_of(obj, karpenter_crds)
        assert len(errors) == 1 and "no schema for apiVersion" in errors[0], errors


def test_kubernetes_version_selects_the_schemas(karpenter_crds):
    hpa = {"apiVersion": "autoscaling/v2beta2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "gemma-fp8"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "gemma-fp8"}, "maxReplicas": 2}}
    assert errors_of(hpa, karpenter_crds, kubernetes_version="1.25") == []
    assert "no schema for apiVersion 'autoscaling/v2beta2'" in errors_of(hpa, karpenter_crds)[0]
    with pytest.raises(ValueError, match="not covered"):
        validate_object(service(), kubernetes_version="1.99", crds=karpenter_crds)


def test_most_cel_rules_are_evaluable(karpenter_crds):
    rules = [r for r in karpenter_crds.rules() if not r.transition]
    kinds = {r.kind for r in karpenter_crds.rules()}
    assert kinds == {"NodePool", "NodeClaim", "EC2NodeClass"}
    not_evaluable = [r for r in rules if not r.evaluable]
    print(f"\n{len(rules) - len(not_evaluable)}/{len(rules)} CEL rules evaluable "
          f"(transition rules skipped: {sum(r.transition for r in karpenter_crds.rules())})")
    for r in not_evaluable:
        print(f"  not evaluable: {r.kind} {r.path}: {r.rule}  ({r.why_not})")
    assert len(rules) >= 60
    assert len(rules) - len(not_evaluable) >= 0.8 * len(rules)


def _widget_crd(rules: list[dict], **more_properties: dict) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                    "metadata": {"type": "object"},
                                    "spec": {"type": "object", "x-kubernetes-validations": rules,
                                             "properties": {
                                                 "size": {"type": "string"},
                                                 "zones": {"type": "array", "items": {"type": "string"},
                                                           "x-kubernetes-list-type": "set"},
                                                 "extra": {"type": "object",
                                                           "x-kubernetes-preserve-unknown-fields": True},
                                                 **more_properties}}}}}}]},
    }


def test_rules_that_cannot_run_are_reported_not_passed():
    crds = CrdRegistry.from_documents([_widget_crd([
        {"rule": "quantity(self.size).isGreaterThan(quantity('1Gi'))", "message": "size too small"},
        {"rule": "self.?size.orValue('') != ''", "message": "size empty"},
        {"rule": "self.size.lowerAscii() == self.size", "messageExpression": "'size must be lower case: ' + self.size"},
    ])])
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
           "spec": {"size": "10GI", "zones": ["a", "a"], "extra": {"anything": 1}}}
    report = validate_object(obj, crds=crds)
    assert len(report.unevaluated_rules) == 2, report.unevaluated_rules
    assert any("quantity" in r and "not available offline" in r for r in report.unevaluated_rules)
    assert any("cannot parse" in r for r in report.unevaluated_rules)
    assert any("Widget/w: spec: size must be lower case: 10GI" in e for e in report.errors), report.errors
    assert any("spec.zones:" in e and "non-unique" in e for e in report.errors), report.errors
    assert len(report.errors) == 2, report.errors



def test_defaults_nullable_and_list_maps_as_the_api_server_applies_them():
    crds = CrdRegistry.from_documents([_widget_crd(
        [{"rule": "self.replicas >= 1", "message": "replicas below 1"}],
        replicas={"type": "integer", "default": 2},
        owner={"type": "string", "nullable": True},
        ports={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
               "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}})])
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "vllm"},
           "spec": {"owner": None, "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 81}]}}
    # replicas is left out: the API server defaults it to 2 before the rule reads it; owner may be null
    assert validate_object(obj, crds=crds).errors == []
    obj["spec"]["replicas"] = 0
    obj["spec"]["ports"][1]["name"] = "http"
    errors = validate_object(obj, crds=crds).errors
    assert errors == ["Widget/vllm/w: spec: replicas below 1 (rule: self.replicas >= 1)",
                      'Widget/vllm/w: spec.ports[1]: duplicate entry for list-map keys [\'name\'] = ["http"] '
                      "(first at [0])"], errors

def test_karpenter_schema_version_matches_the_pinned_chart():
    assert pins().karpenter_chart == KARPENTER_VERSION


def test_cli_validates_a_multi_document_file(tmp_path, capsys, karpenter_crds):
    bad = nodeclass()
    bad["spec"]["metadataOptions"]["httpPutResponseHopLimit"] = 0
    path = tmp_path / "kubernetes.yaml"
    import yaml

    path.write_text(yaml.safe_dump_all([nodepool(), bad, service()]))
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "ok   NodePool/gpu" in out and "FAIL EC2NodeClass/gpu" in out and "ok   Service/vllm/gemma-fp8" in out
    assert "3 object(s), 1 with errors" in out
    path.write_text(yaml.safe_dump_all([nodepool(), copy.deepcopy(nodeclass())]))
    assert main([str(path), "--stack", "dev", "-q"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["{missing}"], "no such file; give a rendered manifest"),
    (["{file}", "--stack", "fleat"], "--stack fleat: no stack file Pulumi.fleat.yaml in"),
    (["{file}", "--kubernetes-version", "9.99"], "--kubernetes-version: kubernetes version '9.99' is not covered"),
    (["{file}", "--kubernetes-version", "latest"], "--kubernetes-version: Invalid version"),
    (["{broken}"], "not a YAML file"),
], ids=["missing-file", "unknown-stack", "uncovered-version", "not-a-version", "not-yaml"])
def test_cli_bad_input_exits_2_naming_what_to_fix(argv, message, tmp_path, capsys):
    (tmp_path / "ok.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: vllm}\n")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    paths = {"missing": tmp_path / "none.yaml", "file": tmp_path / "ok.yaml", "broken": tmp_path / "broken.yaml"}
    with pytest.raises(SystemExit) as exit_:
        main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err, err
