"""`python -m stacks diff`: the preview of a change, from two offline renders.

The comparison itself on small records; then the command end to end in a fixture repository (a copy
of the project's files, committed as `main`, then changed in its working tree): nothing changed,
one bench setting changed (hashed renames paired as replacements), a server added; bad input.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from stacks.ops import diff as D

REPO = Path(__file__).resolve().parents[1]


def config_map(logical: str, name: str, data: dict[str, str], immutable: bool = True) -> dict:
    inputs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "vllm"}, "data": data}
    if immutable:
        inputs["immutable"] = True
    return {"type": "kubernetes:core/v1:ConfigMap", "name": logical, "parent": "bench", "inputs": inputs}


def role_policy(policy: dict) -> dict:
    return {"type": "aws:iam/rolePolicy:RolePolicy", "name": "bench-identity-policy", "parent": "bench-identity",
            "inputs": {"role": "bench", "policy": json.dumps(policy)}}


# -- the comparison --------------------------------------------------------------------------------


def test_a_renamed_hashed_object_is_one_replacement_with_its_predecessor():
    old = [config_map("bench-gemma-code", "bench-code-gemma-1111111111", {"a.py": "1"})]
    new = [config_map("bench-gemma-code", "bench-code-gemma-2222222222", {"a.py": "2"})]
    result = D.compare(old, new)
    assert set(result) == {"create", "update", "replace", "delete"}
    assert result["create"] == [] and result["delete"] == [] and result["update"] == []
    (entry,) = result["replace"]
    assert entry["object"] == "ConfigMap vllm/bench-code-gemma-2222222222"
    assert entry["replaces"] == "ConfigMap vllm/bench-code-gemma-1111111111"
    assert "metadata.name changed" in entry["reasons"]
    assert {"field": "metadata.name", "before": "bench-code-gemma-1111111111",
            "after": "bench-code-gemma-2222222222"} in entry["changes"]


def test_a_resource_whose_own_name_carries_a_hash_is_paired_too():
    old = [config_map("streamer-code-1a2b3c4d5e", "streamer-code-1a2b3c4d5e", {"a.py": "1"})]
    new = [config_map("streamer-code-9f8e7d6c5b", "streamer-code-9f8e7d6c5b", {"a.py": "2"})]
    result = D.compare(old, new)
    assert result["create"] == [] and result["delete"] == []
    (entry,) = result["replace"]
    assert entry["reasons"] == ["renamed from streamer-code-1a2b3c4d5e"]
    # without a hash in the name, a new name is a new resource
    plain = D.compare([config_map("old-code", "old-code", {})], [config_map("new-code", "new-code", {})])
    assert [e["name"] for e in plain["create"]] == ["new-code"] and [e["name"] for e in plain["delete"]] == ["old-code"]


def _deployment(image: str, replicas: int | None = 1) -> dict:
    spec = {"template": {"spec": {"containers": [{"name": "vllm", "image": image}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"type": D.DEPLOYMENT, "name": "server-gemma-fp8-deployment", "parent": "server-gemma-fp8",
            "inputs": {"kind": "Deployment", "metadata": {"name": "gemma-fp8", "namespace": "vllm", "labels": {
                "app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "gemma-fp8"}}, "spec": spec}}


def _job(app: str, name: str, server: str = "gemma-fp8") -> dict:
    return {"type": D.JOB, "name": f"{app}-{server}-job", "parent": f"{app}-{server}", "inputs": {
        "kind": "Job", "metadata": {"name": name, "namespace": "vllm", "labels": {
            "app.kubernetes.io/name": f"vllm-{app}", "app.kubernetes.io/instance": server}}, "spec": {}}}


def test_what_a_change_costs_is_said_in_words():
    old = [_deployment("vllm:1"), _job("bench", "bench-gemma-fp8-1111111111"),
           _job("startup", "startup-gemma-fp8-1111111111")]
    same = D.compare(old, old)
    assert D.effects(old, old, same) == []
    # a new image: the server restarts; the sweep's new identity re-runs it and its start-up record
    new = [_deployment("vllm:2"), _job("bench", "bench-gemma-fp8-2222222222"),
           _job("startup", "startup-gemma-fp8-2222222222")]
    assert D.effects(old, new, D.compare(old, new)) == [
        "re-records the start-up of gemma-fp8", "re-runs sweep bench-gemma-fp8", "restarts server gemma-fp8"]
    # replicas alone scale, they do not restart; a new server starts
    scaled = [_deployment("vllm:1", replicas=0), *old[1:]]
    assert D.effects(old, scaled, D.compare(old, scaled)) == ["scales server gemma-fp8 to 0 replicas"]
    assert D.effects([], old, D.compare([], old)) == [
        "records the start-up of gemma-fp8", "runs sweep bench-gemma-fp8", "starts server gemma-fp8"]
    # an autoscaled server rolls instead
    rolling = [{**r, "inputs": {**r["inputs"], "spec": {**r["inputs"]["spec"], "strategy": {"type": "RollingUpdate"}}}}
               if r["type"] == D.DEPLOYMENT else r for r in new]
    assert "rolls server gemma-fp8 one replica at a time" in D.effects(old, rolling, D.compare(old, rolling))
    text = D.format_text(D.compare(old, new), "header", 0, said=D.effects(old, new, D.compare(old, new)))
    assert text.splitlines()[1:4] == ["this change re-records the start-up of gemma-fp8",
                                      "this change re-runs sweep bench-gemma-fp8", "this change restarts server gemma-fp8"]


def test_changed_data_replaces_an_immutable_config_map_and_updates_a_mutable_one():
    old, new = config_map("c", "c", {"a": "1"}), config_map("c", "c", {"a": "2"})
    assert len(D.compare([old], [new])["replace"]) == 1
    old, new = config_map("c", "c", {"a": "1"}, immutable=False), config_map("c", "c", {"a": "2"}, immutable=False)
    result = D.compare([old], [new])
    assert result["replace"] == [] and result["update"][0]["changes"] == [{"field": "data.a", "before": "1", "after": "2"}]


def test_an_iam_policy_is_compared_statement_by_statement():
    statement = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::w/models/a/*"]}
    wider = {**statement, "Resource": ["arn:aws:s3:::w/models/*"]}
    result = D.compare([role_policy({"Statement": [statement]})], [role_policy({"Statement": [wider]})])
    (entry,) = result["update"]
    assert entry["changes"] == [{"field": "policy(json).Statement[0].Resource[0]",
                                 "before": "arn:aws:s3:::w/models/a/*", "after": "arn:aws:s3:::w/models/*"}]
    # an input that names the resource replaces it
    renamed = {**role_policy({"Statement": [statement]}), "inputs": {"role": "other", "policy": "{}"}}
    assert D.compare([role_policy({"Statement": [statement]})], [renamed])["replace"][0]["reasons"] == ["role changed"]


def test_the_text_names_objects_and_never_prints_python_values():
    old = [config_map("c", "c-1111111111", {"a": "1", "gone": "x"})]
    new = [config_map("c", "c-2222222222", {"a": "1"}),
           {"type": "kubernetes:helm.sh/v3:Release", "name": "karpenter", "parent": None,
            "inputs": {"name": "karpenter", "chart": "karpenter", "version": "1.14.1", "namespace": "kube-system"}}]
    text = D.format_text(D.compare(old, new), "stack t: working tree against abc (HEAD)", unchanged=3)
    assert "1 to create, 0 to update, 1 to replace, 0 to delete; 3 unchanged" in text
    assert "+ create Helm release karpenter (karpenter 1.14.1)" in text
    assert "replaces ConfigMap vllm/c-1111111111" in text
    assert "data.gone: x => (not set)" in text
    assert "None" not in text and "{'" not in text and "_ABSENT" not in text
    assert "no changes: 5 resources render the same" in D.format_text(D.compare(new, new), "h", unchanged=5)


def test_a_new_system_instance_type_replaces_the_node_group_under_a_new_name():
    """The system node group is named by a prefix: a change EKS cannot make in place (here its instance type)
    replaces it, and the replacement, created before the old group is deleted, gets a name of its own. The
    same change under a fixed name is flagged as a replacement AWS would refuse."""
    from stacks.loader import load_config
    from stacks.ops.render import render_config

    config = load_config("dev")
    old = json.loads(render_config(config, stack="dev").files()["resources.json"])
    bigger = {**config, "vllm-poc:systemNodes": {**config["vllm-poc:systemNodes"], "instanceTypes": ["m7i.2xlarge"]}}
    new = json.loads(render_config(bigger, stack="dev").files()["resources.json"])
    result = D.compare(old, new)
    (entry,) = [e for e in result["replace"] if e["type"] == "eks:index:ManagedNodeGroup"]
    assert entry["reasons"] == ["instanceTypes changed"] and "collides" not in entry
    (group,) = [r for r in new if r["type"] == "eks:index:ManagedNodeGroup"]
    assert group["inputs"]["nodeGroupNamePrefix"] == "vllm-poc-dev-system-" and "nodeGroupName" not in group["inputs"]
    text = D.format_text(result, "h", unchanged=0)
    assert "replaces ManagedNodeGroup cluster-system: instanceTypes changed" in text and "WILL FAIL" not in text

    # what the stack did before: a fixed name, which the replacement would reuse
    def fixed(records):
        return [{**r, "inputs": {k: v for k, v in {**r["inputs"], "nodeGroupName": "vllm-poc-dev-system"}.items()
                                 if k != "nodeGroupNamePrefix"}} if r["type"] == "eks:index:ManagedNodeGroup" else r
                for r in records]
    result = D.compare(fixed(old), fixed(new))
    (entry,) = [e for e in result["replace"] if e["type"] == "eks:index:ManagedNodeGroup"]
    assert "the same nodeGroupName 'vllm-poc-dev-system', which AWS refuses" in entry["collides"]
    assert "WILL FAIL: the replacement is created before" in D.format_text(result, "h", unchanged=0)
    # deleting first avoids the collision (at the price of the nodes' pods)
    first = [{**r, "options": {"deleteBeforeReplace": True}} for r in fixed(new)]
    (entry,) = [e for e in D.compare(fixed(old), first)["replace"] if e["type"] == "eks:index:ManagedNodeGroup"]
    assert "collides" not in entry


# -- the command, in a fixture repository ----------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _copy_project(dest: Path) -> None:
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory) -> Path:
    """A copy of the project's files (with this branch's uncommitted work), committed once as main."""
    root = tmp_path_factory.mktemp("diff-repo")
    _copy_project(root)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    return root


@pytest.fixture
def repo(fixture_repo: Path) -> Path:
    _git(fixture_repo, "checkout", "-q", "--", ".")
    _git(fixture_repo, "clean", "-qfd")
    return fixture_repo


def run_diff(cwd: Path, *args: str, **popen) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-m", "stacks", "diff", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, **popen)


def edit_stack(repo: Path, stack: str, change) -> None:
    path = repo / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text())
    change(document["config"])
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_nothing_changed_is_an_empty_preview(repo):
    result = run_diff(repo, "dev", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"create": [], "update": [], "replace": [], "delete": [], "effects": []}
    text = run_diff(repo, "dev")
    assert text.returncode == 0 and "no changes:" in text.stdout and "(merge-base with main)" in text.stdout


def test_one_bench_setting_replaces_the_hashed_jobs_and_their_code(repo):
    edit_stack(repo, "dev", lambda c: c["vllm-poc:bench"].update(concurrencies=[1, 8, 64]))
    result = run_diff(repo, "dev", "--json")
    assert result.returncode == 0, result.stderr
    preview = json.loads(result.stdout)
    print("one setting:", {k: [e["object"] for e in preview[k]] for k in D.KINDS}, preview["effects"])
    assert preview["create"] == [] and preview["delete"] == []
    replaced = {e["name"]: e for e in preview["replace"]}
    # the sweep's hash moved: its Job and its code under new names, each paired with its predecessor
    for logical in ("bench-gemma-fp8-job", "bench-gemma-fp8-code"):
        entry = replaced[logical]
        assert entry["replaces"] != entry["object"] and "metadata.name changed" in entry["reasons"]
        assert entry["replaces"].rsplit("-", 1)[0] == entry["object"].rsplit("-", 1)[0]
    assert 2 <= len(preview["replace"]) + len(preview["update"]) <= 8
    # said in words: the sweep runs again, the server does not restart
    assert "re-runs sweep bench-gemma-fp8" in preview["effects"]
    assert not any(text.startswith("restarts server") for text in preview["effects"])
    # the prompt set and the server are untouched
    touched = {e["name"] for kind in ("update", "replace") for e in preview[kind]}
    assert not {"bench-prompts-config-map", "server-gemma-fp8-deployment"} & touched


def test_an_added_server_is_created_with_its_parts(repo):
    new_server = {"name": "gemma-b", "pool": "l40s", "model": "fp8-dynamic", "trafficClass": "batch",
                  "maxModelLen": 8192, "maxNumSeqs": 64}
    edit_stack(repo, "dev", lambda c: c["vllm-poc:servers"].append(new_server))
    result = run_diff(repo, "dev", "--json")
    assert result.returncode == 0, result.stderr
    preview = json.loads(result.stdout)
    print("server added:", {k: len(preview[k]) for k in D.KINDS})
    created = {e["object"] for e in preview["create"]}
    assert {"Deployment vllm/gemma-b", "Service vllm/gemma-b"} <= created
    # only the new server's parts: the existing server and the cluster stay as they are
    assert "Deployment vllm/gemma-fp8" not in created and len(created) <= 15
    assert preview["delete"] == []
    assert not any("gemma-b" in e["object"] for e in preview["replace"])


def test_bad_input_exits_2_with_the_fix(repo, tmp_path):
    unknown = run_diff(repo, "nope")
    assert unknown.returncode == 2 and "Pulumi.nope.yaml" in unknown.stderr and "dev" in unknown.stderr
    bad_ref = run_diff(repo, "dev", "--against", "no-such-branch")
    assert bad_ref.returncode == 2 and "--against no-such-branch" in bad_ref.stderr and "HEAD~1" in bad_ref.stderr
    for result in (unknown, bad_ref):
        assert "Traceback" not in result.stderr
    plain = tmp_path / "plain"
    _copy_project(plain)  # the files without git
    no_git = run_diff(plain, "dev")
    assert no_git.returncode == 2 and "is not a git checkout" in no_git.stderr and "Traceback" not in no_git.stderr


def test_sigterm_stops_the_diff_and_leaves_no_temporary_folder(repo, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(repo), "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "stacks", "diff", "dev"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # the renders have started
    assert "diff: rendering dev" in line, line
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "stopped by SIGTERM" in stderr and "nothing was kept" in stderr and "Traceback" not in stderr
    assert list(scratch.iterdir()) == []
