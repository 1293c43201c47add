"""VllmServer under Pulumi mocks, composed as the stack does: WeightStore -> identity -> server."""

from __future__ import annotations

import json

import pulumi_kubernetes as k8s
import pytest

from components.vllm_server import VllmServer, VllmServerArgs, deployment_manifest, service_manifest
from components.weight_store import WeightStore, WeightStoreArgs
from policy import policies
from stacks import catalog, serving
from stacks.ops import mocks as mocks_module
from tests.fixtures.k8s.schemas import validate_object

K8S = "1.34"
CLUSTER_ARN = "arn:aws:eks:ap-northeast-2:123456789012:cluster/vllm-poc-test"
WEIGHTS = "vllm-poc-test-weights-123456789012-ap-northeast-2"


def render(build) -> list[mocks_module.Registration]:
    return mocks_module.run(build).registrations


def spec_of(server: serving.ServerSettings, instance_type="g6e.2xlarge", raid0=True):
    return serving.build_serve_spec(server, catalog.gpu_instance(instance_type),
                                    serving.ModelUris.for_bucket(WEIGHTS, server),
                                    region="ap-northeast-2", raid0=raid0)


def compose(server: serving.ServerSettings, instance_type="g6e.2xlarge", raid0=True, **kw):
    """The stack's composition in miniature; returns the registrations."""

    def build():
        namespace = k8s.core.v1.Namespace("vllm", metadata={"name": "vllm"})
        node_pool = k8s.apiextensions.CustomResource(
            "gpu-l40s", api_version="karpenter.sh/v1", kind="NodePool", metadata={"name": server.pool},
            spec={})
        store = WeightStore("storage", WeightStoreArgs(
            name_prefix="vllm-poc-test", account_id="123456789012", region="ap-northeast-2"))
        spec = spec_of(server, instance_type, raid0)
        VllmServer(f"server-{server.name}", VllmServerArgs(
            spec=spec, namespace="vllm",
            identity=serving.server_identity_args(
                server, spec, cluster_name="vllm-poc-test", cluster_arn=CLUSTER_ARN, account_id="123456789012",
                namespace="vllm", weights_bucket_arn=store.weights_bucket_arn, depends_on=[namespace]),
            depends_on=[namespace, node_pool], **kw))

    return render(build)


def one(regs, suffix, name=None):
    found = [r for r in regs if r.type.endswith(suffix) and (name is None or r.name == name)]
    assert len(found) == 1, [r.name for r in found]
    return found[0]


def k8s_object(reg) -> dict:
    return {k: reg.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in reg.inputs}


def pod(regs) -> dict:
    return one(regs, "apps/v1:Deployment").inputs["spec"]["template"]["spec"]


def container(regs) -> dict:
    [c] = pod(regs)["containers"]
    return c


def env(regs) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(regs)["env"]}


FP8_BATCH = serving.ServerSettings(name="gemma-fp8", pool="l40s", model="fp8-dynamic",
                                   traffic_class="batch", max_num_seqs=64)


@pytest.fixture(scope="module")
def fp8_batch():
    return compose(FP8_BATCH)


# -- the container --------------------------------------------------------------------------------


def test_args_are_the_serve_spec_with_the_real_bucket(fp8_batch):
    c = container(fp8_batch)
    expected = serving.build_serve_spec(FP8_BATCH, catalog.gpu_instance("g6e.2xlarge"),
                                        serving.ModelUris.for_bucket(WEIGHTS, FP8_BATCH),
                                        region="ap-northeast-2", raid0=True)
    assert c["command"] == ["vllm", "serve"]
    assert c["args"] == list(expected.args)
    assert c["args"][0] == f"s3://{WEIGHTS}/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/"
    spec_config = json.loads(c["args"][c["args"].index("--speculative-config") + 1])
    assert spec_config["model"] == f"s3://{WEIGHTS}/models/google/gemma-4-31B-it-assistant/"
    assert c["args"][c["args"].index("--kv-cache-dtype") + 1] == "fp8"
    assert c["image"] == "vllm/vllm-openai:v0.26.0@sha256:ffb2d59b1c059a5bd8d781320c9f5189de8293693b7d95da54befddaa54abf52"


