"""Ctrl-C and SIGTERM for long commands: one exception for both, and the exit code each calls for.

`stop_on_signals()` turns SIGTERM (Kubernetes stopping a pod, `kill`, a CI runner cancelling a job)
into `Interrupted`, a KeyboardInterrupt, so one `except KeyboardInterrupt` handles both signals the
same way: stop promptly, say what was kept and how to resume, exit 130 (Ctrl-C) or 143 (SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator


class Interrupted(KeyboardInterrupt):
    """A stop request by signal; `exit_code` is 128 + the signal number."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def exit_code(exc: BaseException) -> int:
    return exc.exit_code if isinstance(exc, Interrupted) else 130


def signal_name(exc: BaseException) -> str:
    return "SIGTERM" if exit_code(exc) == 143 else "Ctrl-C"


def _raise(signum, _frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises Interrupted in the main thread (Ctrl-C raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def rerun_command(prefix: str) -> str:
    """The command line that was run, to repeat: `python -m <prefix> <args as given>`."""
    return f"python -m {prefix} {shlex.join(sys.argv[1:])}".rstrip()


def quiet_broken_pipe() -> None:
    """Output piped into `head` and closed early: stop without a BrokenPipeError traceback."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
    # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def stop_process_group(proc: subprocess.Popen | None, grace_s: float) -> None:
    """SIGTERM to the process group started for `proc`, SIGKILL after `grace_s` seconds."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
