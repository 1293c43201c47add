"""The run machinery the sweep's grid and its extra runs share.

A `Runner` runs one `vllm bench serve` at a time: in the long-lived bench client
(bench/run/client.py) when there is one, else as a process of its own in its own session, so a
stop (a timeout, Ctrl-C, SIGTERM) ends it within seconds. It counts the GPU time of what it runs
(the measured windows vLLM reports, the busy share of the wall time, the idle time between two
windows), and it uploads every file it is given as soon as it is written, the manifest included.
`EtaModel` estimates the time the runs left will take. The grid (bench/run/sweep.py) and the extra
runs (bench/run/extra_runs.py) decide what to run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.common import s3
from bench.common.interrupts import stop_process_group
from bench.run import client as bench_client
from bench.run import seeds, sizing
from bench.run.grid import RunSpec, bench_command
from bench.run.server import wait_for_health

MANIFEST = "manifest.json"
LOGS = "logs"
PARTIAL = ".partial"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def log_errors(log: Path, limit: int = 3) -> list[str]:
    """Request errors that `vllm bench serve` prints ("Error 0: Not Found"), first distinct ones, each a
    whole phrase: a traceback is named by the exception it ends with, and where all of it is."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return R.request_errors(text, f"{LOGS}/{log.name}", limit)


