"""One bench command run on its own: `main(argv)` of a command module, as `python -m bench <name>`
would parse it. Lets a Job run `python -m bench.startup.collect ...` with only the modules that
command imports, and tests call a command without the whole CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


def run_one(add_parser: Callable[..., argparse.ArgumentParser], name: str, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: this process's arguments) as `python -m bench <name> ...` and run it."""
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
