"""Times the demo: once installed, or from a fresh clone with its installs. Prints; never asserts.

    python tests/benchmarks/time_demo.py            # `python -m bench demo` here (.venv, vLLM build as they are)
    python tests/benchmarks/time_demo.py --fresh    # clone HEAD into a temporary folder, `make demo` there

The installed run is what `make demo` does once `.venv` and `.venv-vllm` exist (its vLLM build is
$VLLM_POC_VLLM_VENV, else .venv-vllm). The fresh run measures a newcomer's first `make demo`: the
clone, both virtualenvs' installs (from the pip cache or index this machine has), the model, the
servers, the sweeps and the report. Each prints the wall time against its budget (8 and 20 minutes
on 2 cores), the demo's own steps (timing.json) and the load average, since the machine may be
shared: a figure is only as good as the load beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUDGET_S = {"installed": 8 * 60, "fresh": 20 * 60}


def run(cmd: list[str], cwd: Path, log: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - t0


def report(mode: str, rc: int, wall: float, out: Path, log: Path, extra: str = "") -> int:
    load = os.getloadavg()
    print(f"demo ({mode}): exit {rc}, wall {wall / 60:.1f} min against a budget of {BUDGET_S[mode] / 60:.0f} min "
          f"({os.cpu_count()} CPUs, load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}){extra}")
    try:
        timing = json.loads((out / "timing.json").read_text())
        steps = ", ".join(f"{s['step']} {s['seconds']:.0f} s" for s in timing["steps"])
        print(f"  the demo's own steps: {steps}; total {timing['total_s']:.0f} s; load average "
              f"{timing['load_average_start']:.1f} at its start, {timing['load_average_end']:.1f} at its end")
    except (OSError, ValueError, KeyError):
        print(f"  no timing.json: see {log}")
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fresh", action="store_true", help="clone HEAD into a temporary folder and `make demo` there")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone (--fresh)")
    args = parser.parse_args()
    if not args.fresh:
        out = REPO / "build" / "demo-timing"
        shutil.rmtree(out, ignore_errors=True)
        log = REPO / "build" / "demo-timing.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        rc, wall = run([str(REPO / ".venv" / "bin" / "python"), "-m", "bench", "demo", "--out", str(out)], REPO, log)
        return report("installed", rc, wall, out, log)
    root = Path(tempfile.mkdtemp(prefix="vllm-poc-fresh-"))
    try:
        clone = root / "vllm-poc"
        log = root / "make-demo.log"
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        env_free = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_POC_")}
        t1 = time.monotonic()
        with log.open("w") as fh:
            rc = subprocess.run(["make", "demo"], cwd=clone, env=env_free, stdout=fh, stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - t0
        return report("fresh", rc, wall, clone / "build" / "demo", log,
                      f"; clone {t1 - t0:.0f} s, make demo {time.monotonic() - t1:.0f} s (installs included)")
    finally:
        if args.keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
