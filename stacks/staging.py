"""Stage model weights into the weights bucket: `python -m stacks stage-weights <dir> s3://<bucket>/<prefix>`.

vLLM streams the checkpoint straight from S3 (run:ai streamer), so the bucket copy must be complete and
byte-identical to the snapshot. The staging rules:

* Skip test: an object is skipped when its size matches and its `x-amz-meta-sha256` (the whole file's
  SHA-256, written at upload) equals the local file's. S3's own multipart checksums are composite
  (a hash of the part hashes, suffixed `-N`), so they change with the part size and cannot be compared
  against a whole-file hash, and S3 offers full-object checksums for multipart uploads only as CRCs. The
  metadata hash is independent of part size and of the tool that uploaded it. An object without that
  metadata is still accepted when S3 holds a full-object SHA-256 for it (single-part uploads made with
  `--checksum-algorithm SHA256`) that matches.
* Integrity in transit: every PUT and part carries `ChecksumSHA256`, which S3 verifies on receipt.
* Resume: an interrupted multipart upload stays in the bucket. A rerun lists its parts and keeps the
  parts when every one matches the same byte range of the local file by SHA-256 (or, where S3 returns
  no part checksum, by MD5 ETag), and sends only the rest. Uploads that cannot be reused (another
  checksum algorithm, parts that do not line up or no longer match) are aborted and started afresh.
  After completing a resumed upload the object's recorded hash is checked, because the upload's
  metadata was fixed when it began and the file may have changed in a range not yet sent.
  The weights bucket should also expire incomplete uploads by lifecycle rule, for runs never resumed.

boto3's TransferManager is not used for the upload itself: it aborts a failed multipart upload and
cannot reuse parts, which is what makes a 60 GB checkpoint restartable.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures as cf
import hashlib
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench.interrupts import exit_code, quiet_broken_pipe, rerun_command, signal_name, stop_on_signals
from bench.progress import Progress, human_bytes

MiB = 1024 * 1024
S3_MIN_PART = 5 * MiB
S3_MAX_PART = 5 * 1024 * MiB
S3_MAX_PARTS = 10_000
SHA256_META = "sha256"  # stored as x-amz-meta-sha256 (hex)
INDEX_SUFFIX = ".safetensors.index.json"

COMMAND = "stage-weights"


class StagingError(Exception):
    """A problem the operator must fix; the message says what and how."""


class Stopped(Exception):
    """Raised inside worker threads once a stop was requested (Ctrl-C, SIGTERM)."""


class StagingInterrupted(Exception):
    """The run stopped on a signal; `summary` says what was done, `lingering` counts uploads still in flight."""

    def __init__(self, summary: "Summary", signal_exc: BaseException, lingering: int = 0):
        super().__init__("interrupted")
        self.summary = summary
        self.signal_exc = signal_exc
        self.lingering = lingering


# --------------------------------------------------------------------------------------------------
# Local snapshot


@dataclass(frozen=True)
class LocalFile:
    rel: str  # posix path relative to the snapshot root: the object key's suffix
    path: Path  # resolved file (HF snapshot symlinks point into ../../blobs)
    size: int


def parse_s3_uri(uri: str, *, bucket_root: bool = False) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise StagingError(f"destination {uri!r} is not an S3 URI; expected s3://<bucket>/<prefix>")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise StagingError(f"destination {uri!r} names no bucket; expected s3://<bucket>/<prefix>")
    if not prefix.strip("/") and not bucket_root:
        raise StagingError(
            f"destination {uri!r} has no prefix: the snapshot's files would land at the bucket's root, where the "
            f"servers do not look; give the model's prefix, e.g. s3://{bucket}/models/<org>/<name> (the stack "
            "output modelUris lists them), or pass --bucket-root if the root is intended"
        )
    return bucket, prefix.strip("/")


def object_key(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


def resolve_snapshot_dir(source: Path) -> Path:
    """Accept a snapshot dir, or a Hugging Face cache repo dir (`models--org--name`) and pick its snapshot."""
    source = source.expanduser()
    if not source.is_dir():
        raise StagingError(f"source {str(source)!r} is not a directory")
    snapshots = source / "snapshots"
    if not (snapshots.is_dir() and (source / "blobs").is_dir()):
        return source
    ref = source / "refs" / "main"
    if ref.is_file():
        rev = ref.read_text().strip()
        if (snapshots / rev).is_dir():
            return snapshots / rev
    revs = sorted(p.name for p in snapshots.iterdir() if p.is_dir())
    if len(revs) == 1:
        return snapshots / revs[0]
    raise StagingError(
        f"{source} is a Hugging Face cache with {len(revs)} snapshots and no usable refs/main; "
        f"pass one of: {', '.join(str(snapshots / r) for r in revs) or '(none)'}"
    )


def is_ignored(rel_parts: tuple[str, ...]) -> bool:
    """Download-tool state, not model files: huggingface_hub's .cache/ and locks, git metadata."""
    for part in rel_parts:
        if part in (".cache", ".locks") or part.startswith(".git"):
            return True
    name = rel_parts[-1]
    return name.endswith((".lock", ".incomplete")) or name == ".DS_Store"


