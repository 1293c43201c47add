"""`python -m bench open REPORT [--out DIR]`: download a published report and say what it found.

REPORT is the stack output as JSON (`pulumi stack output report --json`, or `-` to read it from
stdin) or the report's s3:// prefix:

    pulumi stack output -s g7e report --json | python -m bench open -
    python -m bench open s3://RESULTS/runs/g7e/report/HASH/

Every file under the prefix (report.html and report.md with their charts, summary.json, plan.*,
compare.*, inputs.json) is copied to DIR (default reports/<stack>/<hash>/), keeping relative paths.
Then it prints the local path of the page (report.html, else report.md), the verdict line and the
plan line. While the report Job is still waiting for its sweeps, it prints where each sweep stands
instead (from the Job's status.json).

Exit codes: 0 downloaded; 1 no report there yet, or S3 failed; 2 bad argument; 130/143 stopped
(complete files stay in DIR; run it again to fetch the rest).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from bench.analysis import answer
from bench.common import s3
from bench.common.cli import out_folder, run_one
from bench.common.interrupts import exit_code, signal_name, stop_on_signals

PAGES = ("report.html", "report.md")


def report_uri(text: str) -> str:
    """The s3:// prefix in a stack output (JSON object with "uri") or given directly."""
    text = text.strip()
    if s3.is_s3_uri(text):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"expected the stack output `report` as JSON or an s3:// prefix, got {text[:80]!r}") from None
    uri = value.get("uri") if isinstance(value, dict) else None
    if not isinstance(uri, str) or not s3.is_s3_uri(uri):
        raise ValueError("the JSON has no \"uri\" with an s3:// prefix; pass `pulumi stack output report --json`")
    return uri


def default_dir(loc: s3.S3Location) -> Path:
    parts = PurePosixPath(loc.prefix.rstrip("/")).parts
    # runs/<stack>/report/<hash>/ -> reports/<stack>/<hash>
    if len(parts) >= 4 and parts[-2] == "report" and parts[-4] == "runs":
        return Path("reports") / parts[-3] / parts[-1]
    return Path("reports") / (parts[-1] if parts else loc.bucket)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def waiting_message(status: dict[str, Any] | None) -> str:
    if not status:
        return "nothing there yet: the report Job writes it once the bench sweeps have finished"
    rows = []
    for sweep in status.get("sweeps") or []:
        done, total = sweep.get("combinations_done"), sweep.get("combinations_planned")
        counts = f", {done} of {total} combinations" if total else ""
        rows.append(f"{sweep.get('label')} {sweep.get('state')}{counts}")
    state = status.get("state") or "waiting"
    return (f"not written yet; the report Job is {state} (as of {status.get('updated_at')}): "
            + ("; ".join(rows) or "no sweep listed"))


def run(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.report == "-" else args.report
        loc = s3.S3Location.parse(report_uri(text), option="REPORT")
    except ValueError as exc:
        print(f"bench open: {exc}", file=sys.stderr)
        return 2
    dest = Path(args.out) if args.out else default_dir(loc)
    copied: list[str] = []
    try:
        with stop_on_signals():
            names = [rel for rel, _size in s3.iter_objects(loc)]
            if not any(name in PAGES for name in names):
                status = None
                if "status.json" in names:
                    s3.download_prefix(loc, dest, copied=copied, progress=False)
                    status = _json(dest / "status.json")
                print(f"bench open: {loc.uri}: {waiting_message(status)}", file=sys.stderr)
                return 1
            s3.download_prefix(loc, dest, copied=copied, progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        print(f"bench open: stopped by {signal_name(exc)}; {len(copied)} complete file(s) in {dest}. "
              "Run it again to fetch the rest.", file=sys.stderr)
        return exit_code(exc)
    except s3.S3Error as exc:
        print(f"bench open: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # botocore: credentials, endpoint, missing bucket
        print(f"bench open: {loc.uri}: {exc}", file=sys.stderr)
        return 1
    page = next(dest / name for name in PAGES if (dest / name).is_file())
    inputs = _json(dest / "inputs.json") or {}
    labels = {s.get("role"): s.get("label") for s in inputs.get("sweeps") or [] if isinstance(s, dict)}
    print(f"bench open: {len(copied)} files from {loc.uri} -> {dest}")
    print(page.resolve())
    print(answer.verdict_line(_json(dest / "summary.json"), labels))
    line = answer.plan_line(_json(dest / "plan.json"))
    if line:
        print(line)
    if inputs.get("complete") is False:
        print("Written before every sweep had finished: see inputs.json for each sweep's state.")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("open", help="download a published report and print its path and verdict",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", metavar="REPORT",
                   help="`pulumi stack output report --json` (or - for stdin), or the report's s3:// prefix")
    p.add_argument("--out", type=out_folder, help="local folder (default: reports/<stack>/<hash>)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (default: a bar on a terminal, else a line every 10 s)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "open", argv)
