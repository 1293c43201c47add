"""How long the Jobs Pulumi manages live, and how long Pulumi waits for them, over every stack file.

A Job with `ttlSecondsAfterFinished` deletes itself; the next `pulumi up --refresh` then finds it gone
and creates it again: a start-up record or a whole benchmark sweep nobody asked for. And Pulumi waits
10 minutes for a Job unless `pulumi.com/timeoutSeconds` says otherwise, so an awaited Job whose
deadline is longer would fail `up` while it is still allowed to run.
"""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.pulumi_stack import render_with, stack_config

PULUMI_DEFAULT_WAIT_S = 600


def _jobs(rendered) -> list[dict]:
    return rendered.k8s("Job")


@pytest.fixture(scope="module")
def streamer_render():
    # No shipped stack runs the streamer Job: render dev with one, so that Job is covered too.
    pools = copy.deepcopy(stack_config("dev")["vllm-poc:gpuPools"])
    pools[0]["streamerJob"] = {"concurrencies": [16], "memoryLimitGib": [8]}
    return render_with(gpuPools=pools)


def _renders(all_stacks, streamer_render):
    return {**all_stacks, "dev+streamer": streamer_render}


def test_every_kind_of_job_is_covered(all_stacks, streamer_render):
    kinds = {j["metadata"]["labels"]["app.kubernetes.io/name"]
             for rendered in _renders(all_stacks, streamer_render).values() for j in _jobs(rendered)}
    assert {"vllm-weight-sync", "vllm-gpu-node-check", "vllm-startup", "vllm-bench",
            "vllm-streamer"} <= kinds, kinds


def test_no_job_deletes_itself(all_stacks, streamer_render):
    for stack, rendered in _renders(all_stacks, streamer_render).items():
        for job in _jobs(rendered):
            assert "ttlSecondsAfterFinished" not in job["spec"], (stack, job["metadata"]["name"])


def test_pulumi_waits_at_least_as_long_as_each_awaited_job_may_run(all_stacks, streamer_render):
    awaited = 0
    for stack, rendered in _renders(all_stacks, streamer_render).items():
        for job in _jobs(rendered):
            annotations = job["metadata"].get("annotations") or {}
            if annotations.get("pulumi.com/skipAwait") == "true":
                continue
            awaited += 1
            name = job["metadata"]["name"]
            deadline = job["spec"]["activeDeadlineSeconds"]
            wait = int(annotations.get("pulumi.com/timeoutSeconds", PULUMI_DEFAULT_WAIT_S))
            assert wait >= deadline, f"{stack}: Pulumi gives up on {name} after {wait} s, its deadline is {deadline} s"
    assert awaited >= 3