def collect_files(root: Path) -> list[LocalFile]:
    files: list[LocalFile] = []
    broken: list[str] = []
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen_dirs:  # a directory symlink loop
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        rel_dir = Path(dirpath).relative_to(root).parts
        dirnames[:] = sorted(d for d in dirnames if not is_ignored(rel_dir + (d,)))
        for name in sorted(filenames):
            rel_parts = rel_dir + (name,)
            if is_ignored(rel_parts):
                continue
            path = Path(dirpath, name)
            target = path.resolve()
            if not target.is_file():
                broken.append("/".join(rel_parts))
                continue
            files.append(LocalFile("/".join(rel_parts), target, target.stat().st_size))
    if broken:
        raise StagingError(
            f"{len(broken)} file(s) in {root} point at missing blobs (an interrupted Hugging Face "
            f"download?): {', '.join(broken)}. Download the snapshot again, then rerun."
        )
    if not files:
        raise StagingError(f"no files to stage in {root}")
    return sorted(files, key=lambda f: f.rel)


def missing_shards(root: Path, files: list[LocalFile]) -> dict[str, list[str]]:
    """Shards named by each `*.safetensors.index.json` (weight_map values) that are not staged."""
    present = {f.rel for f in files}
    missing: dict[str, list[str]] = {}
    for f in files:
        if not f.rel.endswith(INDEX_SUFFIX):
            continue
        try:
            weight_map = json.loads(f.path.read_text())["weight_map"]
            shards = set(weight_map.values())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StagingError(f"{f.rel} is not a safetensors index with a weight_map: {exc}") from None
        base = f.rel.rsplit("/", 1)[0] + "/" if "/" in f.rel else ""
        gone = sorted(s for s in shards if base + s not in present)
        if gone:
            missing[f.rel] = gone
    return missing


def check_shards(root: Path, files: list[LocalFile]) -> None:
    missing = missing_shards(root, files)
    if missing:
        lines = [
            f"  {index}: {len(shards)} missing: {', '.join(shards)}" for index, shards in missing.items()
        ]
        raise StagingError(
            f"shards named in the safetensors index are not in {root}:\n"
            + "\n".join(lines)
            + "\nvLLM would fail to load this checkpoint; download the missing shards, then rerun."
        )


