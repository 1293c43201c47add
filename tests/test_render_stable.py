"""Renders are byte-stable and never crash: the same stack renders to the same bytes, in one process
or another (with another hash seed), 200 times in a row in one process and in 200 processes."""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from components import code_volume
from stacks.job_code import bench_code
from stacks.ops.render import CODE_DIR, render_stack
from stacks.settings import REPO

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in REPO.glob("Pulumi.*.yaml"))
# The smallest stack (an existing VPC, no GPU pools): it still has the EKS cluster and the node group
# that takes the cluster as an input, which is what made the mock runtime crash now and then.
MINIMAL = """config:
  aws:region: ap-northeast-2
  vllm-poc:network:
    vpcId: vpc-0123abcd
    privateSubnets: {ap-northeast-2a: subnet-0123abcd, ap-northeast-2b: subnet-0123abce}
  vllm-poc:cluster:
    privateAccessSecurityGroups: [sg-0123abcd]
"""


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_renders_to_the_same_bytes_twice(stack, tmp_path):
    first = render_stack(stack).files()
    assert render_stack(stack).files() == first
    # another process, another hash seed (set and dict orders must not leak into the files)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "stacks", "render", stack, "--out", str(out)], cwd=REPO,
                          env=dict(os.environ, PYTHONHASHSEED="4242"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    written = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert written == first


def test_job_code_is_written_once_and_referenced_by_hash(tmp_path):
    stack = "g7e"  # two bench targets and the report Job: three ConfigMaps carrying the same bench code
    rendered = render_stack(stack)
    rendered.write(tmp_path)
    written = tmp_path / CODE_DIR / "bench"
    bench_files = sorted(p.relative_to(written).as_posix() for p in written.rglob("*.py"))
    assert bench_files == sorted(bench_code())  # the package's tree, sub-packages included
    # the prompt set, once, where it lives in the repository
    prompt_files = sorted(p.name for p in (tmp_path / CODE_DIR / "bench" / "data").iterdir())
    assert prompt_files == ["korean_marketplace.jsonl"]
    objects = list(yaml.safe_load_all((tmp_path / "kubernetes.yaml").read_text()))
    maps = [o for o in objects if o["kind"] == "ConfigMap"
            and any(k.endswith((".py", ".jsonl")) for k in o.get("data", {}))]
    bench_maps = [m for m in maps if "run.sweep.py" in m["data"]]
    assert sorted(m["metadata"]["name"].split("-")[0] for m in bench_maps) == ["bench", "bench", "report"]
    # the prompt set, once per stack: only the bench Jobs read it (not in the report Job's code)
    assert len([m for m in maps if "korean_marketplace.jsonl" in m["data"]]) == 1
    for config_map in maps:
        for name, reference in config_map["data"].items():
            if not name.endswith((".py", ".jsonl")):
                continue  # other entries (a requirements list) stay inline
            path = reference.split()[1]
            digest = hashlib.sha256((tmp_path / path).read_bytes()).hexdigest()
            assert reference == f"file {path} sha256:{digest}"
            # code/<folder of the project>/<path in it>, the key naming that path (run.sweep.py: run/sweep.py)
            rel = path.split("/", 1)[1]
            assert rel.endswith("/" + code_volume.path(name))
            assert (tmp_path / path).read_text() == (REPO / rel).read_text()
    assert {p.name for p in (tmp_path / CODE_DIR).iterdir()} <= {"bench", "weights"}
    for rendered_file in ("kubernetes.yaml", "resources.json"):
        text = (tmp_path / rendered_file).read_text()
        assert "def main(" not in text and "ko-001" not in text, rendered_file
    # in memory (what the tests and the Job read) the ConfigMap still holds the code itself
    live = [c for c in rendered.k8s("ConfigMap") if "run.sweep.py" in c.get("data", {})]
    assert len(live) == 3
    assert all(c["data"]["run.sweep.py"] == (REPO / "bench" / "run" / "sweep.py").read_text() for c in live)


def test_objects_come_in_dependency_order_then_by_kind_and_name(dev):
    objects = dev.kubernetes_objects()
    assert objects[0]["kind"] == "Namespace"
    by_urn = {}
    for r in dev.registrations:
        if r.type.startswith("kubernetes:") and "helm.sh" not in r.type and "providers" not in r.type:
            by_urn[r.urn] = r
    position = {}
    for index, obj in enumerate(objects):
        for urn, r in by_urn.items():
            name = (r.inputs.get("metadata") or {}).get("name")
            if name and name == obj["metadata"]["name"] and r.inputs.get("kind") == obj["kind"]:
                position[urn] = index
    assert len(position) == len(objects)
    for urn, r in by_urn.items():
        for dependency in r.dependencies:
            if dependency in position:
                assert position[dependency] < position[urn], (r.name, dependency)
    kinds = [o["kind"] for o in objects]
    assert kinds.index("EC2NodeClass") < kinds.index("NodePool")
    resources = dev.resources()
    assert resources == sorted(resources, key=lambda r: (r["type"], r["name"], r["parent"] or ""))
    assert all(r["dependsOn"] == sorted(r["dependsOn"]) for r in resources)


def test_a_resource_given_as_input_is_recorded_by_name(dev):
    """The cause of the old "attached to a different loop" crash: the mock monitor rebuilt a resource
    passed as an input (the node group's cluster) on a worker thread's event loop."""
    (group,) = dev.of_type("eks:index:ManagedNodeGroup")
    assert group.inputs["cluster"] == {"$resource": "cluster-eks"}


def _render_minimal(directory: str) -> int:
    return len(render_stack("min", Path(directory)).registrations)


def test_200_renders_in_one_process(tmp_path):
    (tmp_path / "Pulumi.min.yaml").write_text(MINIMAL)
    started = time.monotonic()
    counts = {_render_minimal(str(tmp_path)) for _ in range(200)}
    assert len(counts) == 1 and counts.pop() > 50
    print(f"200 renders in one process: {time.monotonic() - started:.1f} s")


def test_200_renders_in_200_processes(tmp_path):
    (tmp_path / "Pulumi.min.yaml").write_text(MINIMAL)
    _render_minimal(str(tmp_path))  # imports once; every forked child then renders with its own runtime
    started = time.monotonic()
    # Frozen objects are not traversed by the children's garbage collector, which would otherwise
    # copy the inherited heap page by page (about a second per child).
    gc.collect()
    gc.freeze()
    try:
        with multiprocessing.get_context("fork").Pool(processes=2, maxtasksperchild=1) as pool:
            counts = pool.map(_render_minimal, [str(tmp_path)] * 200, chunksize=1)
    finally:
        gc.unfreeze()
    assert len(counts) == 200 and len(set(counts)) == 1
    print(f"200 renders in 200 processes: {time.monotonic() - started:.1f} s")
