"""`python -m weights <sync|check|compile-cache> ...`: the weight-sync Job's and the servers' cache steps'
entry point (plain Python, boto3, huggingface_hub).

  sync           copy a pinned Hub revision to s3://<bucket>/models/<id>/ (skips what is there, resumes)
  check          verify a model is staged (config.json, every indexed shard); exit 2 with the fix if not
  compile-cache  push|pull a server's compile cache to or from s3://<bucket>/compile-cache/<key>/
                 (`python -m weights compile-cache --help`)

Exit codes: 0 done; 1 an AWS or network error that outlasted --attempts tries in this process; 2 bad
input, or a model that a retry cannot fix (gated without access, missing repository, revision or
file, not staged): the Job fails at once, and `pulumi up` with it, naming the fix.

Network and AWS errors are retried here, in the same process (a sync resumes: finished files are
skipped, a half-sent file keeps its parts), so the Job's pod, its pip install and its credentials
are not started again for a passing error. compile-cache pull ends 0 whenever the server can start (a cold start is not a failure).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from weights import compile_cache, hub
from weights.store import StageConfig, StagingError, format_summary, make_client

GiB = 1024**3
ATTEMPTS = 4
RETRY_WAIT_S = 20.0  # doubled after each failed attempt: 20, 40, 80 s


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m weights", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sync", help="copy a Hub revision to S3")
    s.add_argument("--model", required=True, help="Hugging Face repo id, e.g. google/gemma-4-31B-it-assistant")
    s.add_argument("--revision", required=True, help="commit SHA (pinned) or branch/tag")
    s.add_argument("--dest", required=True, help="s3://<bucket>/models/<id>")
    s.add_argument("--scratch", type=Path, default=Path("/scratch"), help="download directory (one file at a time)")
    s.add_argument("--scratch-gib", type=float, default=20, help="largest file the scratch space holds")
    s.add_argument("--concurrency", type=int, default=StageConfig.concurrency, help="parallel part uploads")
    s.add_argument("--region", default=None)
    c = sub.add_parser("check", help="verify a model is staged in S3")
    c.add_argument("--dest", required=True, help="s3://<bucket>/models/<id>")
    c.add_argument("--stage-hint", default="", help="the command that stages it, shown when it is not")
    c.add_argument("--region", default=None)
    for command in (s, c):
        command.add_argument("--attempts", type=int, default=ATTEMPTS,
                             help=f"tries for a network or AWS error before exit 1 (default {ATTEMPTS}); "
                             "final problems exit 2 at once")
        command.add_argument("--retry-wait-s", type=float, default=RETRY_WAIT_S,
                             help=f"wait before the second try, doubled for each next one (default {RETRY_WAIT_S:g})")
    compile_cache.add_parser(sub)
    return parser


def _once(args: argparse.Namespace) -> int:
    if args.command == "sync":
        config = StageConfig(concurrency=args.concurrency)
        summary = hub.sync(
            make_client(config, args.region), args.model, args.revision, args.dest, args.scratch,
            token=os.environ.get("HF_TOKEN") or None,
            scratch_limit_bytes=int(args.scratch_gib * GiB), config=config,
        )
        print(format_summary(summary), flush=True)
        return 1 if summary.failed else 0
    problems = hub.check_staged(make_client(StageConfig(), args.region), args.dest)
    if problems:
        print("weights not staged:\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
        if args.stage_hint:
            print(f"stage them, then rerun `pulumi up`:\n  {args.stage_hint}", file=sys.stderr)
        return 2
    print(f"{args.dest}: staged", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "compile-cache":
        return compile_cache.run(args)
    if args.attempts < 1 or args.retry_wait_s < 0:
        print(f"weights {args.command}: error: --attempts must be at least 1 and --retry-wait-s at least 0",
              file=sys.stderr)
        return 2
    wait = args.retry_wait_s
    for attempt in range(1, args.attempts + 1):
        try:
            return _once(args)
        except KeyboardInterrupt:
            print(f"weights {args.command}: stopped by Ctrl-C; files already in S3 stay, and a half-sent file keeps "
                  "its parts: rerun the same command to resume", file=sys.stderr)
            return 130
        except StagingError as exc:
            print(f"weights {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - network and AWS errors: one line, tried again
            print(f"weights {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
            if attempt == args.attempts:
                print(f"weights {args.command}: gave up after {attempt} tries", file=sys.stderr)
                return 1
            print(f"weights {args.command}: try {attempt + 1} of {args.attempts} in {wait:g} s "
                  "(finished files are kept)", file=sys.stderr, flush=True)
            try:
                time.sleep(wait)
            except KeyboardInterrupt:
                print(f"weights {args.command}: stopped by Ctrl-C before try {attempt + 1}; rerun the same command "
                      "to resume", file=sys.stderr)
                return 130
            wait *= 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