def sha256_file(path: Path, chunk: int = 8 * MiB, on_bytes: Callable[[int], None] | None = None,
                stop: threading.Event | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            if stop is not None and stop.is_set():
                raise Stopped()
            digest.update(block)
            if on_bytes:
                on_bytes(len(block))
    return digest.hexdigest()


def b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def read_range(path: Path, offset: int, length: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read(length)


# --------------------------------------------------------------------------------------------------
# Plan: what is already in the bucket


@dataclass(frozen=True)
class StageConfig:
    concurrency: int = 8
    part_size: int = 64 * MiB
    multipart_threshold: int = 64 * MiB

    def validate(self) -> None:
        if self.concurrency < 1:
            raise StagingError(f"--concurrency must be at least 1 (got {self.concurrency})")
        if not S3_MIN_PART <= self.part_size <= S3_MAX_PART:
            raise StagingError(
                f"--part-size-mib must be between 5 and 5120 (S3 part limits), got {self.part_size / MiB:g}"
            )
        if self.multipart_threshold < S3_MIN_PART:
            raise StagingError(
                f"--multipart-threshold-mib must be at least 5, got {self.multipart_threshold / MiB:g}"
            )

    def part_size_for(self, size: int) -> int:
        """The configured part size, raised where the file would exceed S3's 10,000 parts."""
        if math.ceil(size / self.part_size) <= S3_MAX_PARTS:
            return self.part_size
        return math.ceil(size / S3_MAX_PARTS / MiB) * MiB


@dataclass
class Action:
    file: LocalFile
    key: str
    sha256: str
    upload: bool
    reason: str  # why it is uploaded or skipped


def remote_matches(head: dict[str, Any] | None, file: LocalFile, sha256_hex: str) -> tuple[bool, str]:
    if head is None:
        return False, "new"
    if head.get("ContentLength") != file.size:
        return False, f"size differs ({head.get('ContentLength')} in S3)"
    recorded = (head.get("Metadata") or {}).get(SHA256_META)
    if recorded:
        return (recorded == sha256_hex, "same sha256" if recorded == sha256_hex else "sha256 differs")
    full = head.get("ChecksumSHA256")
    if full and "-" not in full and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT":
        expected = base64.b64encode(bytes.fromhex(sha256_hex)).decode()
        return (full == expected, "same S3 SHA-256" if full == expected else "S3 SHA-256 differs")
    return False, "no sha256 recorded"


def head_object(client, bucket: str, key: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def plan_uploads(client, bucket: str, prefix: str, files: list[LocalFile], hashes: dict[str, str]) -> list[Action]:
    actions = []
    for f in files:
        key = object_key(prefix, f.rel)
        same, reason = remote_matches(head_object(client, bucket, key), f, hashes[f.rel])
        actions.append(Action(f, key, hashes[f.rel], upload=not same, reason=reason))
    return actions


# --------------------------------------------------------------------------------------------------
# Upload


@dataclass
class Summary:
    dry_run: bool = False
    to_upload_files: int = 0  # files found missing or different
    to_upload_bytes: int = 0
    unfinished: list[str] = field(default_factory=list)  # multipart uploads left in S3 to resume
    uploaded_files: int = 0
    uploaded_bytes: int = 0  # bytes sent in this run
    resumed_bytes: int = 0  # bytes of parts kept from an earlier, interrupted run
    skipped_files: int = 0
    skipped_bytes: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate_mib_s(self) -> float:
        return self.uploaded_bytes / MiB / self.seconds if self.seconds > 0 else 0.0


class _Counter:
    def __init__(self, bar: Progress | None, stop: threading.Event | None = None) -> None:
        self._lock = threading.Lock()
        self._bar = bar
        self.stop = stop or threading.Event()
        self.sent = 0
        self.resumed = 0
        self.open_uploads: dict[str, int] = {}  # key -> parts in S3, for multipart uploads not completed

    def add(self, n: int, resumed: bool = False) -> None:
        with self._lock:
            if resumed:
                self.resumed += n
            else:
                self.sent += n
            if self._bar is not None:
                self._bar.update(n)

    def part_done(self, key: str, count: int = 1) -> None:
        with self._lock:
            self.open_uploads[key] = self.open_uploads.get(key, 0) + count

    def completed(self, key: str) -> None:
        with self._lock:
            self.open_uploads.pop(key, None)


def _part_ranges(size: int, part_size: int) -> list[tuple[int, int, int]]:
    return [(n + 1, n * part_size, min(part_size, size - n * part_size)) for n in range(math.ceil(size / part_size))]


def _list_all(client, method: str, result_key: str, **kwargs) -> list[dict]:
    items: list[dict] = []
    for page in client.get_paginator(method).paginate(**kwargs):
        items.extend(page.get(result_key, []))
    return items


def _part_matches(part: dict, data: bytes) -> tuple[bool, str | None]:
    """Compare a listed part with the local bytes; returns (match, local SHA-256 b64)."""
    local_sha = b64_sha256(data)
    if part.get("ChecksumSHA256"):
        return part["ChecksumSHA256"] == local_sha, local_sha
    etag = str(part.get("ETag", "")).strip('"')
    if len(etag) == 32 and "-" not in etag:  # MD5 ETag (SSE-S3 or no encryption); not for SSE-KMS
        return etag == hashlib.md5(data, usedforsecurity=False).hexdigest(), local_sha
    return False, local_sha


def _reusable_parts(client, bucket: str, key: str, upload: dict, file: LocalFile) -> tuple[int, dict[int, dict]] | None:
    """Return (part_size, {part_number: completed part}) worth keeping, or None if the upload is unusable."""
    if upload.get("ChecksumAlgorithm") != "SHA256":
        return None
    parts = _list_all(client, "list_parts", "Parts", Bucket=bucket, Key=key, UploadId=upload["UploadId"])
    if not parts:
        return None
    part_size = max(p["Size"] for p in parts)
    ranges = {n: (off, length) for n, off, length in _part_ranges(file.size, part_size)} if part_size else {}
    if part_size < S3_MIN_PART and len(ranges) > 1:
        return None
    kept: dict[int, dict] = {}
    for p in parts:
        expected = ranges.get(p["PartNumber"])
        if expected is None or expected[1] != p["Size"]:
            return None  # parts do not line up with this file
        ok, local_sha = _part_matches(p, read_range(file.path, *expected))
        if not ok:
            # The file changed since the upload began (or the part cannot be verified), so the upload's
            # recorded sha256 is stale as well: start afresh rather than patch it.
            return None
        kept[p["PartNumber"]] = {"PartNumber": p["PartNumber"], "ETag": p["ETag"], "ChecksumSHA256": local_sha}
    return part_size, kept


def _open_upload(client, bucket: str, action: Action, config: StageConfig, log) -> tuple[str, int, dict[int, dict], bool]:
    """Resume the best in-progress upload of this key, aborting the others, or start one."""
    uploads = [
        u
        for u in _list_all(client, "list_multipart_uploads", "Uploads", Bucket=bucket, Prefix=action.key)
        if u["Key"] == action.key
    ]
    chosen = None
    for upload in sorted(uploads, key=lambda u: u.get("Initiated") or 0, reverse=True):
        reuse = None if chosen else _reusable_parts(client, bucket, action.key, upload, action.file)
        if reuse:
            chosen = (upload["UploadId"], reuse[0], reuse[1], True)
            log(f"resuming {action.key}: {len(reuse[1])} part(s) already in S3")
        else:
            client.abort_multipart_upload(Bucket=bucket, Key=action.key, UploadId=upload["UploadId"])
            log(f"aborted an unusable earlier upload of {action.key}")
    if chosen:
        return chosen
    created = client.create_multipart_upload(
        Bucket=bucket, Key=action.key, Metadata={SHA256_META: action.sha256}, ChecksumAlgorithm="SHA256"
    )
    return created["UploadId"], config.part_size_for(action.file.size), {}, False


def _upload_part(client, bucket: str, key: str, upload_id: str, file: LocalFile, number: int, offset: int, length: int, counter: _Counter) -> dict:
    if counter.stop.is_set():
        raise Stopped()
    data = read_range(file.path, offset, length)
    checksum = b64_sha256(data)
    resp = client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data, ChecksumSHA256=checksum
    )
    counter.add(length)
    counter.part_done(key)
    return {"PartNumber": number, "ETag": resp["ETag"], "ChecksumSHA256": checksum}


def _upload_multipart(client, bucket: str, action: Action, config: StageConfig, part_pool: cf.Executor, counter: _Counter, log) -> None:
    if counter.stop.is_set():
        raise Stopped()
    upload_id, part_size, done, resumed = _open_upload(client, bucket, action, config, log)
    counter.part_done(action.key, len(done))
    ranges = _part_ranges(action.file.size, part_size)
    for number in done:
        counter.add(next(length for n, _, length in ranges if n == number), resumed=True)
    futures = [
        part_pool.submit(_upload_part, client, bucket, action.key, upload_id, action.file, n, off, length, counter)
        for n, off, length in ranges
        if n not in done
    ]
    pending = set(futures)
    try:
        # Polled, not as_completed(): a part future cancelled while still queued never wakes a waiter,
        # so a blocking wait on it would hang this thread (and the command) for ever.
        while pending:
            if counter.stop.is_set():
                raise Stopped()
            finished, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                part = fut.result()
                done[part["PartNumber"]] = part
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise  # the upload stays in S3 so that a rerun resumes it
    client.complete_multipart_upload(
        Bucket=bucket,
        Key=action.key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [done[n] for n in sorted(done)]},
    )
    counter.completed(action.key)
    if resumed:
        head = head_object(client, bucket, action.key) or {}
        if (head.get("Metadata") or {}).get(SHA256_META) != action.sha256:
            # The file changed after the earlier upload began: its recorded hash is stale. Start over.
            log(f"{action.key}: recorded sha256 is stale after resume; uploading it afresh")
            client.delete_object(Bucket=bucket, Key=action.key)
            _upload_multipart(client, bucket, action, config, part_pool, counter, log)


def _upload_single(client, bucket: str, action: Action, counter: _Counter) -> None:
    if counter.stop.is_set():
        raise Stopped()
    data = action.file.path.read_bytes()
    client.put_object(
        Bucket=bucket,
        Key=action.key,
        Body=data,
        Metadata={SHA256_META: action.sha256},
        ChecksumSHA256=b64_sha256(data),
    )
    counter.add(len(data))


def hash_files(files: list[LocalFile], workers: int, progress: bool, stop: threading.Event | None = None) -> dict[str, str]:
    stop = stop or threading.Event()
    bar = Progress(sum(f.size for f in files), "hashing", enabled=progress)
    pool = cf.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="hash")
    futures = {pool.submit(sha256_file, f.path, on_bytes=bar.update, stop=stop): f for f in files}
    try:
        _wait_all(futures)
        return {futures[fut].rel: fut.result() for fut in futures}
    except BaseException:
        stop.set()  # each hashing thread stops at its next 8 MiB block
        for fut in futures:
            fut.cancel()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()


