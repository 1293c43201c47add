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
cannot reuse parts, which is what makes a 60 GB checkpoint restartable. The S3 side (skip test, uploads,
resume) lives in `weights/store.py`, shared with the in-cluster Hub sync (`python -m weights sync`).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from bench.common.interrupts import exit_code, quiet_broken_pipe, rerun_command, signal_name, stop_on_signals
from bench.common.progress import Progress, human_bytes
from stacks.loader import load_settings
from stacks.settings import ConfigError
from weights.store import (  # noqa: F401 - the shared S3 side; re-exported for callers and tests
    INDEX_SUFFIX, MiB, S3_MAX_PART, S3_MAX_PARTS, S3_MIN_PART, SHA256_META, Action, LocalFile, StageConfig,
    StagingError, Stopped, Summary, _Counter, _list_all, _part_matches, _part_ranges, _reusable_parts,
    b64_sha256, check_bucket, fmt_bytes, format_summary, head_object, index_shards, make_client, object_key,
    open_upload, plan_uploads, read_range, remote_matches, sha256_file, upload_file, upload_multipart, upload_single,
    join_running,
)
from weights.store import parse_s3_uri as _parse_any_s3_uri

_check_bucket = check_bucket


COMMAND = "stage-weights"


class StagingInterrupted(Exception):
    """The run stopped on a signal; `summary` says what was done, `lingering` counts uploads still in flight."""

    def __init__(self, summary: Summary, signal_exc: BaseException, lingering: int = 0):
        super().__init__("interrupted")
        self.summary = summary
        self.signal_exc = signal_exc
        self.lingering = lingering


def parse_s3_uri(uri: str, *, bucket_root: bool = False) -> tuple[str, str]:
    """The destination's bucket and prefix; a destination without prefix only with bucket_root."""
    bucket, prefix = _parse_any_s3_uri(uri)
    if not prefix and not bucket_root:
        raise StagingError(
            f"destination {uri!r} has no prefix: the snapshot's files would land at the bucket's root, where the "
            f"servers do not look; give the model's prefix, e.g. s3://{bucket}/models/<org>/<name> (the stack "
            "output modelUris lists them), or pass --bucket-root if the root is intended"
        )
    return bucket, prefix


# --------------------------------------------------------------------------------------------------
# Local snapshot


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
        shards = index_shards(f.path.read_text(), f.rel)
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
    futures = {file_pool.submit(upload_file, client, bucket, a, config, part_pool, counter, log): a for a in todo}
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
        lingering = join_running(futures, grace_s=3.0)
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


# --------------------------------------------------------------------------------------------------
# CLI


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
                     f"{fmt_bytes(summary.uploaded_bytes)} sent in this run")
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