def test_env_resources_and_volumes(fp8_batch):
    c, e, p = container(fp8_batch), env(fp8_batch), pod(fp8_batch)
    assert e["AWS_REGION"] == "ap-northeast-2"
    assert e["VLLM_CACHE_ROOT"] == "/var/cache/vllm" and e["VLLM_ASSETS_CACHE"] == "/var/cache/vllm/assets"
    assert int(e["VLLM_ENGINE_READY_TIMEOUT_S"]) >= 1200
    assert "VLLM_SERVER_DEV_MODE" not in e
    assert c["resources"]["requests"] == {"cpu": "6", "memory": "51Gi", "ephemeral-storage": "50Gi",
                                          "nvidia.com/gpu": "1"}
    assert c["resources"]["limits"] == {"memory": "51Gi", "nvidia.com/gpu": "1"}
    volumes = {v["name"]: v for v in p["volumes"]}
    # No hostPath (refused by the namespace's restricted admission): the cache is an emptyDir on
    # the node's ephemeral disk, kept across container restarts.
    assert volumes["vllm-cache"] == {"name": "vllm-cache", "emptyDir": {"sizeLimit": "36Gi"}}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"vllm-cache": "/var/cache/vllm", "dshm": "/dev/shm", "home": "/home/app", "tmp": "/tmp"}
    # every cache that follows HOME/XDG lands on the cache volume
    assert e["XDG_CACHE_HOME"] == e["FLASHINFER_WORKSPACE_BASE"] == "/var/cache/vllm"
    assert e["HF_HOME"].startswith("/var/cache/vllm/") and e["HOME"] == "/home/app"


def test_probes_fit_a_cold_start(fp8_batch):
    c = container(fp8_batch)
    startup = c["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800  # PoC: 537 s cold
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_scheduling_on_the_pool(fp8_batch):
    p = pod(fp8_batch)
    assert p["nodeSelector"] == {"vllm-poc/pool": "l40s"}
    assert p["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true",
                                 "effect": "NoSchedule"}]
    assert p["serviceAccountName"] == "gemma-fp8"
    assert p["enableServiceLinks"] is False
    assert p["terminationGracePeriodSeconds"] >= 60


def test_deployment_metadata_labels_and_waits(fp8_batch):
    regs = fp8_batch
    dep = one(regs, "apps/v1:Deployment")
    meta, spec = dep.inputs["metadata"], dep.inputs["spec"]
    assert meta["name"] == "gemma-fp8" and meta["namespace"] == "vllm"
    labels = spec["template"]["metadata"]["labels"]
    assert {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "gemma-fp8",
            "app.kubernetes.io/part-of": "vllm-poc"}.items() <= labels.items()
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm",
                                               "app.kubernetes.io/instance": "gemma-fp8"}
    assert spec["strategy"] == {"type": "Recreate"}
    timeout = int(meta["annotations"]["pulumi.com/timeoutSeconds"])
    assert timeout >= 1800 + 48 + 82 and spec["progressDeadlineSeconds"] >= timeout
    assert "karpenter.sh/do-not-disrupt" not in spec["template"]["metadata"].get("annotations", {})
    waits = set(dep.dependencies)
    assert one(regs, "PodIdentityAssociation").urn in waits
    assert one(regs, "karpenter.sh/v1:NodePool").urn in waits
    assert one(regs, "core/v1:Namespace").urn in waits


def test_service_on_8000(fp8_batch):
    svc = one(fp8_batch, "core/v1:Service").inputs
    assert svc["metadata"]["name"] == "gemma-fp8"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == one(fp8_batch, "apps/v1:Deployment").inputs["spec"]["selector"]["matchLabels"]


def test_identity_reads_the_served_models(fp8_batch):
    document = json.loads(one(fp8_batch, "iam/rolePolicy:RolePolicy").inputs["policy"])
    [read] = [s for s in document["Statement"] if s["Sid"] == "ReadModelAndCaches"]
    assert f"arn:aws:s3:::{WEIGHTS}/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/*" in read["Resource"]
    assert f"arn:aws:s3:::{WEIGHTS}/models/google/gemma-4-31B-it-assistant/*" in read["Resource"]


