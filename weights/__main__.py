"""`python -m weights <sync|check|compile-cache> ...`: the weight-sync Job's and the servers' cache steps'
entry point (plain Python, boto3, huggingface_hub).

  sync           copy a pinned Hub revision to s3://<bucket>/models/<id>/ (skips what is there, resumes)
  check          verify a model is staged (config.json, every indexed shard); exit 2 with the fix if not
  compile-cache  push|pull a server's compile cache to or from s3://<bucket>/compile-cache/<key>/
                 (`python -m weights compile-cache --help`)

Exit codes: 0 done, 1 an AWS or network error (the Job retries), 2 bad input or a missing model
that a retry cannot fix (the Job fails at once, and `pulumi up` with it). compile-cache pull ends 0
whenever the server can start (a cold start is not a failure).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from weights import compile_cache, hub
from weights.store import StageConfig, StagingError, format_summary, make_client

GiB = 1024**3


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
    compile_cache.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "compile-cache":
        return compile_cache.run(args)
    try:
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
    except StagingError as exc:
        print(f"weights {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - network and AWS errors: one line, retried by the Job
        print(f"weights {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
