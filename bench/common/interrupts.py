"""Ctrl-C and SIGTERM for long commands: one exception for both, and the exit code each calls for.

`stop_on_signals()` turns SIGTERM (Kubernetes stopping a pod, `kill`, a CI runner cancelling a job)
into `Interrupted`, a KeyboardInterrupt, so one `except KeyboardInterrupt` handles both signals the
same way: stop promptly, say what was kept and how to resume, exit 130 (Ctrl-C) or 143 (SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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


_stop_requested = threading.Event()
_stop_signal = [int(signal.SIGINT)]


def _note_stop(signum: int) -> None:
    _stop_signal[0] = signum
    _stop_requested.set()


def _raise(signum, _frame):
    _note_stop(signum)
    raise Interrupted(signum)


def stop_behind(exc: BaseException) -> Interrupted | None:
    """The stop an error stands for, or None. A signal's exception can land inside an import or a library's
    asyncio task, which then fails with an error of its own (a half-imported module without the attribute
    asked for: `pulumi_aws.iam` has no `Role`) that surfaces instead of the stop. Within stop_on_signals,
    once a stop was requested, any error is that stop."""
    if isinstance(exc, Interrupted):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted(signal.SIGINT)
    return Interrupted(_stop_signal[0]) if _stop_requested.is_set() else None


class _QuietAfterStop(logging.Filter):
    """Drops asyncio's "Exception in callback" report of the task step a stop cut through.

    A signal's exception may land inside an asyncio task's step (the Pulumi runtime of a render runs
    one), between entering and leaving the task; asyncio then logs a RuntimeError about the task it
    cannot leave, with a traceback, before the command reports the stop. Once a stop was requested
    that report is only noise; before it, nothing is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (_stop_requested.is_set() and isinstance(exc, RuntimeError)
                    and str(exc).startswith(("Leaving task", "Cannot enter into task")))


_QUIET = _QuietAfterStop()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises Interrupted in the main thread, and so does Ctrl-C (a
    KeyboardInterrupt too, exit 130) unless it is ignored; asyncio's report of a task step the stop
    cut through is kept off the terminal (_QuietAfterStop)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stop_requested.clear()  # a stop of an earlier block is not this block's
    previous = signal.signal(signal.SIGTERM, _raise)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise)
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addFilter(_QUIET)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
        asyncio_log.removeFilter(_QUIET)


@contextlib.contextmanager
def stop_loop_on_signals(loop: asyncio.AbstractEventLoop) -> Iterator[list[int]]:
    """Within the block, a stop (a signal stop_on_signals turned into Interrupted) stops `loop` between two of
    its callbacks instead of raising wherever the main thread happens to be; the list it yields gets the
    signal, and the caller raises Interrupted once the loop has returned.

    For code that runs a library's event loop to completion (the Pulumi runtime under the mocks): an
    exception raised inside one of its tasks can be caught by the library's own `except BaseException`,
    after which the loop waits for that task's result for ever (a render that never ended after its stop).
    Signals not turned into stops here, and calls outside the main thread, are left as they are."""
    caught: list[int] = []
    diverted = [sig for sig in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(sig) is _raise]
    if threading.current_thread() is not threading.main_thread():
        diverted = []

    def stop(signum: int) -> None:
        _note_stop(signum)
        caught.append(signum)
        for task in asyncio.all_tasks(loop):  # left unfinished on purpose: no "destroyed but pending" report
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        loop.stop()

    for sig in diverted:
        loop.add_signal_handler(sig, stop, int(sig))
    try:
        yield caught
    finally:
        for sig in diverted:
            loop.remove_signal_handler(sig)
            signal.signal(sig, _raise)


def rerun_command(prefix: str, without: tuple[str, ...] = ()) -> str:
    """The command line that was run, to repeat: `python -m <prefix> <args as given>`, less the flags in
    `without` (a flag whose repeat would not continue what was stopped)."""
    return f"python -m {prefix} {shlex.join(a for a in sys.argv[1:] if a not in without)}".rstrip()


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


def run_logged(argv: list[str], log, *, env: dict[str, str] | None = None, grace_s: float = 60.0) -> int:
    """Run `argv` with its output going into the file `log` as it is written (a command cut off keeps what its
    child had said), and its exit status back. A stop (Ctrl-C, SIGTERM) reaching this process is passed on to
    the child as SIGTERM, which gets `grace_s` seconds to save and say what it kept before it is killed; then
    the stop goes on up."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            raise
