"""One bench command run on its own: `main(argv)` of a command module, as `python -m bench <name>`
would parse it. Lets a Job run `python -m bench.startup.collect ...` with only the modules that
command imports, and tests call a command without the whole CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def run_one(add_parser: Callable[..., argparse.ArgumentParser], name: str, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: this process's arguments) as `python -m bench <name> ...` and run it."""
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


def out_folder(value: str) -> str:
    """argparse `type` of a folder a command writes into (`--out`, `fetch DIR`): a local path, made if
    missing, or an `s3://` prefix. A path that is, or lies under, an existing file is refused while the
    arguments are parsed (exit 2, the argument named), not met later as a FileExistsError."""
    if value.startswith("s3://"):
        return value
    path = Path(value)
    for at in (path, *path.parents):
        if at.exists():
            if at.is_dir():
                return value
            if at != path:
                raise argparse.ArgumentTypeError(
                    f"{value} lies under {at}, which is a file; this takes a folder to write into (made if "
                    "missing): name one outside that file")
            stem = path.with_suffix("") if path.suffix and not path.with_suffix("").exists() else Path(f"{path}-out")
            raise argparse.ArgumentTypeError(
                f"{value} is a file; this takes a folder to write into (made if missing): name a folder, e.g. {stem}")
    return value
