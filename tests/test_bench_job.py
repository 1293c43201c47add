"""BenchJob: ordering, scheduling, resume and S3 destination of the rendered Job; and the rendered
Job's own command, run for real against a vLLM server with its code taken from the ConfigMap."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest

from bench.common.workloads import KOREAN_PROMPTS, WORKLOADS, data_files
from components import pod_security
from components.bench_job import FINAL_EXIT_CODES
from stacks.environment import bench as bench_part
from stacks.job_code import BENCH_DIR, bench_code, module_code
from tests.fixtures.code_volumes import config_maps, volume_files, write_files
from tests.fixtures.pulumi_stack import render_with

SMALL_BENCH = {"targets": ["gemma-fp8"], "scenarios": ["S1_chat", "S3_moderation"], "concurrencies": [1, 2],
               "windowS": 5, "minPrompts": 100}


def deps(registration) -> set[str]:
    return {d.rsplit("::", 1)[-1] for d in registration.dependencies}


def bench_jobs(rendered) -> list[dict]:
    return [j for j in rendered.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-bench"]


def job_of(rendered) -> dict:
    (job,) = bench_jobs(rendered)
    return job


def container_of(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_job_starts_after_the_server_and_pulumi_does_not_wait_for_it(dev):
    registration = dev.one("kubernetes:batch/v1:Job", "bench-gemma-fp8-job")
    assert {"server-gemma-fp8-deployment", "bench-identity-association", "bench-gemma-fp8-code"} <= deps(registration)
    job = job_of(dev)
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    # the server Deployment itself is awaited (availability), with a cold-start sized timeout
    deployment = dev.one("kubernetes:apps/v1:Deployment")
    assert int(deployment.inputs["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) >= 1800


def test_job_runs_the_sweep_in_the_server_image_without_a_gpu(dev):
    job = job_of(dev)
    container = container_of(job)
    (deployment,) = dev.k8s("Deployment")
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == server["image"]
    command = container["command"]
    assert command[:3] == ["python3", "-m", "bench.run.sweep"]
    assert "--resume" in command
    assert flag(command, "--base-url") == "http://gemma-fp8.vllm.svc.cluster.local:8000"
    assert flag(command, "--model") == "RedHatAI/gemma-4-31B-it-FP8-dynamic"
    assert flag(command, "--concurrencies") == "1,2,4,8,16,32,64"
    # the PoC's four, and the Korean prompt set: the MTP draft's acceptance is checked on real text
    assert flag(command, "--scenarios") == "S1_chat,S2_summary,S3_moderation,S4_rag,K_korean"
    assert "--speculative-config" in server["args"]
    assert json.loads(flag(command, "--server-args")) == server["args"]
    resources = container["resources"]
    assert "nvidia.com/gpu" not in resources.get("requests", {}) and "nvidia.com/gpu" not in resources.get("limits", {})
    pod = job["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert job["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    server_pod = deployment["spec"]["template"]["metadata"]
    assert server_pod["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert pod["terminationGracePeriodSeconds"] >= 60  # the sweep uploads its manifest on SIGTERM


def test_restarts_resume_and_interruptions_do_not_count(dev):
    spec = job_of(dev)["spec"]
    assert spec["backoffLimit"] >= 3
    rules = spec["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules
    (final,) = [r for r in rules if r["action"] == "FailJob"]
    assert final["onExitCodes"]["values"] == list(FINAL_EXIT_CODES)
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_results_go_to_the_stack_prefix_of_the_results_bucket(dev):
    job = job_of(dev)
    env = {e["name"]: e.get("value") for e in container_of(job)["env"]}
    bucket = dev.outputs["resultsBucket"]
    config_hash = job["metadata"]["labels"]["vllm-poc/config-hash"]
    assert env["VLLM_POC_RESULTS_URI"] == f"s3://{bucket}/runs/dev/gemma-fp8/{config_hash}/"
    assert dev.outputs["benchResults"] == {"gemma-fp8": env["VLLM_POC_RESULTS_URI"]}
    assert job["metadata"]["name"] == f"bench-gemma-fp8-{config_hash}"
    statements = json.loads(dev.one("aws:iam/rolePolicy:RolePolicy", "bench-identity-policy").inputs["policy"])["Statement"]
    writes = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert writes and all(r == f"arn:aws:s3:::{bucket}/runs/dev/*" for s in writes for r in s["Resource"])


def test_config_map_carries_what_the_sweep_imports_and_not_the_report_side(dev):
    (config_map,) = [c for c in dev.k8s("ConfigMap") if c["metadata"]["name"].startswith("bench-code-")]
    assert config_map["immutable"] is True
    (job,) = bench_jobs(dev)
    files = code_volume_files(dev, job)
    assert {name for name in files if name.endswith(".py")} == set(module_code(bench_code(), "bench.run.sweep"))
    # the sweep's own wing and the rules it judges runs by; not the pages, the demo or the start-up wing
    assert {"run/sweep.py", "run/client.py", "analysis/results.py", "common/s3.py"} <= set(files)
    assert not {"analysis/markup.py", "analysis/pages/report_page.py", "demo/command.py", "__main__.py"} & set(files)
    assert files["run/sweep.py"] == (BENCH_DIR / "run" / "sweep.py").read_text()
    assert config_map["data"]["run.sweep.py"] == files["run/sweep.py"]  # a key holds no '/'


def code_volume_files(rendered, job: dict) -> dict[str, str]:
    """The files the Job's code volume shows the pod ({path under the mount: text})."""
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "code"]
    return volume_files(config_maps(rendered), volume)


