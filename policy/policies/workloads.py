"""Kubernetes workloads as the rules see them: their containers, and the `vllm serve` words a
container runs (exec form, the vLLM image's entrypoint, or an `sh -c` script)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .values import UNKNOWN, as_list, get, is_unknown


DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
REPLICA_SET = "kubernetes:apps/v1:ReplicaSet"
JOB = "kubernetes:batch/v1:Job"
CRON_JOB = "kubernetes:batch/v1:CronJob"
POD = "kubernetes:core/v1:Pod"
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"

# Where the pod spec sits in each workload's props.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    DEPLOYMENT: ("spec", "template", "spec"),
    STATEFUL_SET: ("spec", "template", "spec"),
    DAEMON_SET: ("spec", "template", "spec"),
    REPLICA_SET: ("spec", "template", "spec"),
    JOB: ("spec", "template", "spec"),
    CRON_JOB: ("spec", "jobTemplate", "spec", "template", "spec"),
    POD: ("spec",),
}


def containers(resource_type: str, props: Mapping[str, Any]) -> list[dict[str, Any]] | Any:
    """Containers and init containers of a workload; [] for other types, UNKNOWN if unknown."""
    path = POD_SPEC_PATHS.get(resource_type)
    if path is None:
        return []
    pod_spec = get(props, *path)
    if is_unknown(pod_spec):
        return UNKNOWN
    found: list[dict[str, Any]] = []
    for key in ("initContainers", "containers"):
        items = as_list(get(pod_spec, key))
        if is_unknown(items):
            return UNKNOWN
        found.extend(item for item in items if isinstance(item, Mapping))
    return found


def container_label(name: str, container: Mapping[str, Any]) -> str:
    cname = container.get("name")
    return f"{name}/{cname}" if isinstance(cname, str) else name


SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
_K8S_VAR = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_SHELL_OPERATOR = re.compile(r"^[;&|()<>]+$")
_LEGACY_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# The vllm/vllm-openai image's entrypoint; a container without `command` runs `vllm serve <args>`.
VLLM_IMAGE_ENTRYPOINT = ("vllm", "serve")


@dataclass(frozen=True)
class ServeArgs:
    """The arguments after `vllm serve`: the model (positional or --model) and the flags."""

    tokens: tuple[Any, ...]

    @property
    def model(self) -> Any:
        if self.tokens and (is_unknown(self.tokens[0]) or not str(self.tokens[0]).startswith("-")):
            return self.tokens[0]
        return self.option("--model")

    def option(self, flag: str) -> Any:
        """Value of `--flag v` or `--flag=v` (last one wins, as argparse does); None if absent,
        UNKNOWN if absent from the known words while some word is unknown (it may be the flag).

        vLLM's parser also accepts underscores in flag names (`--max_num_seqs`).
        """
        value: Any = UNKNOWN if any(is_unknown(t) for t in self.tokens) else None
        for index, token in enumerate(self.tokens):
            if is_unknown(token) or not isinstance(token, str) or not token.startswith("--"):
                continue
            name, eq, inline = token.partition("=")
            if "--" + name[2:].replace("_", "-") != flag:
                continue
            if eq:
                value = inline
            elif index + 1 < len(self.tokens):
                value = self.tokens[index + 1]
            else:
                value = ""
        return value


def _image_repository(image: str) -> str:
    without_digest = image.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    if ":" in last:
        without_digest = without_digest[: len(without_digest) - len(last)] + last.split(":", 1)[0]
    return without_digest


def is_vllm_image(image: Any) -> bool:
    return isinstance(image, str) and "vllm" in _image_repository(image).rsplit("/", 1)[-1]


def _env_values(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's env: literal values, UNKNOWN for valueFrom (resolved only in the cluster)."""
    values: dict[str, Any] = {}
    env = as_list(container.get("env"))
    if is_unknown(env):
        return values
    for item in env:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            value = item.get("value")
            values[item["name"]] = value if isinstance(value, str) else UNKNOWN
    return values


