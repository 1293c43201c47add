"""The suite's own scheduling: under `make test` (two xdist workers, --dist loadgroup) the tests that run
vLLM stay on one worker, so a module's server starts once and no two CPU servers compete. Checked on a
generated suite with this project's collection hook: two vLLM-marked modules with a module fixture
each, a vLLM module that starts no server (`no_server`: a group of its own, either worker), a plain module
kept on one worker by its own `xdist_group` mark, and plain tests beside them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MODULE = '''import os, pytest
pytestmark = pytest.mark.vllm

@pytest.fixture(scope="module")
def server():
    with open(os.environ["SETUPS"], "a") as fh:
        fh.write("{name} " + os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    yield

@pytest.mark.parametrize("n", range(4))
def test_one(server, n):
    pass

def test_two(server):
    pass
'''


def test_vllm_tests_share_one_worker_and_set_up_each_module_once(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems, pytest_configure\n")
    for name in ("a", "b"):
        (suite / f"test_{name}.py").write_text(MODULE.replace("{name}", name))
    (suite / "test_c.py").write_text(MODULE.replace("{name}", "c").replace(
        "pytestmark = pytest.mark.vllm", "pytestmark = [pytest.mark.vllm, pytest.mark.no_server]"))
    (suite / "test_plain.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(20)))
    # a plain module keeping its costly fixture's tests together with a group of its own
    (suite / "test_d.py").write_text(MODULE.replace("{name}", "d").replace(
        "pytestmark = pytest.mark.vllm", 'pytestmark = pytest.mark.xdist_group("costly")').replace(
        "range(4)", "range(12)"))
    setups = tmp_path / "setups.txt"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", str(suite)], cwd=suite, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SETUPS": str(setups)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = setups.read_text().split()
    modules, workers = lines[0::2], lines[1::2]
    assert sorted(modules) == ["a", "b", "c", "d"], lines  # each module's fixture once, not once per worker
    grouped = {m: w for m, w in zip(modules, workers)}
    assert grouped["a"] == grouped["b"], lines  # and both on the same worker
    # a vLLM module that starts no server is a group of its own, not held to that worker (xdist names a
    # grouped test "<node id>@<group>")
    assert "PASSED test_c.py::test_two@no_server" in proc.stdout, proc.stdout[-2000:]
    assert "PASSED test_a.py::test_two@vllm" in proc.stdout, proc.stdout[-2000:]
    assert "PASSED test_d.py::test_two@costly" in proc.stdout, proc.stdout[-2000:]
