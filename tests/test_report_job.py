"""The report Job (components/report_job.py, stacks/environment/report.py) as the g7e and matrix stacks
render it: what it reads, where it writes, its role, how it waits, its network reach, the stack
output `report`; and its rendered command run end to end against moto with sweeps arriving late."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import boto3
import pytest

from bench.run import mixcheck as MIX
from components import pod_security
from components.report_job import ATTEMPT_ANNOTATION, FINAL_EXIT_CODE
from stacks.ops import diff as D
from stacks.ops import mocks
from stacks.settings import ConfigError, settings_from_config
from stacks.versions import extra, locked, pins
from stacks.job_code import bench_code
from tests.fixtures.code_volumes import config_maps, volume_files, write_files
from tests.fixtures.pulumi_stack import render_with, stack_config
from tests.test_bench_plan import G7E, L40S
from tests.test_bench_publish import finish, upload
from tests.test_bench_s3_folders import recorded_sweep, s3_files


def report_job(rendered):
    (job,) = [j for j in rendered.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-report"]
    return job


def container(job):
    (only,) = job["spec"]["template"]["spec"]["containers"]
    return only


def flag(argv, name):
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def bench_job_names(rendered):
    return [j["metadata"]["name"] for j in rendered.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-bench"]


def test_g7e_reports_the_g7e_sweep_against_the_l40s_sweep(all_stacks):
    g7e = all_stacks["g7e"]
    job = report_job(g7e)
    argv = container(job)["args"]
    results = g7e.outputs["benchResults"]
    # It reads exactly the two bench Jobs' results prefixes, and writes where the stack output points.
    assert flag(argv, "--candidate") == [results["nvfp4-g7e"]]
    assert flag(argv, "--baseline") == [results["nvfp4-l40s"]]
    assert flag(argv, "--variant") == []
    report = g7e.outputs["report"]
    assert report == {"uri": flag(argv, "--out")[0], "state": None}
    digest = job["metadata"]["name"].removeprefix("report-g7e-")
    assert report["uri"] == f"s3://{g7e.outputs['resultsBucket']}/runs/g7e/report/{digest}/"
    assert flag(argv, "--current-replicas") == ["12"] and flag(argv, "--threshold") == ["1.5"]
    assert flag(argv, "--basis") == ["slo"]
    # Prices and capacity types come from the sweeps' manifests: no price flag is passed.
    assert not [a for a in argv if "price" in a or "capacity" in a]


def test_matrix_compares_its_four_variants_against_the_base(all_stacks):
    matrix = all_stacks["matrix"]
    argv = container(report_job(matrix))["args"]
    results = matrix.outputs["benchResults"]
    assert flag(argv, "--candidate") == []
    assert flag(argv, "--baseline") == [results["gemma-fp8"]]
    assert flag(argv, "--variant") == [results[s] for s in
                                       ("gemma-fp8", "gemma-fp8-spec-off", "gemma-fp8-k8", "gemma-fp8-kv-auto")]
    assert matrix.outputs["report"]["uri"] == flag(argv, "--out")[0]


def test_the_job_waits_in_the_cluster_not_in_pulumi_up(all_stacks):
    g7e = all_stacks["g7e"]
    job = report_job(g7e)
    assert job["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    command = container(job)["command"]
    assert command[:2] == ["sh", "-ec"] and command[3] == "publish"
    assert command[2].splitlines()[-1] == 'exec python -m bench publish "$@"'
    argv = container(job)["args"]
    # It waits past the bench Jobs' own deadline, then reports what is there; Kubernetes stops it after.
    assert flag(argv, "--wait-hours") == ["13"]
    bench_deadlines = {j["spec"]["activeDeadlineSeconds"] for j in g7e.k8s("Job")
                       if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-bench"}
    assert bench_deadlines == {12 * 3600} and job["spec"]["activeDeadlineSeconds"] == 14 * 3600
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "FailJob", "onExitCodes": {"containerName": "publish", "operator": "In",
                                                  "values": [FINAL_EXIT_CODE]}} in rules
    # Created after the bench Jobs it reads (which Pulumi does not await either) and after its identity.
    registration = g7e.one("kubernetes:batch/v1:Job", "report-job")
    deps = {urn.rsplit("::", 1)[1] for urn in registration.dependencies}
    assert {"bench-nvfp4-g7e-job", "bench-nvfp4-l40s-job", "report-identity-association", "report-code"} <= deps


def test_image_code_and_requirements(all_stacks):
    g7e = all_stacks["g7e"]
    job = report_job(g7e)
    spec = job["spec"]["template"]["spec"]
    # the pinned Python image, through the stack's pull-through cache (tests/test_image_provenance.py)
    assert container(job)["image"].endswith("/vllm-poc-g7e/library/" + pins().weight_sync_image)
    # On the system nodes: no GPU, no GPU node kept up while it waits.
    assert spec["nodeSelector"] == {"vllm-poc/role": "system"}
    assert "nvidia.com/gpu" not in json.dumps(container(job)["resources"])
    (code,) = [c for c in g7e.k8s("ConfigMap") if c["metadata"]["name"] == job["metadata"]["name"]]
    assert code["immutable"] is True
    assert spec["volumes"][0]["name"] == "code" and spec["volumes"][0]["configMap"]["name"] == code["metadata"]["name"]
    files = volume_files(config_maps(g7e), spec["volumes"][0])
    # the whole locked set (the extra and what it needs), installed without resolving anything more
    assert files["requirements-report.txt"].split() == locked("report")
    assert set(extra("report")) <= set(locked("report"))
    assert "--no-deps" in container(job)["command"][2]
    assert {"analysis/publish/__init__.py", "analysis/publish/sweeps.py", "analysis/report.py", "analysis/plan.py", "analysis/compare.py",
            "common/locations.py", "__main__.py"} <= set(files)
    assert set(files) == set(bench_code()) | {"requirements-report.txt"}  # the whole package, as its tree


def test_its_role_reads_only_its_sweeps_and_writes_only_its_report(all_stacks):
    g7e = all_stacks["g7e"]
    bucket = g7e.outputs["resultsBucket"]
    arn = f"arn:aws:s3:::{bucket}"
    sweeps = [uri.removeprefix(f"s3://{bucket}/") for uri in g7e.outputs["benchResults"].values()]
    report = g7e.outputs["report"]["uri"].removeprefix(f"s3://{bucket}/")
    policy = json.loads(g7e.one("aws:iam/rolePolicy:RolePolicy", "report-identity-policy").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert set(by_sid) == {"ReadSweepsAndOwnReport", "ListSweepsAndOwnReport", "WriteOwnReport"}
    assert by_sid["WriteOwnReport"]["Action"] == ["s3:PutObject", "s3:AbortMultipartUpload"]
    assert by_sid["WriteOwnReport"]["Resource"] == [f"{arn}/{report}*"]
    assert by_sid["ReadSweepsAndOwnReport"]["Action"] == ["s3:GetObject"]
    assert sorted(by_sid["ReadSweepsAndOwnReport"]["Resource"]) == sorted(f"{arn}/{p}*" for p in [*sweeps, report])
    assert by_sid["ListSweepsAndOwnReport"]["Resource"] == [arn]
    listed = by_sid["ListSweepsAndOwnReport"]["Condition"]["StringLike"]["s3:prefix"]
    assert sorted(listed) == sorted(v for p in [*sweeps, report] for v in (f"{p}*", p.rstrip("/")))
    # Nothing else: no delete, no other prefix, no weights bucket.
    assert not [s for s in policy["Statement"] if "weights" in json.dumps(s)]
    trust = json.loads(g7e.one("aws:iam/role:Role", "report-identity-role").inputs["assumeRolePolicy"])
    assert "vllm-report" in json.dumps(trust)
    association = g7e.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "report-identity-association")
    assert association.inputs["serviceAccount"] == "vllm-report"
    assert report_job(g7e)["spec"]["template"]["spec"]["serviceAccountName"] == "vllm-report"


def _selects(policy, labels):
    wanted = policy["spec"]["podSelector"].get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def test_network_reach_is_the_namespace_rules_plus_pypi(all_stacks):
    g7e = all_stacks["g7e"]
    job = report_job(g7e)
    labels = job["spec"]["template"]["metadata"]["labels"]
    policies = [p for p in g7e.k8s("NetworkPolicy") if _selects(p, labels)]
    own = sorted(p["metadata"]["name"] for p in policies if p["spec"]["podSelector"])
    # Only the internet-egress rule (PyPI, public addresses on 443) selects it by label; the rest are the
    # namespace's rules for every pod: deny by default, DNS, the Pod Identity agent and S3.
    assert own == ["allow-internet-https"]
    everyone = sorted(p["metadata"]["name"] for p in policies if not p["spec"]["podSelector"])
    assert {"default-deny", "allow-dns", "allow-aws-credentials-and-s3"} <= set(everyone)
    # Nothing may connect to it.
    assert not [p for p in policies if p["spec"].get("ingress")]
    (internet,) = [p for p in policies if p["metadata"]["name"] == "allow-internet-https"]
    (rule,) = internet["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
    assert "10.0.0.0/8" in rule["to"][0]["ipBlock"]["except"]
    # Pod security as every workload: restricted, no Kubernetes token.
    spec = job["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == pod_security.RUN_AS
    assert container(job)["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_hash_follows_what_decides_the_answer():
    name = report_job(render_with("g7e"))["metadata"]["name"]
    bench = stack_config("g7e")["vllm-poc:bench"]
    # An unrelated change keeps the finished Job; a changed comparison or sweep makes a new one.
    assert report_job(render_with("g7e", systemNodes={"instanceTypes": ["m7i.2xlarge"]}))["metadata"]["name"] == name
    other = render_with("g7e", bench={**bench, "compare": {**bench["compare"], "currentReplicas": 8}})
    assert report_job(other)["metadata"]["name"] != name
    assert bench_job_names(other) == bench_job_names(render_with("g7e"))  # the sweeps stay as they are
    resweep = render_with("g7e", bench={**bench, "concurrencies": [1, 8, 64]})
    assert report_job(resweep)["metadata"]["name"] != name


def test_no_comparison_no_job_and_no_output(dev):
    assert not [j for j in dev.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-report"]
    assert "report" not in dev.outputs
    assert not [r for r in dev.registrations if r.name.startswith("report-")]


def test_the_output_carries_the_verdict_state_once_the_report_exists(monkeypatch):
    first = render_with("g7e").outputs["report"]
    assert first["state"] is None
    key = first["uri"].removeprefix("s3://") + "summary.json"
    monkeypatch.setattr(mocks, "S3_OBJECTS", {key: json.dumps({"verdict": {
        "threshold": 1.5, "min_ratio": 3.49, "pass": True, "basis": "slo", "state": "pass"}})})
    assert render_with("g7e").outputs["report"] == {"uri": first["uri"], "state": "pass"}
    monkeypatch.setattr(mocks, "S3_OBJECTS", {key: json.dumps({"verdict": {
        "threshold": 1.5, "min_ratio": None, "pass": False, "basis": "slo", "state": "inconclusive"}})})
    assert render_with("g7e").outputs["report"]["state"] == "inconclusive"
    # Only status.json (the Job is waiting): still no state.
    monkeypatch.setattr(mocks, "S3_OBJECTS", {key.replace("summary.json", "status.json"): "{}"})
    assert render_with("g7e").outputs["report"]["state"] is None


def test_a_failed_report_job_shows_in_the_output_and_the_next_up_recreates_it(monkeypatch):
    first = render_with("g7e")
    assert first.outputs["report"]["state"] is None and "reason" not in first.outputs["report"]
    job = report_job(first)
    assert ATTEMPT_ANNOTATION not in (job["spec"]["template"]["metadata"].get("annotations") or {})
    prefix = first.outputs["report"]["uri"].removeprefix("s3://")
    failed = {"state": "failed", "note": "a report step failed; see the Job log", "updated_at": "2026-12-03T08:00:00Z"}
    objects = {f"{prefix}status.json": json.dumps(failed), f"{prefix}failures/2026-12-03T080000Z.json": "{}"}
    monkeypatch.setattr(mocks, "S3_OBJECTS", objects)
    after = render_with("g7e")
    report = after.outputs["report"]
    assert report["state"] == "failed" and report["uri"] == first.outputs["report"]["uri"]
    assert "a report step failed" in report["reason"] and "next `pulumi up` runs it again" in report["reason"]
    # the same Job (name, prefix), a new pod template: Pulumi replaces the failed Job, which runs again
    again = report_job(after)
    assert again["metadata"]["name"] == job["metadata"]["name"]
    assert again["spec"]["template"]["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "2"
    (entry,) = [e for e in D.compare(first.resources(), after.resources())["replace"] if e["name"] == "report-job"]
    assert "spec.template changed" in entry["reasons"]
    # the retry wrote the report: the attempt stays, so the finished Job is left alone
    objects[f"{prefix}summary.json"] = json.dumps({"verdict": {"threshold": 1.5, "min_ratio": 3.49, "pass": True,
                                                               "basis": "slo", "state": "pass"}})
    done = render_with("g7e")
    assert done.outputs["report"] == {"uri": report["uri"], "state": "pass"}
    assert report_job(done)["spec"]["template"] == again["spec"]["template"]
    # a Job still waiting for its sweeps (status.json, not failed): no state, no retry
    monkeypatch.setattr(mocks, "S3_OBJECTS", {f"{prefix}status.json": json.dumps({**failed, "state": "waiting"})})
    waiting = render_with("g7e")
    assert waiting.outputs["report"] == {"uri": report["uri"], "state": None}
    assert report_job(waiting)["spec"]["template"] == job["spec"]["template"]


def test_the_lock_holds_the_extra_and_everything_it_needs():
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins_by_name = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in locked("report")}
    assert all("==" in line for line in locked("report"))
    for line in extra("report"):  # the extra's own pins, as pyproject.toml gives them
        name, version = line.split("==")
        assert pins_by_name[canonicalize_name(name)] == version, f"{line}: regenerate requirements-report.lock"
    # closed: what each locked distribution requires on the image's Python (3.12, Linux x86_64) is locked
    # too (read from the installed distribution's metadata: the project's venv holds the report extra)
    target = {"python_version": "3.12", "python_full_version": "3.12.12", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    missing = []
    for name in pins_by_name:
        for spec in metadata.requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate(target):
                if canonicalize_name(requirement.name) not in pins_by_name:
                    missing.append(f"{name} needs {requirement}")
    assert not missing, f"regenerate requirements-report.lock: {missing}"


@pytest.mark.parametrize("compare, message", [
    ({"candidate": "nvfp4-g7e", "baseline": "nope"},
     "vllm-poc:bench.compare.baseline: 'nope' is not a bench target, so it has no sweep to report on"),
    ({"candidate": "nvfp4-g7e", "baseline": "nvfp4-g7e"}, "is also the baseline"),
    ({"baseline": "nvfp4-l40s", "variants": ["nvfp4-g7e"]}, "two or more variants"),
    ({"candidate": "nvfp4-g7e", "baseline": "nvfp4-l40s", "mix": {"S9_x": 1}},
     "vllm-poc:bench.compare.mix.S9_x: not among bench.scenarios"),
    ({"candidate": "nvfp4-g7e", "baseline": "nvfp4-l40s", "currentReplicas": 0}, "currentReplicas"),
    ({"candidate": "nvfp4-g7e", "baseline": "nvfp4-l40s", "basis": "slo"},
     "vllm-poc:bench.compare.basis: unknown key; did you mean 'baseline'? known here: candidate, baseline, variants, "
     "currentReplicas, threshold, verdictBasis"),
])
def test_bad_comparisons_name_the_key(compare, message):
    config = stack_config("g7e")
    config["vllm-poc:bench"] = {**config["vllm-poc:bench"], "compare": compare}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="g7e")
    assert any(message in p for p in err.value.problems), err.value.problems


def publish_command(rendered, tmp_path) -> tuple[list[str], dict[str, str]]:
    """The report Job's command as rendered (its `exec python -m bench publish` line, the code from its
    ConfigMap written under tmp_path) and the environment to run it here: this Python as `python`, pip not
    run (this Python has the requirements), the manifests looked at every 0.3 s instead of every minute."""
    job = report_job(rendered)
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    code = write_files(volume_files(config_maps(rendered), volume), tmp_path / "code" / "bench")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a wrapper, not a symlink: a symlinked venv python outside its venv runs as the base interpreter
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    script = container(job)["command"][2].splitlines()[-1]
    env = {**os.environ, "PYTHONPATH": str(code.parent), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HOME": str(tmp_path / "home"), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    return ["sh", "-ec", script, "publish", *container(job)["args"], "--poll-s", "0.3", "--max-poll-s", "0.6",
            "--log-every-s", "1", "--no-charts"], env


def test_the_rendered_command_waits_for_late_sweeps_then_reports(aws, all_stacks, tmp_path):
    """The Job's command as rendered (its `exec python -m bench publish` line, code from its ConfigMap)
    against moto: the sweeps arrive after it started; it waits, then writes the report. What differs
    from the cluster: S3 is moto, pip is not run (this Python has the requirements), and it looks at
    the manifests every 0.3 s instead of every minute."""
    g7e = all_stacks["g7e"]
    command, env = publish_command(g7e, tmp_path)
    bucket = g7e.outputs["resultsBucket"]
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    prefixes = {k: v.removeprefix(f"s3://{bucket}/") for k, v in g7e.outputs["benchResults"].items()}
    sweeps = {
        "nvfp4-g7e": recorded_sweep(tmp_path, "nvfp4-g7e", G7E, prefixes["nvfp4-g7e"],
                                    instance_type="g7e.2xlarge", price=1.5, capacity_type="spot"),
        "nvfp4-l40s": recorded_sweep(tmp_path, "nvfp4-l40s", {s: v for s, (v, _) in L40S.items()},
                                     prefixes["nvfp4-l40s"], instance_type="g6e.2xlarge", price=2.76,
                                     capacity_type="on-demand"),
    }
    for server, folder in sweeps.items():  # the bench Job labels its sweep <stack>/<server>
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps({**manifest, "label": f"g7e/{server}"}))
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        # nothing to report yet: it says so and waits (read its lines until it does, however slow the
        # machine is to start it, rather than after a fixed sleep)
        seen = []
        while not any("no results yet" in line for line in seen):
            line = proc.stdout.readline()
            assert line, "".join(seen)  # the Job ended before it said it was waiting
            seen.append(line)
        assert proc.poll() is None, "".join(seen)
        for server, folder in sweeps.items():
            finish(folder)
            upload(client, folder, prefixes[server])
        rest, _ = proc.communicate(timeout=300)
        out = "".join(seen) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "g7e/nvfp4-g7e: no results yet" in out and "every sweep has finished" in out
    report = g7e.outputs["report"]["uri"].removeprefix(f"s3://{bucket}/")
    written = s3_files(client, report)
    assert {"report.md", "summary.json", "plan.md", "plan.json", "inputs.json", "status.json"} <= set(written)
    # The published code is the ConfigMap's: the report names the sweeps' S3 homes.
    assert f"Results: `s3://{bucket}/{prefixes['nvfp4-g7e']}`" in written["report.md"].decode()
    plan = json.loads(written["plan.json"])
    assert plan["current"]["replicas"] == 12 and plan["configurations"][0]["label"] == "g7e/nvfp4-g7e"


def mixed_traffic_stack():
    bench = stack_config("g7e")["vllm-poc:bench"]
    compare = {**bench["compare"], "mix": {"S1_chat": 0.7, "S4_rag": 0.3}, "mixedTraffic": True}
    return render_with("g7e", bench={**bench, "compare": compare})


def test_the_mixed_traffic_check_runs_on_the_candidates_node_after_the_plan():
    rendered = mixed_traffic_stack()
    report = report_job(rendered)
    (mix,) = [j for j in rendered.k8s("Job") if j["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-mixcheck"]
    uri = rendered.outputs["report"]["uri"]
    # The report Job plans with the mix, then waits for the check and plans again with it.
    argv = container(report)["args"]
    assert flag(argv, "--mix") == ["S1_chat=0.7,S4_rag=0.3"] and flag(argv, "--mixed-traffic-wait-hours") == ["2"]
    command = container(mix)["command"]
    assert command[:2] == ["sh", "-c"] and command[-1] == uri  # the plan comes from, the check goes to, the report
    script = command[2]
    assert '--plan "$1" --out "$1"' in script and "--configuration g7e-test/nvfp4-g7e" in script
    assert "--base-url http://nvfp4-g7e.vllm.svc.cluster.local:8000" in script
    # A finding (held or not) ends the Job successfully; it waits as long as the report Job may take.
    assert 'if [ "$rc" -le 1 ]; then exit 0; fi' in script
    assert mix["spec"]["activeDeadlineSeconds"] > report["spec"]["activeDeadlineSeconds"]
    assert f"--wait-hours {report['spec']['activeDeadlineSeconds'] // 3600}" in script
    # The runs fit the hour the deadline leaves after waiting for the plan, and the report's wait for the check:
    # a scenario at 0.03 req/s a replica still sends its 100 requests (the fewest a p99 can pass on)
    run_s = float(flag(shlex.split(script), "--run-timeout-s")[0])
    wait_hours = int(flag(shlex.split(script), "--wait-hours")[0])
    assert run_s < mix["spec"]["activeDeadlineSeconds"] - wait_hours * 3600
    assert run_s < float(flag(argv, "--mixed-traffic-wait-hours")[0]) * 3600
    assert MIX.window_s({"S1_chat": 2.0, "S4_rag": 0.031}, 120.0, MIX.ST.MIN_P99_REQUESTS) <= run_s
    spec = mix["spec"]["template"]["spec"]
    (deployment,) = [d for d in rendered.k8s("Deployment") if d["metadata"]["name"] == "nvfp4-g7e"]
    assert container(mix)["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    affinity = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spec["serviceAccountName"] == "vllm-bench" and spec["automountServiceAccountToken"] is False
    assert "nvidia.com/gpu" not in json.dumps(container(mix)["resources"])
    # Network: its server's API port and nothing else beyond the namespace's rules; the server takes it.
    labels = mix["spec"]["template"]["metadata"]["labels"]
    own = [p for p in rendered.k8s("NetworkPolicy") if p["spec"]["podSelector"] and _selects(p, labels)]
    assert [p["metadata"]["name"] for p in own] == ["bench-mixcheck-nvfp4-g7e"]
    (rule,) = own[0]["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    (server,) = [p for p in rendered.k8s("NetworkPolicy") if p["metadata"]["name"] == "server-nvfp4-g7e"]
    sources = server["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vllm-mixcheck",
                                            "app.kubernetes.io/instance": "nvfp4-g7e"}}} in sources
    (other,) = [p for p in rendered.k8s("NetworkPolicy") if p["metadata"]["name"] == "server-nvfp4-l40s"]
    assert "vllm-mixcheck" not in json.dumps(other)


def test_mixed_traffic_needs_a_mix_and_a_candidate():
    config = stack_config("g7e")
    config["vllm-poc:bench"] = {**config["vllm-poc:bench"],
                                "compare": {**config["vllm-poc:bench"]["compare"], "mixedTraffic": True}}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="g7e")
    assert any(p.startswith("vllm-poc:bench.compare: mixedTraffic: runs the plan's mix") for p in err.value.problems)
    assert not [j for j in report_job_list(render_with("g7e")) if "mixcheck" in j]


def report_job_list(rendered):
    return [j["metadata"]["name"] for j in rendered.k8s("Job")]
