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

    def probe(self) -> dict[str, Any]:
        proc = subprocess.run([self.python, "-c", _PROBE], env=self.env, capture_output=True, text=True, timeout=300)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("gpu-check-probe ")), None)
        if line is None:
            raise UsageError(f"{self.python} could not report its versions:\n{(proc.stdout + proc.stderr)[-1500:]}")
        self.info = json.loads(line.split(" ", 1)[1])
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
