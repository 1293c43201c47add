"""`python -m bench.run.client`: one long-lived `vllm bench serve`, driven run after run by the sweep.

A fresh `vllm bench serve` process per run spends about 11 s importing vLLM and loading the
tokenizer before its measured window; on a GPU that is idle accelerator time, multiplied by the
capacity search and the open-loop runs. This driver imports vLLM's benchmark code once
(`vllm.benchmarks.serve`: `add_cli_args` and `main`, the functions behind `vllm bench serve` in
0.26 and 0.32) and runs each request with exactly the command-line arguments the sweep would have
passed to `vllm bench serve`: same code, same result file. The tokenizer is loaded once per
(tokenizer, mode) and reused.

Protocol (the sweep is the only caller): one JSON object per line on stdin,
`{"argv": [<vllm bench serve arguments>], "log": "<path>"}`; the answer is one JSON line,
`{"rc": <int>, "error": <str or null>}`, on a channel of its own: the file descriptor the sweep
names in VLLM_POC_CLIENT_ANSWER_FD (a pipe it passes down), else a copy of the original stdout. vLLM
logs to stdout by default (VLLM_LOGGING_STREAM), and so may anything it imports (Triton, say): before
the driver imports vLLM, descriptor 1 is pointed at stderr, so nothing printed to stdout can reach the
answer channel. While a run executes, file descriptors 1 and 2 point at its log file, so vLLM's
prints and logs land where a process run's would. The sweep's side still reads only lines that are
JSON objects with the protocol's keys and keeps any other line for its error message.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from bench.common.interrupts import stop_process_group


def _load():
    # vLLM only in the driver process that runs the benchmarks: the sweep imports this module without it.
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cached = functools.lru_cache(maxsize=4)(serve.get_tokenizer)
    serve.get_tokenizer = cached

    def parse(argv: list[str]):
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        serve.add_cli_args(parser)
        return parser.parse_args(argv)

    return parse, serve.main


def serve_forever(parse, bench_main, inp, out) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    for line in inp:
        if not line.strip():
            continue
        request = json.loads(line)
        rc, error = 0, None
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            bench_main(parse(request["argv"]))
        except SystemExit as exc:  # argparse errors
            rc = exc.code if isinstance(exc.code, int) else 2
            error = f"exit {exc.code}"
        except BaseException as exc:  # noqa: BLE001 - one failed run must not end the driver
            if isinstance(exc, KeyboardInterrupt):
                raise
            traceback.print_exc()
            rc, error = 1, f"{type(exc).__name__}: {exc}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.close(fd)
        out.write(json.dumps({"rc": rc, "error": error}) + "\n")
        out.flush()


ANSWER_FD_ENV = "VLLM_POC_CLIENT_ANSWER_FD"


def answer_channel():
    """The protocol's stream, then fd 1 pointed at stderr: what vLLM prints never reaches the channel."""
    given = os.environ.pop(ANSWER_FD_ENV, None)
    fd = int(given) if given and given.isdigit() else os.dup(1)
    out = os.fdopen(fd, "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def main() -> int:
    out = answer_channel()
    try:
        parse, bench_main = _load()
    except Exception as exc:  # noqa: BLE001
        out.write(json.dumps({"rc": 2, "error": f"cannot import vLLM's benchmark code: {exc}"}) + "\n")
        return 2
    out.write(json.dumps({"ready": True}) + "\n")
    serve_forever(parse, bench_main, sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------------------------------------
# The sweep's side


def protocol_line(line: str) -> dict | None:
    """A driver's answer (`ready`, or `rc`), None for any other line."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and ("ready" in data or "rc" in data) else None


class Driver:
    """The sweep's handle on a long-lived `python -m bench.run.client` (started on first use)."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, start_timeout: float = 600.0):
        self.cmd = cmd
        self.env = env
        self.start_timeout = start_timeout
        self.proc = None
        self.lines = None
        self.starts = 0
        self.stray: list[str] = []  # lines on the answer channel that were not the protocol's

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()  # the answer channel: a pipe of its own, not the child's stdout
        env = dict(os.environ if self.env is None else self.env)
        env[ANSWER_FD_ENV] = str(write_fd)
        try:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, text=True, env=env,
                                         start_new_session=True, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        answers = os.fdopen(read_fd, "r")
        self.starts += 1
        self.lines = queue.Queue()
        lines = self.lines

        def pump():
            with answers:
                for line in answers:
                    lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        hello = self._answer(self.start_timeout)
        if not hello or not hello.get("ready"):
            self.stop()
            why = hello.get("error") if hello else "no answer"
            if self.stray:
                why += f" (other output on the channel: {self.stray[-1][:200]!r})"
            raise RuntimeError(f"bench client did not start: {why}")

    def _answer(self, timeout: float) -> dict | None:
        """The next protocol line; a line that is not one (a stray print) is kept aside, not parsed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if not line:
                return None
            answer = protocol_line(line)
            if answer is not None:
                return answer
            self.stray.append(line.rstrip("\n"))

    def run(self, argv: list[str], log: str, timeout: float) -> tuple[int | None, bool]:
        """(exit code, timed out); a timed-out or dead driver is stopped and restarted next time."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "log": log}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.stop()
            return None, False
        answer = self._answer(timeout)
        if answer is None:
            timed_out = self.proc.poll() is None
            self.stop()
            return None, timed_out
        return int(answer.get("rc", 1)), False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process_group(proc, grace_s=10)


def add_arguments(p) -> None:
    p.add_argument("--bench-client", choices=("auto", "library", "process"),
                   default=os.environ.get("VLLM_POC_BENCH_CLIENT") or "auto",
                   help="library (one driver runs every run) or process (one `vllm bench serve` per run) "
                        "(default: auto: library where vllm imports; env VLLM_POC_BENCH_CLIENT)")
    p.add_argument("--bench-client-cmd", default=os.environ.get("VLLM_POC_BENCH_CLIENT_CMD"),
                   help=argparse.SUPPRESS)


def driver_command(mode: str, vllm: list[str], vllm_bin_given: bool, custom: str | None) -> list[str] | None:
    """The driver command for `--bench-client`, or None for a process per run."""
    if custom:
        return shlex.split(custom)
    if mode == "process":
        return None
    python = sys.executable
    if vllm_bin_given:
        # The python that runs the given `vllm` script (its shebang) has vLLM installed.
        try:
            first = Path(vllm[0]).read_text(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            first = ""
        if len(vllm) == 1 and first.startswith("#!") and "python" in first:
            python = first[2:].strip().split()[0]
        elif mode == "auto":
            return None
        else:
            raise ValueError("--bench-client library: cannot tell which python runs --vllm-bin; "
                             "pass --bench-client-cmd 'PYTHON -m bench.run.client'")
    elif mode == "auto" and importlib.util.find_spec("vllm") is None:
        return None
    if mode == "auto" and vllm_bin_given:
        return None  # an explicit --vllm-bin keeps its process per run unless asked otherwise
    return [python, "-m", "bench.run.client"]


def driver_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the bench package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
