"""A stack's life through many `pulumi up`s, as renders: what each ordinary event changes, said by
`stacks diff` (stacks/ops/diff.py: compare and effects), and that nothing else changes.

The g7e stack (two benchmarked servers with compile caches, a report Job, GPU release on) is rendered
once per step, in this process, with the step's input changed under it: the code the Jobs read
(stacks/job_code.py reads bench/ and weights/ from a folder; here a copy with one edit), the pinned
AMI release (pyproject.toml's pins; here a copy), the zones that offer g7e and the report written in
S3 (the mock runtime's answers, stacks/ops/mocks.py). Steps, in order, each against the one before:

  first up                   the baseline
  report-side edit           bench/analysis/markup.py: only the report runs again
  weights edit               weights/hub.py: only the weight sync runs again; no server restarts
  AMI release bump           only the EC2NodeClasses; no server restarts, no sweep re-runs
  g7e offered in zone a      nothing moves (zones are fixed once: the stack file pins them)
  sweeps done, GPUs released nothing changes: no server is scaled back, no sweep re-runs
  another up                 nothing changes
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stacks import job_code, versions
from stacks.ops import diff as D
from stacks.ops import mocks
from stacks.ops.render import Rendered, render_config
from tests.fixtures.pulumi_stack import stack_config

REPO = Path(__file__).resolve().parents[1]
STACK = "g7e"
STEPS = ("first up", "report-side edit", "weights edit", "AMI release bump", "g7e offered in zone a",
         "sweeps done and GPUs released", "another up")


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


@pytest.fixture(scope="module")
def life(tmp_path_factory) -> dict[str, Rendered]:
    """Each step's render (cumulative: every step keeps the changes of the steps before it)."""
    tmp = tmp_path_factory.mktemp("life")
    patch = pytest.MonkeyPatch()
    renders: dict[str, Rendered] = {}
    config = stack_config(STACK)

    def render(step: str) -> None:
        renders[step] = render_config(config, stack=STACK)

    try:
        render("first up")
        bench = _copy(REPO / "bench", tmp / "bench")
        _append(bench / "analysis" / "markup.py", "# a wording change on the report's pages")
        patch.setattr(job_code, "BENCH_DIR", bench)
        render("report-side edit")
        weights = _copy(REPO / "weights", tmp / "weights")
        _append(weights / "hub.py", "# a comment in the weight sync's code")
        patch.setattr(job_code, "WEIGHTS_DIR", weights)
        render("weights edit")
        pyproject = tmp / "pyproject.toml"
        text = (REPO / "pyproject.toml").read_text()
        release = versions.pins().al2023_ami_release
        pyproject.write_text(text.replace(f'al2023_ami_release = "{release}"', 'al2023_ami_release = "v20261031"'))
        patch.setattr(versions, "PYPROJECT", pyproject)
        versions._pyproject.cache_clear()
        versions.pins.cache_clear()
        render("AMI release bump")
        patch.setitem(mocks.OFFERED_ZONES, "g7e", "abcd")
        render("g7e offered in zone a")
        report = renders["g7e offered in zone a"].outputs["report"]["uri"].removeprefix("s3://")
        patch.setattr(mocks, "S3_OBJECTS", {f"{report}summary.json": '{"verdict": {"threshold": 1.5, '
                                            '"min_ratio": 3.49, "pass": true, "basis": "slo", "state": "pass"}}'})
        render("sweeps done and GPUs released")
        render("another up")
    finally:
        patch.undo()
        versions._pyproject.cache_clear()
        versions.pins.cache_clear()
    return renders


def step(life: dict[str, Rendered], name: str) -> tuple[dict, list[str], dict[str, list[str]]]:
    """`stacks diff` between a step and the one before it: the result, its effects, and the changed
    resources by kind (type:name)."""
    before, after = life[STEPS[STEPS.index(name) - 1]], life[name]
    old, new = before.resources(), after.resources()
    result = D.compare(old, new)
    changed = {kind: sorted(f"{e['type'].rsplit(':', 1)[-1]}:{e['name']}" for e in result[kind]) for kind in D.KINDS}
    print(f"{name}: {D.effects(old, new, result)} {changed}")
    return result, D.effects(old, new, result), changed


def _touched(changed: dict[str, list[str]]) -> list[str]:
    return sorted(x for kind in D.KINDS for x in changed[kind])


