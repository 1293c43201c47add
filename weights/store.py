"""The S3 side of staging model weights, shared by `stage-weights` (a laptop's snapshot) and the
in-cluster Hub sync (`python -m weights sync`): the skip test, integrity checks, resumable multipart.

The rules (they apply to both paths, so a model staged one way is recognised by the other):

* Skip test: an object is skipped when its size matches and its `x-amz-meta-sha256` (the whole file's
  SHA-256, written at upload) equals the file's. S3's multipart checksums are composite and change
  with the part size, so they cannot be compared with a whole-file hash; an object without that
  metadata is still accepted when S3 holds a matching full-object SHA-256 (single-part uploads).
* Integrity in transit: every PUT and part carries `ChecksumSHA256`, which S3 verifies on receipt.
* Resume: an interrupted multipart upload stays in the bucket; a rerun keeps the parts that match the
  same byte range of the file and sends only the rest (details at `open_upload`).

Plain Python and boto3 only: this module runs in the weight-sync Job's container as well.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

MiB = 1024 * 1024
S3_MIN_PART = 5 * MiB
S3_MAX_PART = 5 * 1024 * MiB
S3_MAX_PARTS = 10_000
SHA256_META = "sha256"  # stored as x-amz-meta-sha256 (hex)
INDEX_SUFFIX = ".safetensors.index.json"


class StagingError(Exception):
    """A problem the operator must fix; the message says what and how."""


class Stopped(Exception):
    """Raised inside worker threads once a stop was requested (Ctrl-C, SIGTERM)."""


@dataclass(frozen=True)
class LocalFile:
    rel: str  # posix path relative to the snapshot root: the object key's suffix
    path: Path  # resolved file (HF snapshot symlinks point into ../../blobs)
    size: int


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise StagingError(f"destination {uri!r} is not an S3 URI; expected s3://<bucket>/<prefix>")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise StagingError(f"destination {uri!r} names no bucket; expected s3://<bucket>/<prefix>")
    return bucket, prefix.strip("/")


def object_key(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


def index_shards(index_text: str, index_name: str = "model.safetensors.index.json") -> set[str]:
    """Shard file names a `*.safetensors.index.json` names (its weight_map values)."""
    try:
        return set(json.loads(index_text)["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StagingError(f"{index_name} is not a safetensors index with a weight_map: {exc}") from None


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
    """Bytes sent and kept, multipart uploads left open, and the stop request the workers obey."""

    def __init__(self, bar, stop: threading.Event | None = None) -> None:
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


def open_upload(client, bucket: str, action: Action, config: StageConfig, log) -> tuple[str, int, dict[int, dict], bool]:
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


def upload_multipart(client, bucket: str, action: Action, config: StageConfig, part_pool: cf.Executor, counter: _Counter, log) -> None:
    if counter.stop.is_set():
        raise Stopped()
    upload_id, part_size, done, resumed = open_upload(client, bucket, action, config, log)
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
            upload_multipart(client, bucket, action, config, part_pool, counter, log)


def upload_single(client, bucket: str, action: Action, counter: _Counter) -> None:
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


def join_running(futures, grace_s: float) -> int:
    """Wait up to grace_s for the futures still running; returns how many still are."""
    deadline = time.monotonic() + grace_s
    running = [f for f in futures if f.running()]
    while running and time.monotonic() < deadline:
        cf.wait(running, timeout=0.1)
        running = [f for f in running if f.running()]
    return len(running)


def upload_file(client, bucket: str, action: Action, config: StageConfig, part_pool: cf.Executor,
                counter: _Counter, log) -> None:
    """One file: multipart (resumable) from the configured threshold up, else a single PUT."""
    if action.file.size >= config.multipart_threshold:
        upload_multipart(client, bucket, action, config, part_pool, counter, log)
    else:
        upload_single(client, bucket, action, counter)


def check_bucket(client, bucket: str) -> None:
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


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def format_summary(s: Summary) -> str:
    if s.dry_run:
        return (f"dry run: would upload {s.to_upload_files} file(s), {fmt_bytes(s.to_upload_bytes)}; "
                f"would skip {s.skipped_files} file(s), {fmt_bytes(s.skipped_bytes)} already in S3 with the same "
                "sha256; nothing was sent")
    lines = [
        f"uploaded {s.uploaded_files} file(s), {fmt_bytes(s.uploaded_bytes)} sent"
        + (f" (+{fmt_bytes(s.resumed_bytes)} kept from an earlier run)" if s.resumed_bytes else "")
        + f" in {s.seconds:.1f} s, {s.rate_mib_s:.1f} MiB/s",
        f"skipped {s.skipped_files} file(s), {fmt_bytes(s.skipped_bytes)} already in S3 with the same sha256",
    ]
    if s.failed:
        lines.append(f"FAILED {len(s.failed)} file(s); rerun the same command to resume:")
        lines += [f"  {f}" for f in s.failed]
    return "\n".join(lines)


def make_client(config: StageConfig, region: str | None):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        region_name=region,
        config=Config(max_pool_connections=2 * config.concurrency + 4, retries={"mode": "standard", "max_attempts": 8}),
    )
