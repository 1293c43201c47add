"""Guardrails for the vllm-poc stacks, enforced by `pulumi preview/up --policy-pack policy`.

Every rule is a plain function over plain data, wrapped in a pulumi-policy object:

  resource rules   check_<rule>(resource_type, props, config) -> list[str]   (one message per finding)
  stack rules      check_<rule>(resources: list[StackResource]) -> list[(message, urn)]

`check_resources()` runs the real policy objects over (type, name, props) tuples, which is how tests
run the pack over the stack's offline render. This module imports nothing but the standard library
and pulumi_policy: the pack runs in its own virtualenv (policy/venv) that has nothing else.

Unknown values. During `pulumi preview` a value computed from another resource's output (a bucket
name, an ARN, a policy document built in an `apply`) is unknown. The engine's property proxy raises
on reading one; `plain()` turns them into the `UNKNOWN` marker instead, and every rule treats a
finding that depends on an unknown value as "cannot tell yet" and reports nothing. Resource rules run
again during `pulumi up` with the values resolved, before the resource is created; stack rules run
again at the end of `pulumi up`.

Scope and decisions:
- Workloads: Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs and Pods declared as
  Pulumi resources (also the children of yaml/v2 ConfigGroups and helm/v4 Charts, which the engine
  sees). Values of a helm/v3 Release are not inspected: the chart renders them inside the provider.
- A container runs vLLM when its words contain `vllm serve` (exec form, or an `sh -c` script split
  with shlex), or when it has no command and a vLLM image (whose entrypoint is `vllm serve`).
  Flags set only through `--config <file>` are not seen.
- --max-num-seqs absent: vLLM picks 256, or 1024 on >= 70 GiB GPUs; the rule counts on 256, so it
  passes for the bench's 64 and fails only if benchMaxConcurrency is raised above 256. It applies to
  every vLLM server, benchmarked or not.
- Every EC2NodeClass is checked for IMDSv2/hop limit 1 (see check_ec2nodeclass_imds).
- S3: a bucket is protected by companions whose `bucket` input equals its name, id, logical name or
  URN, or whose `bucket` input depends on it (engine property dependencies). An account-wide public
  access block with all four flags also counts.
- IAM: workload role = trusted by pods.eks.amazonaws.com or tagged vllm-poc/workload=true. Wildcard
  actions in Allow statements (and Allow + NotAction) are violations; `*` in Resource is not.
  AWS-managed policy ARNs attached to roles are not inspected (their documents are not in the stack).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
    unknown_checking_proxy,
)

PACK_NAME = "vllm-poc-guardrails"

# --------------------------------------------------------------------------------------------------
# Unknown values and plain data


class _Unknown:
    """A value the engine does not know yet (preview); never equal to anything but itself."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        return False


UNKNOWN: Any = _Unknown()

_UNKNOWN_SENTINELS = frozenset({
    UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
})


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN


