"""`extraArgs` checked against the flags of the serving image's vLLM, without installing vLLM.

stacks/vllm_flags.json lists every `vllm serve` flag of the vLLM release in the pinned image
(`[tool.vllm-poc.pins] vllm_image`) with what follows it (a value, none, ...). It is generated from
that release's own parser and checked in (`python -m stacks.ops.vllm_flags generate`), so config
validation needs no vLLM; a test regenerates it and compares, and another holds its version to the
image pin.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stacks.versions import image_vllm_version

FLAGS_FILE = Path(__file__).with_name("vllm_flags.json")
_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_TAKES_VALUES = {"one", "some"}


@dataclass(frozen=True)
class FlagList:
    vllm: str
    flags: dict[str, str]  # option string -> arity (see stacks/ops/vllm_flags_dump.py)

    @property
    def long_flags(self) -> list[str]:
        return [f for f in self.flags if f.startswith("--")]


@cache
def flag_list(path: Path = FLAGS_FILE) -> FlagList:
    data = json.loads(path.read_text())
    return FlagList(vllm=data["vllm"], flags=dict(data["flags"]))


# -- checking extraArgs ---------------------------------------------------------------------------


def _is_flag(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.fullmatch(token)


def _lookup(token: str, flags: dict[str, str]) -> tuple[str, str | None, bool]:
    """(flag name as vLLM reads it, its arity or None if unknown, whether a value is attached)."""
    if token.startswith("--"):
        # FlexibleArgumentParser: --name=value, --json-option.key value, and _ for - in the name.
        # (--json-option.key takes its value from the next token unless one is attached with =.)
        head, eq, _ = token.partition("=")
        name = head.partition(".")[0]
        name = "--" + name[2:].replace("_", "-")
        return name, flags.get(name), bool(eq)
    head, eq, _ = token.partition("=")
    if head in flags:
        return head, flags[head], bool(eq)
    if token.startswith("-O") and "--optimization-level" in flags:
        # FlexibleArgumentParser reads -O3, -O=3 and -O 3 as --optimization-level.
        return "-O", "one", token != "-O"
    return head, None, False


def _suggestion(name: str, candidates: list[str]) -> str:
    prefixed = [c for c in candidates if c.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else ""


def extra_args_problems(args: Sequence[str], *, key: str, flags: FlagList | None = None) -> list[str]:
    """Problems of an extraArgs list against the flag list, one line each naming `key[index]`."""
    table = flags or flag_list()
    image = f"vLLM {table.vllm}, the serving image's version"
    problems: list[str] = []
    pending: tuple[int, str, str] | None = None  # flag still owed a value: (index, name, arity)
    last_switch: str | None = None

    def owed(p: tuple[int, str, str] | None) -> None:
        if p and p[2] in _TAKES_VALUES:
            problems.append(f"{key}[{p[0]}]: {p[1]} needs a value after it")

    for index, token in enumerate(args):
        where = f"{key}[{index}]"
        if not _is_flag(token):
            if pending is None:
                after = f" ({last_switch} takes no value)" if last_switch else ""
                problems.append(f"{where}: {token!r} is a value without a flag{after}; remove it or "
                                "put the flag it belongs to before it")
            elif pending[2] in ("one", "optional"):
                pending = None
            else:
                pending = (pending[0], pending[1], "any")  # "some"/"any": more values may follow
            continue
        owed(pending)
        pending, last_switch = None, None
        name, arity, attached = _lookup(token, table.flags)
        if arity is None:
            hint = _suggestion(name, table.long_flags if name.startswith("--") else list(table.flags))
            fix = f"did you mean {hint}?" if hint else f"see `vllm serve --help=all` of vLLM {table.vllm}"
            problems.append(f"{where}: {token.split('=', 1)[0]} is not a `vllm serve` flag in {image}; {fix}")
            pending = (index, name, "any")  # its values are not reported on their own
            continue
        if arity == "none":
            if attached:
                problems.append(f"{where}: {name} is a switch and takes no value; write {name} alone")
            last_switch = name
        elif not attached:
            pending = (index, name, arity)
    owed(pending)
    return problems


def server_extra_args_problems(extra_args: Sequence[str], image: str, *, key: str) -> list[str]:
    """extraArgs of a server, checked when its image runs the vLLM release the list was made from.

    A server with its own image of another (or no readable) vLLM version is left to that release.
    """
    table = flag_list()
    if image_vllm_version(image) != table.vllm:
        return []
    return extra_args_problems(extra_args, key=key, flags=table)
