"""`python -m bench open REPORT [--out DIR]`: download a published report and say what it found.

REPORT is the stack output as JSON (`pulumi stack output report --json`, or `-` to read it from
stdin), the report's s3:// prefix, or a local report folder (what `bench report --out` or the demo
wrote; it is opened where it is):

    pulumi stack output -s g7e report --json | python -m bench open -
    python -m bench open s3://RESULTS/runs/g7e/report/HASH/
    python -m bench open build/demo/report

Every file under the prefix (report.html and report.md with their charts, summary.json, plan.*,
compare.*, inputs.json) is copied to --out (default build/open/<stack>/<hash>/), keeping relative paths.
Then it prints the local path of the page (report.html, else report.md), the verdict line and the
plan line. While the report Job is still waiting for its sweeps, it prints where each sweep stands
instead (from the Job's status.json).

Exit codes: 0 downloaded (or found); 1 no report there yet, or S3 failed; 2 bad argument; 130/143 stopped
(complete files stay in --out; run it again to fetch the rest).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from bench.analysis import answer
from bench.common import options as O
from bench.common import s3
from bench.common.cli import Help, run_one
from bench.common.interrupts import exit_code, signal_name, stop_on_signals

PAGES = ("report.html", "report.md")
DEFAULT_OUT = "build/open"


def report_uri(text: str) -> str:
    """The s3:// prefix in a stack output (JSON object with "uri") or given directly."""
    text = text.strip()
    if s3.is_s3_uri(text):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"expected a report folder, the stack output `report` as JSON or an s3:// prefix, got "
                         f"{text[:80]!r}") from None
    uri = value.get("uri") if isinstance(value, dict) else None
    if not isinstance(uri, str) or not s3.is_s3_uri(uri):
        raise ValueError("the JSON has no \"uri\" with an s3:// prefix; pass `pulumi stack output report --json`")
    return uri


def default_dir(loc: s3.S3Location) -> Path:
    parts = PurePosixPath(loc.prefix.rstrip("/")).parts
    # runs/<stack>/report/<hash>/ -> build/open/<stack>/<hash>, under build/ as every command's --out
    if len(parts) >= 4 and parts[-2] == "report" and parts[-4] == "runs":
        return Path(DEFAULT_OUT) / parts[-3] / parts[-1]
    return Path(DEFAULT_OUT) / (parts[-1] if parts else loc.bucket)


def read_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file (a report's summary.json, plan.json, ...), None where it is missing, unreadable or
    not an object."""
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


def local_report(path: Path) -> Path | None:
    """The report folder at `path`: itself, or its report/ (the demo's folder); None without a page."""
    for folder in (path, path / "report"):
        if any((folder / name).is_file() for name in PAGES):
            return folder
    return None


def open_local(args: argparse.Namespace) -> int:
    folder = local_report(Path(args.report))
    if folder is None:
        print(f"bench open: {args.report} holds no {' or '.join(PAGES)}: pass the folder `bench report --out` wrote "
              "(the demo's is build/demo/report), a stack output or an s3:// prefix", file=sys.stderr)
        return 2
    if args.out:
        print(f"bench open: {folder} is already local; --out applies to a download and is left unused", file=sys.stderr)
    say(folder)
    return 0


def say(folder: Path, source: str | None = None, copied: int = 0) -> None:
    """The page's path, the verdict line and the plan line of a report folder."""
    page = next(folder / name for name in PAGES if (folder / name).is_file())
    inputs = read_object(folder / "inputs.json") or {}
    labels = {s.get("role"): s.get("label") for s in inputs.get("sweeps") or [] if isinstance(s, dict)}
    if source is not None:
        print(f"bench open: {copied} files from {source} -> {folder}")
    print(page.resolve())
    print(answer.verdict_line(read_object(folder / "summary.json"), labels))
    line = answer.plan_line(read_object(folder / "plan.json"))
    if line:
        print(line)
    rounds = [r for r in inputs.get("earlier_rounds") or [] if isinstance(r, dict)]
    if rounds:  # bench.round past 1: the earlier rounds of the same configuration the figures pool
        left = [str(r.get("uri")) for r in rounds if not r.get("pooled")]
        print(f"Earlier rounds: {len(rounds) - len(left)} of {len(rounds)} pooled into the figures"
              + (f"; left out: {', '.join(left)} (inputs.json says why)" if left else "") + ".")
    if inputs.get("complete") is False:
        print("Written before every sweep had finished: see inputs.json for each sweep's state.")


def run(args: argparse.Namespace) -> int:
    if args.report != "-" and not s3.is_s3_uri(args.report) and Path(args.report).is_dir():
        return open_local(args)
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
                    status = read_object(dest / "status.json")
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
    say(dest, loc.uri, len(copied))
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("open", help="download a published report and print its path and verdict",
                              description=__doc__, formatter_class=Help)
    p.add_argument("report", metavar="REPORT",
                   help="`pulumi stack output report --json` (or - for stdin), the report's s3:// prefix, or a local "
                   "report folder (e.g. build/demo/report)")
    p.add_argument("--out", type=O.local_folder, metavar="DIR",
                   help=f"folder for a download (default: {DEFAULT_OUT}/<stack>/<hash>)")
    O.add_no_progress(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "open", argv)