def test_a_report_side_edit_writes_the_report_again_and_nothing_else(life):
    result, effects, changed = step(life, "report-side edit")
    assert effects == ["writes the report again"]
    assert changed["create"] == [] and changed["delete"] == []
    touched = _touched(changed)
    # the report's Job, code and prefix (its role's write grant); the release Role and Jobs that name it
    assert all(x.split(":", 1)[1].startswith(("report-", "gpu-release-")) for x in touched), touched
    assert {"Job:report-job", "ConfigMap:report-code", "RolePolicy:report-identity-policy"} <= set(touched)
    # no sweep, start-up record, wake or server is touched
    assert not [x for x in touched if x.startswith(("Job:bench-", "Job:startup-", "Deployment:"))]
    assert not [x for x in touched if "wake" in x]


def test_a_weights_edit_restarts_no_server_and_re_runs_no_sweep(life):
    result, effects, changed = step(life, "weights edit")
    assert effects == []
    touched = _touched(changed)
    assert touched, "the weight sync mounts weights/hub.py: its Job runs again (skipping what S3 holds)"
    assert all(x.split(":", 1)[1].startswith("weights-") for x in touched), touched
    assert not [x for x in touched if x.startswith("Deployment:") or "cache" in x]


def test_an_ami_release_bump_updates_the_node_classes_only(life):
    result, effects, changed = step(life, "AMI release bump")
    assert effects == []
    assert changed["create"] == [] and changed["delete"] == [] and changed["replace"] == []
    assert changed["update"] and all(x.startswith("EC2NodeClass:") for x in changed["update"]), changed
    for entry in result["update"]:
        assert {c["field"] for c in entry["changes"]} == {"spec.amiSelectorTerms[0].alias"}


def test_g7e_offered_in_another_zone_moves_nothing(life):
    result, effects, changed = step(life, "g7e offered in zone a")
    assert effects == [] and _touched(changed) == [], changed


def test_sweeps_done_and_gpus_released_change_nothing_and_scale_nothing_back(life):
    result, effects, changed = step(life, "sweeps done and GPUs released")
    assert effects == [] and _touched(changed) == [], changed
    after = life["sweeps done and GPUs released"]
    assert after.outputs["report"]["state"] == "pass"
    # the release Jobs scaled the servers to 0; Pulumi does not own `replicas`, so no `up` undoes it
    targets = set(stack_config(STACK)["vllm-poc:bench"]["targets"])
    deployments = {d["metadata"]["name"]: d for d in after.k8s("Deployment")}
    assert targets <= set(deployments) and all("replicas" not in deployments[t]["spec"] for t in targets)


def test_another_up_changes_nothing(life):
    result, effects, changed = step(life, "another up")
    assert effects == [] and _touched(changed) == [], changed
    # and the whole life re-ran no sweep and restarted no server
    first, last = life["first up"], life["another up"]
    old, new = first.resources(), last.resources()
    said = D.effects(old, new, D.compare(old, new))
    assert not [s for s in said if s.startswith(("restarts server", "re-runs sweep"))], said


def test_an_edit_to_the_sweeps_own_code_re_runs_the_sweeps_and_says_so(life, tmp_path, monkeypatch):
    """The other side of the identity: bench/run/ is what the sweep runs, so it names the sweep."""
    bench = _copy(REPO / "bench", tmp_path / "bench")
    _append(bench / "run" / "grid.py", "# a change to how the grid is run")
    monkeypatch.setattr(job_code, "BENCH_DIR", bench)
    edited = render_config(stack_config(STACK), stack=STACK)
    old, new = life["first up"].resources(), edited.resources()
    result = D.compare(old, new)
    said = D.effects(old, new, result)
    targets = sorted(stack_config(STACK)["vllm-poc:bench"]["targets"])
    assert [s for s in said if s.startswith("re-runs sweep")] == [f"re-runs sweep bench-{t}" for t in targets]
    assert [s for s in said if s.startswith("re-records")] == [f"re-records the start-up of {t}" for t in targets]
    assert not [s for s in said if s.startswith("restarts server")], said
    # a new results prefix per target (the sweep's identity), the servers as they were
    assert {t: u.rsplit("/", 2)[-2] for t, u in edited.outputs["benchResults"].items()} != \
        {t: u.rsplit("/", 2)[-2] for t, u in life["first up"].outputs["benchResults"].items()}
    assert not [e for kind in ("update", "replace") for e in result[kind] if e["type"] == D.DEPLOYMENT]
