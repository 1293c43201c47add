"""One reader for stack files, used by every command and by the Pulumi program.

`load_settings(stack)` reads `Pulumi.<stack>.yaml` and returns validated settings, or raises
`StackFileError` with every problem of the file at once, each naming its key as the user wrote it
and, where the file is known, its line:

* YAML syntax errors with file, line and column (never a PyYAML traceback);
* structure: the document must be a mapping with a `config:` mapping, keys must carry a namespace,
  a key may appear once;
* namespaces: only the project's (`vllm-poc:`) and the AWS provider's `aws:region`; anything else
  (`vllm_poc:bench`, `aws:regoin`, a key without namespace) is refused with a did-you-mean, because
  Pulumi would pass it to nobody and the stack would silently fall back to a default;
* `secure:` values: only settings typed as secrets (the Hugging Face token) take one; anywhere else
  (names, tags and ARNs are visible in the AWS console anyway) a secret is refused with that
  explanation rather than failing inside Pulumi;
* values: the settings models (stacks/settings/), the region against botocore's partition data,
  tags against AWS's tag rules.

`scope="cluster"` checks only what pre-destroy and teardown-check need (region, cluster, network,
storage, tags), so a teardown is never blocked by a serving setting that stopped validating. The full
scope also refuses a stack with no way to its Kubernetes API (stacks.api_path).
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import SecretStr

from stacks.api_path import api_path_problems
from stacks.settings import alerts
from stacks.settings import PROJECT, REPO, TOP_LEVEL_KEYS, ConfigError, StackSettings, settings_from_config

Scope = Literal["full", "cluster"]

# Keys Pulumi itself writes into a stack file next to `config:`.
FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")
# The AWS provider of every resource is built from the region alone (stacks/environment/); other
# aws: keys would configure a default provider that nothing uses.
AWS_KEYS = ("region",)
CLUSTER_SCOPE_KEYS = ("cluster", "network", "storage", "tags")
MAX_VALUES = 100_000  # a stack file holds hundreds
CONFIG_REFERENCE = "the config reference in docs/configuration.md (section \"Config reference\")"

# AWS tag rules (Tagging AWS resources, "Tag naming limits and requirements").
TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
_TAG_CHARS = re.compile(r"^[\w .:/=+\-@]*$", re.UNICODE)


class StackFileError(ConfigError):
    """Problems of one stack file; the message names the file and each problem's line where known."""

    def __init__(self, problems: list[str], path: Path | None = None, lines: dict[str, int] | None = None):
        self.path = path
        self.lines = lines or {}
        super().__init__(problems)

    def __str__(self) -> str:
        where = f"{self.path.name}: " if self.path else ""
        count = len(self.problems)
        head = f"{where}invalid stack config ({count} problem{'s' if count != 1 else ''}):"
        ordered = sorted(self.problems, key=lambda p: line_of(p, self.lines) or 1 << 30)
        return "\n".join([head, *(f"  - {self._at(p)}" for p in ordered)])

    def _at(self, problem: str) -> str:
        line = line_of(problem, self.lines)
        return f"line {line}: {problem}" if line else problem


def line_of(problem: str, lines: dict[str, int]) -> int | None:
    """Line of the key a problem starts with (or of its closest parent key)."""
    key = problem.split(": ", 1)[0].strip()
    while key:
        if key in lines:
            return lines[key]
        cut = max(key.rfind("."), key.rfind("["))
        if cut <= key.find(":"):
            return None
        key = key[:cut]
    return None


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    folded = {c.lower().replace("_", "-"): c for c in choices}
    exact = folded.get(word.lower().replace("_", "-"))
    close = [exact] if exact else difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


# --------------------------------------------------------------------------------------------------
# Reading the file


@dataclass
class StackFile:
    stack: str
    path: Path | None
    config: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)  # key path -> line (1-based)
    scalars: dict[str, str] = field(default_factory=dict)  # key path -> the text as written
    problems: list[str] = field(default_factory=list)  # structure problems found while reading
    visited: int = 0


def stack_path(stack: str, directory: Path = REPO) -> Path:
    path = Path(directory) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                       for p in Path(directory).glob("Pulumi.*.yaml") if p.is_file())
        hint = did_you_mean(stack, known)
        raise StackFileError([f"no stack file {path.name} in {directory}; {hint}stacks here: {', '.join(known) or 'none'}"])
    return path


