"""Entry point: `python -m bench <sweep|report|plan|compare|publish|open|mix-check|rehearse|startup|fetch|streamer|timeline|demo|gpu-check> ...`."""

from __future__ import annotations

import argparse
import sys

from bench.analysis import compare, opener, plan, publish, report
from bench.common.interrupts import exit_code, quiet_broken_pipe, signal_name
from bench.demo import command as demo
from bench.demo import gpu_check
from bench.run import fetch, mixcheck, rehearse, sweep
from bench.startup import collect, phases, streamer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark a vLLM server: sweep scenarios x concurrencies, report, startup phases.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (sweep, report, plan, compare, publish, opener, mixcheck, rehearse, phases, fetch, streamer,
                   collect, demo, gpu_check):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `| head` closed the pipe: the reader has what it wanted
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt as exc:  # a command without its own handling, stopped between steps
        print(f"bench {args.command}: stopped by {signal_name(exc)}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
