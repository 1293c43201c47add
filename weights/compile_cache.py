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
seconds, uri, reason), which the start-up timeline reads from the pod's log. This module is the commands
(arguments, the wait for /health, the lines, the stops); the transfers are weights/cache_transfer.py.
"""


from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from weights.cache_manifest import STAGING, CacheInputError, check_uri
from weights.cache_transfer import RESULT_MARK, Result, pull, push  # noqa: F401 - RESULT_MARK: the commands' last line


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
    # Not at the top: the weight-sync Job imports this module without the bench package (see cache_transfer._progress).
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
            return _after_push(result, args.stay, log)
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


def _after_push(result: Result, stay: bool, log: Callable[[str], None]) -> int:
    """The push is over (its manifest written, or its error known): its lines, then, with --stay, idle until the
    pod stops, as a native sidecar must (one that exits is started again). A stop from here on interrupts
    nothing: a SIGTERM that lands while the lines are printed (a pod stopping just as its push ended; on a busy
    machine, a test's sidecar stopped once the manifest showed) is the push's own exit code, not 143 with "the
    manifest was not written". A sidecar's exit says nothing of its push (its line did): 0 once stopped."""
    code = 1 if result.outcome == "error" and not stay else 0
    try:
        _emit(result)
        if stay:
            log("compile-cache push: done; idle until the pod stops")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return code


def _stopped_message(args: argparse.Namespace, exc: BaseException) -> str:
    # Not at the top: the weight-sync Job imports this module without the bench package (see cache_transfer._progress).
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