def _wait_all(futures, timeout: float = 0.5) -> None:
    """Wait for every future in short steps, so that a signal is handled at once in the main thread."""
    pending = set(futures)
    while pending:
        _, pending = cf.wait(pending, timeout=timeout)


def _join(futures, grace_s: float) -> int:
    """Wait up to grace_s for running futures; returns how many are still running."""
    deadline = time.monotonic() + grace_s
    running = [f for f in futures if f.running()]
    while running and time.monotonic() < deadline:
        cf.wait(running, timeout=0.1)
        running = [f for f in running if f.running()]
    return len(running)


def stage(
    client,
    source: Path,
    destination: str,
    config: StageConfig = StageConfig(),
    *,
    progress: bool = False,
    dry_run: bool = False,
    bucket_root: bool = False,
    log: Callable[[str], None] = print,
) -> Summary:
    """Upload what is missing or different; raises StagingError on bad input, leaves partial uploads to resume.

    Ctrl-C or SIGTERM (as KeyboardInterrupt) stops the run within seconds and raises StagingInterrupted,
    whose summary says what was kept in S3; no worker thread is left waiting.
    """
    config.validate()
    bucket, prefix = parse_s3_uri(destination, bucket_root=bucket_root)
    root = resolve_snapshot_dir(Path(source))
    files = collect_files(root)
    check_shards(root, files)
    _check_bucket(client, bucket)

    stop = threading.Event()
    summary = Summary(dry_run=dry_run)
    try:
        hashes = hash_files(files, min(config.concurrency, os.cpu_count() or 1), progress, stop)
    except KeyboardInterrupt as exc:
        raise StagingInterrupted(summary, exc) from None
    actions = plan_uploads(client, bucket, prefix, files, hashes)
    todo = [a for a in actions if a.upload]
    summary.skipped_files = len(actions) - len(todo)
    summary.skipped_bytes = sum(a.file.size for a in actions if not a.upload)
    summary.to_upload_files = len(todo)
    summary.to_upload_bytes = sum(a.file.size for a in todo)
    if dry_run:
        for a in actions:
            log(f"{'upload' if a.upload else 'skip  '} {human_bytes(a.file.size):>10}  s3://{bucket}/{a.key}  ({a.reason})")
        return summary

    bar = Progress(summary.to_upload_bytes, "uploading", enabled=progress)
    counter = _Counter(bar, stop)
    start = time.monotonic()
    part_pool = cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="part")
    file_pool = cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="file")

    def one(action: Action) -> None:
        if action.file.size >= config.multipart_threshold:
            _upload_multipart(client, bucket, action, config, part_pool, counter, log)
        else:
            _upload_single(client, bucket, action, counter)

    futures = {file_pool.submit(one, a): a for a in todo}
    try:
        pending = set(futures)
        while pending:  # short waits: Ctrl-C and SIGTERM are handled at once
            finished, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                try:
                    fut.result()
                    summary.uploaded_files += 1
                except Exception as exc:  # noqa: BLE001 - reported per file, the run continues
                    summary.failed.append(f"{futures[fut].key}: {exc}")
    except KeyboardInterrupt as exc:
        # Stop: queued work is dropped, the file threads leave at their next step, parts in flight
        # get a short grace to land (each one kept is one less to send on the rerun).
        stop.set()
        for fut in futures:
            fut.cancel()
        file_pool.shutdown(wait=False, cancel_futures=True)
        part_pool.shutdown(wait=False, cancel_futures=True)
        lingering = _join(futures, grace_s=3.0)
        raise StagingInterrupted(_finish(summary, counter, bar, start), exc, lingering) from None
    file_pool.shutdown()
    part_pool.shutdown()
    return _finish(summary, counter, bar, start)


