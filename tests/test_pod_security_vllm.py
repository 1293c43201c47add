"""A real vLLM (CPU) server under the hardened pod's conditions.

In a private mount namespace the root filesystem is remounted read-only, except three folders that
stand for the pod's writable volumes (HOME, /tmp, the cache volume); the server then runs as
UID/GID 65532 (no passwd entry, no supplementary groups, no capabilities, no_new_privs) with the
rendered Deployment's env, its volume paths mapped to those folders. A write anywhere else, or a
lookup of the user's name that fails, stops the server or shows in its log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from components import pod_security
from stacks.serving import CACHE_MOUNT
from tests.fixtures.bench_env import SERVE_FLAGS, TINY_MODEL, _free_port, _stop, wait_healthy

UID = pod_security.RUN_AS
# Runs as root in a new mount namespace, then becomes the pod's user. The interpreter lives under
# /root (mode 700 on this machine): a tmpfs over /root makes the path traversable again.
CONFINE = r"""
set -eu
for d in "$POD_HOME" "$POD_TMP" "$POD_CACHE"; do mount --bind "$d" "$d"; done
mount --bind /root/.pyenv "$STASH"
mount -t tmpfs -o mode=755,size=1m tmpfs /root
mkdir /root/.pyenv
mount --bind "$STASH" /root/.pyenv
mount --bind "$VENV" "$VENV_VIEW"
mount -o remount,bind,ro /
exec setpriv --reuid "$POD_UID" --regid "$POD_UID" --clear-groups --no-new-privs \
    --inh-caps=-all --bounding-set=-all -- "$@"
"""


@pytest.fixture
def sandbox():
    base = Path(tempfile.mkdtemp(prefix="vllm-poc-nonroot-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _owned_by_uid(base: Path, *names: str) -> dict[str, Path]:
    paths = {}
    for name in names:
        path = base / name
        path.mkdir()
        os.chown(path, UID, UID)
        path.chmod(0o700)
        paths[name] = path
    return paths


def _readable_tree(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(Path(root) / name, 0o644)


def mapped_env(container: dict, mapping: dict[str, Path]) -> dict[str, str]:
    """A rendered container's env with its volume paths mapped to the sandbox's folders."""
    env = {}
    for item in container["env"]:
        value = item["value"]
        for pod_path, here in mapping.items():
            if value == pod_path or value.startswith(pod_path + "/"):
                value = str(here) + value[len(pod_path):]
                break
        env[item["name"]] = value
    return env


@pytest.mark.vllm
def test_vllm_serves_as_the_pod_uid_writing_only_to_the_pod_volumes(dev, vllm_env, sandbox):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.fail("this test needs root, unshare and setpriv (util-linux), as CI has")
    # what vLLM needs beside its venv: the dist-info shim (see tests/fixtures/vllm_env.py), a model
    shim = sandbox / "shim"
    dist = shim / f"vllm-{vllm_env.version}+cpu.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {vllm_env.version}+cpu\n")
    built = vllm_env.run([vllm_env.python, str(TINY_MODEL), str(sandbox / "model")], timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    _readable_tree(shim)
    _readable_tree(sandbox / "model")
    volumes = _owned_by_uid(sandbox, "home", "tmp", "cache")

    (deployment,) = dev.k8s("Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["runAsUser"] == UID
    mapping = {pod_security.HOME: volumes["home"], pod_security.TMP: volumes["tmp"], CACHE_MOUNT: volumes["cache"]}
    env = mapped_env(container, mapping)
    assert env["HOME"] == str(volumes["home"]) and env["XDG_CACHE_HOME"] == str(volumes["cache"])
    env.update(PATH=vllm_env.env["PATH"], PYTHONPATH=str(shim), VLLM_TARGET_DEVICE="cpu",
               VLLM_CPU_KVCACHE_SPACE="1", TRANSFORMERS_OFFLINE="1")

    port = _free_port()
    log = volumes["tmp"] / "server.log"
    stash = sandbox / "pyenv"
    stash.mkdir()
    # The venv seen at a path the UID can traverse: the checkout's own folders may be root-only (0700).
    venv_view = sandbox / "venv"
    venv_view.mkdir()
    confine_env = {**env, "VENV": str(vllm_env.venv), "VENV_VIEW": str(venv_view),
                   "POD_HOME": str(volumes["home"]), "POD_TMP": str(volumes["tmp"]),
                   "POD_CACHE": str(volumes["cache"]), "STASH": str(stash), "POD_UID": str(UID)}
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", CONFINE, "confine",
             str(venv_view / "bin" / "python3"), "-m", "vllm.entrypoints.cli.main", "serve", str(sandbox / "model"),
             "--served-model-name", "tiny",
             "--host", "127.0.0.1", "--port", str(port), *SERVE_FLAGS],
            env=confine_env, cwd=sandbox / "model",
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, log, what=f"vllm serve as UID {UID}")
        request = urllib.request.Request(
            f"{url}/v1/completions", data=json.dumps({"model": "tiny", "prompt": "w1 w2 w3", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert json.loads(resp.read())["choices"][0]["text"] is not None
    finally:
        _stop(proc)
    text = log.read_text()
    assert "Permission denied" not in text and "Read-only file system" not in text, text[-4000:]
    # it really ran as the pod's user, and used the volumes
    assert any(p.stat().st_uid == UID for p in volumes["tmp"].rglob("*") if p != log) or \
        any(p.stat().st_uid == UID for p in volumes["cache"].rglob("*")), "nothing written by the pod's UID"


def test_the_confinement_is_what_the_pod_gets(sandbox):
    """The sandbox of the test above: the pod's UID, writes only to the volume folders."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.fail("this test needs root, unshare and setpriv (util-linux), as CI has")
    volumes = _owned_by_uid(sandbox, "home", "tmp", "cache")
    stash = sandbox / "pyenv"
    stash.mkdir()
    (sandbox / "venv").mkdir()
    env = {**os.environ, "VENV": str(sandbox / "home"), "VENV_VIEW": str(sandbox / "venv"), "POD_HOME": str(volumes["home"]), "POD_TMP": str(volumes["tmp"]),
           "POD_CACHE": str(volumes["cache"]), "STASH": str(stash), "POD_UID": str(UID)}
    probe = ('id -u; grep -E "^(NoNewPrivs|CapEff)" /proc/self/status; touch "$POD_TMP/ok"; '
             'touch "$POD_CACHE/ok"; touch /tmp/vllm-poc-not-allowed 2>&1 || echo refused')
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", CONFINE, "confine",
                             "sh", "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == str(UID)
    assert "NoNewPrivs:\t1" in result.stdout and "CapEff:\t0000000000000000" in result.stdout
    assert "Read-only file system" in result.stdout and lines[-2] == "refused"
    assert (volumes["tmp"] / "ok").exists() and (volumes["cache"] / "ok").exists()
    assert not Path("/tmp/vllm-poc-not-allowed").exists()
