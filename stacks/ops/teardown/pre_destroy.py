"""pre-destroy's steps: kubectl deletes built from the stack's labels (Jobs, Deployments, NodePools,
EC2NodeClasses, in that order), then a bounded wait until Karpenter's instances are gone."""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

from components.labels import PART_OF_SELECTOR
from stacks.ops.teardown.ownership import describe_instance, karpenter_instances


@dataclass(frozen=True)
class Step:
    description: str
    argv: list[str]
    timeout_s: int
    missing_type_ok: bool = True  # the CRD may already be gone: nothing to delete


def kubectl(kubeconfig: str | None, context: str | None, *args: str) -> list[str]:
    argv = ["kubectl"]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    return argv + list(args)


def update_kubeconfig_step(cluster: str, region: str, path: str) -> Step:
    return Step(
        f"write a kubeconfig for EKS cluster {cluster}",
        ["aws", "eks", "update-kubeconfig", "--name", cluster, "--region", region, "--kubeconfig", path],
        timeout_s=120,
        missing_type_ok=False,
    )


def delete_steps(
    kubeconfig: str | None, context: str | None, selector: str = PART_OF_SELECTOR, wait_minutes: int = 15
) -> list[Step]:
    common = ["--selector", selector, "--ignore-not-found", "--wait", f"--timeout={wait_minutes}m"]
    return [
        Step(
            "delete bench Jobs (and their pods)",
            kubectl(kubeconfig, context, "delete", "jobs.batch", "--all-namespaces", "--cascade=foreground", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        Step(
            "delete vLLM Deployments",
            kubectl(kubeconfig, context, "delete", "deployments.apps", "--all-namespaces", "--cascade=foreground", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        Step(
            "delete Karpenter NodePools (Karpenter drains and terminates their nodes)",
            kubectl(kubeconfig, context, "delete", "nodepools.karpenter.sh", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
        # The EC2NodeClass finalizer waits for its NodeClaims, then removes the launch templates and
        # instance profiles Karpenter made: done here, while the controller still runs.
        Step(
            "delete EC2NodeClasses (Karpenter removes its launch templates and instance profiles)",
            kubectl(kubeconfig, context, "delete", "ec2nodeclasses.karpenter.k8s.aws", *common),
            timeout_s=wait_minutes * 60 + 60,
        ),
    ]


def wait_for_instances_gone(
    ec2,
    cluster: str,
    timeout_s: float,
    interval_s: float = 15,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = print,
    ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Poll until Karpenter's instances for the cluster are gone; return those left at the deadline."""
    deadline = clock() + timeout_s
    while True:
        left = karpenter_instances(ec2, cluster)
        if ids is not None:
            left = [i for i in left if i["InstanceId"] in ids]
        if not left:
            log("no Karpenter instances left for the cluster")
            return []
        remaining = deadline - clock()
        shown = ", ".join(describe_instance(i) for i in left[:5]) + (" ..." if len(left) > 5 else "")
        if remaining <= 0:
            log(f"timed out: {len(left)} Karpenter instance(s) still there: {shown}")
            return left
        log(f"waiting for {len(left)} Karpenter instance(s) to terminate ({remaining:.0f} s left): {shown}")
        sleep(min(interval_s, remaining))


def run_steps(steps: list[Step], runner: Callable[..., subprocess.CompletedProcess], log: Callable[[str], None]) -> bool:
    for step in steps:
        log(f"--> {step.description}\n    $ {shlex.join(step.argv)}")
        try:
            proc = runner(step.argv, capture_output=True, text=True, timeout=step.timeout_s)
        except FileNotFoundError:
            log(f"    {step.argv[0]} is not installed or not on PATH")
            return False
        except subprocess.TimeoutExpired:
            log(f"    timed out after {step.timeout_s} s")
            return False
        out = (proc.stdout or "").strip()
        err = (proc.stderr or "").strip()
        if out:
            log("    " + out.replace("\n", "\n    "))
        if proc.returncode != 0:
            if step.missing_type_ok and "doesn't have a resource type" in err:
                log("    (resource type not installed: nothing to delete)")
                continue
            log(f"    failed (exit {proc.returncode}): {err}")
            return False
    return True
