"""A stack's config, `{"<namespace>:<key>": value}`, turned into `StackSettings`.

Every key lives under the project namespace (`vllm-poc:<key>`), except the region, which is the AWS
provider's own `aws:region`. Structured keys hold objects; their fields are camelCase, as a user
writes them in `Pulumi.<stack>.yaml`. A problem is reported with the key as the user wrote it
(`vllm-poc:gpuPools[1].instanceType`) and what would be accepted; an unknown key is an error with a
did-you-mean, so a misspelt key never silently falls back to a default. stacks.loader reads the
stack file itself (YAML, namespaces, secrets) and hands its values here.
"""

from __future__ import annotations

import difflib
import json
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from stacks.settings.base import PROJECT, ConfigError
from stacks.settings.stack import StackSettings, partial_cross_key_problems


_TOP_LEVEL = {
    "cluster": "cluster",
    "network": "network",
    "systemNodes": "systemNodes",
    "gpuPools": "gpuPools",
    "storage": "storage",
    "servers": "servers",
    "bench": "bench",
    "security": "security",
    "weights": "weights",
    "hfToken": "hfToken",
    "tags": "tags",
    "fleet": "fleet",
    "alertWebhookUrl": "alertWebhookUrl",
}
# Plain strings rather than structured (JSON) values.
_STRING_KEYS = {"hfToken", "alertWebhookUrl"}
TOP_LEVEL_KEYS = tuple(_TOP_LEVEL)


def _key_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings model that holds the last key of `loc` (for did-you-mean on unknown keys)."""
    model: type[BaseModel] = StackSettings
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        found = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if found is None:
            return None
        inner = [found.annotation]
        model = None
        while inner:
            candidate = inner.pop()
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
            inner += list(typing.get_args(candidate))
        if model is None:
            return None
    return model


def _unknown_key_message(loc: tuple[Any, ...]) -> str:
    model = _model_at(loc)
    if model is None:
        return "unknown key (misspelt?); see the config reference in docs/configuration.md"
    known = [f.alias or name for name, f in model.model_fields.items() if not f.exclude]
    word = str(loc[-1])
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6) or [
        k for k in known if k.lower() == word.lower().replace("_", "").replace("-", "")]
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key; {hint}known here: {', '.join(known)} (config reference in docs/configuration.md)"


def _format(error: ValidationError) -> list[str]:
    problems = []
    for err in error.errors():
        loc = tuple(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = _unknown_key_message(loc)
        if loc and loc[0] == "region":
            key = "aws:region"
        elif loc:
            key = f"{PROJECT}:{_key_path(loc)}"
        else:
            key = None
        for line in message.splitlines():
            if key is None:
                # cross-key problems start with their own key path
                problems.append(f"{PROJECT}:{line}")
            else:
                problems.append(f"{key}: {line}")
    return problems


def settings_from_config(values: dict[str, Any], *, stack: str, project: str = PROJECT) -> StackSettings:
    """Build settings from a stack's config, given as {"<namespace>:<key>": value}.

    Values may be JSON strings (as `pulumi.Config` hands them out) or already-parsed objects.
    """
    data: dict[str, Any] = {"project": project, "stack": stack}
    problems: list[str] = []
    for full_key, value in values.items():
        namespace, _, key = full_key.partition(":")
        if namespace == "aws" and key == "region":
            data["region"] = value
        elif namespace == project:
            if key not in _TOP_LEVEL:
                problems.append(f"{full_key}: unknown key; known keys: {', '.join(f'{project}:{k}' for k in _TOP_LEVEL)}")
                continue
            if key in _STRING_KEYS:
                # a `pulumi config set --secret` value in a stack file is ciphertext: known to be set only
                data[key] = "[secret]" if isinstance(value, dict) and "secure" in value else value
                continue
            if isinstance(value, str):
                # pulumi.Config hands structured values over as JSON text
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    problems.append(f"{full_key}: expected a structured value (object or list), got {value!r}")
                    continue
            data[key] = value
    try:
        settings = StackSettings.model_validate(data)
    except ValidationError as err:
        problems += _format(err)
        if any(e["loc"] for e in err.errors()):
            problems += partial_cross_key_problems(data)
    else:
        if not problems:
            return settings
    raise ConfigError(list(dict.fromkeys(problems)))
