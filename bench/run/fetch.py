"""`python -m bench fetch s3://bucket/prefix DIR`: download a sweep's files for `report`.

Copies every object under the prefix (results, invalid attempts, logs, manifest.json) into DIR,
keeping relative paths. Credentials and region come from the usual AWS chain (AWS_PROFILE,
AWS_REGION, ...); AWS_ENDPOINT_URL points it at another S3 endpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import options as O
from bench.common import s3
from bench.common.cli import Help, run_one
from bench.common.interrupts import exit_code, rerun_command, signal_name, stop_on_signals


def run(args: argparse.Namespace) -> int:
    copied: list[str] = []
    try:
        loc = s3.S3Location.parse(args.uri, option="fetch URI")
        with stop_on_signals():
            s3.download_prefix(loc, Path(args.dir), only_missing=args.skip_existing, copied=copied,
                               progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        again = rerun_command("bench")
        if "--skip-existing" not in again:
            again += " --skip-existing"
        print(f"bench fetch: stopped by {signal_name(exc)}; {len(copied)} complete file(s) are in {args.dir} "
              f"(no half-written file is left). Fetch the rest with: {again}", file=sys.stderr)
        return exit_code(exc)
    except (ValueError, s3.S3Error) as exc:
        print(f"bench fetch: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # botocore: credentials, endpoint, missing bucket
        print(f"bench fetch: {loc.uri}: {exc}", file=sys.stderr)
        return 1
    if not copied and not args.skip_existing:
        print(f"bench fetch: nothing under {loc.uri}", file=sys.stderr)
        return 1
    print(f"bench fetch: {len(copied)} files from {loc.uri} -> {args.dir}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch", help="download a sweep from S3", description=__doc__,
        formatter_class=Help,
    )
    p.add_argument("uri", metavar="URI", help="s3://bucket/prefix of the sweep (the --upload of `sweep`)")
    p.add_argument("dir", metavar="DIR", type=O.local_folder, help="local folder to copy into")
    p.add_argument("--skip-existing", action="store_true", help="keep local files that already exist (resume)")
    O.add_no_progress(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "fetch", argv)
