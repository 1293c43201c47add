"""The compile cache through S3: `python -m weights compile-cache push|pull --dir DIR --uri s3://...`.

A server's start-up compiles its model (torch.compile, Triton kernels, the CUDA JIT): the PoC
measured torch.compile at 73 s without a cache and 8.5 s with one, and engine init at 93 s and 25 s.
The cache sits on the pod's own volume, so a new pod on a new Spot node starts without it. These two
commands carry it through the weights bucket, under `compile-cache/<key>/` (the key says which
servers may share a cache: components/compile_cache.py):

    <uri>files/<sha256>   one object per distinct file content, named by its SHA-256 (also in
                          x-amz-meta-sha256): two nodes pushing at once never overwrite each
                          other's files, and identical files are stored once
    <uri>manifest.json    what a complete cache holds: every file's path, size and SHA-256

push  hashes DIR's files and uploads them, the manifest last: an interrupted push leaves the
      previous manifest (or none), never one that names a file S3 does not hold yet, and a rerun
      sends only what is missing (the skip test of weights/store.py). It pushes only when the key
      has no cache yet, or when DIR holds every file the stored manifest names, unchanged, and more
      (compiled since); a cache another node stored first is kept (`--force` replaces it). The
      first manifest of a key is written only if none exists yet (a conditional PUT), so of two
      nodes finishing their first start together one stores its cache and the other keeps it. With
      `--wait-for URL` it first waits until URL answers 200 (the server's /health), and with
      `--stay` it then stays idle until stopped, as a sidecar must.
pull  restores a cache into DIR when DIR holds nothing else (or only files of that same cache: a
      rerun after an interruption goes on where it stopped). Each file is downloaded into a
      staging folder inside DIR and checked against the manifest's size and SHA-256; files are
      moved into place only when every one has passed. A file that does not match restores
      nothing at all: the cache is code the server executes, and a cache with one foreign file is
      not trusted for the rest. The pull says which file and why, and the server compiles as on a
      first start.

A missing cache, a rejected one, an S3 error (retried by botocore first) and a pull slower than
`--budget-s` all end the pull with exit 0 and a line saying the start goes on cold: a cold start
is slower, never a failure. Exit 2: bad arguments. Exit 1: a push that S3 refused. 130 or 143:
stopped by Ctrl-C or SIGTERM (what was kept is printed; the same command resumes).

The last line of either command is `compile-cache-result {json}` (action, outcome, files, bytes,
seconds, uri, reason), which the start-up timeline reads from the pod's log.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from weights.cache_manifest import (
    FILES,
    MANIFEST,
    STAGING,
    STATE,
    CacheInputError,
    Entry,
    check_uri,
    entries_of,
    manifest_bytes,
    parse_manifest,
    read_state,
    scan,
)
from weights.store import (
    Action,
    LocalFile,
    MiB,
    StageConfig,
    Stopped,
    _Counter,
    b64_sha256,
    fmt_bytes,
    head_object,
    join_running,
    remote_matches,
    sha256_file,
    upload_file,
)

RESULT_MARK = "compile-cache-result "
# A cache file is written with one PUT up to this size; larger ones go multipart (resumable by part).
MULTIPART_THRESHOLD = 256 * MiB


@dataclass
class Result:
    """What one push or pull did; `line()` for people, `record()` for the start-up timeline."""

    action: str  # pull | push
    outcome: str  # pull: restored, absent, rejected, error, kept, interrupted; push: pushed, same, kept, empty, error, interrupted
    uri: str
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    reason: str = ""
    problems: list[str] = field(default_factory=list)
    lingering: int = field(default=0, repr=False)  # transfers still blocked when it returned

    def record(self) -> str:
        data = asdict(self)
        data.pop("lingering")
        data["seconds"] = round(self.seconds, 3)
        return RESULT_MARK + json.dumps(data, sort_keys=True)

    def line(self) -> str:
        size = f"{self.files} file(s), {fmt_bytes(self.bytes)}"
        took = f"in {self.seconds:.1f} s"
        text = {
            ("pull", "restored"): f"restored {size} from {self.uri} {took}, where vLLM looks for its compiled graphs",
            ("pull", "absent"): f"no compile cache at {self.uri} yet: the server compiles on this start "
                                "(a cold start, not a failure), and pushes its cache once healthy",
            ("pull", "rejected"): f"nothing restored from {self.uri}: {self.reason}; the start goes on cold",
            ("pull", "error"): f"nothing restored from {self.uri}: {self.reason}; the start goes on cold",
            ("pull", "kept"): f"nothing restored: {self.reason}",
            ("push", "pushed"): f"uploaded {size} to {self.uri} {took} ({self.reason})",
            ("push", "same"): f"nothing to push: {self.reason}",
            ("push", "kept"): f"this pod's cache is not the key's: {self.reason}",
            ("push", "empty"): f"nothing to push: {self.reason}",
            ("push", "error"): f"push to {self.uri} failed: {self.reason}; the same command resumes it",
        }.get((self.action, self.outcome), f"{self.outcome}: {self.reason}")
        return f"compile-cache {self.action}: {text}"


# --------------------------------------------------------------------------------------------------
# The stored cache


def get_manifest(client, bucket: str, prefix: str) -> bytes | None:
    from botocore.exceptions import ClientError

    try:
        return client.get_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}")["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def _write_state(directory: Path, result: Result, manifest_sha: str | None) -> None:
    state = {"outcome": result.outcome, "uri": result.uri, "manifest_sha256": manifest_sha,
             "problems": result.problems}
    try:
        (directory / STATE).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except OSError:
        pass  # bookkeeping only: the push then treats the stored cache as it finds it


# --------------------------------------------------------------------------------------------------
# Pull


def _progress(total: int, desc: str, enabled: bool):
    # bench.common's progress and interrupts travel with this module into the server pod (their own
    # ConfigMap); imported where used, so the weight-sync Job, which mounts only weights/, never needs them.
    from bench.common.progress import Progress  # local import: the sync Job mounts no bench

    return Progress(total, desc, enabled=enabled)


def _fetch(client, bucket: str, key: str, staged: Path, entry: Entry, bar,
           stop: threading.Event) -> tuple[str, str] | None:
    """Download one file to its staging name and check it; (kind, problem) when it fails."""
    from botocore.exceptions import BotoCoreError, ClientError

    if staged.is_file() and staged.stat().st_size == entry.size and sha256_file(staged, stop=stop) == entry.sha256:
        bar.update(entry.size)  # verified by an earlier, interrupted pull
        return None
    digest, received = hashlib.sha256(), 0
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        with staged.open("wb") as fh:
            while chunk := body.read(MiB):
                if stop.is_set():
                    raise Stopped()
                received += len(chunk)
                if received > entry.size:
                    break
                fh.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    except ClientError as exc:
        staged.unlink(missing_ok=True)
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return "rejected", f"{entry.path}: named by the manifest but not in S3"
        return "error", f"{entry.path}: {exc}"
    except (BotoCoreError, OSError) as exc:
        staged.unlink(missing_ok=True)
        return "error", f"{entry.path}: {type(exc).__name__}: {exc}"
    if received != entry.size:
        staged.unlink(missing_ok=True)
        more = "more than" if received > entry.size else f"{received:,d} bytes, not"
        return "rejected", f"{entry.path}: S3 holds {more} the {entry.size:,d} bytes the manifest names"
    if digest.hexdigest() != entry.sha256:
        staged.unlink(missing_ok=True)
        return "rejected", (f"{entry.path}: SHA-256 {digest.hexdigest()[:16]}... differs from the manifest's "
                            f"{entry.sha256[:16]}... (changed after it was pushed)")
    return None


def _local_state(files: list, entries: dict[str, Entry], stop: threading.Event) -> tuple[set[str], list[str]]:
    """(manifest files already in place with the right content, files that are not the manifest's)."""
    present, foreign = set(), []
    for f in files:
        entry = entries.get(f.rel)
        if entry and f.size == entry.size and sha256_file(f.path, stop=stop) == entry.sha256:
            present.add(f.rel)
        else:
            foreign.append(f.rel)
    return present, foreign


def _abandon(pool: cf.ThreadPoolExecutor, futures, stop: threading.Event, grace_s: float = 3.0) -> int:
    """Stop the workers: queued ones are dropped, running ones get `grace_s` to reach their next check.

    Returns how many are still running (blocked on the network); the command then exits without
    waiting for them (`os._exit`), as `stage-weights` does.
    """
    stop.set()
    for fut in futures:
        fut.cancel()
    pool.shutdown(wait=False, cancel_futures=True)
    return join_running(futures, grace_s)


def pull(client, directory: Path, uri: str, *, max_bytes: int | None = None, budget_s: float | None = None,
         concurrency: int = 8, progress: bool = True, stop: threading.Event | None = None,
         log: Callable[[str], None] = print, excludes: tuple[str, ...] = ()) -> Result:
    """Restore the cache at `uri` into `directory` (see the module's docstring); never raises on S3 errors."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = check_uri(uri)
    shown = f"s3://{bucket}/{prefix}/"
    stop = stop or threading.Event()
    started = time.monotonic()
    result = Result("pull", "error", shown)

    def done(outcome: str, reason: str = "", manifest_sha: str | None = None) -> Result:
        result.outcome, result.reason, result.seconds = outcome, reason, time.monotonic() - started
        if outcome != "error":
            _write_state(directory, result, manifest_sha)
        return result

    try:
        raw = get_manifest(client, bucket, prefix)
    except (ClientError, BotoCoreError) as exc:
        return done("error", f"S3 error reading the manifest: {exc}")
    if raw is None:
        return done("absent")
    manifest_sha = hashlib.sha256(raw).hexdigest()
    try:
        entries = parse_manifest(raw)
    except ValueError as exc:
        result.problems.append(str(exc))
        return done("rejected", str(exc), manifest_sha)
    total = sum(e.size for e in entries.values())
    if max_bytes is not None and total > max_bytes:
        return done("rejected", f"the cache holds {fmt_bytes(total)}, more than --max-gib allows "
                    f"({fmt_bytes(max_bytes)}, what the cache volume can hold beside the server's own files)",
                    manifest_sha)
    present, foreign = _local_state(scan(directory, excludes), entries, stop)  # excluded names: neither
    if foreign:
        return done("kept", f"{directory} already holds {len(foreign)} file(s) of another cache "
                    f"(e.g. {foreign[0]}); keeping them", manifest_sha)
    missing = [entries[p] for p in sorted(entries) if p not in present]
    staging = directory / STAGING
    staging.mkdir(exist_ok=True)
    distinct = {e.sha256: e for e in missing}  # one download per content
    bar = _progress(sum(e.size for e in distinct.values()), "restoring the compile cache", progress)
    problems: list[tuple[str, str]] = []
    pool = cf.ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="pull")
    futures = {pool.submit(_fetch, client, bucket, f"{prefix}/{FILES}{sha}", staging / sha, e, bar, stop): e
               for sha, e in sorted(distinct.items())}
    over_budget = False
    try:
        pending = set(futures)
        while pending:
            finished, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                try:
                    problem = fut.result()
                except Stopped:
                    problem = None
                if problem:
                    problems.append(problem)
            if budget_s is not None and time.monotonic() - started > budget_s and pending:
                over_budget = True
                break
    except KeyboardInterrupt:
        _abandon(pool, futures, stop)
        raise
    finally:
        bar.close()
    if over_budget:
        result.lingering = _abandon(pool, futures, stop)
    else:
        pool.shutdown(wait=True)
    result.problems = [p for _, p in problems]
    if any(kind == "rejected" for kind, _ in problems):
        # Nothing from a cache that fails its own manifest stays on the node, not even the files that passed.
        shutil.rmtree(staging, ignore_errors=True)
        bad = [p for kind, p in problems if kind == "rejected"]
        return done("rejected", f"{len(bad)} file(s) failed verification: " + "; ".join(bad[:3])
                    + (" ..." if len(bad) > 3 else ""), manifest_sha)
    if over_budget:
        return done("error", f"the pull took longer than --budget-s {budget_s:g} s (verified files are kept "
                    "in the staging folder for a rerun)")
    if problems:
        return done("error", f"S3 errors on {len(problems)} file(s), e.g. {problems[0][1]}")
    placed: dict[str, Path] = {}
    for entry in missing:
        target = directory / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.sha256 in placed:  # the same content under a second name
            shutil.copyfile(placed[entry.sha256], target)
        else:
            os.replace(staging / entry.sha256, target)
            placed[entry.sha256] = target
        os.chmod(target, 0o755 if entry.executable else 0o644)
    shutil.rmtree(staging, ignore_errors=True)
    result.files, result.bytes = len(entries), total
    return done("restored", "", manifest_sha)


# --------------------------------------------------------------------------------------------------
# Push


@dataclass(frozen=True)
class Decision:
    push: bool
    outcome: str  # what a push that does not happen reports: same | kept
    why: str
    first: bool = False  # no manifest yet: write it only if still none (a conditional PUT)
    reuse: frozenset[str] = frozenset()  # SHA-256s whose stored objects are known good (not re-sent)


def decide(local: dict[str, Entry], remote_raw: bytes | None, state: dict[str, Any], *,
           force: bool = False) -> Decision:
    """Whether DIR's cache (`local`) should replace or complete the stored one, and why."""
    if remote_raw is None:
        return Decision(True, "pushed", "no cache for this key yet", first=True)
    remote_sha = hashlib.sha256(remote_raw).hexdigest()
    try:
        remote = parse_manifest(remote_raw)
    except ValueError as exc:
        return Decision(True, "pushed", f"the stored manifest is unusable ({exc}): replacing it")
    if state.get("outcome") == "rejected" and state.get("manifest_sha256") == remote_sha:
        # Its objects are not trusted: every file is sent again.
        return Decision(True, "pushed", "the stored cache failed verification when this pod pulled it: replacing it")
    if force:
        return Decision(True, "pushed", "--force: replacing the stored cache")
    same = {p for p, e in remote.items() if local.get(p) == e}
    if same == set(remote) and len(local) == len(remote):
        return Decision(False, "same", f"S3 already holds this cache ({len(remote)} file(s))")
    if same == set(remote):
        return Decision(True, "pushed", f"{len(local) - len(remote)} file(s) compiled since the stored cache, "
                        "which this one completes", reuse=frozenset(e.sha256 for e in remote.values()))
    return Decision(False, "kept", (f"S3 holds another cache for this key ({len(remote)} file(s), "
                                    f"{len(remote) - len(same)} differ or are missing here: another node stored it "
                                    "first); keeping it (--force replaces it)"))


def push(client, directory: Path, uri: str, *, excludes: tuple[str, ...] = (), force: bool = False,
         concurrency: int = 8, progress: bool = True, stop: threading.Event | None = None,
         log: Callable[[str], None] = print) -> Result:
    """Upload DIR's cache to `uri` when `decide` says so, the manifest last. S3 errors raise."""
    bucket, prefix = check_uri(uri)
    shown = f"s3://{bucket}/{prefix}/"
    stop = stop or threading.Event()
    started = time.monotonic()
    files = scan(directory, excludes)
    if not files:
        return Result("push", "empty", shown, reason=f"{directory} holds no cache files",
                      seconds=time.monotonic() - started)
    hashes = {f.rel: sha256_file(f.path, stop=stop) for f in files}
    local = entries_of(files, hashes)
    decision = decide(local, get_manifest(client, bucket, prefix), read_state(directory), force=force)
    if not decision.push:
        return Result("push", decision.outcome, shown, reason=decision.why, seconds=time.monotonic() - started)
    # One object per distinct content. What the stored manifest names is in S3 already (when that
    # cache is trusted); the rest is checked object by object (an interrupted push left some there).
    config = StageConfig(concurrency=concurrency, multipart_threshold=MULTIPART_THRESHOLD)
    distinct: dict[str, LocalFile] = {}
    for f in files:
        distinct.setdefault(hashes[f.rel], f)
    actions = []
    for sha, f in sorted(distinct.items()):
        if sha in decision.reuse:
            continue
        key = f"{prefix}/{FILES}{sha}"
        same, reason = remote_matches(head_object(client, bucket, key), f, sha)
        if not same or not (decision.reuse or decision.first):
            actions.append(Action(f, key, sha, upload=True, reason=reason if not same else "replacing"))
    bar = _progress(sum(a.file.size for a in actions), "pushing the compile cache", progress)
    counter = _Counter(bar, stop)
    part_pool = cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="part")
    file_pool = cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="file")
    futures = [file_pool.submit(upload_file, client, bucket, a, config, part_pool, counter, log) for a in actions]
    try:
        pending = set(futures)
        while pending:
            finished, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                fut.result()  # an S3 error ends the push before the manifest is written
    except BaseException:
        _abandon(file_pool, futures, stop)
        part_pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        bar.close()
    file_pool.shutdown(wait=True)
    part_pool.shutdown(wait=True)
    body = manifest_bytes(local)
    conditional = {"IfNoneMatch": "*"} if decision.first else {}
    try:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}", Body=body, ContentType="application/json",
                          ChecksumSHA256=b64_sha256(body), **conditional)
    except Exception as exc:  # noqa: BLE001 - only the lost race is expected; anything else is raised
        if _error_code(exc) not in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise
        return Result("push", "kept", shown, files=len(actions), bytes=counter.sent, seconds=time.monotonic() - started,
                      reason="another node stored its cache for this key while this one was pushing; keeping it")
    return Result("push", "pushed", shown, files=len(actions), bytes=counter.sent, reason=decision.why,
                  seconds=time.monotonic() - started)


