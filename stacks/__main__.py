"""Operator commands: `python -m stacks <command> ...` (see --help)."""

from __future__ import annotations

import argparse
import sys

from bench.common.interrupts import exit_code, quiet_broken_pipe, signal_name, stop_behind, stop_on_signals
from stacks.ops import api_access, config_reference, diff, pin_zones, preflight, render, staging, teardown

# Each module exposes add_parser(subparsers), which sets `func` on its parser; --help lists them in this order.
COMMAND_MODULES = (render, diff, config_reference, staging, preflight, pin_zones, api_access, teardown)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stacks", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for module in COMMAND_MODULES:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # SIGTERM is handled like Ctrl-C; each command says what it kept and how to resume.
        with stop_on_signals():
            return args.func(args)
    except KeyboardInterrupt as exc:
        # A command without its own handling stopped between steps: nothing half-done to report.
        print(f"{args.command}: stopped by {signal_name(exc)}; rerun the same command to start again",
              file=sys.stderr)
        return exit_code(exc)
    except BrokenPipeError:
        # `| head` closed the pipe: the reader has what it wanted.
        quiet_broken_pipe()
        return 0
    except Exception as exc:  # an error a stop caused (inside an import, a library's task) is that stop
        stop = stop_behind(exc)
        if stop is None:
            raise
        print(f"{args.command}: stopped by {signal_name(stop)}; rerun the same command to start again",
              file=sys.stderr)
        return exit_code(stop)


if __name__ == "__main__":
    sys.exit(main())
