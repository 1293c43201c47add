"""`python -m weights compile-cache push|pull` against a moto S3 server over HTTP.

The cache stands in for vLLM's: nested folders, an executable shared object, an empty file, and one
file large enough to go up in parts. The real engine's cache is tried in tests/proof_compile_cache.py
(not in the suite: it takes 3-6 minutes).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest

from weights import cache_manifest as CM
from weights import cache_transfer
from weights import compile_cache as cc
from weights.__main__ import main as weights_main

REPO = Path(__file__).resolve().parents[1]
BUCKET = "weights-test"
URI = f"s3://{BUCKET}/compile-cache/k0123456789abcdef/"
PREFIX = "compile-cache/k0123456789abcdef"


def _blob(n: int, seed: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (n // len(block) + 1))[:n]


CACHE = {
    "torch_compile_cache/torch_aot_compile/3f2a/rank_0_0/model": _blob(300_000, 1),
    "torch_compile_cache/torch_aot_compile/3f2a/inductor_cache/ab/cab123.py": b"def call(args):\n    return args\n",
    "torch_compile_cache/torch_aot_compile/3f2a/inductor_cache/ab/cab123.so": _blob(40_000, 2),
    "triton/XYZ/kernel.cubin": _blob(7 * 1024 * 1024, 3),
    "modelinfos/empty.json": b"",
}
EXECUTABLE = "torch_compile_cache/torch_aot_compile/3f2a/inductor_cache/ab/cab123.so"


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if EXECUTABLE in files:
        (root / EXECUTABLE).chmod(0o755)
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {f.rel: f.path.read_bytes() for f in CM.scan(root)}


def obj(data: bytes) -> str:
    """Where a file's content is stored: files/<its SHA-256>."""
    return f"{PREFIX}/files/{hashlib.sha256(data).hexdigest()}"


def _keys(s3) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