def plain(value: Any) -> Any:
    """Engine props (proxies that raise on unknown values) -> dicts, lists and UNKNOWN markers."""
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in list(value):
            try:
                out[key] = plain(value[key])
            except UnknownValueError:
                out[key] = UNKNOWN
        return out
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items: list[Any] = []
        for index in range(len(value)):
            try:
                items.append(plain(value[index]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return value


def _get(data: Any, *path: str) -> Any:
    """Walk nested dicts; None where a key is missing, UNKNOWN where a step is unknown."""
    for key in path:
        if is_unknown(data):
            return UNKNOWN
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _list(value: Any) -> list[Any] | Any:
    """A list field: [] when absent, UNKNOWN when unknown, a one-item list for a scalar."""
    if value is None:
        return []
    if is_unknown(value):
        return UNKNOWN
    if isinstance(value, list):
        return value
    return [value]


def _bench_max_concurrency(config: Mapping[str, Any] | None) -> int:
    raw = (config or {}).get("benchMaxConcurrency", DEFAULT_BENCH_MAX_CONCURRENCY)
    # Policy config travels as a protobuf Struct, so integers arrive as floats (64.0).
    return int(float(raw))


# --------------------------------------------------------------------------------------------------
# Kubernetes workloads

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
    pod_spec = _get(props, *path)
    if is_unknown(pod_spec):
        return UNKNOWN
    found: list[dict[str, Any]] = []
    for key in ("initContainers", "containers"):
        items = _list(_get(pod_spec, key))
        if is_unknown(items):
            return UNKNOWN
        found.extend(item for item in items if isinstance(item, Mapping))
    return found


def _container_label(name: str, container: Mapping[str, Any]) -> str:
    cname = container.get("name")
    return f"{name}/{cname}" if isinstance(cname, str) else name


# --------------------------------------------------------------------------------------------------
# Finding `vllm serve` and its arguments in a container


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
    env = _list(container.get("env"))
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
    command_list = list(_list(command))
    args_list = list(_list(args))
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
            found.append((_container_label(name, container), parsed))
    return found


# --------------------------------------------------------------------------------------------------
# Rule: FP8 checkpoint needs --kv-cache-dtype fp8

# The PoC measured it: FP8-dynamic checkpoints ship kv_cache_scheme=None, so the KV cache stays BF16 and
# capacity halves (12,150 vs 23,320 tokens); FP8 then loses S2/S4 to NVFP4 for that reason alone.
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3")


# A server variant generated to measure the KV cache dtype (stacks/variants.py) says so in its labels;
# it is the one deliberate exception (the PoC's "FP8 (BF16 KV)" measurement).
VARIANT_LABEL = "vllm-poc/variant"


def measures_kv_cache_dtype(props: Mapping[str, Any]) -> bool:
    value = _get(props, "metadata", "labels", VARIANT_LABEL)
    return isinstance(value, str) and "kvCacheDtype" in value.split(".")


def check_fp8_kv_cache(resource_type: str, props: Mapping[str, Any], name: str = "",
                       config: Mapping[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    if measures_kv_cache_dtype(props):
        return messages
    for label, serve in vllm_servers(resource_type, name, props):
        model = serve.model
        if not isinstance(model, str) or "fp8" not in model.lower():
            continue
        dtype = serve.option("--kv-cache-dtype")
        if is_unknown(dtype):
            continue
        if dtype is None:
            messages.append(
                f"{label}: serves the FP8 checkpoint '{model}' without --kv-cache-dtype; the KV cache "
                f"then stays BF16 with half the token capacity. Add '--kv-cache-dtype fp8' "
                f"(accepted values: {', '.join(FP8_KV_CACHE_DTYPES)}).")
        elif dtype not in FP8_KV_CACHE_DTYPES:
            messages.append(
                f"{label}: serves the FP8 checkpoint '{model}' with --kv-cache-dtype {dtype}; "
                f"use one of: {', '.join(FP8_KV_CACHE_DTYPES)}.")
    return messages


# --------------------------------------------------------------------------------------------------
# Rule: --max-num-seqs must admit the bench's highest concurrency

DEFAULT_BENCH_MAX_CONCURRENCY = 64
# vLLM's default when --max-num-seqs is absent: 256, or 1024 on GPUs with >= 70 GiB (not A100).
# The smaller one is what we can count on without knowing the GPU.
VLLM_DEFAULT_MAX_NUM_SEQS = 256


def check_max_num_seqs(resource_type: str, props: Mapping[str, Any], name: str = "",
                       config: Mapping[str, Any] | None = None) -> list[str]:
    bench_max = _bench_max_concurrency(config)
    messages: list[str] = []
    for label, serve in vllm_servers(resource_type, name, props):
        raw = serve.option("--max-num-seqs")
        if is_unknown(raw):
            continue
        if raw is None:
            if VLLM_DEFAULT_MAX_NUM_SEQS < bench_max:
                messages.append(
                    f"{label}: --max-num-seqs is not set, so vLLM may use its default of "
                    f"{VLLM_DEFAULT_MAX_NUM_SEQS}, below the bench's highest concurrency {bench_max}. "
                    f"Set --max-num-seqs to at least {bench_max}.")
            continue
        try:
            value = int(str(raw))
        except ValueError:
            messages.append(f"{label}: --max-num-seqs '{raw}' is not an integer; "
                            f"set it to an integer of at least {bench_max}.")
            continue
        if value < bench_max:
            messages.append(
                f"{label}: --max-num-seqs {value} is below the bench's highest concurrency "
                f"{bench_max}; requests above {value} would queue in vLLM and the sweep would measure "
                f"the queue, not the server. Set it to at least {bench_max} (policy config "
                f"benchMaxConcurrency).")
    return messages


# --------------------------------------------------------------------------------------------------
# Rule: container images are pinned (no `latest`, no missing tag)


_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None if it is (a tag other than latest, or a digest)."""
    _, at, digest = image.partition("@")
    if at:
        return None if _DIGEST.fullmatch(digest) else f"has a malformed digest '{digest}'"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (pulls 'latest')"
    tag = last.split(":", 1)[1]
    if tag == "latest":
        return "uses the tag 'latest'"
    if not tag:
        return "has an empty tag"
    return None


def check_image_tags(resource_type: str, props: Mapping[str, Any], name: str = "",
                     config: Mapping[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    items = containers(resource_type, props)
    if is_unknown(items):
        return messages
    for container in items:
        image = container.get("image")
        if not isinstance(image, str):
            continue
        problem = image_problem(image)
        if problem:
            messages.append(
                f"{_container_label(name, container)}: image '{image}' {problem}; pin a version tag "
                f"(e.g. from [tool.vllm-poc.pins] in pyproject.toml) or a digest '@sha256:...'.")
    return messages


# --------------------------------------------------------------------------------------------------
# Rule (advisory): container images are pinned by digest


def check_image_digests(resource_type: str, props: Mapping[str, Any], name: str = "",
                        config: Mapping[str, Any] | None = None) -> list[str]:
    """A tag can be moved to other content; a digest cannot. Advisory: a tag-only image is
    sometimes the only choice (no digest published for it), and the project lists those with the
    reason in pyproject's pins."""
    messages: list[str] = []
    items = containers(resource_type, props)
    if is_unknown(items):
        return messages
    for container in items:
        image = container.get("image")
        if isinstance(image, str) and "@" not in image:
            messages.append(
                f"{_container_label(name, container)}: image '{image}' is pinned by tag only; the "
                f"registry can move a tag to other content. Pin the digest too ('<tag>@sha256:...', "
                f"[tool.vllm-poc.pins] in pyproject.toml) or list the image as tag-only with a reason.")
    return messages


# --------------------------------------------------------------------------------------------------
# Rule: EC2NodeClass requires IMDSv2 with hop limit 1


def check_ec2nodeclass_imds(resource_type: str, props: Mapping[str, Any], name: str = "",
                            config: Mapping[str, Any] | None = None) -> list[str]:
    """Every EC2NodeClass counts as a GPU class: a NodeClass carries no GPU marker, any GPU NodePool
    may reference it, and the al2023 alias picks the NVIDIA AMI for GPU instance types by itself.
    Karpenter's defaults equal the required values today; the rule asks for them explicitly so that
    a default change or an override cannot expose node credentials to pods."""
    if resource_type != EC2_NODE_CLASS:
        return []
    options = _get(props, "spec", "metadataOptions")
    if is_unknown(options):
        return []
    label = name or "EC2NodeClass"
    if not isinstance(options, Mapping):
        return [f"{label}: spec.metadataOptions is missing; set httpTokens: required and "
                f"httpPutResponseHopLimit: 1 so pods cannot reach the node role through IMDS."]
    messages: list[str] = []
    hop = options.get("httpPutResponseHopLimit")
    if not is_unknown(hop) and not (isinstance(hop, (int, float)) and not isinstance(hop, bool)
                                    and hop == 1):
        messages.append(f"{label}: spec.metadataOptions.httpPutResponseHopLimit is {hop!r}; set it "
                        f"to 1 so only the node (not pods) reaches IMDS.")
    tokens = options.get("httpTokens")
    if not is_unknown(tokens) and tokens != "required":
        messages.append(f"{label}: spec.metadataOptions.httpTokens is {tokens!r}; set it to "
                        f"'required' (IMDSv2 only).")
    return messages


# --------------------------------------------------------------------------------------------------
# Rule: GPU NodePool carries the nvidia.com/gpu NoSchedule taint

GPU_TAINT_KEY = "nvidia.com/gpu"
_GPU_FAMILY = re.compile(r"^(g|gr|p)\d")
_POSITIVE_OPERATORS = frozenset({"In", "Exists", "Gt", "Gte"})


def _is_gpu_requirement(requirement: Mapping[str, Any]) -> bool:
    key = requirement.get("key")
    operator = requirement.get("operator")
    if not isinstance(key, str) or operator not in _POSITIVE_OPERATORS:
        return False
    if key.startswith("karpenter.k8s.aws/instance-gpu-") or key.startswith("karpenter.k8s.aws/instance-accelerator-"):
        return True
    values = [v for v in _list(requirement.get("values")) if isinstance(v, str)] \
        if not is_unknown(requirement.get("values")) else []
    if key == "node.kubernetes.io/instance-type":
        return any(_GPU_FAMILY.match(v) for v in values)
    if key == "karpenter.k8s.aws/instance-family":
        return any(_GPU_FAMILY.match(v) for v in values)
    if key == "karpenter.k8s.aws/instance-category":
        return any(v in ("g", "p") for v in values)
    return False


def is_gpu_nodepool(props: Mapping[str, Any]) -> bool:
    """GPU if a requirement selects g*/p* instance types or GPU attributes, the template labels
    nvidia.com/gpu.present, or the limits cap nvidia.com/gpu."""
    requirements = _list(_get(props, "spec", "template", "spec", "requirements"))
    if not is_unknown(requirements):
        if any(isinstance(r, Mapping) and _is_gpu_requirement(r) for r in requirements):
            return True
    labels = _get(props, "spec", "template", "metadata", "labels")
    if isinstance(labels, Mapping) and str(labels.get("nvidia.com/gpu.present", "")).lower() == "true":
        return True
    limits = _get(props, "spec", "limits")
    return isinstance(limits, Mapping) and GPU_TAINT_KEY in limits


def check_gpu_nodepool_taint(resource_type: str, props: Mapping[str, Any], name: str = "",
                             config: Mapping[str, Any] | None = None) -> list[str]:
    if resource_type != NODE_POOL or not is_gpu_nodepool(props):
        return []
    taints = _list(_get(props, "spec", "template", "spec", "taints"))
    if is_unknown(taints):
        return []
    for taint in taints:
        if isinstance(taint, Mapping) and taint.get("key") == GPU_TAINT_KEY:
            effect = taint.get("effect")
            if effect == "NoSchedule" or is_unknown(effect):
                return []
    return [f"{name or 'NodePool'}: GPU NodePool without the taint {GPU_TAINT_KEY}:NoSchedule in "
            f"spec.template.spec.taints; without it any pod can land on (and keep alive) a GPU node."]


# --------------------------------------------------------------------------------------------------
# Stack rules: resources with their links


@dataclass
class StackResource:
    """A resource as the stack rules see it: plain props plus, per prop, the URNs it came from."""

    type: str
    name: str
    urn: str
    props: dict[str, Any]
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_policy_resource(cls, resource: PolicyResource) -> StackResource:
        deps = {key: [dep.urn for dep in value]
                for key, value in (resource.property_dependencies or {}).items()}
        return cls(resource.resource_type, resource.name, resource.urn, plain(resource.props), deps)

    def keys(self, *props: str) -> set[str]:
        """What other resources may use to point at this one: URN, logical name and the given props
        (physical name, id, ARN). The logical name matters for the offline render, where the mocks'
        ids are derived from it."""
        found = {self.urn, self.name}
        for prop in props:
            value = self.props.get(prop)
            if isinstance(value, str) and value:
                found.add(value)
        return found


def _resolve(ref: Any, deps: Sequence[str], targets: Sequence[StackResource],
             key_props: tuple[str, ...]) -> list[StackResource] | Any:
    """The targets a reference points at: by dependency URN first, then by value.

    UNKNOWN if the reference is unknown and no dependency names a target (cannot tell which one).
    """
    by_dep = [t for t in targets if t.urn in deps]
    if by_dep:
        return by_dep
    if is_unknown(ref):
        return UNKNOWN
    if isinstance(ref, str):
        return [t for t in targets if ref in t.keys(*key_props)]
    return []


def _statements(document: Any) -> list[dict[str, Any]] | Any:
    """Statements of an IAM policy document (JSON string or dict); UNKNOWN if unknown."""
    if is_unknown(document):
        return UNKNOWN
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    if not isinstance(document, Mapping):
        return []
    statements = _list(document.get("Statement"))
    if is_unknown(statements):
        return UNKNOWN
    return [s for s in statements if isinstance(s, Mapping)]


# --------------------------------------------------------------------------------------------------
# Rule: S3 buckets have a full public-access block and a TLS-only bucket policy

BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                       "restrictPublicBuckets")
_BUCKET_KEY_PROPS = ("bucket", "id")


def _all_flags(props: Mapping[str, Any]) -> bool | Any:
    """True if all four flags are true, UNKNOWN if none is false but some are unknown."""
    values = [props.get(flag) for flag in PUBLIC_ACCESS_FLAGS]
    if any(v is False or v is None for v in values):
        return False
    if any(is_unknown(v) for v in values):
        return UNKNOWN
    return all(v is True for v in values)


def _is_false(value: Any) -> bool:
    if isinstance(value, list):
        return len(value) > 0 and all(_is_false(v) for v in value)
    return value is False or (isinstance(value, str) and value.lower() == "false")


def _denies_insecure_transport(statement: Mapping[str, Any]) -> bool:
    if statement.get("Effect") != "Deny":
        return False
    principal = statement.get("Principal")
    if isinstance(principal, Mapping):
        principal = principal.get("AWS")
    if principal != "*" and principal != ["*"]:
        return False
    actions = _list(statement.get("Action"))
    if is_unknown(actions) or not any(a in ("s3:*", "*") for a in actions):
        return False
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return False
    insecure = False
    for operator in ("Bool", "BoolIfExists"):
        block = condition.get(operator)
        if isinstance(block, Mapping):
            for key, value in block.items():
                if key.lower() == "aws:securetransport" and _is_false(value):
                    insecure = True
    if not insecure:
        return False
    resources = _list(statement.get("Resource"))
    if is_unknown(resources) or any(is_unknown(r) for r in resources):
        return True
    # The deny must cover the objects, not only the bucket ARN.
    return any(isinstance(r, str) and (r == "*" or r.endswith("/*")) for r in resources)


def is_tls_only_policy(document: Any) -> bool | Any:
    statements = _statements(document)
    if is_unknown(statements):
        return UNKNOWN
    return any(_denies_insecure_transport(s) for s in statements)


def check_s3_bucket_protection(resources: Sequence[StackResource]) -> list[tuple[str, str]]:
    buckets = [r for r in resources if r.type in BUCKET_TYPES]
    blocks = [r for r in resources if r.type == PUBLIC_ACCESS_BLOCK]
    policies = [r for r in resources if r.type == BUCKET_POLICY]
    account_blocked = any(_all_flags(r.props) is True for r in resources
                          if r.type == ACCOUNT_PUBLIC_ACCESS_BLOCK)

    def companions(kind: Sequence[StackResource]) -> tuple[dict[str, list[StackResource]], bool]:
        matched: dict[str, list[StackResource]] = {b.urn: [] for b in buckets}
        unresolved = False
        for companion in kind:
            targets = _resolve(companion.props.get("bucket"),
                               companion.property_dependencies.get("bucket", []),
                               buckets, _BUCKET_KEY_PROPS)
            if is_unknown(targets):
                unresolved = True
                continue
            for target in targets:
                matched[target.urn].append(companion)
        return matched, unresolved

    block_map, blocks_unresolved = companions(blocks)
    policy_map, policies_unresolved = companions(policies)
    findings: list[tuple[str, str]] = []
    for bucket in buckets:
        label = bucket.name
        # Public-access block.
        states = [_all_flags(b.props) for b in block_map[bucket.urn]]
        if not account_blocked and True not in states and not any(is_unknown(s) for s in states):
            if block_map[bucket.urn]:
                findings.append((f"{label}: its BucketPublicAccessBlock does not set all of "
                                 f"{', '.join(PUBLIC_ACCESS_FLAGS)} to true.", bucket.urn))
            elif not blocks_unresolved:
                findings.append((f"{label}: no BucketPublicAccessBlock; add one with "
                                 f"{', '.join(PUBLIC_ACCESS_FLAGS)} all true.", bucket.urn))
        # TLS-only bucket policy (a BucketPolicy resource, or the legacy inline `policy` prop).
        documents = [p.props.get("policy") for p in policy_map[bucket.urn]]
        inline = bucket.props.get("policy")
        if inline is not None and inline != "":
            documents.append(inline)
        verdicts = [is_tls_only_policy(d) for d in documents]
        if True not in verdicts and not any(is_unknown(v) for v in verdicts):
            if documents:
                findings.append((f"{label}: its bucket policy does not deny requests with "
                                 f"aws:SecureTransport=false (Effect Deny, Principal *, Action s3:*, "
                                 f"Resource covering the bucket and its objects).", bucket.urn))
            elif not policies_unresolved:
                findings.append((f"{label}: no BucketPolicy denying requests without TLS; add one "
                                 f"that denies s3:* when aws:SecureTransport is false.", bucket.urn))
    return findings


# --------------------------------------------------------------------------------------------------
# Rule: no wildcard actions on workload roles

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
WORKLOAD_TAG = "vllm-poc/workload"
_ROLE_KEY_PROPS = ("name", "id", "arn")
_POLICY_KEY_PROPS = ("arn", "id", "name")


def _trusts_pod_identity(document: Any) -> bool | Any:
    statements = _statements(document)
    if is_unknown(statements):
        return UNKNOWN
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal")
        services = _list(principal.get("Service")) if isinstance(principal, Mapping) else []
        if not is_unknown(services) and POD_IDENTITY_PRINCIPAL in services:
            return True
    return False


def is_workload_role(role: StackResource) -> bool | Any:
    """A role that pods assume: trusted by EKS Pod Identity, or tagged vllm-poc/workload=true."""
    for tags_prop in ("tags", "tagsAll"):
        tags = role.props.get(tags_prop)
        if isinstance(tags, Mapping) and str(tags.get(WORKLOAD_TAG, "")).lower() == "true":
            return True
    return _trusts_pod_identity(role.props.get("assumeRolePolicy"))


def wildcard_actions(document: Any) -> list[str] | Any:
    """Action patterns with `*` or `?` (and NotAction) in Allow statements; resource `*` is fine."""
    statements = _statements(document)
    if is_unknown(statements):
        return UNKNOWN
    found: list[str] = []
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        if statement.get("NotAction") is not None:
            found.append("NotAction (allows every action not listed)")
        actions = _list(statement.get("Action"))
        if is_unknown(actions):
            continue
        found.extend(a for a in actions if isinstance(a, str) and ("*" in a or "?" in a))
    return found


# Karpenter's controller role is a workload role too (Pod Identity). Its upstream reference policies
# (karpenter 1.14 cloudformation.yaml) list every action explicitly and use `*` only in resources,
# so it passes without an exemption; a wildcard action there would be a deviation worth flagging.


def check_iam_wildcard_actions(resources: Sequence[StackResource]) -> list[tuple[str, str]]:
    roles = [r for r in resources if r.type == ROLE]
    managed = [r for r in resources if r.type == IAM_POLICY]
    grants: list[tuple[StackResource, Any, Any, str]] = []  # (holder, document, role targets, how)

    for role in roles:
        inline = _list(role.props.get("inlinePolicies"))
        if not is_unknown(inline):
            for item in inline:
                if isinstance(item, Mapping):
                    grants.append((role, item.get("policy"), [role],
                                   f"inline policy '{item.get('name', '')}'"))
    for holder in resources:
        if holder.type == ROLE_POLICY:
            targets = _resolve(holder.props.get("role"), holder.property_dependencies.get("role", []),
                               roles, _ROLE_KEY_PROPS)
            grants.append((holder, holder.props.get("policy"), targets, "role policy"))
        elif holder.type in (ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT):
            policy_targets = _resolve(holder.props.get("policyArn"),
                                      holder.property_dependencies.get("policyArn", []),
                                      managed, _POLICY_KEY_PROPS)
            if is_unknown(policy_targets):
                continue
            if holder.type == ROLE_POLICY_ATTACHMENT:
                role_targets = _resolve(holder.props.get("role"),
                                        holder.property_dependencies.get("role", []),
                                        roles, _ROLE_KEY_PROPS)
            else:
                refs = _list(holder.props.get("roles"))
                deps = holder.property_dependencies.get("roles", [])
                if is_unknown(refs):
                    role_targets = _resolve(UNKNOWN, deps, roles, _ROLE_KEY_PROPS)
                else:
                    role_targets = []
                    for ref in refs:
                        resolved = _resolve(ref, deps, roles, _ROLE_KEY_PROPS)
                        if is_unknown(resolved):
                            continue
                        role_targets.extend(t for t in resolved if t not in role_targets)
            for policy in policy_targets:
                grants.append((policy, policy.props.get("policy"), role_targets,
                               f"managed policy attached by {holder.name}"))

    findings: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for holder, document, targets, how in grants:
        if is_unknown(targets):
            continue
        workload_roles = [t for t in targets if is_workload_role(t) is True]
        if not workload_roles:
            continue
        actions = wildcard_actions(document)
        if is_unknown(actions) or not actions:
            continue
        for role in workload_roles:
            if (holder.urn, role.urn) in seen:
                continue
            seen.add((holder.urn, role.urn))
            findings.append((
                f"{holder.name}: {how} grants wildcard actions {sorted(set(actions))} to the "
                f"workload role {role.name} (assumed by pods). List the actions the workload needs; "
                f"a `*` in Resource is fine, a `*` in Action is not.", holder.urn))
    return findings


# --------------------------------------------------------------------------------------------------
# Policy objects


def _resource_policy(name: str, description: str,
                     check: Callable[..., list[str]], config_schema: PolicyConfigSchema | None = None,
                     enforcement_level: EnforcementLevel = EnforcementLevel.MANDATORY,
                     ) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation) -> None:
        props = plain(args.props)
        for message in check(args.resource_type, props, args.name, args.get_config()):
            report_violation(message, None)

    return ResourceValidationPolicy(name=name, description=description, validate=validate,
                                    enforcement_level=enforcement_level,
                                    config_schema=config_schema)


def _stack_policy(name: str, description: str,
                  check: Callable[[Sequence[StackResource]], list[tuple[str, str]]],
                  ) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation) -> None:
        resources = [StackResource.from_policy_resource(r) for r in args.resources]
        for message, urn in check(resources):
            report_violation(message, urn)

    return StackValidationPolicy(name=name, description=description, validate=validate,
                                 enforcement_level=EnforcementLevel.MANDATORY)


FP8_KV_CACHE = _resource_policy(
    "vllm-fp8-kv-cache",
    "A vLLM server of an FP8 checkpoint sets --kv-cache-dtype fp8.",
    check_fp8_kv_cache)
MAX_NUM_SEQS = _resource_policy(
    "vllm-max-num-seqs",
    "vLLM --max-num-seqs is at least the bench's highest concurrency.",
    check_max_num_seqs,
    PolicyConfigSchema(properties={"benchMaxConcurrency": {
        "type": "integer", "minimum": 1, "default": DEFAULT_BENCH_MAX_CONCURRENCY,
        "description": "Highest concurrency the benchmark sweep sends to one server."}}))
IMAGE_TAGS = _resource_policy(
    "container-image-pinned",
    "Workload container images carry a version tag other than latest, or a digest.",
    check_image_tags)
IMAGE_DIGESTS = _resource_policy(
    "container-image-digest",
    "Workload container images are pinned by digest (warning only).",
    check_image_digests, enforcement_level=EnforcementLevel.ADVISORY)
EC2NODECLASS_IMDS = _resource_policy(
    "ec2nodeclass-imdsv2-hop-limit",
    "EC2NodeClass sets metadataOptions httpTokens: required and httpPutResponseHopLimit: 1.",
    check_ec2nodeclass_imds)
GPU_NODEPOOL_TAINT = _resource_policy(
    "gpu-nodepool-taint",
    "A GPU NodePool taints its nodes nvidia.com/gpu:NoSchedule.",
    check_gpu_nodepool_taint)
S3_BUCKET_PROTECTION = _stack_policy(
    "s3-bucket-public-access-and-tls",
    "Every S3 bucket has a full public-access block and a bucket policy that denies non-TLS access.",
    check_s3_bucket_protection)
IAM_WILDCARD_ACTIONS = _stack_policy(
    "iam-no-wildcard-actions-on-workload-roles",
    "IAM policies on workload roles (Pod Identity or tagged vllm-poc/workload=true) list actions "
    "without wildcards.",
    check_iam_wildcard_actions)

POLICIES: list[Policy] = [
    FP8_KV_CACHE, MAX_NUM_SEQS, IMAGE_TAGS, IMAGE_DIGESTS, EC2NODECLASS_IMDS, GPU_NODEPOOL_TAINT,
    S3_BUCKET_PROTECTION, IAM_WILDCARD_ACTIONS,
]


# --------------------------------------------------------------------------------------------------
# Running the pack without the engine (tests, offline render)


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str  # logical name of the resource the finding is about
    message: str


def _urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:offline::vllm-poc::{resource_type}::{name}"


def _options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def check_resources(resources: Iterable[Sequence[Any]],
                    config: Mapping[str, Mapping[str, Any]] | None = None,
                    policies: Sequence[Policy] | None = None) -> list[Violation]:
    """Run the pack's policy objects over resources given as (type, name, props) or
    (type, name, props, id) tuples, as the engine would (props wrapped in its unknown-checking proxy,
    so the pulumi_policy UNKNOWN_* sentinels behave as in a preview).

    `config` is keyed by policy name, like a `--policy-pack-config` file:
    {"vllm-max-num-seqs": {"benchMaxConcurrency": 64}}. The optional id becomes the resource's `id`
    prop, which companion resources (BucketPolicy.bucket, RolePolicy.role) are matched against.
    """
    config = config or {}
    items: list[tuple[str, str, dict[str, Any]]] = []
    for entry in resources:
        resource_type, name, props = entry[0], entry[1], dict(entry[2])
        if len(entry) > 3 and entry[3] is not None:
            props.setdefault("id", entry[3])
        items.append((resource_type, name, props))
    names_by_urn = {_urn(t, n): n for t, n, _ in items}

    violations: list[Violation] = []
    for policy in policies if policies is not None else POLICIES:
        policy_config = dict(config.get(policy.name, {}))

        def report(message: str, urn: str | None = None, *, _policy: str = policy.name,
                   _name: str = "") -> None:
            violations.append(Violation(_policy, names_by_urn.get(urn or "", _name), message))

        if isinstance(policy, ResourceValidationPolicy):
            for resource_type, name, props in items:
                urn = _urn(resource_type, name)
                args = ResourceValidationArgs(resource_type, unknown_checking_proxy(props), urn, name,
                                              _options(), None, policy_config)
                policy.validate(args, lambda message, _urn=None, _n=name, _p=policy.name:
                                violations.append(Violation(_p, _n, message)))
        elif isinstance(policy, StackValidationPolicy):
            stack = [PolicyResource(t, unknown_checking_proxy(p), _urn(t, n), n, _options(), None,
                                    None, [], {}) for t, n, p in items]
            policy.validate(StackValidationArgs(stack, policy_config), report)
    return violations
