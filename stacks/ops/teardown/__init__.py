"""Clean teardown: `python -m stacks pre-destroy <stack>` and `python -m stacks teardown-check <stack>`.

Orphaned Karpenter nodes are the usual teardown bill: once the Karpenter controller is uninstalled
nothing terminates the instances it launched (aws/karpenter-provider-aws #1955, #3179, #6870).

* pre-destroy (before `pulumi destroy`): deletes the stack's bench Jobs, then its vLLM Deployments, then
  its Karpenter NodePools and EC2NodeClasses, through kubectl with the stack's labels
  (`app.kubernetes.io/part-of=vllm-poc`), then waits, bounded, until no EC2 instance that Karpenter
  launched for the cluster is left. Jobs go first because bench pods carry
  `karpenter.sh/do-not-disrupt`, which holds their node's drain.
* teardown-check (after `pulumi destroy`): lists what would be left behind and billed: Karpenter's
  instances, launch templates and instance profiles for this cluster, available ENIs and EBS volumes
  tagged for it (or ENIs in the stack's own VPC), load balancers the AWS Load Balancer Controller or
  the in-tree service controller made for it, and non-empty buckets tagged with the stack. Exit 1 when
  anything unexpected remains. `--delete` removes the orphans after confirmation, in a safe order,
  only ever resources tagged for this cluster; buckets are never deleted (the data decides).

This module is the two commands; the package holds their parts: ownership (what is Karpenter's or
this cluster's), pre_destroy (the kubectl steps and the wait) and leftovers (what is left, and its
deletion).

Without AWS credentials teardown-check checks nothing: it says which reads it needs and how to provide
credentials, and exits 3 (stacks.ops.credentials.INCOMPLETE; its JSON has `complete: false`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from bench.common.interrupts import exit_code, rerun_command, signal_name
from bench.common.options import above_zero, add_renamed
from components.labels import PART_OF_SELECTOR
from stacks.loader import load_settings
from stacks.ops.credentials import HOW_TO_PROVIDE, INCOMPLETE, NotRun, credentials_problem, missing_credentials
from stacks.ops.teardown.leftovers import delete_leftovers, find_leftovers, format_leftovers, unexpected
from stacks.ops.teardown.pre_destroy import Step, delete_steps, run_steps, update_kubeconfig_step, wait_for_instances_gone
from stacks.settings import REPO

PRE_DESTROY = "pre-destroy"
TEARDOWN_CHECK = "teardown-check"

# What teardown-check reads (and with --delete removes) in the stack's account and region.
TEARDOWN_READS = NotRun(
    "leftovers", "Karpenter's instances, launch templates and instance profiles, ENIs, EBS volumes, load "
    "balancers, log groups and non-empty buckets left for the cluster",
    "ec2:DescribeInstances, ec2:DescribeLaunchTemplates, ec2:DescribeNetworkInterfaces, ec2:DescribeVolumes, "
    "iam:ListInstanceProfiles, iam:GetInstanceProfile, elasticloadbalancing:DescribeLoadBalancers, "
    "elasticloadbalancing:DescribeTags, logs:DescribeLogGroups, s3:ListAllMyBuckets, s3:GetBucketTagging, "
    "s3:ListBucket; with --delete also the matching Terminate/Delete actions")


def _load_settings(stack: str, directory: str | None = None):
    # Only what teardown needs (region, cluster, network, storage): a serving setting that no longer
    # validates must never block cleaning up.
    return load_settings(stack, Path(directory) if directory else REPO, scope="cluster")


def make_clients(region: str) -> dict[str, Any]:
    import boto3

    return {name: boto3.client(name, region_name=region) for name in ("ec2", "iam", "elbv2", "elb", "s3", "logs")}


def add_parser(subparsers) -> None:
    pre = subparsers.add_parser(
        PRE_DESTROY,
        help="before `pulumi destroy`: delete bench Jobs, vLLM Deployments, NodePools; wait for Karpenter's nodes",
        description="Delete the stack's bench Jobs, vLLM Deployments, Karpenter NodePools and EC2NodeClasses (by label "
                    f"{PART_OF_SELECTOR}) and wait until Karpenter's EC2 instances are gone.",
    )
    pre.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    pre.add_argument("--kubeconfig", help="kubeconfig of the cluster (default: written by `aws eks update-kubeconfig`)")
    pre.add_argument("--context", help="kubeconfig context to use")
    add_renamed(pre, "--wait-minutes", type=above_zero(float), default=20,
                help="how long to wait for the instances to go (default %(default)s)")
    add_renamed(pre, "--poll-s", type=above_zero(float), default=10, dest="poll_seconds", help=argparse.SUPPRESS)
    pre.add_argument("--dry-run", action="store_true", help="print the commands, change nothing")
    pre.add_argument("--dir", help="directory holding the stack files (default: the project)")
    pre.set_defaults(func=run_pre_destroy)

    check = subparsers.add_parser(
        TEARDOWN_CHECK,
        help="after `pulumi destroy`: list (and with --delete remove) what is left behind and billed",
        description="List Karpenter instances, launch templates, instance profiles, ENIs, volumes, load "
                    "balancers and non-empty buckets left for the stack; exit 1 if any unexpected remain.",
    )
    check.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    check.add_argument("--delete", action="store_true", help="remove the orphans tagged for this cluster")
    check.add_argument("--yes", action="store_true", help="with --delete: do not ask for confirmation")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    check.add_argument("--dir", help="directory holding the stack files (default: the project)")
    check.add_argument("--wait-minutes", type=above_zero(float), default=10,
                       help="with --delete: how long to wait for terminations (default %(default)s)")
    check.set_defaults(func=run_teardown_check)


def _on_interrupt(command: str, kept: str) -> Callable:
    """Ctrl-C or SIGTERM: say what stays done and how to go on, exit 130 or 143, no traceback."""
    def wrap(func: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(func)
        def run(*args, **kwargs) -> int:
            try:
                return func(*args, **kwargs)
            except KeyboardInterrupt as exc:
                print(f"{command}: stopped by {signal_name(exc)}; {kept}. Rerun: {rerun_command('stacks')}",
                      file=sys.stderr, flush=True)
                return exit_code(exc)
        return run
    return wrap


@_on_interrupt(PRE_DESTROY, "what was deleted stays deleted and every step is safe to repeat")
def run_pre_destroy(args: argparse.Namespace, clients: dict[str, Any] | None = None,
                    runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                    sleep: Callable[[float], None] = time.sleep) -> int:
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
    except Exception as exc:  # noqa: BLE001
        print(f"{PRE_DESTROY}: error: {exc}", file=sys.stderr)
        return 2
    cluster, region = settings.cluster.name, settings.region
    with tempfile.TemporaryDirectory(prefix="vllm-poc-kube-") as tmp:
        steps: list[Step] = []
        kubeconfig = args.kubeconfig
        if not kubeconfig:
            kubeconfig = os.path.join(tmp, "kubeconfig")
            steps.append(update_kubeconfig_step(cluster, region, kubeconfig))
        steps += delete_steps(kubeconfig, args.context)
        if args.dry_run:
            for step in steps:
                print(f"# {step.description}\n{shlex.join(step.argv)}")
            print(f"# then wait up to {args.wait_minutes:g} min until no EC2 instance tagged karpenter.sh/nodepool "
                  f"and kubernetes.io/cluster/{cluster}=owned (or eks:eks-cluster-name={cluster}) is left in {region}")
            return 0
        if clients is None and (missing := missing_credentials()):
            print(f"{PRE_DESTROY} {cluster} in {region}: NOT RUN, {missing}.\n"
                  "  it needs the credentials `pulumi up` used (EKS access for kubectl, ec2:DescribeInstances for the "
                  f"wait); `--dry-run` prints its steps without them.\n  to run it: {HOW_TO_PROVIDE}", file=sys.stderr)
            return INCOMPLETE
        if not run_steps(steps, runner, print):
            print(f"{PRE_DESTROY}: a cleanup command failed; fix it and rerun (it is safe to repeat)", file=sys.stderr)
            return 1
    try:
        ec2 = (clients or make_clients(region))["ec2"]
        left = wait_for_instances_gone(ec2, cluster, args.wait_minutes * 60, args.poll_seconds, sleep=sleep)
    except Exception as exc:  # noqa: BLE001
        print(f"{PRE_DESTROY}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if left:
        print(f"{PRE_DESTROY}: Karpenter instances remain; check the controller logs, or after `pulumi destroy` run "
              f"`python -m stacks {TEARDOWN_CHECK} {args.stack} --delete`", file=sys.stderr)
        return 1
    return 0


@_on_interrupt(TEARDOWN_CHECK, "deletions already sent stay done, nothing else was changed")
def run_teardown_check(args: argparse.Namespace, clients: dict[str, Any] | None = None,
                       confirm: Callable[[str], str] = input, sleep: Callable[[float], None] = time.sleep) -> int:
    try:
        settings = _load_settings(args.stack, args.dir) if getattr(args, "dir", None) else _load_settings(args.stack)
        cluster, region = settings.cluster.name, settings.region
        if clients is None and (missing := missing_credentials()):
            return _without_credentials(args, cluster, region, missing)
        clients = clients or make_clients(region)
        aws = {k: clients[k] for k in ("ec2", "iam", "elbv2", "elb")}
        leftovers = find_leftovers(cluster, args.stack, **aws, s3=clients["s3"],
                                   vpc_id=getattr(settings.network, "vpc_id", None),
                                   teardown=settings.storage.teardown, logs=clients.get("logs"))
    except Exception as exc:  # noqa: BLE001
        if (problem := credentials_problem(exc)) is not None:
            return _without_credentials(args, cluster, region, problem)
        print(f"{TEARDOWN_CHECK}: error: {exc if isinstance(exc, ValueError) else f'{type(exc).__name__}: {exc}'}",
              file=sys.stderr)
        return 2

    if args.json and not args.delete:
        print(json.dumps({"cluster": cluster, "region": region, "ok": not unexpected(leftovers),
                          "leftovers": [asdict(x) for x in leftovers]}, indent=2))
        return 1 if unexpected(leftovers) else 0
    print(format_leftovers(leftovers, cluster, region))
    removable = [x for x in unexpected(leftovers) if x.deletable]
    if not args.delete or not removable:
        return 1 if unexpected(leftovers) else 0

    if not args.yes:
        if not sys.stdin.isatty() and confirm is input:
            print(f"{TEARDOWN_CHECK}: refusing to delete without a terminal; pass --yes", file=sys.stderr)
            return 2
        answer = confirm(f"Delete the {len(removable)} resource(s) above in {region}? Type the cluster name ({cluster}): ")
        if answer.strip() != cluster:
            print("not confirmed; nothing deleted")
            return 1
    errors = delete_leftovers(leftovers, cluster, **aws, wait_timeout_s=args.wait_minutes * 60, sleep=sleep)
    after = find_leftovers(cluster, args.stack, **aws, s3=clients["s3"],
                           vpc_id=getattr(settings.network, "vpc_id", None), teardown=settings.storage.teardown,
                           logs=clients.get("logs"))
    print()
    print(format_leftovers(after, cluster, region))
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    return 1 if unexpected(after) or errors else 0


def _without_credentials(args: argparse.Namespace, cluster: str, region: str, why: str) -> int:
    """Nothing could be checked: say what the check reads and how to give it credentials; exit 3."""
    if args.json:
        print(json.dumps({"cluster": cluster, "region": region, "ok": False, "complete": False, "result": "incomplete",
                          "exit_code": INCOMPLETE, "credentials": why, "not_run": [TEARDOWN_READS.to_dict()],
                          "how_to_provide_credentials": HOW_TO_PROVIDE, "leftovers": []}, indent=2))
    else:
        print(f"{TEARDOWN_CHECK} {cluster} in {region}: NOT RUN, {why}.\n"
              f"  it lists {TEARDOWN_READS.answers}\n"
              f"  reads: {TEARDOWN_READS.reads}\n"
              f"  to run it: {HOW_TO_PROVIDE}\n"
              f"RESULT: INCOMPLETE - nothing was checked (exit {INCOMPLETE})")
    return INCOMPLETE


def main(argv: list[str] | argparse.Namespace | None = None) -> int:
    """`pre-destroy|teardown-check <stack> ...` as `python -m stacks` reads them."""
    if isinstance(argv, argparse.Namespace):
        return argv.func(argv)
    parser = argparse.ArgumentParser(prog="python -m stacks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)
