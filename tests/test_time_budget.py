"""The time a first `pulumi up` may wait adds up: the longest chain of awaited objects in each shipped
stack's render fits the deploy role's session and the deploy workflow's timeout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from stacks.ops.time_budget import (DEPLOY_SESSION_S, K8S_DEFAULT_WAIT_S, WORKFLOW_SETUP_S, awaited_chain,
                                    awaited_seconds, budget_problems, format_duration)
from tests.fixtures.pulumi_stack import render_with, stack_config

REPO = Path(__file__).resolve().parents[1]


def deploy_workflow() -> dict:
    return yaml.safe_load((REPO / ".github/workflows/deploy.yml").read_text())


def workflow_limits() -> tuple[int, int]:
    """(the deploy job's timeout, the role session it asks for), in seconds."""
    job = deploy_workflow()["jobs"]["deploy"]
    (creds,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("aws-actions/configure-aws-credentials")]
    return int(job["timeout-minutes"]) * 60, int(creds["with"]["role-duration-seconds"])


def test_every_stacks_longest_chain_fits_the_session_and_the_workflow(all_stacks):
    timeout_s, session_s = workflow_limits()
    assert session_s == DEPLOY_SESSION_S  # preflight checks the role allows this session
    for stack, rendered in all_stacks.items():
        chain = awaited_chain(rendered)
        assert budget_problems(chain, session_s=session_s, workflow_s=timeout_s) == [], stack
        assert chain.total_s + WORKFLOW_SETUP_S <= min(timeout_s, session_s), f"{stack}: {chain.describe()}"


def test_the_dev_chain_is_the_cluster_then_weights_node_server_and_startup(dev):
    chain = awaited_chain(dev)
    kinds = [step.kind for step in chain.steps]
    assert kinds == ["eks:index:Cluster", "eks:index:ManagedNodeGroup", "aws:eks/addon:Addon", "Job", "Job",
                     "Deployment", "Job", "Job"], chain.describe()
    sync, node, server, wake, startup = chain.steps[3:]
    assert sync.name.startswith("weights-") and sync.seconds == 60 * 60 + 600
    assert node.name == "gpu-node-l40s-job" and node.seconds == 900 + 120
    assert server.name == "server-gemma-fp8-deployment" and server.seconds == 2700
    # the wake Job waits for a released server's cold start, when `up` does not wait for the Deployment:
    # the two never add up, so only its minute beyond the server's own timeout counts
    assert wake.name.startswith("gpu-release-wake-") and wake.seconds == 60 and "beyond" in wake.source
    assert startup.name.startswith("startup-") and startup.seconds == 300 + 120
    assert chain.total_s == 900 + 300 + 120 + 4200 + 1020 + 2700 + 60 + 420
    # the sweep and the Service are not waited for
    assert not any(step.name.startswith("bench-") or step.kind == "Service" for step in chain.steps)


def test_a_longer_weight_sync_is_said_to_outlast_the_session():
    weights = {**stack_config()["vllm-poc:weights"], "syncTimeoutMinutes": 120}
    chain = awaited_chain(render_with(weights=weights))
    problems = budget_problems(chain, workflow_s=180 * 60)
    assert len(problems) == 2
    assert "more than the deploy role's session (3 h)" in problems[0]
    assert "weights.syncTimeoutMinutes" in problems[0] and format_duration(chain.total_s) in problems[0]


def k8s(kind: str, annotations: dict | None = None, **options) -> dict:
    return {"type": f"kubernetes:x/v1:{kind}", "inputs": {"kind": kind, "metadata": {"annotations": annotations or {}}},
            "options": options}


@pytest.mark.parametrize("resource, expected", [
    (k8s("Job"), (K8S_DEFAULT_WAIT_S, "pulumi-kubernetes default")),
    (k8s("Job", {"pulumi.com/timeoutSeconds": "1020"}), (1020, "pulumi.com/timeoutSeconds")),
    (k8s("Deployment", {"pulumi.com/timeoutSeconds": "1020"}, customTimeouts={"create": "1h30m"}),
     (5400, "customTimeouts")),
    (k8s("Job", {"pulumi.com/skipAwait": "true", "pulumi.com/timeoutSeconds": "99"}), (0, "skipAwait")),
    (k8s("Service"), (600, "pulumi-kubernetes default")),
    (k8s("ConfigMap"), (0, "not awaited")),
    ({"type": "kubernetes:helm.sh/v3:Release", "inputs": {}}, (300, "Helm default")),
    ({"type": "kubernetes:helm.sh/v3:Release", "inputs": {"timeout": 900.0}}, (900, "timeout")),
    ({"type": "kubernetes:helm.sh/v3:Release", "inputs": {"skipAwait": True}}, (0, "skipAwait")),
    ({"type": "eks:index:Cluster", "inputs": {}}, (900, "typical creation time")),
    ({"type": "aws:s3/bucketV2:BucketV2", "inputs": {}}, (0, "quick")),
])
def test_what_each_resource_may_keep_up_waiting(resource, expected):
    assert awaited_seconds(resource) == expected


@dataclass
class Reg:
    name: str
    type: str
    inputs: dict
    dependencies: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    custom: bool = True

    @property
    def urn(self) -> str:
        return f"urn:{self.type}::{self.name}"


@dataclass
class FakeRender:
    registrations: list[Reg]


def test_the_longest_chain_follows_dependencies_providers_and_resource_references():
    cluster = Reg("eks", "eks:index:Cluster", {})
    nodes = Reg("nodes", "eks:index:ManagedNodeGroup", {"cluster": {"$resource": "eks"}})  # a reference
    provider = Reg("k8s", "pulumi:providers:kubernetes", {}, [cluster.urn])
    long_job = Reg("sync", "kubernetes:batch/v1:Job", k8s("Job", {"pulumi.com/timeoutSeconds": "4000"})["inputs"],
                   [nodes.urn], {"provider": "k8s"})
    short_job = Reg("quick", "kubernetes:batch/v1:Job", k8s("Job", {"pulumi.com/timeoutSeconds": "60"})["inputs"],
                    [], {"provider": "k8s"})
    server = Reg("server", "kubernetes:apps/v1:Deployment", k8s("Deployment")["inputs"],
                 [long_job.urn, short_job.urn], {"provider": "k8s"})
    sweep = Reg("sweep", "kubernetes:batch/v1:Job", k8s("Job", {"pulumi.com/skipAwait": "true"})["inputs"],
                [server.urn], {"provider": "k8s"})
    chain = awaited_chain(FakeRender([sweep, server, short_job, long_job, provider, nodes, cluster]))
    assert [s.name for s in chain.steps] == ["eks", "nodes", "sync", "server"]
    assert chain.total_s == 900 + 300 + 4000 + 600
    assert chain.describe().endswith(f"= {format_duration(5800)}") and format_duration(5800) == "1 h 36 min 40 s"