def _finish(summary: Summary, counter: _Counter, bar: Progress, start: float) -> Summary:
    bar.close()
    summary.seconds = time.monotonic() - start
    summary.uploaded_bytes = counter.sent
    summary.resumed_bytes = counter.resumed
    summary.unfinished = sorted(counter.open_uploads)
    return summary


def _check_bucket(client, bucket: str) -> None:
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise StagingError(f"bucket {bucket!r} does not exist (run `pulumi up` first?)") from None
        if code in ("403", "AccessDenied", "Forbidden"):
            raise StagingError(f"no access to bucket {bucket!r} with the current AWS credentials") from None
        raise


# --------------------------------------------------------------------------------------------------
# CLI


_fmt_bytes = human_bytes


def format_summary(s: Summary) -> str:
    if s.dry_run:
        return (f"dry run: would upload {s.to_upload_files} file(s), {_fmt_bytes(s.to_upload_bytes)}; "
                f"would skip {s.skipped_files} file(s), {_fmt_bytes(s.skipped_bytes)} already in S3 with the same "
                "sha256; nothing was sent")
    lines = [
        f"uploaded {s.uploaded_files} file(s), {_fmt_bytes(s.uploaded_bytes)} sent"
        + (f" (+{_fmt_bytes(s.resumed_bytes)} kept from an earlier run)" if s.resumed_bytes else "")
        + f" in {s.seconds:.1f} s, {s.rate_mib_s:.1f} MiB/s",
        f"skipped {s.skipped_files} file(s), {_fmt_bytes(s.skipped_bytes)} already in S3 with the same sha256",
    ]
    if s.failed:
        lines.append(f"FAILED {len(s.failed)} file(s); rerun the same command to resume:")
        lines += [f"  {f}" for f in s.failed]
    return "\n".join(lines)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        COMMAND,
        help="upload a local or Hugging Face snapshot to s3://<bucket>/<prefix> (resumable)",
        description="Upload a model snapshot to S3: parallel multipart, skips identical files (sha256), resumes.",
    )
    p.add_argument("source", help="snapshot dir (or a Hugging Face cache dir models--org--name)")
    p.add_argument("destination", help="s3://<bucket>/<prefix>, e.g. s3://bucket/models/RedHatAI/gemma-4-31B-it-FP8-dynamic")
    p.add_argument("--concurrency", type=int, default=StageConfig.concurrency, help="parallel part uploads (default %(default)s)")
    p.add_argument("--part-size-mib", type=float, default=StageConfig.part_size / MiB, help="multipart part size (default %(default)s)")
    p.add_argument(
        "--multipart-threshold-mib", type=float, default=StageConfig.multipart_threshold / MiB,
        help="files at least this large go multipart (default %(default)s)",
    )
    p.add_argument("--region", help="AWS region of the bucket (default: the stack's with --stack, else the environment's)")
    p.add_argument("--stack", help="take the region from Pulumi.<stack>.yaml (read and checked like every command)")
    p.add_argument("--dry-run", action="store_true", help="show what would be uploaded or skipped")
    p.add_argument("--bucket-root", action="store_true", help="allow a destination without prefix (the bucket's root)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (default: a bar on a terminal, else a line every 10 s)")
    p.set_defaults(func=run)
    return p


