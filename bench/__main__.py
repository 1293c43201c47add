"""Entry point: `python -m bench <sweep|report|plan|startup|fetch> ...`."""

from __future__ import annotations

import argparse
import sys

from bench import fetch, plan, report, startup, sweep


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark a vLLM server: sweep scenarios x concurrencies, report, startup phases.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (sweep, report, plan, startup, fetch):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