def _yaml_error(path: Path, err: yaml.YAMLError) -> StackFileError:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    text = f"{problem}" + (f" ({context})" if context else "")
    start = getattr(err, "context_mark", None)
    if start is not None and mark is not None and start.line != mark.line:
        text += f"; it started at line {start.line + 1}, column {start.column + 1}"
    if "\t" in text or "found character '\\t'" in text:
        text += "; YAML indents with spaces only, replace the tab"
    where = f"{path.name}:{mark.line + 1}:{mark.column + 1}" if mark else path.name
    return StackFileError([f"{where}: YAML syntax error: {text}"])


class _Recursive(Exception):
    pass


def _walk(node: yaml.Node, path: str, out: StackFile, problems: list[str], above: frozenset[int] = frozenset()) -> None:
    if id(node) in above:  # an alias of a node that contains it: `a: &x [*x]`
        raise _Recursive(path, "a YAML alias that contains itself; write the value out")
    out.visited += 1
    if out.visited > MAX_VALUES:  # aliases of aliases expand exponentially ("billion laughs")
        raise _Recursive(path, f"the file expands to more than {MAX_VALUES:,} values through YAML aliases; "
                               "write the values out")
    above = above | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(f"{child}: duplicate key (lines {seen[key]} and {line}); YAML keeps only the last, "
                                "remove one")
            seen[key] = line
            out.lines.setdefault(child, line)
            _walk(value_node, child, out, problems, above)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = f"{path}[{index}]"
            out.lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, out, problems, above)
    elif isinstance(node, yaml.ScalarNode):
        out.scalars[path] = node.value