def _expand_k8s(token: Any, env: Mapping[str, Any]) -> Any:
    """Kubernetes expands $(VAR) in command/args from the container's env and leaves references to
    undefined variables as they are. A reference to a valueFrom variable makes the word UNKNOWN."""
    if not isinstance(token, str):
        return token
    unresolved = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal unresolved
        value = env.get(match.group(1))
        if isinstance(value, str):
            return value
        if is_unknown(value):
            unresolved = True
        return match.group(0)

    expanded = _K8S_VAR.sub(substitute, token)
    return UNKNOWN if unresolved else expanded.replace("$$(", "$(")


def _shell_tokens(script: str, env: Mapping[str, Any]) -> list[Any]:
    """Split a `sh -c` script into words and operators.

    Variables are expanded from the container's literal env before splitting (single-quote rules
    are not modelled); a word still holding an unresolved `$VAR` becomes UNKNOWN.
    """
    script = script.replace("\\\n", " ").replace("\n", " ; ")
    script = _SHELL_VAR.sub(
        lambda m: v if isinstance(v := env.get(m.group(1) or m.group(2)), str) else m.group(0), script)
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would fail too; nothing to read
        return []
    return [UNKNOWN if _SHELL_VAR.search(word) else word for word in words]


def _after_serve(argv: Sequence[Any]) -> tuple[Any, ...] | None:
    """Tokens after `vllm serve` (or the legacy api_server module) up to a shell operator."""
    for index, token in enumerate(argv):
        if not isinstance(token, str):
            continue
        start: int | None = None
        if token.rsplit("/", 1)[-1] == "vllm" and index + 1 < len(argv) and argv[index + 1] == "serve":
            start = index + 2
        elif token == _LEGACY_SERVER_MODULE and index >= 1 and argv[index - 1] == "-m":
            start = index + 1
        if start is None:
            continue
        rest: list[Any] = []
        for word in argv[start:]:
            if isinstance(word, str) and _SHELL_OPERATOR.match(word):
                break
            rest.append(word)
        return tuple(rest)
    return None


def serve_args(container: Mapping[str, Any]) -> ServeArgs | Any | None:
    """ServeArgs if the container runs `vllm serve`, None if it does not, UNKNOWN if unknowable.

    Three forms are recognised:
      command: ["vllm", "serve", model, ...]           (args appended)
      args: [model, ...] with the vLLM image's entrypoint `vllm serve` (no command)
      command: ["/bin/sh", "-c", "... vllm serve ..."] (script in command or in args)
    """
    command = container.get("command")
    args = container.get("args")
    image = container.get("image")
    if is_unknown(command) or is_unknown(args):
        # Without the words we cannot tell what runs; a vLLM image is the only hint left.
        return UNKNOWN if is_vllm_image(image) or is_unknown(image) else None
    command_list = list(as_list(command))
    args_list = list(as_list(args))
    if not command_list:
        if is_unknown(image):
            return UNKNOWN
        if not is_vllm_image(image):
            return None
        command_list = list(VLLM_IMAGE_ENTRYPOINT)
    env = _env_values(container)
    argv = [_expand_k8s(token, env) for token in command_list + args_list]

    first = argv[0]
    if isinstance(first, str) and first.rsplit("/", 1)[-1] in SHELLS:
        for index in range(1, len(argv) - 1):
            flag = argv[index]
            if isinstance(flag, str) and flag.startswith("-") and not flag.startswith("--") \
                    and "c" in flag[1:]:
                script = argv[index + 1]
                if is_unknown(script):
                    return UNKNOWN
                if not isinstance(script, str):
                    return None
                tokens = _after_serve(_shell_tokens(script, env))
                return ServeArgs(tokens) if tokens is not None else None
        return None
    tokens = _after_serve(argv)
    return ServeArgs(tokens) if tokens is not None else None


def vllm_servers(resource_type: str, name: str, props: Mapping[str, Any]) \
        -> list[tuple[str, ServeArgs]]:
    """(label, ServeArgs) for each container of the workload that runs `vllm serve` with known words."""
    found: list[tuple[str, ServeArgs]] = []
    items = containers(resource_type, props)
    if is_unknown(items):
        return found
    for container in items:
        parsed = serve_args(container)
        if isinstance(parsed, ServeArgs):
            found.append((container_label(name, container), parsed))
    return found
