"""The pieces `python -m bench gpu-check` measures with: one `vllm serve` with a start-up timeline, the
GPU's memory, the compile cache's trip through S3, the cross-check's `vllm bench serve` runs and the
speculative-decoding counters. Plain functions and small classes; bench/demo/gpu_check.py orders them.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.analysis import spec as spec_metrics
from bench.common import leftovers
from bench.common.interrupts import stop_process_group
from bench.demo import cpu_vllm, gpu_settings
from bench.startup import timeline

REPO = Path(__file__).resolve().parents[2]
SERVED_NAME = "tiny"
FULL_SERVED_NAME = "gemma-4-31b-random"  # what a full-size server holds: the architecture, random weights

# Milestones of a start, first seen in the server's log while it starts (stamped by this process's clock,
# so the times are seconds since launch even where vLLM's own stamps have one-second resolution).
MILESTONES: tuple[tuple[str, str], ...] = (
    ("api_banner", r"vLLM API server version|non-default args:"),
    ("engine_started", r"Initializing a V1 LLM engine|EngineCore.*(?:Waiting for init message|started)"),
    ("weights_loaded", r"Loading weights took|Model loading took"),
    ("compile_started", r"Dynamo bytecode transform time|Start compiling|Directly load"),
    ("compile_done", r"torch\.compile (?:took|takes|and initial profiling/warmup run together took)"),
    ("kv_cache_sized", r"(?:GPU|CPU) KV cache size|Available KV cache memory"),
    ("graphs_captured", r"Graph capturing finished"),
    ("engine_ready", r"init engine \(profile, create kv cache, warmup model\) took"),
    ("api_ready", r"Application startup complete"),
)
_MILESTONES = tuple((key, re.compile(pattern)) for key, pattern in MILESTONES)
_REFUSED = re.compile(r"NotImplementedError|not supported|is not supported|Unsupported|ValueError: .*speculative",
                      re.IGNORECASE)


class StepEnd(RuntimeError):
    """A step that ends early, keeping the figures it measured before."""

    def __init__(self, reason: str, figures: dict[str, Any] | None = None):
        super().__init__(reason)
        self.figures = figures or {}


class NotAvailable(StepEnd):
    """The step cannot run on this device or installation (not a broken check)."""


class Broken(StepEnd):
    """The check ran and the configuration did not behave as the docs say."""


@dataclass
class Pod:
    """One start of the server, standing in for a pod: its own HOME and TMPDIR, the cache root shared."""

    name: str
    folder: Path
    cache_root: Path

    def env(self, base: dict[str, str]) -> dict[str, str]:
        home, tmp = self.folder / "home", self.folder / "tmp"
        for d in (home, tmp):
            d.mkdir(parents=True, exist_ok=True)
        env = dict(base)
        env.update(gpu_settings.server_env(str(self.cache_root)))
        # Nothing the start writes may land outside the cache root but in this pod's own folders, so the
        # next pod starts with what the compile cache carried and nothing else.
        env.update({"HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache"),
                    "HF_HOME": str(home / ".cache" / "huggingface"), "VLLM_RPC_BASE_PATH": rpc_dir(tmp)})
        return env


IPC_PATH_MAX = 107  # a Unix socket's path: sizeof(sockaddr_un.sun_path) less the final NUL


def rpc_dir(tmp: Path) -> str:
    """Where vLLM puts its ZMQ sockets between the API server and the engine (VLLM_RPC_BASE_PATH, by default
    TMPDIR): `<dir>/<uuid4>` must fit a Unix socket's 107 characters, or the engine cannot bind and
    `vllm serve` exits 1. The pod's own TMPDIR where it fits, else the system's temporary folder (vLLM
    keeps this path out of its compile hash, so pods still share their compiled graphs)."""
    if len(str(tmp)) + 1 + 36 <= IPC_PATH_MAX:
        return str(tmp)
    short = Path(os.environ.get("TMPDIR") or "/tmp")
    return str(short if len(str(short)) + 1 + 36 <= IPC_PATH_MAX else Path("/tmp"))


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path
    launched: float  # wall clock
    cmd: list[str] = field(default_factory=list)
    milestones: dict[str, float] = field(default_factory=dict)
    healthy_s: float | None = None
    noted: Path | None = None  # the file naming its process group while it runs (leftovers.note_group)

    def stop(self) -> None:
        stop_process_group(self.proc, 30)
        leftovers.forget_group(self.noted)

    @property
    def name(self) -> str:
        """The model name the server answers to (its --served-model-name)."""
        if "--served-model-name" in self.cmd[:-1]:
            return self.cmd[self.cmd.index("--served-model-name") + 1]
        return SERVED_NAME


def serve_command(python: str, model: Path, port: int, flags: list[str], name: str = SERVED_NAME) -> list[str]:
    return [python, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), *flags]


def start(cmd: list[str], env: dict[str, str], log: Path, noted: Path | None = None) -> Server:
    """`vllm serve` in a process group of its own that ends with this command however it ends (SIGTERM when
    its starter dies), the group noted in `noted` while it runs (stop_leftover's file)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    launched = time.time()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=leftovers.die_with_parent())
    if noted is not None:
        leftovers.note_group(noted, proc.pid, "vLLM server")
    return Server(proc, f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}", log, launched, list(cmd), noted=noted)


def _scan(server: Server, text: str) -> None:
    now = round(time.time() - server.launched, 1)
    for line in text.splitlines():
        for key, pattern in _MILESTONES:
            if key not in server.milestones and pattern.search(line):
                server.milestones[key] = now


def wait_healthy(server: Server, budget_s: float) -> float:
    """Seconds from launch to /health 200, noting each milestone as its log line appears; raises
    Broken (with the log's tail) when the process exits or the budget runs out."""
    offset = 0
    while True:
        try:
            with server.log.open("r", errors="replace") as fh:
                fh.seek(offset)
                chunk = fh.read()
                offset = fh.tell()
        except OSError:
            chunk = ""
        if chunk:
            _scan(server, chunk)
        if server.proc.poll() is not None:
            raise Broken(f"vllm serve exited {server.proc.returncode} before /health answered: "
                         f"{last_error(tail(server.log, 20000))}\n{tail(server.log)}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=5) as resp:
                if resp.status == 200:
                    server.healthy_s = round(time.time() - server.launched, 1)
                    server.milestones.setdefault("api_ready", server.healthy_s)
                    server.milestones["health_ok"] = server.healthy_s
                    return server.healthy_s
        except OSError:
            pass
        if time.time() - server.launched > budget_s:
            raise Broken(f"vllm serve not healthy after {budget_s:.0f} s:\n{tail(server.log)}")
        time.sleep(0.5)


def tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


# vLLM's line prefix: "(EngineCore pid=2775) ERROR 12-05 02:15:27 [core.py:1330] "
_LOG_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:]+\s+"
                         r"\[[^\]]*\]\s*)?")
