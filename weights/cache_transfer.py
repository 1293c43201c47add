"""The compile cache's transfers through S3, under the commands of weights/compile_cache.py: what one push or
pull did (`Result`), the stored manifest, the pull (staged, checked against the manifest's size and SHA-256,
moved into place only when every file passed), the push decision and the push (content-addressed files, the
manifest last, the first one conditional). Plain functions over a boto3 client; the command line, its
waiting, its lines and its stops are weights/compile_cache.py's. Both travel into the server pod
(stacks/job_code.py mounts what `python -m weights.compile_cache` imports)."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from weights.cache_manifest import (
    FILES,
    MANIFEST,
    STAGING,
    STATE,
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
