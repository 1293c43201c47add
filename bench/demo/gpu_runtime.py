"""Which python runs vLLM for `python -m bench gpu-check`, with which environment, on which device: the
version probe (vLLM, torch, transformers, Triton, the GPUs torch sees) and the transformers trap's check
(bench/demo/transformers_trap.py), both run by that python.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.demo import cpu_vllm, transformers_trap


class UsageError(ValueError):
    """Bad input: said on stderr in one message naming the flag and the fix, exit 2."""


_PROBE = r"""
import json, platform, sys
info = {"python": platform.python_version()}
for name in ("vllm", "torch", "transformers", "triton"):
    try:
        info[name] = __import__(name).__version__
    except Exception as exc:
        info[name] = None
try:
    import torch
    info["cuda"] = bool(torch.cuda.is_available())
    if info["cuda"]:
        p = torch.cuda.get_device_properties(0)
        info["device_name"] = p.name
        info["device_memory_gib"] = round(p.total_memory / 2**30, 1)
        info["cuda_runtime"] = torch.version.cuda
        info["device_count"] = torch.cuda.device_count()
except Exception:
    info["cuda"] = False
print("gpu-check-probe " + json.dumps(info))
"""

# What the two probes' answers depend on: the python, the machine, the GPUs it may see and the packages
# they read (each one's file, size and time: a reinstall changes them), found without importing anything.
# It takes a tenth of a second; the probes take about 10 s on a CPU and about 45 s a command on the H200
# box, whose commands each have ten minutes.
_KEY = r"""
import importlib.util, json, os, socket, sys
key = {"executable": sys.executable, "host": socket.gethostname(),
       "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "path": os.environ.get("PYTHONPATH")}
for name in ("vllm", "torch", "transformers", "triton"):
    try:
        spec = importlib.util.find_spec(name)
        st = os.stat(spec.origin)
        key[name] = [spec.origin, st.st_size, st.st_mtime_ns]
    except Exception:
        key[name] = None
print("gpu-check-key " + json.dumps(key))
"""


class Runtime:
    """Which python runs vLLM, with which environment, on which device."""

    def __init__(self, args: argparse.Namespace, out: Path):
        self.cpu_build = False
        if args.python:
            self.python = args.python
            self.env = dict(os.environ)
        else:
            if importlib.util.find_spec("vllm") is not None:
                self.python, self.env = sys.executable, dict(os.environ)
            else:
                venv = cpu_vllm.venv_dir(None)
                version = cpu_vllm.installed_version(venv)
                if version is None:
                    raise UsageError("no vLLM to run: this python cannot import vllm, and "
                                     f"{venv} holds no vLLM CPU build; give --python PATH or set VLLM_POC_VLLM_VENV")
                self.cpu_build = True
                self.python = str(venv / "bin" / "python")
                self.env = cpu_vllm.environment(venv, cpu_vllm.dist_info_shim(out / ".vllm-dist-info", version))
        self.env = cpu_vllm.with_repo(self.env)
        self.env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        self.env["PYTHONUNBUFFERED"] = "1"
        self.info: dict[str, Any] = {}

    def probes(self, kept: Path) -> tuple[dict[str, Any], dict[str, Any], str | None]:
        """(the version probe's answer, the transformers trap's finding, when they were probed where an earlier
        command's answers in `kept` still hold, else None): both are asked again only where the python, the
        machine, its visible GPUs or the packages changed since (`_KEY`); answers that hold are kept there."""
        key = self._key()
        try:
            earlier = json.loads(kept.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = None
        if key is not None and isinstance(earlier, dict) and earlier.get("key") == key:
            self.info = dict(earlier["info"])
            self._device()
            return self.info, earlier["trap"], earlier.get("at")
        # each probe imports vLLM in a python of its own (about 6 s apiece on a CPU, most of the H200 box's
        # 45 s): side by side, a command waits for the slower one only
        with ThreadPoolExecutor(max_workers=1) as pool:
            trap_asked = pool.submit(self.trap)
            answer = self._ask()
            trap = trap_asked.result()
        self.info = dict(answer)
        self._device()
        if key is not None and trap.get("status") != transformers_trap.NOT_CHECKED:
            try:
                kept.write_text(json.dumps({"key": key, "info": answer, "trap": trap,
                                            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
            except OSError:  # answers that cannot be kept are asked again next time; this command has them
                pass
        return self.info, trap, None

    def _key(self) -> dict[str, Any] | None:
        try:
            proc = subprocess.run([self.python, "-c", _KEY], env=self.env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        line = next((l for l in proc.stdout.splitlines() if l.startswith("gpu-check-key ")), None)
        return json.loads(line.split(" ", 1)[1]) if line else None

    def _ask(self) -> dict[str, Any]:
        proc = subprocess.run([self.python, "-c", _PROBE], env=self.env, capture_output=True, text=True, timeout=300)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("gpu-check-probe ")), None)
        if line is None:
            raise UsageError(f"{self.python} could not report its versions:\n{(proc.stdout + proc.stderr)[-1500:]}")
        return json.loads(line.split(" ", 1)[1])

    def _device(self) -> dict[str, Any]:
        """The probe's answer with what nvidia-smi says now and whether this is the project's CPU build."""
        if shutil.which("nvidia-smi"):
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader",
                                  "-i", "0"], capture_output=True, text=True)
            if smi.returncode == 0 and smi.stdout.strip():
                name, driver, total = [p.strip() for p in smi.stdout.strip().splitlines()[0].split(",")]
                self.info.update({"nvidia_smi_name": name, "driver": driver, "memory_total": total})
        self.info["cpu_build"] = self.cpu_build
        return self.info

    def trap(self) -> dict[str, Any]:
        """How this vLLM and its transformers read a Gemma 4 config (bench/demo/transformers_trap.py)."""
        return transformers_trap.finding(transformers_trap.run_probe(self.python, self.env))

    @property
    def gpu(self) -> bool:
        return bool(self.info.get("cuda")) and not self.cpu_build

    @property
    def gpus(self) -> int:
        """GPUs torch sees (0 on a CPU)."""
        return int(self.info.get("device_count") or (1 if self.gpu else 0))
