"""GitHub Actions workflows: schema-valid, and wired the way the operations procedure needs."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
FILES = {name: WORKFLOWS / f"{name}.yml" for name in ("preview", "deploy", "teardown")}
STACKS = ["dev", "g7e"]

# Current majors (checked against each action's repository, July-August 2026).
ACTION_MAJORS = {
    "actions/checkout": "v7",
    "actions/setup-python": "v7",
    "aws-actions/configure-aws-credentials": "v6",
    "pulumi/actions": "v7",
}
# The operator commands agreed for `python -m stacks`; the parser's own list takes over once
# stacks/__main__.py wires all of them.
AGREED_STACKS_COMMANDS = {"render", "stage-weights", "preflight", "pre-destroy", "teardown-check"}


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load(FILES[name].read_text())
    # YAML 1.1 reads the key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def steps(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job_id, step) for job_id, job in workflow["jobs"].items() for step in job.get("steps", [])]


def uses(step: dict[str, Any]) -> str:
    return step.get("uses", "").split("@")[0]


def step_index(job: dict[str, Any], predicate) -> int:
    matches = [i for i, step in enumerate(job["steps"]) if predicate(step)]
    assert matches, "step not found"
    return matches[0]


def pulumi_step(job: dict[str, Any]) -> dict[str, Any]:
    [step] = [s for s in job["steps"] if uses(s) == "pulumi/actions"]
    return step


def check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema,
                           *map(str, files)], capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# Schema

def test_workflows_validate_against_the_github_workflow_schema():
    result = check_jsonschema("vendor.github-workflows", *FILES.values())
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_job_has_a_timeout():
    result = check_jsonschema("custom.github-workflows-require-timeout", *FILES.values())
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = FILES["preview"].read_text().replace("id-token: write", "id-token: writ", 1)
    assert broken != FILES["preview"].read_text()
    path = tmp_path / "broken.yml"
    path.write_text(broken)
    assert check_jsonschema("vendor.github-workflows", path).returncode != 0


# ---------------------------------------------------------------------------------------------
# Actions, OIDC, permissions

@pytest.mark.parametrize("name", FILES)
def test_actions_are_pinned_to_current_majors(name):
    for _, step in steps(load(name)):
        if "uses" not in step:
            continue
        action, _, ref = step["uses"].partition("@")
        assert action in ACTION_MAJORS, f"unexpected action {action}"
        assert ref == ACTION_MAJORS[action], f"{action}@{ref}, expected @{ACTION_MAJORS[action]}"


@pytest.mark.parametrize("name", FILES)
def test_aws_access_only_through_oidc(name):
    workflow = load(name)
    assert workflow["permissions"] == {"contents": "read"}
    for job_id, job in workflow["jobs"].items():
        aws_steps = [s for s in job["steps"] if uses(s) == "aws-actions/configure-aws-credentials"]
        if not aws_steps:
            assert "id-token" not in job.get("permissions", {}), job_id
            continue
        assert job["permissions"]["id-token"] == "write"
        [step] = aws_steps
        assert "vars.AWS_ROLE_ARN" in step["with"]["role-to-assume"]
        assert step["with"]["aws-region"]
        assert not {"aws-access-key-id", "aws-secret-access-key"} & set(step["with"])
    assert "AWS_ACCESS_KEY_ID" not in FILES[name].read_text()


@pytest.mark.parametrize("name", FILES)
def test_run_scripts_take_inputs_through_env_only(name):
    # `${{ }}` inside a script is pasted into the shell before it runs (script injection).
    for job_id, step in steps(load(name)):
        assert "${{" not in step.get("run", ""), f"{job_id}: {step.get('name') or step['run'][:40]}"


@pytest.mark.parametrize("name", FILES)
def test_header_documents_every_variable_and_secret(name):
    text = FILES[name].read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for kind, key in set(re.findall(r"\b(vars|secrets)\.([A-Z_]+)", text)):
        assert f"{kind}.{key}" in header, f"{kind}.{key} is used but not documented"


# ---------------------------------------------------------------------------------------------
# Pulumi steps

def _pulumi_pin() -> str:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    [pin] = [d for d in pyproject["project"]["dependencies"] if d.startswith("pulumi==")]
    return pin.split("==")[1]


@pytest.mark.parametrize("name", FILES)
def test_pulumi_steps_use_the_s3_backend_and_the_sdk_version(name):
    workflow = load(name)
    found = 0
    for _, step in steps(workflow):
        if uses(step) != "pulumi/actions":
            continue
        found += 1
        options = step["with"]
        assert options["cloud-url"].startswith("s3://${{ vars.PULUMI_STATE_BUCKET }}?region=")
        assert str(options["pulumi-version"]) == _pulumi_pin()
        assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    assert found == 1


@pytest.mark.parametrize("name", ["preview", "deploy"])
def test_policy_pack_is_installed_and_attached(name):
    job = load(name)["jobs"]["preview" if name == "preview" else "deploy"]
    step = pulumi_step(job)
    assert step["with"]["policyPacks"] == "${{ github.workspace }}/policy"
    install = step_index(job, lambda s: "policy/venv/bin/pip install" in s.get("run", "")
                         and "-r policy/requirements.txt" in s.get("run", ""))
    assert install < job["steps"].index(step)
    assert (REPO / "policy" / "PulumiPolicy.yaml").exists()


@pytest.mark.parametrize("name", ["preview", "deploy"])
def test_preflight_runs_before_pulumi(name):
    job = load(name)["jobs"]["preview" if name == "preview" else "deploy"]
    preflight = step_index(job, lambda s: "python -m stacks preflight" in s.get("run", ""))
    aws = step_index(job, lambda s: uses(s) == "aws-actions/configure-aws-credentials")
    assert aws < preflight < job["steps"].index(pulumi_step(job))
    # Blockers must fail the job: the step may not be allowed to fail.
    assert not job["steps"][preflight].get("continue-on-error", False)


def test_preview_comments_the_diff_per_stack_after_the_tests():
    workflow = load("preview")
    assert set(workflow["on"]) == {"pull_request"}
    assert "pull_request.number" in workflow["concurrency"]["group"]
    assert workflow["concurrency"]["cancel-in-progress"] is True
    assert workflow["jobs"]["test"]["steps"][-1]["run"] == "make test"
    job = workflow["jobs"]["preview"]
    assert job["needs"] == "test"
    assert job["strategy"]["matrix"]["stack"] == STACKS
    assert job["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}
    options = pulumi_step(job)["with"]
    assert options["command"] == "preview" and options["stack-name"] == "${{ matrix.stack }}"
    assert options["comment-on-pr"] is True and options["diff"] is True
    assert "upsert" not in options  # previews never create stacks


def test_preview_posts_the_offline_render_diff_beside_the_pulumi_preview():
    job = load("preview")["jobs"]["preview"]
    checkout = next(s for s in job["steps"] if uses(s) == "actions/checkout")
    assert checkout["with"]["fetch-depth"] == 0  # the base branch is there to render
    diff = step_index(job, lambda s: "python -m stacks diff" in s.get("run", ""))
    step = job["steps"][diff]
    assert '"$STACK" --against "origin/$BASE_REF"' in step["run"] and "gh pr comment" in step["run"]
    assert step["env"]["STACK"] == "${{ matrix.stack }}" and step["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert step["env"]["GH_TOKEN"] == "${{ github.token }}"
    # before the cloud steps: posted even when preflight or the preview fails, and needs no credentials
    aws = step_index(job, lambda s: uses(s) == "aws-actions/configure-aws-credentials")
    assert diff < aws < job["steps"].index(pulumi_step(job))
    flags = set(re.findall(r"(--[a-z-]+)", step["run"].split("python -m stacks diff", 1)[1].splitlines()[0]))
    from stacks.__main__ import build_parser
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert flags and flags <= {o for a in sub.choices["diff"]._actions for o in a.option_strings}


def test_deploy_runs_up_per_stack_in_a_protected_environment():
    workflow = load("deploy")
    assert workflow["on"] == {"push": {"branches": ["main"]}, "workflow_dispatch": None}
    assert workflow["jobs"]["test"]["steps"][-1]["run"] == "make test"
    job = workflow["jobs"]["deploy"]
    assert job["needs"] == "test"
    assert job["strategy"]["matrix"]["stack"] == STACKS
    assert job["environment"] == "${{ matrix.stack }}"
    assert job["concurrency"] == {"group": "pulumi-${{ matrix.stack }}", "cancel-in-progress": False}
    options = pulumi_step(job)["with"]
    assert options["command"] == "up" and options["stack-name"] == "${{ matrix.stack }}"
    outputs = step_index(job, lambda s: "pulumi stack output" in s.get("run", ""))
    assert outputs > job["steps"].index(pulumi_step(job))


def test_deploy_runs_up_only_when_the_render_changed():
    job = load("deploy")["jobs"]["deploy"]
    assert job["steps"][0]["with"]["fetch-depth"] == 0  # the commit before the push, for its render
    gate = step_index(job, lambda s: s.get("id") == "render")
    run = job["steps"][gate]["run"]
    assert 'stacks diff "$STACK" --against "$before" --json > render-diff.json' in run
    assert "changed=true" in run and "changed=false" in run
    # every step that talks to AWS or the cluster, or spends anything, waits for the answer
    for later in job["steps"][gate + 1:]:
        assert later.get("if") == "steps.render.outputs.changed == 'true'", later.get("name") or later.get("uses")
    assert job["steps"].index(pulumi_step(job)) > gate


def test_teardown_is_confirmed_drained_destroyed_and_checked():
    workflow = load("teardown")
    inputs = workflow["on"]["workflow_dispatch"]["inputs"]
    assert inputs["stack"]["options"] == STACKS and inputs["confirm"]["required"] is True
    job = workflow["jobs"]["teardown"]
    # Shares the deploy lock: a teardown never overlaps an `up` of the same stack.
    assert job["concurrency"] == {"group": "pulumi-${{ inputs.stack }}", "cancel-in-progress": False}
    assert job["environment"] == "${{ inputs.stack }}"
    first = job["steps"][0]
    assert first["id"] == "confirm" and '"$CONFIRM" != "$STACK"' in first["run"] and "exit 1" in first["run"]
    assert first["env"]["CONFIRM"] == "${{ inputs.confirm }}"
    kubeconfig = step_index(job, lambda s: "aws eks update-kubeconfig" in s.get("run", ""))
    pre_destroy = step_index(job, lambda s: "python -m stacks pre-destroy" in s.get("run", ""))
    destroy = job["steps"].index(pulumi_step(job))
    check = step_index(job, lambda s: "python -m stacks teardown-check" in s.get("run", ""))
    assert kubeconfig < pre_destroy < destroy < check
    assert pulumi_step(job)["with"]["command"] == "destroy"
    assert "!cancelled()" in job["steps"][check]["if"]
    assert "continue-on-error" not in job["steps"][check]


def test_teardown_reads_the_cluster_name_from_the_stack_file(tmp_path):
    # The kubeconfig step's one-liner, run against a stack file of the documented config shape.
    job = load("teardown")["jobs"]["teardown"]
    script = job["steps"][step_index(job, lambda s: "update-kubeconfig" in s.get("run", ""))]["run"]
    [one_liner] = re.findall(r"-c '([^']+)'", script)
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": {
        "aws:region": "ap-northeast-2",
        "vllm-poc:cluster": {"name": "vllm-poc-dev", "kubernetesVersion": "1.34"}}}))
    result = subprocess.run([sys.executable, "-c", one_liner, "dev"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "vllm-poc-dev"


# ---------------------------------------------------------------------------------------------
# `python -m stacks` commands

def stacks_commands() -> set[str]:
    try:
        from stacks.__main__ import build_parser
    except ImportError:
        return AGREED_STACKS_COMMANDS
    parser = build_parser()
    choices: set[str] = set()
    for action in parser._actions:  # argparse keeps subcommands on its _SubParsersAction
        if isinstance(action, argparse._SubParsersAction):
            choices |= set(action.choices)
    return choices if AGREED_STACKS_COMMANDS <= choices else choices | AGREED_STACKS_COMMANDS


@pytest.mark.parametrize("name", FILES)
def test_stacks_commands_exist(name):
    used = set(re.findall(r"python -m stacks ([a-z][a-z-]*)", FILES[name].read_text()))
    assert used, "each workflow runs at least one operator command"
    assert used <= stacks_commands()


# ---------------------------------------------------------------------------------------------
# The way to the Kubernetes API

CLUSTER_JOBS = {"preview": "preview", "deploy": "deploy", "teardown": "teardown"}
RUNNER = "${{ vars.CLUSTER_RUNNER || 'ubuntu-latest' }}"


@pytest.mark.parametrize("name", FILES)
def test_jobs_that_talk_to_the_cluster_run_where_the_api_path_reaches(name):
    workflow = load(name)
    assert workflow["env"]["CLUSTER_API_PATH"] == "${{ vars.CLUSTER_API_PATH || 'public' }}"
    for job_id, job in workflow["jobs"].items():
        # the offline tests need no cluster and stay on a hosted runner
        assert job["runs-on"] == (RUNNER if job_id == CLUSTER_JOBS[name] else "ubuntu-latest"), job_id


def _path_step(name: str) -> tuple[dict[str, Any], int]:
    job = load(name)["jobs"][CLUSTER_JOBS[name]]
    return job, step_index(job, lambda s: "$CLUSTER_API_PATH" in s.get("run", ""))


@pytest.mark.parametrize("name", FILES)
def test_the_api_path_is_checked_before_the_cluster_is_touched(name, tmp_path):
    job, index = _path_step(name)
    first_cluster_step = job["steps"].index(pulumi_step(job))
    if name == "teardown":
        first_cluster_step = step_index(job, lambda s: "python -m stacks pre-destroy" in s.get("run", ""))
    assert index < first_cluster_step
    command = "api-path" if name == "teardown" else "preflight"
    strict = [] if name == "teardown" else ["--strict"]

    # The step's script, run by bash with a stand-in interpreter that records its arguments.
    stub = tmp_path / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/argv"\n')
    stub.chmod(0o755)
    script = job["steps"][index]["run"]
    for path, extra in (("public", []), ("private", ["--inside-vpc"])):
        result = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                                env={"PATH": "/usr/bin:/bin", "CLUSTER_API_PATH": path, "STACK": "dev"}, timeout=30)
        assert result.returncode == 0, result.stderr
        assert (stub.parent / "argv").read_text().split() == ["-m", "stacks", command, "dev", *strict, *extra]
    wrong = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "CLUSTER_API_PATH": "vpn", "STACK": "dev"}, timeout=30)
    assert wrong.returncode == 1 and "use public or private" in wrong.stdout