def read_stack_file(stack: str, directory: Path = REPO) -> StackFile:
    """Parse `Pulumi.<stack>.yaml`: its `config:` mapping plus where each key is written."""
    path = stack_path(stack, directory)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise StackFileError([f"{path.name}: not UTF-8 text ({err.reason} at byte {err.start})"], path) from None
    except OSError as err:
        raise StackFileError([f"{path.name}: cannot read: {err.strerror}"], path) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise _yaml_error(path, err) from None
    out = StackFile(stack=stack, path=path, config={})
    if document is None:
        raise StackFileError([f"{path.name}: the file is empty; a stack file holds `config:` with the stack's keys"], path)
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a {type(document).__name__}"
        raise StackFileError([f"{path.name}: the file holds {kind}; a stack file is a mapping with a `config:` key"], path)
    problems: list[str] = []
    config_node = None
    if isinstance(root, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in root.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in seen:
                problems.append(f"{key}: duplicate top-level key (lines {seen[key]} and {line}); remove one")
            seen[key] = line
            if key == "config":
                config_node = value_node
            elif key not in FILE_KEYS:
                hint = did_you_mean(key, FILE_KEYS)
                if ":" in key:
                    hint = "config keys go under `config:`; " + hint
                problems.append(f"{key}: not a stack file key; {hint}a stack file holds {', '.join(FILE_KEYS)}")
                out.lines[key] = line
    if "config" not in document:
        problems.append(f"{path.name}: no `config:` key; put the stack's keys under `config:` "
                        f"(without it Pulumi sees no config and would deploy the defaults)")
    elif document["config"] is not None and not isinstance(document["config"], dict):
        problems.append(f"config: must be a mapping of `<namespace>:<key>: value`, got {type(document['config']).__name__}")
    else:
        out.config = dict(document["config"] or {})
        if config_node is not None:
            try:
                _walk(config_node, "", out, problems)
            except _Recursive as loop:
                raise StackFileError([f"{loop.args[0] or 'config'}: {loop.args[1]}"], path, out.lines) from None
    if "config" not in document or (document["config"] is not None and not isinstance(document["config"], dict)):
        raise StackFileError(problems, path, out.lines)
    out.problems = problems  # duplicate keys: reported with the value problems
    return out


# --------------------------------------------------------------------------------------------------
# Keys and values


def _secure_paths(value: Any, path: str) -> list[str]:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return [path]
        return [p for k, v in value.items() for p in _secure_paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _secure_paths(v, f"{path}[{i}]")]
    return []


def secret_settings(project: str = PROJECT) -> frozenset[str]:
    """Top-level keys whose value may be a Pulumi secret: the settings fields typed SecretStr."""
    found = set()
    for name, info in StackSettings.model_fields.items():
        kinds = [info.annotation, *typing.get_args(info.annotation)]
        if any(k is SecretStr for k in kinds):
            found.add(f"{project}:{info.alias or name}")
    return frozenset(found)


def check_keys(values: dict[str, Any], project: str = PROJECT,
               secret_keys: frozenset[str] = frozenset()) -> tuple[dict[str, Any], list[str]]:
    """Split {"<ns>:<key>": value} into the keys the settings read and one problem per bad key."""
    may_be_secret = secret_settings(project)
    known_keys = [f"{project}:{k}" for k in TOP_LEVEL_KEYS] + [f"aws:{k}" for k in AWS_KEYS]
    keep: dict[str, Any] = {}
    problems: list[str] = []
    for full_key, value in values.items():
        if not isinstance(full_key, str):
            problems.append(f"{full_key!r}: config keys are text of the form <namespace>:<key>, e.g. {project}:cluster")
            continue
        namespace, colon, key = full_key.partition(":")
        secure = _secure_paths(value, full_key)
        if full_key in secret_keys and not secure:
            secure = [full_key]
        if not colon:
            hint = f"write it as {project}:{full_key}" if full_key in TOP_LEVEL_KEYS else (
                did_you_mean(full_key, list(TOP_LEVEL_KEYS)) + f"keys are <namespace>:<key>, e.g. {project}:cluster")
            problems.append(f"{full_key}: no namespace; {hint}")
        elif namespace == project:
            if key not in TOP_LEVEL_KEYS:
                problems.append(f"{full_key}: unknown key; {did_you_mean(full_key, known_keys)}"
                                f"known keys: {', '.join(known_keys)}; see {CONFIG_REFERENCE}")
            elif full_key in may_be_secret and secure in ([], [full_key]):
                keep[full_key] = value
                if not secure and key == alerts.URL_KEY and value != alerts.PLACEHOLDER_URL:
                    problems.append(f"{full_key}: written in plain text, and the URL carries its token into the "
                                    f"stack file; set it as a secret: {alerts.SET_COMMAND}")
            else:
                problems += [_secure_problem(p, may_be_secret) for p in secure]
                keep[full_key] = _unsecured(value) if secure else value
        elif namespace == "aws":
            if key not in AWS_KEYS:
                problems.append(f"{full_key}: not used by this stack; {did_you_mean(full_key, known_keys)}"
                                "the AWS provider is built from aws:region alone (set AWS_PROFILE and the like in "
                                "the environment)")
            elif secure:
                problems += [_secure_problem(p, may_be_secret) for p in secure]
            else:
                keep[full_key] = value
        else:
            hint = did_you_mean(full_key, known_keys) or did_you_mean(namespace, [project, "aws"])
            problems.append(f"{full_key}: unknown namespace {namespace!r}; {hint}this stack reads only "
                            f"{project}:<key> and aws:region (see {CONFIG_REFERENCE})")
    return keep, problems


def _unsecured(value: Any) -> Any:
    """The value with each `secure:` leaf replaced by a plain placeholder, so the other checks still run."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return "secret"
        return {k: _unsecured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecured(v) for v in value]
    return value


def _secure_problem(path: str, may_be_secret: frozenset[str]) -> str:
    which = f"only {', '.join(sorted(may_be_secret))} may be" if may_be_secret else "no setting is"
    return (f"{path}: a secret (`secure:`) value, but {which} secret here (names, tags and ARNs are visible in "
            "the AWS console anyway); write the value in plain text (`pulumi config set` without --secret)")


@lru_cache(maxsize=1)
def known_regions() -> dict[str, list[str]]:
    """Regions per partition, from the endpoint data botocore ships (no network)."""
    from botocore.loaders import Loader

    endpoints = Loader().load_data("endpoints")
    return {p["partition"]: sorted(p["regions"]) for p in endpoints["partitions"]}


def region_problem(region: Any) -> str | None:
    if not isinstance(region, str):
        return None  # the settings report the type
    regions = known_regions()
    if any(region in names for names in regions.values()):
        return None
    every = [r for names in regions.values() for r in names]
    hint = did_you_mean(region, every)
    return (f"aws:region: {region!r} is not an AWS region botocore knows; {hint}regions of the aws partition: "
            f"{', '.join(regions.get('aws', []))}")


def tag_problems(tags: Any, key: str = f"{PROJECT}:tags") -> list[str]:
    """AWS tag rules: keys 1-128 and values 0-256 characters of letters, digits, spaces and _ . : / = + - @;
    keys may not start with `aws:` (reserved for AWS)."""
    if not isinstance(tags, dict):
        return []  # the settings report the type
    problems = []
    for name, value in tags.items():
        where = f"{key}.{name}"
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}: tag keys must be 1-{TAG_KEY_MAX} characters")
            continue
        if name.lower().startswith("aws:"):
            problems.append(f"{where}: tag keys starting with 'aws:' are reserved for AWS and refused by its APIs; "
                            "rename the tag")
        if len(name) > TAG_KEY_MAX:
            problems.append(f"{where}: tag key is {len(name)} characters; AWS allows at most {TAG_KEY_MAX}")
        if not _TAG_CHARS.match(name):
            problems.append(f"{where}: tag key has characters AWS refuses; use letters, digits, spaces and _ . : / = + - @")
        if isinstance(value, str):
            if len(value) > TAG_VALUE_MAX:
                problems.append(f"{where}: tag value is {len(value)} characters; AWS allows at most {TAG_VALUE_MAX}")
            if not _TAG_CHARS.match(value):
                problems.append(f"{where}: tag value has characters AWS refuses; use letters, digits, spaces and "
                                "_ . : / = + - @")
    return problems


def _with_hints(problems: list[str], scalars: dict[str, str], values: dict[str, Any]) -> list[str]:
    """Say to quote a number YAML read from text meant as a string (`kubernetesVersion: 1.30`)."""
    out = []
    for problem in problems:
        key, _, message = problem.partition(": ")
        raw = scalars.get(key)
        if "valid string" in message and raw is not None and re.fullmatch(r"[-+.0-9eE_:]+", raw):
            problem = (f"{key}: expected text, but YAML reads the unquoted {raw} as a number; quote it: "
                       f"{key.rsplit('.', 1)[-1].split(':')[-1]}: \"{raw}\"")
        out.append(problem)
    return out


def settings_from_values(values: dict[str, Any], *, stack: str, project: str = PROJECT, scope: Scope = "full",
                         scalars: dict[str, str] | None = None,
                         secret_keys: frozenset[str] = frozenset()) -> StackSettings:
    """Settings from {"<ns>:<key>": value}: every key, value and cross-key problem at once."""
    keep, problems = check_keys(values, project, secret_keys)
    if scope == "cluster":
        keep = {k: v for k, v in keep.items()
                if k == "aws:region" or k.partition(":")[2] in CLUSTER_SCOPE_KEYS}
    region = keep.get("aws:region")
    if region is not None and (problem := region_problem(region)):
        problems.append(problem)
        keep.pop("aws:region")
    tags = keep.get(f"{project}:tags")
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except json.JSONDecodeError:
            pass
    problems += tag_problems(tags, f"{project}:tags")
    try:
        settings = settings_from_config(keep, stack=stack, project=project)
    except ConfigError as err:
        problems += err.problems
    else:
        if scope == "full":
            # A deploy needs a way to the Kubernetes API; a teardown-check does not (and is never blocked).
            problems += api_path_problems(settings)
        if not problems:
            return settings
    raise StackFileError(_with_hints(list(dict.fromkeys(problems)), scalars or {}, keep))


def _checked(file: StackFile, scope: Scope) -> StackSettings:
    problems = list(file.problems)
    try:
        settings = settings_from_values(file.config, stack=file.stack, scope=scope, scalars=file.scalars)
    except StackFileError as err:
        problems += err.problems
    if problems:
        raise StackFileError(problems, file.path, file.lines)
    return settings


def load_settings(stack: str, directory: Path = REPO, *, scope: Scope = "full") -> StackSettings:
    """Validated settings of `Pulumi.<stack>.yaml`, as `pulumi up -s <stack>` would see them."""
    return _checked(read_stack_file(stack, directory), scope)


def load_config(stack: str, directory: Path = REPO) -> dict[str, Any]:
    """The checked `config:` mapping of a stack file (raises StackFileError like load_settings)."""
    file = read_stack_file(stack, directory)
    _checked(file, "full")
    return file.config


def load(stack: str, directory: Path = REPO) -> tuple[StackFile, StackSettings]:
    """The file and its settings, for commands that need both (render)."""
    file = read_stack_file(stack, directory)
    return file, _checked(file, "full")
