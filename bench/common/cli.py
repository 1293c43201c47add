"""One bench command run on its own: `main(argv)` of a command module, as `python -m bench <name>`
would parse it. Lets a Job run `python -m bench.startup.collect ...` with only the modules that
command imports, and tests call a command without the whole CLI."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path


def run_one(add_parser: Callable[..., argparse.ArgumentParser], name: str, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: this process's arguments) as `python -m bench <name> ...` and run it."""
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:  # --help (0), or arguments refused with the reason on stderr (2)
        return exc.code if isinstance(exc.code, int) else 2
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


out_folder.kind = "folder"  # type: ignore[attr-defined]  # the value's kind, as the vocabulary test compares it


class Help(argparse.RawDescriptionHelpFormatter):
    """The bench commands' --help: a short usage line (positionals, required flags, then [options]) and
    each flag with its help flowing after it, so that a command's help fits a screen or two. The
    description is printed as written (its examples keep their layout)."""

    def add_usage(self, usage, actions, groups, prefix=None):
        if usage is None:
            actions = list(actions)
            needed = [self._format_args(a, self._get_default_metavar_for_positional(a)) for a in actions
                      if not a.option_strings and a.help is not argparse.SUPPRESS]
            needed += [f"{a.option_strings[0]} {self._format_args(a, self._get_default_metavar_for_optional(a))}"
                       for a in actions if a.option_strings and a.required]
            usage = " ".join(["%(prog)s", *needed, "[options]"])
        super().add_usage(usage, actions, groups, prefix)

    def _format_text(self, text):
        # A module docstring opens with the command line the usage line already shows: drop it there.
        head = re.match(r"`python3? -m bench [^`]*`: ", text)
        if head:
            first, _, rest = text[head.end():].partition("\n")
            text = first[:1].upper() + first[1:] + ("\n" + rest if rest else "")
        return super()._format_text(text)

    def _format_action(self, action):
        if not action.option_strings or action.help is argparse.SUPPRESS:
            return super()._format_action(action)
        text = self._format_action_invocation(action)
        if action.help:
            text += "  " + self._expand_help(action)
        indent = " " * self._current_indent
        return "\n".join(textwrap.wrap(text, self._width, initial_indent=indent, subsequent_indent=indent + "    ",
                                       break_on_hyphens=False, break_long_words=False)) + "\n"

    def _get_default_metavar_for_optional(self, action):
        named = getattr(action.type, "metavar", None) or {int: "N", float: "X"}.get(action.type)
        return named or action.dest.upper().rsplit("_", 1)[-1]
