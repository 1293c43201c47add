"""Servers that outlive the command that started them, and how not to leave one.

A vLLM server runs in a process group of its own, so that a stop can end it and its engine process
together. The other side of that: when the command that started it is killed outright (SIGKILL from a
time limit, an out-of-memory kill), nothing stops the group, and the server keeps the GPU's memory for
the next command to trip over. Two guards, both here:

- `die_with_parent()` asks Linux to send the server SIGTERM the moment its starter dies, however it died;
- `note_group()` writes the group into a file beside the command's results, and `stop_leftover()` stops
  a group such a file names at the next start, where it still runs vLLM (a pid reused by another program
  is left alone).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child gets `sig` when the thread that started it ends (the
    whole command, for a start from its main thread); None where the platform has no such request."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def request() -> None:  # runs in the child between fork and exec: no imports, no allocation to speak of
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the starter died before the request was made
            os.kill(os.getpid(), int(sig))

    return request


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes in process group `pgid` (zombies left out)."""
    members = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "Z" or int(fields[2]) != pgid:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        members.append((int(entry.name), cmdline or stat[stat.index("(") + 1:stat.rindex(")")]))
    return sorted(members)


def note_group(path: Path, pgid: int, what: str) -> None:
    """Write the server's process group into `path`, for `stop_leftover` at a later start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pgid": pgid, "what": what}) + "\n")


def forget_group(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def stop_leftover(path: Path, marker: str = "vllm", grace_s: float = 30.0) -> str | None:
    """Stop the process group that `path` names if a process in it still runs `marker` (case aside): the
    server of an earlier command that was killed before it could stop it. Returns what was done, in a
    sentence; None where nothing was left running. The file is gone afterwards either way."""
    try:
        noted = json.loads(path.read_text())
        pgid, what = int(noted["pgid"]), str(noted.get("what") or "server")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    members = group_members(pgid)
    if not any(marker in cmdline.lower() for _, cmdline in members):
        forget_group(path)
        return None
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not group_members(pgid):
            break
    left = group_members(pgid)
    forget_group(path)
    pids = ", ".join(str(pid) for pid, _ in members)
    if left:
        return (f"the {what} an earlier command left running (process group {pgid}: pids {pids}) did not stop; "
                f"stop it by hand (kill -9 -{pgid})")
    return f"stopped the {what} an earlier command left running (process group {pgid}: pids {pids})"