def make_client(config: StageConfig, region: str | None):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        region_name=region,
        config=Config(max_pool_connections=2 * config.concurrency + 4, retries={"mode": "standard", "max_attempts": 8}),
    )


def run(args: argparse.Namespace) -> int:
    config = StageConfig(
        concurrency=args.concurrency,
        part_size=int(args.part_size_mib * MiB),
        multipart_threshold=int(args.multipart_threshold_mib * MiB),
    )
    try:
        with stop_on_signals():
            config.validate()
            region = args.region or (_stack_region(args.stack) if getattr(args, "stack", None) else None)
            summary = stage(
                make_client(config, region), Path(args.source), args.destination, config,
                progress=not args.no_progress, dry_run=args.dry_run, bucket_root=args.bucket_root,
            )
    except StagingError as exc:
        print(f"{COMMAND}: error: {exc}", file=sys.stderr)
        return 2
    except StagingInterrupted as exc:
        return _interrupted(exc.signal_exc, exc.summary, exc.lingering)
    except KeyboardInterrupt as exc:  # before the upload began (listing, planning)
        return _interrupted(exc, None, 0)
    except Exception as exc:  # noqa: BLE001 - AWS/credential errors end the run with one clear line
        print(f"{COMMAND}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        print(format_summary(summary), flush=True)
    except BrokenPipeError:
        quiet_broken_pipe()
    return 1 if summary.failed else 0


def _stack_region(stack: str) -> str:
    from stacks.loader import load_settings
    from stacks.settings import ConfigError

    try:
        return load_settings(stack, scope="cluster").region
    except ConfigError as err:
        raise StagingError(str(err)) from None


def interrupted_message(exc: BaseException, summary: Summary | None) -> str:
    lines = [f"{COMMAND}: stopped by {signal_name(exc)}."]
    if summary is None or not (summary.uploaded_files or summary.unfinished or summary.uploaded_bytes):
        lines.append("  nothing was uploaded in this run; files already in S3 stay as they are.")
    else:
        lines.append(f"  kept in S3: {summary.uploaded_files} complete file(s), "
                     f"{_fmt_bytes(summary.uploaded_bytes)} sent in this run")
        if summary.unfinished:
            shown = ", ".join(summary.unfinished[:3]) + (" ..." if len(summary.unfinished) > 3 else "")
            lines.append(f"  unfinished multipart upload(s) kept for the rerun: {shown}")
    lines.append(f"  to resume (parts already in S3 are not sent again): {rerun_command('stacks')}")
    return "\n".join(lines)


def _interrupted(exc: BaseException, summary: Summary | None, lingering: int) -> int:
    code = exit_code(exc)
    print(interrupted_message(exc, summary), file=sys.stderr, flush=True)
    if lingering:
        # Part uploads still on the wire after the grace period: do not wait for them at exit (S3
        # drops an unfinished part; the rerun sends it again).
        sys.stdout.flush()
        os._exit(code)
    return code


def main(argv: list[str] | argparse.Namespace | None = None) -> int:
    if isinstance(argv, argparse.Namespace):
        return run(argv)
    parser = argparse.ArgumentParser(prog="python -m stacks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