def test_one_prompt_set_per_stack_mounted_beside_every_bench_jobs_code(all_stacks):
    matrix = all_stacks["matrix"]
    prompt_maps = [c for c in matrix.k8s("ConfigMap") if data_files().keys() & set(c.get("data") or {})]
    (prompts,) = prompt_maps  # once per stack, however many targets
    assert prompts["metadata"]["name"].startswith("bench-prompts-") and prompts["immutable"] is True
    assert prompts["data"] == data_files()
    jobs = bench_jobs(matrix)
    assert len(jobs) >= 2
    for job in jobs:
        files = code_volume_files(matrix, job)
        assert set(module_code(bench_code(), "bench.run.sweep")) | {f"data/{name}" for name in data_files()} == set(files)
        # bench.common.workloads reads bench/data/, where the projection puts the prompt set
        assert files[f"data/{KOREAN_PROMPTS}"] == WORKLOADS["K_korean"].data_path().read_text(encoding="utf-8")
    registration = matrix.one("kubernetes:batch/v1:Job", f"bench-{jobs[0]['metadata']['labels']['app.kubernetes.io/instance']}-job")
    assert "bench-prompts-config-map" in deps(registration)


def test_a_changed_prompt_set_is_a_new_config_map_and_new_sweeps(monkeypatch):
    before = render_with()
    job, prompts = job_of(before), prompt_map_of(before)
    changed = {name: text + '{"id": "ko-999", "category": "rag", "prompt": "x"}\n' for name, text in data_files().items()}
    monkeypatch.setattr(bench_part, "bench_prompts", lambda: changed)
    after = render_with()
    assert prompt_map_of(after)["metadata"]["name"] != prompts["metadata"]["name"]
    # the sweep's hash covers the prompt set: a new Job under a new results prefix, nothing resumed
    assert job_of(after)["metadata"]["name"] != job["metadata"]["name"]
    code = [c for c in after.k8s("ConfigMap") if c["metadata"]["name"].startswith("bench-code-")]
    assert code and all(c["data"] for c in code)


def prompt_map_of(rendered) -> dict:
    (config_map,) = [c for c in rendered.k8s("ConfigMap") if c["metadata"]["name"].startswith("bench-prompts-")]
    return config_map


def test_the_job_name_changes_with_what_shapes_the_numbers_and_only_then():
    name = job_of(render_with())["metadata"]["name"]
    assert job_of(render_with())["metadata"]["name"] == name  # an unchanged `pulumi up`: same Job
    assert job_of(render_with(systemNodes={"instanceTypes": ["m7i.2xlarge"]}))["metadata"]["name"] == name
    assert job_of(render_with(bench={"targets": ["gemma-fp8"], "concurrencies": [1, 8, 64]}))["metadata"]["name"] != name
    servers = [{"name": "gemma-fp8", "pool": "l40s", "model": "fp8-dynamic", "trafficClass": "interactive",
                "maxNumSeqs": 64}]
    assert job_of(render_with(servers=servers))["metadata"]["name"] != name


def test_no_bench_targets_no_job():
    rendered = render_with(bench=None)
    assert not bench_jobs(rendered) and rendered.outputs["benchResults"] == {}
    (deployment,) = rendered.k8s("Deployment")
    assert "karpenter.sh/do-not-disrupt" not in deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert not [r for r in rendered.registrations if r.name == "bench-identity"]


