"""Render: the per-pool streamer Job (gpuPools[].streamerJob) and the image-cache snapshot volume
(gpuPools[].imageCache) in the GPU EC2NodeClasses, both off by default, valid against the schemas."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from components import image_cache
from stacks.settings import ConfigError, settings_from_config
from tests.fixtures.code_volumes import config_maps, volume_files, write_files
from tests.fixtures.k8s.schemas import validate_object
from tests.fixtures.pulumi_stack import render_with, stack_config

SNAPSHOT = "snap-0123456789abcdef0"


def pools_with(**per_pool):
    pools = copy.deepcopy(stack_config("dev")["vllm-poc:gpuPools"])
    for pool in pools:
        pool.update(per_pool.get(pool["name"], {}))
    return pools


@pytest.fixture(scope="module")
def startup_render():
    return render_with(gpuPools=pools_with(
        l40s={"streamerJob": {"concurrencies": [16, 64], "memoryLimitGib": [8, 24], "repeats": 2},
              "imageCache": {"snapshotId": SNAPSHOT, "volumeGib": 120, "initializationRate": 300}},
        g7e={"streamerJob": {"model": "fp8-dynamic"}},
    ))


def test_off_by_default(dev):
    assert not [j for j in dev.k8s("Job") if j["metadata"]["name"].startswith("streamer-")]
    assert dev.outputs["streamerResults"] == {}
    for node_class in dev.k8s("EC2NodeClass"):
        assert [b["deviceName"] for b in node_class["spec"]["blockDeviceMappings"]] == ["/dev/xvda"]
        assert "userData" not in node_class["spec"]


def test_streamer_job_per_enabled_pool(startup_render):
    jobs = {j["metadata"]["labels"]["app.kubernetes.io/instance"]: j for j in startup_render.k8s("Job")
            if j["metadata"]["name"].startswith("streamer-")}
    assert set(jobs) == {"l40s", "g7e"}
    l40s = jobs["l40s"]["spec"]["template"]["spec"]
    (container,) = l40s["containers"]
    assert container["command"] == [
        "python3", "-m", "bench.startup.streamer", container["command"][3],
        "--concurrency", "16,64", "--memory-limit-gib", "8,24", "--repeats", "2",
        "--instance-type", "g6e.2xlarge", "--out", "/results"]
    assert container["command"][3].startswith("s3://vllm-poc-dev-test-weights-")
    assert container["command"][3].endswith("/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/")
    assert l40s["nodeSelector"] == {"vllm-poc/pool": "l40s"}
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # host memory only, no GPU
    assert container["resources"]["requests"]["memory"] == "30Gi"
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    results = startup_render.outputs["streamerResults"]
    assert env["VLLM_POC_RESULTS_URI"] == results["l40s"]
    assert "/runs/dev-test/streamer/l40s/" in results["l40s"] and "/runs/dev-test/streamer/g7e/" in results["g7e"]
    g7e = jobs["g7e"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "g7e.2xlarge" in g7e and "8,16,32,64" in g7e
    assert l40s["serviceAccountName"] == "vllm-streamer"
    for job in jobs.values():
        assert validate_object(job).errors == []


def test_streamer_identity_reads_only_the_streamed_models_and_writes_only_its_results(startup_render):
    policy = startup_render.one("aws:iam/rolePolicy:RolePolicy", "streamer-identity-policy")
    statements = json.loads(policy.inputs["policy"])["Statement"]
    reads = [r for s in statements if s["Action"] == ["s3:GetObject"] for r in s["Resource"]]
    assert len(reads) == 1 and reads[0].endswith("/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/*")
    writes = [r for s in statements if "s3:PutObject" in s["Action"] for r in s["Resource"]]
    assert len(writes) == 1 and writes[0].endswith("/runs/dev-test/streamer/*")


def test_job_name_follows_the_grid():
    def name(**job):
        rendered = render_with(gpuPools=pools_with(l40s={"streamerJob": job}))
        return [j["metadata"]["name"] for j in rendered.k8s("Job") if j["metadata"]["name"].startswith("streamer-")]

    first = name(concurrencies=[8, 16])
    assert first == name(concurrencies=[8, 16]) and first[0].startswith("streamer-l40s-")
    assert name(concurrencies=[8, 32]) != first


def test_image_cache_volume_and_mount_script(startup_render, karpenter_crds):
    classes = {c["metadata"]["name"]: c for c in startup_render.k8s("EC2NodeClass")}
    spec = classes["l40s"]["spec"]
    devices = spec["blockDeviceMappings"]
    assert devices[0]["rootVolume"] is True
    assert devices[1] == {"deviceName": "/dev/xvdb", "ebs": {
        "snapshotID": SNAPSHOT, "volumeSize": "120Gi", "volumeType": "gp3", "encrypted": True,
        "deleteOnTermination": True, "volumeInitializationRate": 300}}
    assert spec["instanceStorePolicy"] == "RAID0"
    assert 'Content-Type: text/x-shellscript' in spec["userData"]
    assert "mount -o defaults,noatime /dev/xvdb /var/lib/containerd" in spec["userData"]
    assert spec["userData"].rstrip().endswith(f"--{image_cache.BOUNDARY}--")
    assert "userData" not in classes["g7e"]["spec"]  # only the pool that asks for it
    for node_class in classes.values():
        report = validate_object(node_class, crds=karpenter_crds)
        assert report.errors == [], report.errors


def test_image_cache_volume_without_rate_is_valid(karpenter_crds):
    rendered = render_with(gpuPools=pools_with(g7e={"imageCache": {"snapshotId": "snap-0123abcd"}}))
    (node_class,) = [c for c in rendered.k8s("EC2NodeClass") if c["metadata"]["name"] == "g7e"]
    assert node_class["spec"]["blockDeviceMappings"][1]["ebs"] == {
        "snapshotID": "snap-0123abcd", "volumeSize": "150Gi", "volumeType": "gp3", "encrypted": True,
        "deleteOnTermination": True}
    assert validate_object(node_class, crds=karpenter_crds).errors == []


def test_schema_rejects_a_rate_without_a_snapshot(karpenter_crds):
    # the CRD's own rule, which the snapshot-only config cannot produce: shown to be checked here
    spec = image_cache.apply({"blockDeviceMappings": []}, image_cache.ImageCacheSpec("snap-0123abcd", 50, 200))
    spec["blockDeviceMappings"][0]["ebs"].pop("snapshotID")
    obj = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "x"},
           "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@v20260930"}],
                    "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                    **spec}}
    errors = validate_object(obj, crds=karpenter_crds).errors
    assert len(errors) == 1 and "snapshotID must be set when volumeInitializationRate is set" in errors[0]


@pytest.mark.parametrize("pool,message", [
    ({"imageCache": {"snapshotId": "ami-0123abcd"}}, "gpuPools[0].imageCache.snapshotId"),
    ({"imageCache": {"snapshotId": SNAPSHOT, "initializationRate": 50}}, "initializationRate"),
    ({"streamerJob": {"memoryLimitGib": [8, 64]}}, "does not fit g6e.2xlarge"),
    ({"streamerJob": {"concurrencies": []}}, "streamerJob.concurrencies"),
    ({"streamerJob": {"model": "bf16"}}, "streamerJob.model: bf16 is not staged by any server"),
    ({"streamerJob": {"model": "gpt-oss"}}, "unknown model 'gpt-oss'"),
])
def test_bad_config_names_the_key(pool, message):
    config = stack_config("dev")
    config["vllm-poc:gpuPools"][0].update(pool)
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="dev")
    assert any(message in p for p in err.value.problems), err.value.problems


def _by_name(rendered, kind, prefix):
    return [o for o in rendered.k8s(kind) if o["metadata"]["name"].startswith(prefix)]


def test_startup_job_records_each_target_before_its_sweep(dev):
    (job,) = _by_name(dev, "Job", "startup-gemma-fp8-")
    (bench,) = _by_name(dev, "Job", "bench-gemma-fp8-")
    assert job["metadata"]["name"].split("-")[-1] == bench["metadata"]["name"].split("-")[-1]  # same config hash
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:2] == ["sh", "-c"]
    script = container["command"][2]
    assert script.startswith("python3 -m bench.startup.collect --namespace vllm --selector "
                             "app.kubernetes.io/instance=gemma-fp8,app.kubernetes.io/name=vllm --out /results ")
    assert "--sleep-wake-port" not in script and script.endswith("; exit 0")
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["VLLM_POC_RESULTS_URI"] == dev.outputs["benchResults"]["gemma-fp8"]  # beside the sweep's results
    assert pod["serviceAccountName"] == "vllm-bench"
    assert "pulumi.com/skipAwait" not in job["metadata"].get("annotations", {})  # Pulumi waits for it
    registration = dev.one("kubernetes:batch/v1:Job", "bench-gemma-fp8-job")
    assert "startup-gemma-fp8-job" in [d.rsplit("::", 1)[-1] for d in registration.dependencies]
    assert validate_object(job).errors == []


def test_startup_reader_rbac_is_read_only_and_minimal(dev):
    (role,) = _by_name(dev, "Role", "vllm-poc-startup-reader")
    (cluster_role,) = _by_name(dev, "ClusterRole", "vllm-poc-startup-reader")
    assert role["metadata"]["namespace"] == "vllm"
    grants = {(g, r, v) for rule in role["rules"] + cluster_role["rules"]
              for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    # nodes `get` reaches the same account through the bench's node read (BenchNodeAccess)
    assert grants == {("", "pods", "get"), ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"),
                      ("karpenter.sh", "nodeclaims", "get")}
    for binding in _by_name(dev, "RoleBinding", "vllm-poc-startup-reader") + _by_name(
            dev, "ClusterRoleBinding", "vllm-poc-startup-reader"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vllm-bench", "namespace": "vllm"}]
        assert validate_object(binding).errors == []
    assert validate_object(role).errors == [] and validate_object(cluster_role).errors == []


def test_sleep_mode_servers_get_sleep_and_wake_timed():
    config = stack_config("dev")
    server = dict(config["vllm-poc:servers"][0], sleepMode=True)
    rendered = render_with(servers=[server])
    (job,) = _by_name(rendered, "Job", "startup-gemma-fp8-")
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--sleep-wake-port 8000 --model " in script
    # the spec's notes reach the reviewer: the stack's outputs (and `pulumi preview`'s log) carry them
    notes = rendered.outputs["serverNotes"]["gemma-fp8"]
    assert any(n.startswith("sleep mode exposes vLLM's development endpoints") for n in notes)
    assert any(n.startswith("sleep mode: vLLM 0.26's start-up memory profile can count negative non-torch memory")
               and "g6e.2xlarge leaves 4.4 GiB outside that share" in n  # 44 GiB x 0.10
               # 0.90 - 4.6 / 44 = 0.795: the share 4.6 GiB smaller, rounded down
               and "gpuMemoryUtilization 0.79 keeps the KV cache about the size it has without sleep mode" in n
               for n in notes), notes


def test_no_targets_no_startup_job():
    rendered = render_with(bench=None)
    assert not _by_name(rendered, "Job", "startup-") and not _by_name(rendered, "Role", "vllm-poc-startup")


def test_streamer_job_waits_for_its_model_weights(startup_render):
    registration = startup_render.one("kubernetes:batch/v1:Job", "streamer-l40s-job")
    deps = {d.rsplit("::", 1)[-1] for d in registration.dependencies}
    assert "weights-redhatai-gemma-4-31b-it-fp8-dynamic-job" in deps, deps


def _code_files(rendered, job: dict) -> dict[str, str]:
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "code"]
    return volume_files(config_maps(rendered), volume)


def _module_run(job: dict) -> str:
    """The module a Job runs: `python3 -m <module> ...` (as its command, or inside its sh -c script)."""
    argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
    argv = argv[2].split() if argv[:2] == ["sh", "-c"] else argv
    return argv[argv.index("-m") + 1]


def test_jobs_mount_only_the_modules_they_run(startup_render):
    (streamer,) = _by_name(startup_render, "Job", "streamer-l40s-")
    (startup,) = _by_name(startup_render, "Job", "startup-gemma-fp8-")
    assert _module_run(streamer) == "bench.startup.streamer" and _module_run(startup) == "bench.startup.collect"
    assert set(_code_files(startup_render, streamer)) == {
        "__init__.py", "startup/__init__.py", "startup/streamer.py", "startup/netlimits.py",
        "common/__init__.py", "common/cli.py", "common/options.py", "common/s3.py", "common/progress.py",
        "common/instances.py"}
    files = set(_code_files(startup_render, startup))
    assert {"startup/collect.py", "startup/timeline.py", "startup/phases.py", "startup/sleepwake.py",
            "common/kube.py"} <= files
    assert not [f for f in files if f.startswith(("run/", "analysis/", "demo/"))] and "__main__.py" not in files


def test_each_job_imports_what_it_runs_from_its_own_code_volume(startup_render, tmp_path):
    """The module each Job runs, imported from nothing but its volume (no site-packages, so no
    installed copy of the project can stand in for a module the volume lacks)."""
    jobs = _by_name(startup_render, "Job", "streamer-") + _by_name(startup_render, "Job", "startup-")
    assert len(jobs) == 3
    for job in jobs:
        root = tmp_path / job["metadata"]["name"]
        write_files(_code_files(startup_render, job), root / "bench")
        module = _module_run(job)
        done = subprocess.run([sys.executable, "-S", "-c", f"import {module}"], cwd=root, capture_output=True,
                              text=True, env={"PYTHONPATH": str(root)}, timeout=60)
        assert done.returncode == 0, f"{job['metadata']['name']}: {module}: {done.stderr}"
