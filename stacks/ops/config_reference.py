"""The config reference, generated from the settings models so that it cannot drift from them.

`python -m stacks config-reference` prints the Markdown table docs/configuration.md embeds between
`<!-- config-reference:start -->` and `<!-- config-reference:end -->`; a test keeps the two equal.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from stacks.settings import PROJECT, REPO, StackSettings

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
_TOP_LEVEL_SKIP = {"project", "stack"}


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " | ".join(names) + (" (optional)" if type(None) in args else "")
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map {_type_name(args[0])} to {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    if annotation is SecretStr:
        return "secret str"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value)}`"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    out = []
    for name, field in model.model_fields.items():
        if name in _TOP_LEVEL_SKIP and model is StackSettings:
            continue
        alias = field.alias or name
        key = "aws:region" if (model is StackSettings and name == "region") else f"{prefix}{alias}"
        nested = _model_of(field.annotation)
        is_list = typing.get_origin(field.annotation) is list
        if nested is not None:
            out.append((key, "list of objects" if is_list else "object", _default(field),
                        field.description or ""))
            out += rows(nested, f"{key}[]." if is_list else f"{key}.")
        else:
            out.append((key, _type_name(field.annotation), _default(field), field.description or ""))
    return out


def markdown() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, typ, default, description in rows(StackSettings, f"{PROJECT}:"):
        cell = description.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{key}` | {typ} | {default} | {cell} |")
    return "\n".join(lines) + "\n"


def embedded(path: Path) -> str | None:
    text = path.read_text()
    if START not in text or END not in text:
        return None
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("config-reference", help="print every config key with its default (Markdown)")
    parser.add_argument("--check", type=Path, nargs="?", const=REPO / "docs" / "configuration.md",
                        help="exit 1 if the table embedded in this file (default: docs/configuration.md) differs")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    table = markdown()
    if args.check:
        if embedded(args.check) != table:
            print(f"{args.check} config reference is out of date; paste `python -m stacks config-reference`")
            return 1
        return 0
    print(table, end="")
    return 0