def _error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    return (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None


# --------------------------------------------------------------------------------------------------
# CLI


def make_client(region: str | None, concurrency: int):
    """An S3 client that gives up on a stalled connection in seconds (the start waits on it)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", region_name=region, config=Config(
        max_pool_connections=2 * concurrency + 4, connect_timeout=5, read_timeout=30,
        retries={"mode": "standard", "max_attempts": 5}))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compile-cache", help="push or pull a server's compile cache through S3 (manifest, SHA-256 checked)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cache_command", required=True)
    for name, text in (("push", "upload DIR's compile cache, the manifest last"),
                       ("pull", "restore a compile cache into DIR, every file checked against the manifest")):
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("--dir", required=True, type=Path, help="the cache folder (the server's VLLM_CACHE_ROOT)")
        s.add_argument("--uri", required=True, help="s3://<bucket>/compile-cache/<key>/")
        s.add_argument("--concurrency", type=int, default=8, help="parallel transfers (default %(default)s)")
        s.add_argument("--region", default=None, help="the bucket's region (default: the environment's)")
        s.add_argument("--no-progress", action="store_true",
                       help="no progress (default: a bar on a terminal, else a line every 10 s)")
        s.add_argument("--exclude", action="append", default=[], metavar="NAME", help="a top-level name in DIR "
                       "that is not compile output, left alone (repeatable), e.g. assets")
        if name == "push":
            s.add_argument("--force", action="store_true", help="replace a cache another node stored for the key")
            s.add_argument("--wait-for", default=None, metavar="URL",
                           help="first wait until URL answers 200 (the server's /health)")
            s.add_argument("--poll-s", type=float, default=5.0, help="--wait-for poll interval (default %(default)s)")
            s.add_argument("--stay", action="store_true",
                           help="after the push, stay idle until stopped (a sidecar container must not exit)")
        else:
            s.add_argument("--max-gib", type=float, default=None,
                           help="restore nothing from a cache larger than this (default: no limit)")
            s.add_argument("--budget-s", type=float, default=None,
                           help="give up (start cold) when the pull takes longer (default: no limit)")
    p.set_defaults(func=run)
    return p


def _check_args(args: argparse.Namespace) -> None:
    check_uri(args.uri)
    if args.concurrency < 1:
        raise CacheInputError(f"--concurrency must be at least 1 (got {args.concurrency})")
    if args.cache_command == "pull":
        if args.max_gib is not None and args.max_gib <= 0:
            raise CacheInputError(f"--max-gib must be positive (got {args.max_gib:g})")
        if args.budget_s is not None and args.budget_s <= 0:
            raise CacheInputError(f"--budget-s must be positive (got {args.budget_s:g})")
        if not args.dir.exists():
            args.dir.mkdir(parents=True)
    else:
        if args.poll_s <= 0:
            raise CacheInputError(f"--poll-s must be positive (got {args.poll_s:g})")
        if args.wait_for and not args.wait_for.startswith(("http://", "https://")):
            raise CacheInputError(f"--wait-for {args.wait_for!r} is not an http(s) URL, e.g. http://127.0.0.1:8000/health")
    if not args.dir.is_dir():
        raise CacheInputError(f"--dir {args.dir} is not a folder")


def wait_for(url: str, poll_s: float, log: Callable[[str], None]) -> None:
    """Until `url` answers 200 (Ctrl-C and SIGTERM interrupt the wait)."""
    log(f"compile-cache push: waiting for {url} to answer 200 before pushing")
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(poll_s)


def _emit(result: Result) -> None:
    stream = sys.stderr if result.outcome in ("rejected", "error") else sys.stdout
    print(result.line(), file=stream, flush=True)
    print(result.record(), flush=True)


def run(args: argparse.Namespace) -> int:
    # Not at the top: the weight-sync Job imports this module without the bench package (see _progress).
    from bench.common.interrupts import exit_code, signal_name, stop_on_signals  # local import: the sync Job mounts no bench

    log = lambda text: print(text, flush=True)  # noqa: E731
    stop = threading.Event()
    progress = not args.no_progress
    try:
        with stop_on_signals():
            _check_args(args)
            client = make_client(args.region, args.concurrency)
            if args.cache_command == "pull":
                result = pull(client, args.dir, args.uri, budget_s=args.budget_s, excludes=tuple(args.exclude),
                              concurrency=args.concurrency, max_bytes=int(args.max_gib * 1024**3) if args.max_gib else None,
                              progress=progress, stop=stop, log=log)
                _emit(result)
                if result.lingering:  # downloads still blocked on the network: do not wait for them
                    sys.stdout.flush()
                    os._exit(0)
                return 0
            if args.wait_for:
                wait_for(args.wait_for, args.poll_s, log)
            try:
                result = push(client, args.dir, args.uri, excludes=tuple(args.exclude), force=args.force,
                              concurrency=args.concurrency, progress=progress, stop=stop, log=log)
            except CacheInputError:
                raise
            except Exception as exc:  # noqa: BLE001 - S3 and credential errors: one line, the rerun resumes
                result = Result("push", "error", args.uri, reason=f"{type(exc).__name__}: {exc}")
            _emit(result)
            code = 1 if result.outcome == "error" else 0
            if args.stay:
                return _stay(log)
            return code
    except CacheInputError as exc:
        print(f"compile-cache {args.cache_command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        stop.set()
        print(_stopped_message(args, exc), file=sys.stderr, flush=True)
        print(Result(args.cache_command, "interrupted", args.uri, reason=f"stopped by {signal_name(exc)}").record(),
              flush=True)
        if any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
            # transfers still blocked on the network after their grace: S3 drops them, the rerun resends
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code(exc))
        return exit_code(exc)


def _stay(log: Callable[[str], None]) -> int:
    """A native sidecar that exits is started again: after its one push it idles until the pod stops."""
    log("compile-cache push: done; idle until the pod stops")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


def _stopped_message(args: argparse.Namespace, exc: BaseException) -> str:
    # Not at the top: the weight-sync Job imports this module without the bench package (see _progress).
    from bench.common.interrupts import rerun_command, signal_name  # local import: the sync Job mounts no bench
    if args.cache_command == "pull":
        kept = (f"files already verified stay in {args.dir / STAGING} and are not downloaded again; "
                "nothing was moved into place unless the pull had finished")
    else:
        kept = ("files already uploaded stay in S3 and are not sent again; the manifest was not written, "
                "so no pull takes the partial upload for a cache")
    return (f"compile-cache {args.cache_command}: stopped by {signal_name(exc)}.\n  {kept}\n"
            f"  to resume: {rerun_command('weights' if sys.argv[1:2] == ['compile-cache'] else 'weights.compile_cache')}")


if __name__ == "__main__":  # the server pod's steps: this module and its imports only (stacks/job_code.py)
    parser = argparse.ArgumentParser(prog="python -m weights.compile_cache")
    add_parser(parser.add_subparsers(dest="command", required=True))
    sys.exit(run(parser.parse_args(["compile-cache", *sys.argv[1:]])))
