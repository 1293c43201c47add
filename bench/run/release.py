"""`python -m bench.run.release release|wake`: give a benchmarked server's GPUs back once the answer
is in, and take them again for a new sweep. Runs in the cluster, as the GPU release Job
(components/release_job.py), with its own service account; stdlib only (bench/common/kube.py).

  release  waits until every Job named by --job (the server's start-up record and sweep, the
           report and the mixed-traffic check that read it) has ended, Complete or Failed: none
           of them will use the server again. Then it scales the server's Deployment (--deployment)
           to 0 replicas through its `scale` subresource; Karpenter removes the emptied GPU node
           (consolidation WhenEmpty). A server already at 0 is left as it is.
  wake     a new sweep of a released server: scales the Deployment back to --replicas (only when
           it is at 0) and waits until that many pods are available, so the sweep's Jobs find it.

The Role of the Job (components/release_job.py) grants `get` and `patch` on the scale of the stack's
own server Deployments, `get` on those Deployments and on the Jobs it waits for, by name, nothing
else: a typo in a name here is a 403, reported with the name, exit 2.

Exit codes: 0 done (released, already released, awake); 1 a wake that outlasted --timeout-seconds;
2 bad arguments or a grant the Role does not give; 130/143 stopped (nothing half-done: a scale is
one request; run the same command again).
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from typing import Any, Callable, Protocol

from bench.common import kube
from bench.common.interrupts import exit_code, signal_name, stop_on_signals

TERMINAL = ("Complete", "Failed")


class Api(Protocol):
    def get(self, path: str, **params: str) -> dict[str, Any]: ...

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{_q(namespace)}/jobs/{_q(name)}"


def deployment_path(namespace: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments/{_q(name)}"


def scale_path(namespace: str, name: str) -> str:
    return deployment_path(namespace, name) + "/scale"


def job_state(job: dict[str, Any]) -> str | None:
    """`Complete` or `Failed` once the Job has ended, else None (still running, or not started)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in TERMINAL and condition.get("status") == "True":
            return condition["type"]
    return None


class Denied(Exception):
    """The Role does not grant a request: a wrong name or a missing rule, never fixed by waiting."""