def log_tail(log: Path, lines: int = 3) -> str:
    """The end of a log that left no result: the exception a traceback ends with where the process
    raised one, else its last useful lines."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    heads = [i for i, line in enumerate(text) if line.strip() == R.TRACEBACK_HEAD]
    if heads:
        return R.traceback_words(R.exception_line(text[heads[-1] + 1:]), f"{LOGS}/{log.name}")
    useful = [l for l in text if l.strip() and "leaked" not in l and not l.startswith((" - ", "$ "))]
    return " | ".join(useful[-lines:])[:400]


class EtaModel:
    """Run time = fixed part (CLI start-up, tokenizer load, warm-ups) + rate x `RunSpec.cost()`.

    The fixed part is each process's wall time minus the benchmark window vLLM reports; the rate
    comes from the windows of valid runs. On a GPU the windows dominate; on small test runs the
    fixed start-up does, and a single proportional factor would be far off for either.
    """

    def __init__(self) -> None:
        self.fixed: list[float] = []
        self.window = 0.0
        self.cost = 0.0

    def observe(self, spec: RunSpec, process_s: float, window_s: float | None) -> None:
        if window_s is not None:
            self.fixed.append(max(0.0, process_s - window_s))
            self.window += window_s
            self.cost += spec.cost()
        else:
            self.fixed.append(process_s)

    def estimate(self, remaining: list[RunSpec]) -> float:
        if not self.fixed:
            return 0.0
        fixed = sum(self.fixed) / len(self.fixed)
        rate = self.window / self.cost if self.cost else 0.0
        return sum(fixed + rate * spec.cost() for spec in remaining)


class ServerGone(Exception):
    """The server stopped answering /health after a failed run and did not come back in --health-timeout-s."""


class Runner:
    """One `vllm bench serve` at a time, its GPU time, and the sweep's files (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, vllm: list[str]):
        self.args = args
        self.vllm = vllm
        self.out = Path(args.out)
        self.logs = self.out / LOGS
        self.partial = self.out / PARTIAL
        self.uploader: s3.Uploader | None = None
        self.proc: subprocess.Popen | None = None
        self.manifest: dict[str, Any] = {}
        self.session: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.started_at = now()
        self.bench_seconds = 0.0
        self.bench_window_seconds = 0.0
        self.health_seconds = 0.0
        self.driver: bench_client.Driver | None = None
        # [end time, GPU-busy seconds, measured?] per bench launch (warm-ups busy, not measured)
        self.launches: list[list[Any]] = []
        self.first_launch: float | None = None
        self.hardware: dict[str, Any] = {}
        self.measured: dict[str, dict[int, float]] = {}  # req/s of the valid closed-loop runs, per scenario

    def measured_rate(self, scenario: str, concurrency: int, req_s: float | None) -> None:
        if req_s:
            known = self.measured.setdefault(scenario, {})
            known[concurrency] = max(req_s, known.get(concurrency, 0.0))

    # -- files -----------------------------------------------------------------------------
    def publish(self, path: Path) -> None:
        if self.uploader and path.exists():
            self.uploader.upload(path)

    def save_manifest(self) -> None:
        self.session["timing"] = self.timing()
        self.manifest["finished_at"] = self.session.get("finished_at")
        runs = self.manifest["runs"]
        self.manifest["counts"] = {
            status: sum(1 for r in runs if r["status"] == status)
            for status in ("valid", "suspect", "invalid", "pending")
        }
        if self.uploader:
            self.manifest["upload"] = {"uri": self.uploader.loc.uri, "failed": dict(self.uploader.failed)}
        write_json(self.out / MANIFEST, self.manifest)
        self.publish(self.out / MANIFEST)

    def note_window(self, seconds: float) -> None:
        """A valid run's measured window (vLLM's duration), for the GPU time and the busy share."""
        self.bench_window_seconds += seconds
        if self.launches:
            self.launches[-1][1:] = [seconds, True]

    def busy(self) -> dict[str, Any]:
        """Measured windows / wall time of the runs, and the idle time between two windows."""
        marks = self.launches
        span = marks[-1][0] - self.first_launch if marks and self.first_launch is not None else 0.0
        # Idle between two measured windows: the time since the previous measured run ended that no
        # launch kept the GPU busy (a warm-up's own requests count as busy, not as measured).
        gaps, last, busy = [], None, 0.0
        for k, (end, seconds, measured) in enumerate(marks):
            busy += seconds
            if measured:
                if last is not None:
                    gaps.append(end - marks[last][0] - busy)
                last, busy = k, 0.0
        return {
            "bench_client": "library" if self.driver else "process",
            "runs_wall_s": round(span, 3),
            "busy_share_pct": round(100 * self.bench_window_seconds / span, 1) if span > 0 else None,
            "idle_between_windows_s": round(sum(gaps) / len(gaps), 3) if gaps else None,
        }

    def timing(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        overhead = wall - self.health_seconds - self.bench_seconds
        return {
            **self.busy(),
            "wall_s": round(wall, 3),
            "health_wait_s": round(self.health_seconds, 3),
            "bench_processes_s": round(self.bench_seconds, 3),
            "bench_windows_s": round(self.bench_window_seconds, 3),
            "orchestration_overhead_s": round(overhead, 3),
            "orchestration_overhead_pct": round(100 * overhead / wall, 3) if wall > 0 else 0.0,
        }

    # -- the server --------------------------------------------------------------------------
    def ensure_serving(self, what: str) -> None:
        """After a failed run: the server still answers /health, or answers again within --health-timeout-s (a
        pod restarting after its engine died); else ServerGone naming the run. On a GPU box an engine out of
        memory took the server down mid-run, and every later run failed to connect within a second or two."""
        args = self.args
        try:
            self.health_seconds += wait_for_health(args.base_url, args.health_timeout, args.health_interval,
                                                   args.health_say_every)
        except TimeoutError as exc:
            raise ServerGone(f"the server stopped answering during {what}: {exc}") from exc

    # -- one `vllm bench serve` -------------------------------------------------------------
    def run_command(self, cmd: list[str], fh) -> tuple[int | None, bool, float]:
        """Run one `vllm bench serve` with its output in `fh`: (exit code, timed out, seconds).

        With a bench client (bench.run.client) the run executes in that one long-lived process, its
        output appended to the same log; otherwise in a process of its own.
        """
        fh.write("$ " + shlex.join(cmd) + ("  (in the bench client)" if self.driver else "") + "\n")
        fh.flush()
        started = time.monotonic()
        if self.first_launch is None:
            self.first_launch = started
        rc: int | None = None
        timed_out = False
        if self.driver is not None:
            try:
                rc, timed_out = self.driver.run(cmd[cmd.index("serve") + 1:], fh.name, self.args.run_timeout)
            except RuntimeError as exc:
                print(f"bench sweep: WARNING: {exc}; falling back to a process per run", file=sys.stderr, flush=True)
                self.driver = None
            else:
                fh.seek(0, os.SEEK_END)  # the client appended to the log
                duration = time.monotonic() - started
                self.bench_seconds += duration
                self.launches.append([time.monotonic(), 0.0, False])
                return rc, timed_out, duration
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            fh.write(f"could not start: {exc}\n")
            self.proc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=self.args.run_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                self.stop()
                rc = self.proc.returncode
            except BaseException:  # SIGTERM/Ctrl-C: the bench runs in its own session
                self.stop()
                raise
            finally:
                self.proc = None
        duration = time.monotonic() - started
        self.bench_seconds += duration
        self.launches.append([time.monotonic(), 0.0, False])
        return rc, timed_out, duration

    def burst(self, spec: RunSpec, tokenizer: str, concurrency: int, requests: int, seed: int,
              fh) -> dict[str, Any] | None:
        """The burst before a measured run: `requests` warm-up requests at `concurrency` with prompts of
        their own. It warms the server at that batch size, and its request rate sizes the run
        (bench.run.sizing); None where no burst is asked for."""
        if requests <= 0:
            return None
        name = f"{spec.scenario}_c{concurrency}.warmup.json"
        at = spec if spec.concurrency == concurrency else replace(spec, concurrency=concurrency)
        cmd = bench_command(self.vllm, self.args, at, tokenizer, self.partial, seed=seed, num_prompts=requests,
                            filename=name, phase=seeds.WARMUP)
        self.partial.mkdir(exist_ok=True)
        rc, timed_out, duration = self.run_command(cmd, fh)
        warm = R.load_result(self.partial / name)
        if self.launches and warm.duration_s:
            self.launches[-1][1] = warm.duration_s  # the warm-up's requests keep the GPU busy
        (self.partial / name).unlink(missing_ok=True)
        fh.write(f"--- burst done (exit {rc}); measured run follows\n")
        fh.flush()
        rate = sizing.burst_rate(warm.raw, concurrency) if warm.valid else None
        return {"seed": seed, "requests": requests, "rc": rc, "timed_out": timed_out, "duration_s": round(duration, 3),
                "req_s": round(rate, 4) if rate else None}

    def launch(self, cmd: list[str], log: Path) -> tuple[int | None, bool]:
        """Run one `vllm bench serve` command, output to `log`; (exit code or None, timed out)."""
        with log.open("w", encoding="utf-8") as fh:
            rc, timed_out, _ = self.run_command(cmd, fh)
        return rc, timed_out

    def stop(self) -> None:
        """Stop what runs now: the bench client's run, or the process and its group."""
        if self.driver is not None:
            self.driver.stop()
        # A stop must take seconds: the bench gets 3 s to end on SIGTERM, then it is killed.
        stop_process_group(self.proc, grace_s=3)