@pytest.fixture
def s3(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    return client


def _push(s3, root, **kw):
    return cc.push(s3, root, URI, progress=False, log=lambda _: None, **kw)


def _pull(s3, root, **kw):
    return cc.pull(s3, root, URI, progress=False, log=lambda _: None, **kw)


class CountingClient:
    """The moto client with a hook on single PUTs and GETs (a network drop, a slow link)."""

    def __init__(self, client, *, fail_puts_after: int | None = None, get_delay_s: float = 0.0,
                 get_error_for: str | None = None):
        self._client, self._fail_after, self._delay, self._error_for = client, fail_puts_after, get_delay_s, get_error_for
        self.puts, self.gets, self._lock = [], [], threading.Lock()

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_object(self, **kwargs):
        with self._lock:
            if self._fail_after is not None and len(self.puts) >= self._fail_after:
                raise ConnectionError("simulated network drop")
            self.puts.append(kwargs["Key"])
        return self._client.put_object(**kwargs)

    def get_object(self, **kwargs):
        from botocore.exceptions import ClientError

        self.gets.append(kwargs["Key"])
        if self._error_for and kwargs["Key"].endswith(self._error_for):
            raise ClientError({"Error": {"Code": "InternalError", "Message": "simulated S3 failure"}}, "GetObject")
        if self._delay and not kwargs["Key"].endswith(CM.MANIFEST):
            time.sleep(self._delay)
        return self._client.get_object(**kwargs)


# -- round trip -------------------------------------------------------------------------------------


def test_push_then_pull_restores_the_cache_byte_for_byte(s3, tmp_path):
    source = _write(tmp_path / "a", CACHE)
    (source / "assets").mkdir()
    (source / "assets" / "tokenizer.json").write_text("{}")  # model files, not compile output
    pushed = _push(s3, source, excludes=("assets",))
    assert pushed.outcome == "pushed" and pushed.files == len(CACHE)
    assert pushed.bytes == sum(map(len, CACHE.values()))
    assert _keys(s3) == sorted([f"{PREFIX}/manifest.json"] + [obj(d) for d in CACHE.values()])
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json")["Body"].read())
    assert {f["path"]: (f["size"], f["sha256"]) for f in manifest["files"]} == {
        p: (len(d), hashlib.sha256(d).hexdigest()) for p, d in CACHE.items()}

    target = tmp_path / "b"
    target.mkdir()
    pulled = _pull(s3, target)
    assert pulled.outcome == "restored" and pulled.files == len(CACHE) and pulled.bytes == pushed.bytes
    assert _tree(target) == CACHE
    assert os.access(target / EXECUTABLE, os.X_OK)
    assert not os.access(target / "modelinfos/empty.json", os.X_OK)
    assert not (target / CM.STAGING).exists()
    # The result line the timeline reads, and the one people read.
    record = json.loads(pulled.record().removeprefix(cc.RESULT_MARK))
    assert record["outcome"] == "restored" and record["bytes"] == pushed.bytes and record["uri"].endswith("/")
    assert "restored 5 file(s)" in pulled.line()


def test_a_second_pull_into_the_restored_folder_changes_nothing(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    target = tmp_path / "b"
    target.mkdir()
    _pull(s3, target)
    client = CountingClient(s3)
    again = cc.pull(client, target, URI, progress=False)
    assert again.outcome == "restored" and _tree(target) == CACHE
    assert client.gets == [f"{PREFIX}/manifest.json"]  # every file was verified in place, none downloaded


# -- verification -----------------------------------------------------------------------------------


def test_a_tampered_file_is_not_restored_and_the_pull_says_which(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    tampered = "torch_compile_cache/torch_aot_compile/3f2a/inductor_cache/ab/cab123.py"
    planted = b"import os; os.system('curl xy')\n"
    assert len(planted) == len(CACHE[tampered])  # same size: only the hash can tell
    s3.put_object(Bucket=BUCKET, Key=obj(CACHE[tampered]), Body=planted)
    target = tmp_path / "b"
    target.mkdir()
    result = _pull(s3, target)
    assert result.outcome == "rejected"
    assert tampered in result.reason and "differs from the manifest" in result.reason
    assert "the start goes on cold" in result.line()
    # Nothing of a cache that fails its manifest is left in the folder vLLM reads, not even the good files.
    assert _tree(target) == {}
    assert not (target / CM.STAGING).exists()


def test_a_file_of_another_size_or_missing_is_rejected(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    s3.put_object(Bucket=BUCKET, Key=obj(b""), Body=b"{}")
    s3.delete_object(Bucket=BUCKET, Key=obj(CACHE["triton/XYZ/kernel.cubin"]))
    target = tmp_path / "b"
    target.mkdir()
    result = _pull(s3, target)
    assert result.outcome == "rejected" and _tree(target) == {}
    problems = " ".join(result.problems)
    assert "modelinfos/empty.json: S3 holds more than the 0 bytes" in problems
    assert "triton/XYZ/kernel.cubin: named by the manifest but not in S3" in problems


@pytest.mark.parametrize("path", ["../outside", "/etc/passwd", "a/../../b", ".compile-cache-incoming/x"])
def test_a_manifest_naming_a_path_outside_the_folder_restores_nothing(s3, tmp_path, path):
    files = [{"path": path, "size": 1, "sha256": hashlib.sha256(b"x").hexdigest()}]
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json",
                  Body=json.dumps({"kind": CM.KIND, "version": CM.VERSION, "files": files}).encode())
    target = tmp_path / "deep" / "b"
    target.mkdir(parents=True)
    result = _pull(s3, target)
    assert result.outcome == "rejected" and "unsafe path" in result.reason
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["b", "deep", CM.STATE])


def test_a_cache_larger_than_the_volume_allows_is_not_restored(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    target = tmp_path / "b"
    target.mkdir()
    result = _pull(s3, target, max_bytes=1024 * 1024)
    assert result.outcome == "rejected" and "--max-gib" in result.reason and _tree(target) == {}


def test_a_folder_holding_another_cache_is_kept(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    target = _write(tmp_path / "b", {"torch_compile_cache/mine": b"compiled here"})
    result = _pull(s3, target)
    assert result.outcome == "kept" and "torch_compile_cache/mine" in result.reason
    assert _tree(target) == {"torch_compile_cache/mine": b"compiled here"}


# -- missing key, S3 errors, budget ------------------------------------------------------------------


def test_a_key_without_a_cache_exits_0_and_says_the_start_goes_on_cold(s3, tmp_path, capsys):
    code = weights_main(["compile-cache", "pull", "--dir", str(tmp_path / "c"), "--uri", URI, "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "no compile cache at" in out and "a cold start, not a failure" in out
    record = json.loads(out.strip().splitlines()[-1].removeprefix(cc.RESULT_MARK))
    assert record == {"action": "pull", "outcome": "absent", "uri": URI, "files": 0, "bytes": 0,
                      "seconds": record["seconds"], "reason": "", "problems": []}


def test_an_s3_error_restores_nothing_keeps_verified_files_and_a_rerun_resumes(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    target = tmp_path / "b"
    target.mkdir()
    failing = CountingClient(s3, get_error_for=obj(CACHE["triton/XYZ/kernel.cubin"]).rsplit("/", 1)[1])
    result = cc.pull(failing, target, URI, progress=False, concurrency=1)
    assert result.outcome == "error" and "simulated S3 failure" in result.reason
    assert "the start goes on cold" in result.line()
    assert _tree(target) == {}
    assert len(list((target / CM.STAGING).iterdir())) == len(CACHE) - 1  # verified, waiting
    rerun = CountingClient(s3)
    assert cc.pull(rerun, target, URI, progress=False).outcome == "restored"
    assert _tree(target) == CACHE
    assert [k for k in rerun.gets if "/files/" in k] == [obj(CACHE["triton/XYZ/kernel.cubin"])]


def test_an_excluded_folder_is_not_another_cache_and_stays_as_it_is(s3, tmp_path):
    """The pod's own bytecode (PYTHONPYCACHEPREFIX under the cache volume) is written by the pull step's
    imports before it restores anything: with --exclude it is left alone, without it the pull keeps
    the folder as another cache's."""
    _push(s3, _write(tmp_path / "a", CACHE))
    mine = {"pycache/usr/lib/python3/json/__init__.cpython-312.pyc": b"bytecode"}
    target = _write(tmp_path / "b", mine)
    assert _pull(s3, target).outcome == "kept"
    result = _pull(s3, target, excludes=("pycache",))
    assert result.outcome == "restored", result.reason
    assert _tree(target) == {**CACHE, **mine}


def test_a_pull_slower_than_its_budget_gives_up_and_the_start_goes_on_cold(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    target = tmp_path / "b"
    target.mkdir()
    slow = CountingClient(s3, get_delay_s=0.4)
    result = cc.pull(slow, target, URI, progress=False, concurrency=1, budget_s=0.5)
    assert result.outcome == "error" and "--budget-s 0.5" in result.reason
    assert _tree(target) == {}


def test_an_unreachable_s3_is_a_warning_and_exit_0(tmp_path, monkeypatch, capsys):
    from tests.fixtures.moto_server import _free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    for key, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"), ("AWS_REGION", "ap-northeast-2")):
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cc, "make_client", lambda region, concurrency: boto3.client(
        "s3", config=__import__("botocore.config").config.Config(retries={"mode": "standard", "max_attempts": 2})))
    code = weights_main(["compile-cache", "pull", "--dir", str(tmp_path), "--uri", URI, "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0
    assert "S3 error reading the manifest" in captured.err and "the start goes on cold" in captured.err


# -- push decisions ------------------------------------------------------------------------------------


def test_push_skips_a_cache_s3_already_holds_and_adds_what_was_compiled_since(s3, tmp_path):
    source = _write(tmp_path / "a", CACHE)
    _push(s3, source)
    same = _push(s3, source)
    assert same.outcome == "same" and "already holds" in same.reason
    (source / "torch_compile_cache/new_range").write_bytes(b"compiled after the pull")
    client = CountingClient(s3)
    grown = cc.push(client, source, URI, progress=False)
    assert grown.outcome == "pushed" and "1 file(s) compiled since" in grown.reason
    assert client.puts == [obj(b"compiled after the pull"), f"{PREFIX}/manifest.json"]
    target = tmp_path / "b"
    target.mkdir()
    _pull(s3, target)
    assert _tree(target) == {**CACHE, "torch_compile_cache/new_range": b"compiled after the pull"}


def test_push_keeps_the_cache_another_node_stored_first_unless_forced(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    other = _write(tmp_path / "other", {p: d + b"\n" for p, d in CACHE.items()})
    kept = _push(s3, other)
    assert kept.outcome == "kept" and "another node stored it first" in kept.reason
    forced = _push(s3, other, force=True)
    assert forced.outcome == "pushed"
    target = tmp_path / "b"
    target.mkdir()
    assert _pull(s3, target).outcome == "restored" and _tree(target) == _tree(other)


def test_a_cache_that_failed_this_pods_pull_is_replaced_by_its_own_compile(s3, tmp_path):
    _push(s3, _write(tmp_path / "a", CACHE))
    s3.put_object(Bucket=BUCKET, Key=obj(b""), Body=b"tampered")
    pod = tmp_path / "pod"
    pod.mkdir()
    assert _pull(s3, pod).outcome == "rejected"
    _write(pod, {p: d + b"!" for p, d in CACHE.items()})  # what vLLM compiled on the cold start
    replaced = _push(s3, pod)
    assert replaced.outcome == "pushed" and "failed verification" in replaced.reason
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert _pull(s3, fresh).outcome == "restored" and _tree(fresh) == _tree(pod)


def test_two_nodes_pushing_their_first_cache_at_once_store_one_whole_cache(s3, tmp_path, monkeypatch):
    first = _write(tmp_path / "first", CACHE)
    second = _write(tmp_path / "second", {p: d + b"#" for p, d in CACHE.items()})
    assert _push(s3, first).outcome == "pushed"
    # The second node read the manifest before the first wrote it: it also believes it is first.
    monkeypatch.setattr(cache_transfer, "get_manifest", lambda client, bucket, prefix: None)
    late = _push(s3, second)
    monkeypatch.undo()
    assert late.outcome == "kept" and "while this one was pushing" in late.reason
    # Its files landed beside the first's (content-addressed), but the manifest is the first's, whole.
    target = tmp_path / "b"
    target.mkdir()
    assert _pull(s3, target).outcome == "restored" and _tree(target) == CACHE


def test_identical_files_are_stored_once_and_restored_under_every_name(s3, tmp_path):
    files = {"a/kernel.so": b"same bytes", "b/kernel.so": b"same bytes", "c/other": b"other"}
    client = CountingClient(s3)
    assert cc.push(client, _write(tmp_path / "a", files), URI, progress=False).files == 2
    assert sorted(client.puts[:-1]) == sorted([obj(b"same bytes"), obj(b"other")])
    target = tmp_path / "b"
    target.mkdir()
    assert _pull(s3, target).outcome == "restored" and _tree(target) == files


def test_replacing_a_rejected_cache_sends_every_file_again_even_one_that_looks_stored(s3, tmp_path):
    source = _write(tmp_path / "a", CACHE)
    _push(s3, source)
    # Planted with the right metadata: only reading the content shows it is not the file.
    original = CACHE["torch_compile_cache/torch_aot_compile/3f2a/inductor_cache/ab/cab123.py"]
    key = obj(original)
    planted = b"#" * len(original)
    s3.put_object(Bucket=BUCKET, Key=key, Body=planted, Metadata={"sha256": hashlib.sha256(original).hexdigest()})
    pod = tmp_path / "pod"
    pod.mkdir()
    assert _pull(s3, pod).outcome == "rejected"
    _write(pod, CACHE)  # the cold start compiled the same files
    client = CountingClient(s3)
    assert cc.push(client, pod, URI, progress=False).outcome == "pushed"
    assert key in client.puts
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert _pull(s3, fresh).outcome == "restored" and _tree(fresh) == CACHE


def test_an_interrupted_push_leaves_no_manifest_naming_missing_files_and_a_rerun_resumes(s3, tmp_path):
    source = _write(tmp_path / "a", CACHE)
    dropped = CountingClient(s3, fail_puts_after=2)
    with pytest.raises(ConnectionError):
        cc.push(dropped, source, URI, progress=False, concurrency=1)
    assert f"{PREFIX}/manifest.json" not in _keys(s3)
    target = tmp_path / "b"
    target.mkdir()
    assert _pull(s3, target).outcome == "absent"

    rerun = CountingClient(s3)
    assert cc.push(rerun, source, URI, progress=False, concurrency=1).outcome == "pushed"
    sent_before = set(dropped.puts)
    assert sent_before and not sent_before & set(rerun.puts)  # what landed the first time is not sent again
    assert rerun.puts[-1] == f"{PREFIX}/manifest.json"


def test_an_interrupted_second_push_leaves_the_first_manifest_whole(s3, tmp_path):
    source = _write(tmp_path / "a", CACHE)
    _push(s3, source)
    _write(source, {f"torch_compile_cache/extra{i}": _blob(1000, 10 + i) for i in range(4)})
    with pytest.raises(ConnectionError):
        cc.push(CountingClient(s3, fail_puts_after=2), source, URI, progress=False, concurrency=1)
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json")["Body"].read())
    stored = set(_keys(s3))
    assert all(f"{PREFIX}/files/{f['sha256']}" in stored for f in manifest["files"])
    target = tmp_path / "b"
    target.mkdir()
    assert _pull(s3, target).outcome == "restored" and _tree(target) == CACHE


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["pull", "--uri", f"s3://{BUCKET}"], "names no prefix"),
    (["pull", "--uri", "/tmp/cache"], "is not an S3 URI"),
    (["pull", "--uri", URI, "--budget-s", "0"], "--budget-s must be positive"),
    (["push", "--uri", URI, "--wait-for", "localhost:8000/health"], "is not an http(s) URL"),
])
def test_bad_arguments_exit_2_naming_the_flag(tmp_path, capsys, argv, message):
    code = weights_main(["compile-cache", argv[0], "--dir", str(tmp_path), *argv[1:]])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "weights", "compile-cache", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(proc: subprocess.Popen, words: str, within_s: float = 60.0) -> str:
    """What a running command printed on stdout up to `words` (a stop timed by what it says, not by a sleep that
    a busy machine outlasts). Read from the pipe itself: a buffered readline takes lines already written along
    with the first, where neither select nor a later communicate() sees them."""
    said, deadline, fd = b"", time.monotonic() + within_s, proc.stdout.fileno()
    while words.encode() not in said and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, said.decode() + "".join(proc.communicate())  # it ended before saying it
            said += chunk
    assert words.encode() in said, said.decode()
    return said.decode()


def test_sigterm_while_waiting_for_health_stops_at_once_and_a_sidecar_idles_after_its_push(s3, tmp_path, aws):
    from tests.fixtures.moto_server import _free_port

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    waiting = _cli(["push", "--dir", str(tmp_path), "--uri", URI, "--no-progress", "--poll-s", "0.2",
                    "--wait-for", f"http://127.0.0.1:{_free_port()}/health"], env)
    # SIGTERM once it says it waits (a fixed 2 s could land in its start-up on a busy machine)
    said = read_until(waiting, "to answer 200")
    assert "waiting for http://127.0.0.1:" in said, said
    time.sleep(0.5)
    assert waiting.poll() is None  # nothing answers /health yet
    waiting.send_signal(signal.SIGTERM)
    out, err = waiting.communicate(timeout=10)
    assert waiting.returncode == 143
    assert "stopped by SIGTERM" in err and "the manifest was not written" in err
    assert f"{PREFIX}/manifest.json" not in _keys(s3)

    source = _write(tmp_path / "cache", CACHE)
    sidecar = _cli(["push", "--dir", str(source), "--uri", URI, "--no-progress", "--stay"], env)
    said = read_until(sidecar, "idle until the pod stops")
    assert f"{PREFIX}/manifest.json" in _keys(s3)
    time.sleep(0.5)
    assert sidecar.poll() is None  # a native sidecar that exits would be started again
    sidecar.send_signal(signal.SIGTERM)
    out, err = sidecar.communicate(timeout=10)
    out = said + out
    assert sidecar.returncode == 0, err
    assert "uploaded 5 file(s)" in out and '"outcome": "pushed"' in out


def test_every_flag_the_docs_show_for_the_cache_commands_is_in_their_help():
    import re

    from weights.__main__ import build_parser

    readme = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    shown: dict[str, set[str]] = {"pull": set(), "push": set()}
    for verb in shown:
        for match in re.finditer(rf"python -m weights compile-cache {verb}(.*?)(?:\n(?!\s{{4,}})|$)", readme, re.S):
            shown[verb] |= set(re.findall(r"(--[a-z][a-z-]+)", match.group(1)))
    assert shown["pull"] >= {"--dir", "--uri", "--max-gib", "--budget-s"}
    assert shown["push"] >= {"--dir", "--uri", "--exclude", "--force", "--wait-for", "--stay"}
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    cache = next(a for a in sub.choices["compile-cache"]._actions if a.__class__.__name__ == "_SubParsersAction")
    for verb, flags in shown.items():
        known = {o for a in cache.choices[verb]._actions for o in a.option_strings}
        assert flags <= known, f"{verb}: {sorted(flags - known)} shown in the docs but not in --help"


@pytest.mark.parametrize("stay", [True, False], ids=["sidecar", "once"])
def test_a_stop_once_the_push_is_done_interrupts_nothing(tmp_path, monkeypatch, capsys, stay):
    """On a busy machine a sidecar stopped as soon as its manifest showed in S3 got the SIGTERM while it printed
    its result: it exited 143 saying "the manifest was not written", which it had been. Past the push, a stop
    interrupts nothing: the push's own exit code (a sidecar 0), no "stopped by" message."""
    from bench.common.interrupts import Interrupted

    def emit(result):
        raise Interrupted(signal.SIGTERM)  # what stop_on_signals raises for a SIGTERM

    monkeypatch.setattr(cc, "make_client", lambda region, concurrency: None)
    monkeypatch.setattr(cc, "push", lambda client, *a, **kw: cc.Result("push", "pushed", URI, files=2))
    monkeypatch.setattr(cc, "_emit", emit)
    code = weights_main(["compile-cache", "push", "--dir", str(tmp_path), "--uri", URI, "--no-progress",
                         *(["--stay"] if stay else [])])
    err = capsys.readouterr().err
    assert code == 0 and "stopped by" not in err and "manifest was not written" not in err, err
