"""How long a first `pulumi up` may wait, from the render: the longest chain of awaited objects.

`pulumi up` creates a resource once everything it depends on is ready, and waits for each awaited
object up to its timeout. The chain through the dependencies (explicit `dependsOn`, and the Kubernetes
provider, which waits for the cluster) whose waits add up to the most is the time the deploy role's
session and the deploy workflow's job must cover, or credentials expire, or the runner is cancelled,
half-way through a create:

* a Kubernetes Deployment, StatefulSet, DaemonSet, Job, Pod or Service waits up to its `customTimeouts`
  create, else its `pulumi.com/timeoutSeconds` annotation, else pulumi-kubernetes' 10 minutes; with
  `pulumi.com/skipAwait: "true"` it is not waited for (the bench and report Jobs). Other Kubernetes
  objects (ConfigMaps, RBAC, NodePools without waitFor) are ready when applied;
* a Helm release waits up to its `timeout` (Helm's 300 s), unless skipAwait;
* an object annotated `vllm-poc/await-overlaps: <Kind>/<name>` waits only when the named object, on the
  same chain, is not waited for in that `up` (the wake Job and its server's Deployment): the chain
  counts the longer of the two, not their sum;
* AWS takes minutes to create a few resources whatever their timeouts: those count with their typical
  duration (PROVISIONING_S), the one figure here that is not a timeout.

`awaited_chain` returns the chain of a render and its total; `budget_problems` compares it with the role's session
and the workflow's timeout, less the workflow's steps before `up`. tests/test_time_budget.py checks every
shipped stack; preflight can state the same figure (`chain_for_stack`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.release_job import OVERLAPS_ANNOTATION

# pulumi-kubernetes' await for these kinds when no timeout is given (provider/pkg/await).
AWAITED_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "Service")
K8S_DEFAULT_WAIT_S = 600
HELM_DEFAULT_WAIT_S = 300
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Typical creation times of the AWS resources that take minutes (EKS: "usually 10 to 15 minutes" for the
# control plane; a managed node group and an add-on a few minutes; NAT gateways and interface endpoints
# one to two). Estimates, not timeouts: the provider would wait far longer before giving up.
PROVISIONING_S = {
    "eks:index:Cluster": 900,
    "eks:index:ManagedNodeGroup": 300,
    "aws:eks/addon:Addon": 120,
    "aws:ec2/natGateway:NatGateway": 120,
}
# What the deploy workflow runs before `up` starts waiting (checkout, the two virtualenvs, credentials,
# preflight, the Pulumi CLI and plugins), and after it (the stack outputs).
WORKFLOW_SETUP_S = 15 * 60
# The deploy role's session (role-duration-seconds in the workflows; preflight checks the role allows it).
DEPLOY_SESSION_S = 3 * 3600


@dataclass(frozen=True)
class Step:
    name: str  # the resource's name in the render
    kind: str  # Kubernetes kind, or the resource type
    seconds: int
    source: str  # where the figure comes from: the annotation, customTimeouts, a default, an estimate

    def describe(self) -> str:
        return f"{self.name} ({self.kind}) {format_duration(self.seconds)} [{self.source}]"


@dataclass(frozen=True)
class Chain:
    steps: tuple[Step, ...]

    @property
    def total_s(self) -> int:
        return sum(step.seconds for step in self.steps)

    def describe(self) -> str:
        """One line: each step with its figure, then the total."""
        return " -> ".join(step.describe() for step in self.steps) + f" = {format_duration(self.total_s)}"


def format_duration(seconds: int) -> str:
    """3 h, 2 h 41 min, 17 min, 1 h 36 min 40 s."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"), (secs, "s")) if n]
    return " ".join(parts) or "0 s"