def test_every_object_validates_against_kubernetes_1_34(fp8_batch):
    objects = [k8s_object(r) for r in fp8_batch
               if r.type in ("kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service",
                             "kubernetes:core/v1:ServiceAccount")]
    assert len(objects) == 3
    reports = [validate_object(o, kubernetes_version=K8S) for o in objects]
    assert [e for r in reports for e in r.errors] == []


def test_policy_pack_finds_nothing(fp8_batch):
    violations = policies.check_resources(
        [(r.type, r.name, r.inputs, r.outputs.get("id")) for r in fp8_batch],
        config={"vllm-max-num-seqs": {"benchMaxConcurrency": 64}})
    assert violations == []


# -- variants ----------------------------------------------------------------------------------------


def test_tensor_parallel_4_on_g6e_12xlarge():
    server = serving.ServerSettings(name="gemma-bf16", pool="l40s-x4", model="bf16",
                                    tensor_parallel_size=4)
    regs = compose(server, instance_type="g6e.12xlarge")
    c, p = container(regs), pod(regs)
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert c["resources"]["requests"]["memory"] == "304Gi"
    assert {v["name"]: v for v in p["volumes"]}["dshm"]["emptyDir"]["sizeLimit"] == "16Gi"
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "4"
    assert validate_object(k8s_object(one(regs, "apps/v1:Deployment")), kubernetes_version=K8S).ok


def test_sleep_mode_text_only_without_raid_and_do_not_disrupt():
    server = serving.ServerSettings(name="gemma-nvfp4", pool="g7e", model="nvfp4",
                                    traffic_class="text-only", sleep_mode=True)
    regs = compose(server, instance_type="g7e.2xlarge", raid0=False, do_not_disrupt=True)
    c, e, p = container(regs), env(regs), pod(regs)
    assert e["VLLM_SERVER_DEV_MODE"] == "1" and "--enable-sleep-mode" in c["args"]
    assert json.loads(c["args"][c["args"].index("--limit-mm-per-prompt") + 1]) == {"image": 0}
    assert {v["name"]: v for v in p["volumes"]}["vllm-cache"]["emptyDir"] == {"sizeLimit": "16Gi"}
    template = one(regs, "apps/v1:Deployment").inputs["spec"]["template"]["metadata"]
    assert template["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    # Only the target's prefix: no speculative decoding, so no draft to read.
    document = json.loads(one(regs, "iam/rolePolicy:RolePolicy").inputs["policy"])
    assert not any("assistant" in r for s in document["Statement"] for r in s["Resource"])


def test_existing_service_account_instead_of_identity():
    server = FP8_BATCH

    def build():
        association = k8s.core.v1.ConfigMap("stand-in-association", metadata={"name": "x"})
        VllmServer("server", VllmServerArgs(
            spec=spec_of(server), namespace="vllm", service_account_name="shared-vllm",
            depends_on=[association]))

    regs = render(build)
    assert not [r for r in regs if r.type.endswith("PodIdentityAssociation")]
    assert pod(regs)["serviceAccountName"] == "shared-vllm"
    assert one(regs, "core/v1:ConfigMap").urn in one(regs, "apps/v1:Deployment").dependencies
    assert container(regs)["args"][0] == f"s3://{WEIGHTS}/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/"


def test_identity_xor_service_account():
    with pytest.raises(ValueError, match="either identity or service_account_name"):
        VllmServerArgs(spec=spec_of(FP8_BATCH), namespace="vllm")


def test_manifests_are_plain_and_valid_for_every_combination():
    for model in serving.MODELS:
        for traffic in serving.TRAFFIC_CLASSES:
            for instance_type, tp in (("g6e.2xlarge", 1), ("g6e.12xlarge", 2), ("g7e.2xlarge", 1)):
                server = serving.ServerSettings(name="s", pool="p", model=model, traffic_class=traffic,
                                                tensor_parallel_size=tp)
                if serving.check_server(server, instance_type, 64):
                    continue
                spec = serving.build_serve_spec(server, catalog.gpu_instance(instance_type),
                                                serving.ModelUris.for_bucket(WEIGHTS, server),
                                                region="ap-northeast-2")
                for obj in (deployment_manifest(spec, namespace="vllm", service_account="s"),
                            service_manifest(spec, namespace="vllm")):
                    report = validate_object(obj, kubernetes_version=K8S)
                    assert report.ok, report.errors
