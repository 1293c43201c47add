"""Operator commands: `python -m stacks <command> ...` (see --help)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module exposes add_parser(subparsers), which sets `func` on its parser.
COMMAND_MODULES = ("render", "config_reference", "staging", "preflight", "teardown")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stacks", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for module in COMMAND_MODULES:
        importlib.import_module(f"stacks.{module}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