@pytest.mark.vllm
def test_the_rendered_job_command_sweeps_a_real_server_and_streams_to_s3(aws, tiny_vllm_server, vllm_env, tmp_path):
    """The Job's command as rendered, with its code from the ConfigMap, against a real vLLM server.

    What differs from the cluster: the server URL and served name (a tiny local model), the output
    folder, and S3 (moto). Scenario lengths are scaled to the tiny model's context.
    """
    rendered = render_with(bench=SMALL_BENCH)
    job = job_of(rendered)
    container = container_of(job)
    code = write_files(code_volume_files(rendered, job), tmp_path / "code" / "bench")

    env = {e["name"]: e.get("value") for e in container["env"]}
    # The pod's writable volumes (HOME, /tmp and the caches below HOME) become folders here.
    env = {k: v.replace(pod_security.HOME, str(tmp_path / "home")) if v else v for k, v in env.items()}
    results_uri = env["VLLM_POC_RESULTS_URI"]
    tokenizer_uri = flag(container["command"], "--tokenizer")
    s3 = boto3.client("s3")
    for uri in (results_uri, tokenizer_uri):
        s3.create_bucket(Bucket=uri.split("/")[2], CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    weights_bucket, prefix = tokenizer_uri[5:].split("/", 1)
    for path in tiny_vllm_server.model_dir.iterdir():
        if path.suffix == ".json" or path.name.startswith("tokenizer"):
            s3.upload_file(str(path), weights_bucket, prefix + path.name)

    command = list(container["command"])
    command[0] = sys.executable  # python3 of the image; this one has boto3, as the image does
    command[command.index("--base-url") + 1] = tiny_vllm_server.url
    command[command.index("--model") + 1] = tiny_vllm_server.model
    command[command.index("--out") + 1] = str(tmp_path / "results")
    # warm-ups (one more process per run) are covered by test_bench_telemetry_vllm.py; here they
    # would only add minutes of CPU time
    command += ["--length-scale", "0.25", "--warmups", "0"]
    env = {k: v for k, v in env.items() if v is not None}  # NODE_NAME, HOST_IP come from the pod
    run_env = {**os.environ, **env, "PYTHONPATH": str(code.parent),
               "VLLM_POC_VLLM_BIN": vllm_env.vllm,
               "PATH": vllm_env.env["PATH"], "VLLM_TARGET_DEVICE": "cpu",
               # the image's python imports vllm, so its sweep runs every window in one client process
               # ("auto"); here --vllm-bin points at another environment, which "auto" would run per run
               "VLLM_POC_BENCH_CLIENT": "library"}
    run_env["PYTHONPATH"] = os.pathsep.join([str(code.parent), vllm_env.env["PYTHONPATH"].split(os.pathsep)[0]])
    result = subprocess.run(command, env=run_env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    results_bucket, results_prefix = results_uri[5:].split("/", 1)
    keys = {o["Key"].removeprefix(results_prefix)
            for o in s3.list_objects_v2(Bucket=results_bucket, Prefix=results_prefix).get("Contents", [])}
    expected = {f"{s}_c{c}.json" for s in SMALL_BENCH["scenarios"] for c in SMALL_BENCH["concurrencies"]}
    assert expected | {"manifest.json"} <= keys
    manifest = json.loads(s3.get_object(Bucket=results_bucket, Key=results_prefix + "manifest.json")["Body"].read())
    assert {r["status"] for r in manifest["runs"]} == {"valid"}
    assert manifest["sessions"][-1]["timing"]["bench_client"] == "library"  # one client for every window
    # what the report needs to compare runs comes from the rendered Job
    assert manifest["instance_type"] == "g6e.2xlarge" and manifest["gpus"] == 1
    assert manifest["price_per_hour"] == 2.76 and manifest["label"] == "dev-test/gemma-fp8"

    # a restarted pod (fresh disk, same prefix) downloads the results and re-runs nothing
    command[command.index("--out") + 1] = str(tmp_path / "results-after-restart")
    again = subprocess.run(command, env=run_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    manifest = json.loads(s3.get_object(Bucket=results_bucket, Key=results_prefix + "manifest.json")["Body"].read())
    last = manifest["sessions"][-1]
    assert last["resume"] is True and last["executed"] == []
    assert sorted(last["skipped_valid"]) == sorted(expected)