def _get(api: Api, path: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist (yet); a 403 is final, other errors are retried."""
    try:
        return api.get(path)
    except kube.KubeError as exc:
        if exc.status == 404:
            return None
        if exc.status in (401, 403):
            raise Denied(str(exc)) from None
        raise


def pending_jobs(api: Api, namespace: str, jobs: list[str], log: Callable[[str], None]) -> list[str]:
    """The Jobs of `jobs` that have not ended; a Job not created yet counts as pending."""
    pending = []
    for name in jobs:
        try:
            job = _get(api, job_path(namespace, name))
        except kube.KubeError as exc:  # the API server restarting, a network blip: ask again next round
            log(f"release: {exc}; asking again")
            pending.append(name)
            continue
        if job is None or job_state(job) is None:
            pending.append(name)
    return pending


def scale_to(api: Api, namespace: str, deployment: str, replicas: int) -> int:
    """Set the Deployment's replicas through its scale subresource; returns the replicas it had."""
    scale = _get(api, scale_path(namespace, deployment))
    if scale is None:
        raise Denied(f"deployment {namespace}/{deployment} does not exist")
    before = int((scale.get("spec") or {}).get("replicas") or 0)
    if before != replicas:
        try:
            api.patch(scale_path(namespace, deployment), {"spec": {"replicas": replicas}})
        except kube.KubeError as exc:
            if exc.status in (401, 403):
                raise Denied(str(exc)) from None
            raise
    return before


def release(api: Api, namespace: str, deployment: str, jobs: list[str], *, poll_s: float,
            log: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> int:
    waiting: list[str] | None = None
    while True:
        pending = pending_jobs(api, namespace, jobs, log)
        if not pending:
            break
        if pending != waiting:
            log(f"release: {deployment} keeps its GPUs while {', '.join(pending)} "
                f"{'has' if len(pending) == 1 else 'have'} not ended")
            waiting = pending
        sleep(poll_s)
    while True:
        try:
            before = scale_to(api, namespace, deployment, 0)
            break
        except kube.KubeError as exc:  # not a denial: the API server busy or restarting
            log(f"release: {exc}; trying again")
            sleep(poll_s)
    if before == 0:
        log(f"release: {deployment} is already at 0 replicas; nothing to do")
    else:
        log(f"release: every Job that uses {deployment} has ended ({', '.join(jobs)}); scaled it from "
            f"{before} to 0 replicas: Karpenter removes its GPU node once it is empty")
    return 0


def wake(api: Api, namespace: str, deployment: str, replicas: int, *, poll_s: float, timeout_s: float,
         log: Callable[[str], None], sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> int:
    before = scale_to(api, namespace, deployment, replicas) if _at_zero(api, namespace, deployment) else None
    if before is not None:
        log(f"wake: {deployment} was released (0 replicas); scaled to {replicas} for a new sweep")
    deadline = clock() + timeout_s
    while True:
        found = _get(api, deployment_path(namespace, deployment)) or {}
        available = int((found.get("status") or {}).get("availableReplicas") or 0)
        if available >= replicas:
            log(f"wake: {deployment} has {available} available replica(s)")
            return 0
        if clock() >= deadline:
            log(f"wake: {deployment} has {available} of {replicas} replicas available after {timeout_s:g} s; "
                f"see `kubectl -n {namespace} describe deployment {deployment}` (a GPU node, the image, the model)")
            return 1
        sleep(poll_s)


def _at_zero(api: Api, namespace: str, deployment: str) -> bool:
    scale = _get(api, scale_path(namespace, deployment))
    return scale is not None and not int((scale.get("spec") or {}).get("replicas") or 0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("release", help="scale the server to 0 once every Job that uses it has ended")
    r.add_argument("--job", action="append", required=True, metavar="NAME",
                   help="a Job that uses the server (repeatable): its sweep, start-up record, report, mix check")
    w = sub.add_parser("wake", help="scale a released server back up and wait until it is available")
    w.add_argument("--replicas", type=int, default=1, help="replicas to scale to (default %(default)s)")
    w.add_argument("--timeout-seconds", type=float, default=2700.0,
                   help="give up (exit 1) after this long without the replicas available (default %(default)g)")
    for p in (r, w):
        p.add_argument("--namespace", required=True, help="the servers' namespace")
        p.add_argument("--deployment", required=True, help="the server's Deployment")
        p.add_argument("--poll-seconds", type=float, default=60.0, help="how often to ask (default %(default)g)")
    return parser


def main(argv: list[str] | None = None, api: Api | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.poll_seconds <= 0 or getattr(args, "replicas", 1) < 1:
        print(f"{args.command}: error: --poll-seconds must be positive and --replicas at least 1", file=sys.stderr)
        return 2
    api = api or kube.InCluster.from_environment()
    if api is None:
        print(f"{args.command}: error: no service-account token: this command runs in the cluster, as the "
              "GPU release Job", file=sys.stderr)
        return 2
    log = lambda text: print(text, flush=True)  # noqa: E731
    try:
        with stop_on_signals():
            if args.command == "release":
                return release(api, args.namespace, args.deployment, args.job, poll_s=args.poll_seconds, log=log)
            return wake(api, args.namespace, args.deployment, args.replicas, poll_s=args.poll_seconds,
                        timeout_s=args.timeout_seconds, log=log)
    except Denied as exc:
        print(f"{args.command}: error: {exc} (the release Role names each server Deployment and Job it may "
              "use: components/release_job.py)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"{args.command}: stopped by {signal_name(exc)}; nothing is half-done, run the same command again",
              file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
