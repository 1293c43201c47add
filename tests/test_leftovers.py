"""A server that outlives its command, on real processes: the H200 box, 2026-12-05, killed a command outright
at its time limit and its vLLM server (in a process group of its own) kept 133.8 GiB of the GPU for the next
command. A server started through bench.common.leftovers ends with its starter however the starter ends, and
a group an earlier command noted is stopped at the next start where it still runs vLLM, and only then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import leftovers

# a stand-in server: "vllm" in its command line, a child of its own in the same group (vLLM's engine core)
SERVER = ("import subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', 'VLLM::EngineCore'])\n"
          "print('up', flush=True)\n"
          "time.sleep(300)\n")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pids, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


def _group(pgid: int, n: int, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(members := leftovers.group_members(pgid)) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid, _ in members]


def test_a_server_ends_with_the_command_that_started_it_even_when_that_is_killed_outright(tmp_path):
    starter = ("import subprocess, sys\n"
               "from bench.common import leftovers\n"
               f"p = subprocess.Popen([sys.executable, '-c', {SERVER!r}, 'vllm', 'serve'], start_new_session=True,\n"
               "                      stdout=subprocess.PIPE, text=True, preexec_fn=leftovers.die_with_parent())\n"
               "p.stdout.readline()\n"
               "print(p.pid, flush=True)\n"
               "import time; time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    server = int(proc.stdout.readline())
    members = _group(server, 2)
    assert server in members and len(members) == 2, members
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: what a time limit's kill -9 does
    proc.wait()
    # the server itself gets SIGTERM from the kernel; its engine-core stand-in is what stop_leftover is for
    assert _gone([server]), f"the server (pid {server}) outlived the command that started it"
    for pid in members:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_group_an_earlier_command_left_running_is_stopped_at_the_next_start(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", SERVER, "vllm", "serve"], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        members = _group(server.pid, 2)
        assert len(members) == 2, members
        note = tmp_path / "out" / "server.pid.json"
        leftovers.note_group(note, server.pid, "vLLM server")
        said = leftovers.stop_leftover(note, grace_s=10)
        assert said == (f"stopped the vLLM server an earlier command left running (process group {server.pid}: "
                        f"pids {', '.join(str(p) for p in sorted(members))})"), said
        assert _gone(members) and not note.exists()
        assert leftovers.stop_leftover(note) is None  # nothing noted, nothing done
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_noted_group_that_no_longer_runs_vllm_is_left_alone(tmp_path):
    """The noted pid was reused by another program (or the group ended): nothing is stopped, the note goes."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        note = tmp_path / "server.pid.json"
        leftovers.note_group(note, other.pid, "vLLM server")
        assert leftovers.stop_leftover(note) is None
        assert other.poll() is None and not note.exists()
        note.write_text("not json")
        assert leftovers.stop_leftover(note) is None
    finally:
        other.kill()
        other.wait()