def _seconds(text: str) -> int:
    """A Pulumi custom timeout ("45m", "1h30m", "90s") in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise ValueError(f"{text!r} is not a duration such as 45m or 1h30m")
    return int(sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts))


def awaited_seconds(resource: dict[str, Any]) -> tuple[int, str]:
    """(seconds `up` may wait for this resource once its dependencies are ready, where that comes from)."""
    typ, inputs = resource["type"], resource.get("inputs") or {}
    create = ((resource.get("options") or {}).get("customTimeouts") or {}).get("create")
    if typ == HELM_RELEASE:
        if inputs.get("skipAwait"):
            return 0, "skipAwait"
        return (int(float(inputs["timeout"])), "timeout") if inputs.get("timeout") else (HELM_DEFAULT_WAIT_S, "Helm default")
    if typ.startswith("kubernetes:"):
        kind = inputs.get("kind") or typ.rsplit(":", 1)[-1]
        annotations = (inputs.get("metadata") or {}).get("annotations") or {}
        if kind not in AWAITED_KINDS:
            return 0, "not awaited"
        if str(annotations.get("pulumi.com/skipAwait", "")).lower() == "true":
            return 0, "skipAwait"
        if create:
            return _seconds(create), "customTimeouts"
        if "pulumi.com/timeoutSeconds" in annotations:
            return int(float(annotations["pulumi.com/timeoutSeconds"])), "pulumi.com/timeoutSeconds"
        return K8S_DEFAULT_WAIT_S, "pulumi-kubernetes default"
    if typ in PROVISIONING_S:
        return PROVISIONING_S[typ], "typical creation time"
    return 0, "quick"


def _referenced(value: Any) -> set[str]:
    """Names of the resources an input value refers to (the render marks them {"$resource": name})."""
    if isinstance(value, dict):
        if set(value) == {"$resource"}:
            return {value["$resource"]}
        return set().union(*(_referenced(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_referenced(v) for v in value)) if value else set()
    return set()


def awaited_chain(rendered) -> Chain:
    """The longest chain of waits through a render's dependencies (a `stacks.ops.render.Rendered`)."""
    records = list(rendered.registrations)
    index_of = {r.urn: i for i, r in enumerate(records)}
    providers = {r.name: i for i, r in enumerate(records) if r.type.startswith("pulumi:providers:")}
    by_name: dict[str, set[int]] = {}
    for i, r in enumerate(records):
        by_name.setdefault(r.name, set()).add(i)
    resources = [{"type": r.type, "name": r.name, "inputs": r.inputs, "options": r.options} for r in records]

    def dependencies(index: int) -> set[int]:
        record = records[index]
        found = {index_of[urn] for urn in record.dependencies if urn in index_of}
        provider = record.options.get("provider")
        if provider in providers:
            found.add(providers[provider])  # the provider is ready when the cluster is
        for name in _referenced(record.inputs):  # an input that is a resource (a node group's cluster)
            found |= by_name.get(name, set())
        return found - {index}

    costs = [awaited_seconds(r) for r in resources]
    keys = [f"{(r['inputs'] or {}).get('kind')}/{((r['inputs'] or {}).get('metadata') or {}).get('name')}"
            for r in resources]
    overlaps = [(((r["inputs"] or {}).get("metadata") or {}).get("annotations") or {}).get(OVERLAPS_ANNOTATION)
                for r in resources]
    memo: dict[int, tuple[int, tuple[int, ...]]] = {}

    def longest(index: int, below: tuple[int, ...] = ()) -> tuple[int, tuple[int, ...]]:
        """(the most seconds of waits ending with this resource, the chain of indexes)."""
        if index in memo:
            return memo[index]
        if index in below:
            raise ValueError(f"dependency cycle through {records[index].name}")
        best: tuple[int, tuple[int, ...]] = (0, ())
        for dep in sorted(dependencies(index)):
            found = longest(dep, below + (index,))
            if found[0] > best[0]:
                best = found
        own = costs[index][0]
        shared = [i for i in best[1] if overlaps[index] and keys[i] == overlaps[index]]
        if shared:  # the two waits never add up: count only what this one may wait beyond the other
            own = max(0, own - costs[shared[0]][0])
            costs[index] = (own, f"{costs[index][1]}, beyond {resources[shared[0]]['name']}'s wait")
        memo[index] = (best[0] + own, best[1] + (index,))
        return memo[index]

    _, path = max((longest(i) for i in range(len(records))), key=lambda found: found[0], default=(0, ()))
    steps = []
    for index in path:
        resource, (seconds, source) = resources[index], costs[index]
        if seconds:
            kind = (resource.get("inputs") or {}).get("kind") or resource["type"]
            steps.append(Step(resource["name"], kind, seconds, source))
    return Chain(tuple(steps))


def budget_problems(chain: Chain, *, session_s: int = DEPLOY_SESSION_S, workflow_s: int | None = None,
                    setup_s: int = WORKFLOW_SETUP_S) -> list[str]:
    """What the chain does not fit: the role's session, and the workflow job's timeout (each less the
    workflow's steps around `up`)."""
    problems = []
    for what, limit in (("the deploy role's session", session_s), ("the deploy workflow's timeout", workflow_s)):
        if limit is None:
            continue
        if chain.total_s + setup_s > limit:
            problems.append(
                f"a first `up` may wait {format_duration(chain.total_s)} ({chain.describe()}), plus "
                f"{format_duration(setup_s)} of workflow steps: more than {what} ({format_duration(limit)}); "
                "lower the longest waits (weights.syncTimeoutMinutes first) or raise the limit with the reason")
    return problems


def chain_for_stack(stack: str, directory: Path | None = None) -> Chain:
    """The chain of a stack file, from its offline render (seconds; no cloud)."""
    from stacks.ops import render  # local import: the render loads the provider SDKs, only when asked

    return awaited_chain(render.render_stack(stack, directory) if directory else render.render_stack(stack))