# An exception's own line ("ValueError: Free memory on device ..."), not a traceback's source line
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): ")
# What a process says after its child failed: the cause is in the child's lines above it
_FOLLOW_ON = re.compile(r"root cause above|initialization failed|Failed core proc|stack trace \(above\)")


def last_error(text: str) -> str:
    """The error a log ends on, for the one-line reason, vLLM's line prefix left off: the last exception raised
    that is not a follow-on of another (an engine's start-up failure names its cause in the engine core's lines,
    then the API server adds "Engine core initialization failed. See root cause above"), else the last line
    that names an error, else the last line."""
    lines = [_LOG_PREFIX.sub("", l.strip()).strip() for l in text.splitlines()]
    lines = [l for l in lines if l]
    raised = [l for l in lines if _RAISED.match(l)]
    causes = [l for l in raised if not _FOLLOW_ON.search(l)]
    named = [l for l in lines if re.search(r"Error|Exception|error:", l)]
    line = (causes or raised or named or lines or ["an empty log"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


def refused(log: Path) -> str | None:
    """The line in which vLLM refused a configuration (an unsupported feature), if any."""
    for line in reversed(tail(log, 20000).splitlines()):
        if _REFUSED.search(line):
            return line.strip()[-300:]
    return None


# ---------------------------------------------------------------------------------------------
# HTTP


def post(url: str, body: dict | None = None, timeout: float = 300) -> tuple[float, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"} if data else {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        payload = resp.read()
    seconds = time.perf_counter() - t0
    try:
        return seconds, json.loads(payload) if payload else None
    except ValueError:
        return seconds, payload.decode(errors="replace")


def get_text(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode(errors="replace")


def greedy_text(base: str, prompt: str = "w1 w2 w3 w4 w5 w6 w7 w8", tokens: int = 16,
                model: str = SERVED_NAME) -> str:
    _, out = post(f"{base}/v1/completions", {"model": model, "prompt": prompt, "max_tokens": tokens,
                                              "temperature": 0, "ignore_eos": True})
    return out["choices"][0]["text"]


def completions(base: str, n: int, concurrency: int, max_tokens: int, seed: int = 0,
                prompts: list[str] | None = None, model: str = SERVED_NAME) -> tuple[int, float]:
    """`n` greedy completions of distinct prompts (or of `prompts`), `concurrency` at a time, ignoring
    the end of sequence: (completed, seconds)."""
    queue = list(prompts) if prompts is not None else [
        " ".join(f"w{(seed * 7919 + i * 131 + k * 17) % 1000}" for k in range(32)) for i in range(n)]
    done = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                prompt = queue.pop()
            try:
                post(f"{base}/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                "temperature": 0, "ignore_eos": True})
                with lock:
                    done[0] += 1
            except (OSError, ValueError):
                pass

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0], time.perf_counter() - t0


def acceptance(before: str, after: str) -> dict[str, Any] | None:
    """Speculative decoding over a window between two /metrics texts (bench/analysis/spec.py)."""
    return spec_metrics.acceptance_from_metrics(before, after)


# ---------------------------------------------------------------------------------------------
# The GPU's memory


def gpu_memory_mib(gpus: int = 1) -> float | None:
    """Memory in use on GPUs 0 .. gpus-1 together as nvidia-smi reports it (all processes; a tensor-parallel
    server holds all of them), None without nvidia-smi."""
    lines = _nvidia_smi("--query-gpu=memory.used", gpus)
    try:
        return sum(float(line) for line in lines[:gpus]) if lines else None
    except ValueError:
        return None


def _nvidia_smi(query: str, gpus: int) -> list[str] | None:
    """nvidia-smi's CSV lines (no header, no units) for `query` on GPUs 0 .. gpus-1; None without it."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits", "-i",
                              ",".join(str(i) for i in range(gpus))], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line for line in out.stdout.strip().splitlines() if line.strip()]


def gpu_processes(gpus: int = 1) -> list[tuple[int, str, float]]:
    """(pid, name, MiB) of each process nvidia-smi sees holding memory on GPUs 0 .. gpus-1; [] without nvidia-smi."""
    found = []
    for line in _nvidia_smi("--query-compute-apps=pid,process_name,used_memory", gpus) or []:
        parts = [p.strip() for p in line.split(",")]
        try:
            found.append((int(parts[0]), parts[1], float(parts[-1])))
        except (ValueError, IndexError):
            continue  # "[N/A]" and the like: nothing to name
    return found


HOLDER_MIB = 1024.0  # a process holding less than this leaves a server room to start (a monitor, a driver's helper)
HOLDER_GRACE_S = 30.0  # a server just stopped frees its memory within seconds: wait this long before naming it


def ensure_gpu_free(gpus: int = 1, grace_s: float = HOLDER_GRACE_S) -> None:
    """Raise Broken naming the processes that hold GPU memory before a server starts: vLLM would take the
    GPU's free memory for its utilization and stop with a traceback. Waits up to `grace_s` first, as the
    last server's engine process may still be exiting."""
    deadline = time.monotonic() + grace_s
    while True:
        holders = [p for p in gpu_processes(gpus) if p[2] >= HOLDER_MIB]
        if not holders or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    if not holders:
        return
    gib = sum(p[2] for p in holders) / 1024
    who = "; ".join(f"pid {pid}: {Path(name).name or 'unnamed'} with {mib / 1024:.1f} GiB" for pid, name, mib in holders)
    pids = " ".join(str(p[0]) for p in holders)
    raise Broken(f"the GPU already holds {gib:.1f} GiB in {'another process' if len(holders) == 1 else 'other processes'}"
                 f" ({who}), so vLLM would find too little free memory to start: a server an earlier command left "
                 f"running (one cut off by a time limit), or another job. Stop it (kill {pids}) and run the command "
                 "again")


# ---------------------------------------------------------------------------------------------
# The compile cache through S3


def cache_files(root: Path) -> dict[str, tuple[int, float]]:
    """{relative path: (size, mtime)} of the compile output under `root` (what the push carries)."""
    out = {}
    if not root.is_dir():
        return out
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and rel.parts[0] not in gpu_settings.PUSH_EXCLUDES and not path.name.startswith(".compile-cache"):
            st = path.stat()
            out[rel.as_posix()] = (st.st_size, st.st_mtime)
    return out


def weights_cli(action: str, cache: Path, uri: str, env: dict[str, str], timeout: float = 300) -> dict[str, Any]:
    """`python -m weights compile-cache push|pull`, the servers' own steps; its result line as a dict."""
    cmd = [sys.executable, "-m", "weights", "compile-cache", action, "--dir", str(cache), "--uri", uri, "--no-progress"]
    if action == "push":
        cmd += [arg for name in gpu_settings.PUSH_EXCLUDES for arg in ("--exclude", name)]
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    seconds = round(time.perf_counter() - t0, 2)
    result = timeline.cache_result(proc.stdout + "\n" + proc.stderr) or {}
    return {"rc": proc.returncode, "seconds_with_process": seconds, **result,
            "output_tail": None if proc.returncode == 0 else (proc.stdout + proc.stderr)[-1500:]}


class S3:
    """Where the compile cache goes: a bucket the user names, a moto server on 127.0.0.1, or (neither
    installed) a local copy, labelled so."""

    BUCKET = "gpu-check"

    def __init__(self, uri: str | None):
        self.uri = uri
        self.env: dict[str, str] = {}
        self.moto = None
        self.transport = "s3"
        self.note = ""

    def open(self, key: str) -> None:
        if self.uri:
            self.uri = self.uri.rstrip("/") + f"/{key}/"
            self.note = "the bucket given with --s3-uri"
            return
        if importlib.util.find_spec("boto3") and importlib.util.find_spec("moto") \
                and (REPO / "weights" / "compile_cache.py").is_file():
            from moto.server import ThreadedMotoServer  # local import: moto is optional (else a local copy)
            import boto3  # local import: optional, as moto

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
            port = cpu_vllm.free_port()
            self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            self.moto.start()
            self.env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "gpu-check",
                        "AWS_SECRET_ACCESS_KEY": "gpu-check", "AWS_REGION": "us-east-1",
                        "AWS_DEFAULT_REGION": "us-east-1"}
            boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                         aws_access_key_id="gpu-check", aws_secret_access_key="gpu-check").create_bucket(Bucket=self.BUCKET)
            self.uri = f"s3://{self.BUCKET}/compile-cache/{key}/"
            self.transport = "moto"
            self.note = "a moto S3 server on 127.0.0.1 (the same boto3 calls as a bucket; no network in between)"
            return
        self.transport = "local-copy"
        self.note = ("no S3: boto3 or moto is not installed here (or weights/ is missing), so the cache was copied "
                     "folder to folder; give --s3-uri s3://BUCKET/PREFIX to go through a bucket")

    def close(self) -> None:
        if self.moto is not None:
            self.moto.stop()
            self.moto = None

    def push(self, cache: Path, env: dict[str, str]) -> dict[str, Any]:
        if self.transport == "local-copy":
            t0 = time.perf_counter()
            target = cache.parent / (cache.name + ".pushed")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(cache, target, ignore=lambda d, names: [n for n in names if Path(d) == cache
                                                                      and n in gpu_settings.PUSH_EXCLUDES])
            files = cache_files(target)
            return {"outcome": "pushed", "files": len(files), "bytes": sum(s for s, _ in files.values()),
                    "seconds": round(time.perf_counter() - t0, 2), "rc": 0}
        return weights_cli("push", cache, self.uri, {**env, **self.env})

    def pull(self, cache: Path, env: dict[str, str]) -> dict[str, Any]:
        if self.transport == "local-copy":
            t0 = time.perf_counter()
            source = cache.parent / (cache.name + ".pushed")
            shutil.copytree(source, cache, dirs_exist_ok=True)
            files = cache_files(cache)
            return {"outcome": "restored", "files": len(files), "bytes": sum(s for s, _ in files.values()),
                    "seconds": round(time.perf_counter() - t0, 2), "rc": 0}
        return weights_cli("pull", cache, self.uri, {**env, **self.env})


# ---------------------------------------------------------------------------------------------
# The sweep and its cross-check


def cli_prompts(req_s: float | None, concurrency: int, window_s: float, cap: int = 4000) -> int:
    """Prompts for a `vllm bench serve` run whose measured window lasts about `window_s` at the request
    rate the sweep measured at the same concurrency (at least 4 per concurrency slot, at least 16)."""
    floor = max(16, 4 * concurrency)
    if not req_s or req_s <= 0:
        return floor
    return int(min(cap, max(floor, math.ceil(req_s * window_s))))


def cli_argv(*, url: str, tokenizer: Path, concurrency: int, prompts: int, input_len: int, output_len: int,
             out: Path, seed: int, model: str = SERVED_NAME) -> list[str]:
    """`vllm bench serve` at one point: the random dataset the sweep's S1_chat draws, fixed lengths."""
    return ["bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions", "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len), "--random-range-ratio", "0",
            "--ignore-eos", "--base-url", url, "--model", model, "--tokenizer", str(tokenizer),
            "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--num-warmups", str(min(concurrency, 8)), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,99", "--seed", str(seed), "--save-result", "--result-dir", str(out),
            "--result-filename", f"S1_chat_c{concurrency}.json"]


def agreement(ours: float | None, theirs: float | None) -> float | None:
    """|ours - theirs| as a percentage of theirs (vLLM's own client is the reference)."""
    if not ours or not theirs:
        return None
    return round(100.0 * abs(ours - theirs) / theirs, 1)
