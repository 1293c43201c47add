"""Entry point: `python -m bench <command> ...`; `python -m bench --help` lists the commands a person
types apart from the ones the stack's Jobs run in the cluster."""

from __future__ import annotations

import argparse
import sys

from bench.analysis import compare, opener, plan, publish, report
from bench.common.interrupts import exit_code, quiet_broken_pipe, signal_name
from bench.demo import command as demo
from bench.demo import gpu_cli
from bench.run import fetch, mixcheck, rehearse, sweep
from bench.startup import collect, phases, streamer

# What a person types, in the order one meets it: try it, measure, judge, size, check the plan.
COMMANDS = (demo, gpu_cli, sweep, report, plan, compare, opener, mixcheck, rehearse, phases)
# What the stack's Jobs run in the cluster (each works by hand too)
IN_CLUSTER = (publish, collect, streamer, fetch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", usage="%(prog)s COMMAND [options]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Benchmark a vLLM server: sweep scenarios x concurrencies, "
                                                 "judge and size the fleet, time its start-up.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS,
                                prog="python -m bench")
    lines = []
    for title, modules in (("commands", COMMANDS), ("run by the stack's Jobs in the cluster", IN_CLUSTER)):
        lines.append(f"{title}:")
        for module in modules:
            before = set(sub.choices)
            module.add_parser(sub)
            for name in [n for n in sub.choices if n not in before]:
                lines.append(f"  {name:<10}  {sub._choices_actions[-1].help}")
        lines.append("")
    parser.epilog = "\n".join(lines) + "python -m bench COMMAND --help says more; docs/benchmark.md#commands has them all.\n"
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
