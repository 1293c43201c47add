"""The offline render's interface: three files with stable keys, a summary, clean failures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stacks", "render", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_render_dev_writes_the_three_files(tmp_path):
    started = time.perf_counter()
    result = run_render("dev", "--out", str(tmp_path))
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    print(f"render dev: {elapsed:.1f} s")  # a figure, not a limit: a loaded machine is slower
    assert "stack dev:" in result.stdout and "kubernetes:karpenter.sh/v1:NodePool" in result.stdout

    resources = json.loads((tmp_path / "resources.json").read_text())
    assert all({"type", "name", "parent", "inputs"} <= set(r) for r in resources)
    names = {r["name"] for r in resources}
    assert all(r["parent"] is None or r["parent"] in names for r in resources)
    # remote components appear once, with their inputs
    (cluster,) = [r for r in resources if r["type"] == "eks:index:Cluster"]
    assert cluster["inputs"]["version"] and cluster["parent"] == "cluster"
    # everything but the providers and the workload namespace lives inside a component
    top_level = {(r["type"], r["name"]) for r in resources
                 if r["parent"] is None and not r["type"].startswith("vllm-poc:")}
    assert top_level == {("pulumi:providers:aws", "aws"), ("kubernetes:core/v1:Namespace", "vllm")}

    objects = list(yaml.safe_load_all((tmp_path / "kubernetes.yaml").read_text()))
    assert objects and all({"apiVersion", "kind", "metadata"} <= set(o) for o in objects)
    assert all(("spec" in o) or ("data" in o) or ("rules" in o) or ("roleRef" in o) or ("subjects" in o)
               or o["kind"] in ("Namespace", "ServiceAccount") for o in objects)

    releases = json.loads((tmp_path / "helm.json").read_text())
    assert {"karpenter-crd", "karpenter", "nvidia-device-plugin"} <= {r["name"] for r in releases}
    assert all({"chart", "repository", "version", "namespace", "values"} <= set(r) for r in releases)


def test_bad_config_exits_non_zero_with_the_key(tmp_path):
    (tmp_path / "Pulumi.broken.yaml").write_text(yaml.safe_dump({"config": {
        "vllm-poc:gpuPools": [{"name": "x", "instanceType": "g6e.2xlarg", "gpuLimit": 1}]}}))
    result = run_render("broken", "--out", str(tmp_path / "out"), "--dir", str(tmp_path))
    assert result.returncode == 2
    assert "vllm-poc:gpuPools[0].instanceType" in result.stderr and "g6e.2xlarge" in result.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a bad config"


def test_unknown_stack_names_the_known_ones(tmp_path):
    result = run_render("nope", "--out", str(tmp_path))
    assert result.returncode == 2 and "Pulumi.nope.yaml" in result.stderr and "dev" in result.stderr
