"""Times a fresh clone's set-up with empty caches. Prints; never asserts.

    python tests/benchmarks/time_setup.py                 # `make venv`
    python tests/benchmarks/time_setup.py --demo          # what `make demo` installs: .venv and .venv-vllm
    python tests/benchmarks/time_setup.py --ci            # what `make test` (and .ci/run) installs: all five
    python tests/benchmarks/time_setup.py --bootstrap     # as on a machine without uv: install it into .venv-uv first
    python tests/benchmarks/time_setup.py --installer pip # the same with INSTALLER=pip

It clones HEAD into a temporary folder and runs the targets there with a fresh, empty uv cache
(UV_CACHE_DIR) and pip's cache off, so every package is downloaded: the figure is a newcomer's, from
the package index this machine reaches. Each target's wall time is printed with the load average
beside it, since the machine may be shared: a figure is only as good as the load beside it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGETS = {"venv": ["venv"], "demo": ["venv", "venv-vllm"], "ci": ["venv", "venv-vllm", "vllm-image", "venv-checkov", "venv-router"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--demo", action="store_true", help="time .venv and .venv-vllm (what `make demo` installs)")
    which.add_argument("--ci", action="store_true", help="time all five environments (what `make test` installs)")
    parser.add_argument("--bootstrap", action="store_true", help="ignore a uv on PATH: install the pinned one first")
    parser.add_argument("--installer", choices=("uv", "pip"), default="uv", help="INSTALLER= for make (default uv)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = parser.parse_args()
    targets = TARGETS["ci" if args.ci else "demo" if args.demo else "venv"]
    root = Path(tempfile.mkdtemp(prefix="vllm-poc-setup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_POC_")}
    env.update(UV_CACHE_DIR=str(root / "uv-cache"), PIP_NO_CACHE_DIR="1")
    extra = [f"INSTALLER={args.installer}"] + (["UV=.venv-uv/bin/uv"] if args.bootstrap else [])
    rc = 0
    try:
        clone = root / "vllm-poc"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        total = 0.0
        for target in targets:
            log = root / f"make-{target}.log"
            t0 = time.monotonic()
            with log.open("w") as fh:
                rc = subprocess.run(["make", target, *extra], cwd=clone, env=env, stdout=fh,
                                    stderr=subprocess.STDOUT).returncode
            wall = time.monotonic() - t0
            total += wall
            load = os.getloadavg()
            print(f"make {target} {' '.join(extra)}: exit {rc}, {wall:.1f} s ({os.cpu_count()} CPUs, load average "
                  f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f})")
            if rc:
                print(f"  see {log}")
                args.keep = True
                break
        print(f"total: {total:.1f} s for {', '.join(targets)}, from a fresh clone with empty caches")
    finally:
        if args.keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
