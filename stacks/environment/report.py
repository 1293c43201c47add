"""The stack's answer: the report Job (bench.compare) and the stack output `report`.

The Job (components/report_job.py) gets its own service account and role, scoped to the sweeps it
reads and to its own report prefix. The output is `{"uri": "s3://.../runs/<stack>/report/<hash>/",
"state": "pass" | "fail" | "inconclusive" | "failed" | null}` (with `"reason"` when failed): the
state is read from the report's summary.json when `pulumi up` runs (a listing of the prefix, then
the file), so it is null until the Job has written the report, and the next `pulumi up` after that
shows it. A Job that failed says so in status.json (bench publish): the output shows
`"state": "failed"` and the reason, and that same `up` recreates the Job (failures/ counts the
attempts; components/report_job.py). A written report of a round past the first (bench.round) adds
`"rounds"`: how many earlier rounds it pooled and which it left out, from its status.json.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from bench.analysis import answer
from components.cluster import Cluster
from components.labels import PART_OF
from components.mix_check_job import MixCheckJob, MixCheckJobArgs
from components.report_job import (REPEATED_ROLES, ReportJob, ReportJobArgs, ReportSweep, deadline_hours, inputs_hash,
                                   job_name, report_prefix, report_statements)
from components.vllm_server import VllmServer, selector_labels
from components.weight_store import WeightStore, model_prefix, results_prefix
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs
from stacks.settings import StackSettings
from stacks.versions import locked, pins

REPORT_SERVICE_ACCOUNT = "vllm-report"
# The mixed-traffic check runs as the bench (bench.SERVICE_ACCOUNT, spelled again here: bench.py imports this
# module through release.py): its server's tokenizer and the stack's results prefix, where the report's
# prefix lies.
BENCH_SERVICE_ACCOUNT = "vllm-bench"
SUMMARY = "summary.json"
STATUS = "status.json"  # bench publish's progress file; `failed` with a note when the Job failed
FAILURES = "failures/"  # one file per failed attempt (bench/analysis/publish/sweeps.py)


def report_sweeps(settings: StackSettings, prefixes: dict[str, str],
                  earlier: dict[str, list[str]] | None = None) -> list[ReportSweep]:
    """The sweeps the comparison reads, with their results prefixes (runs/<stack>/<server>/<hash>/) and, for
    the candidate and the baseline, the prefixes of their configuration's earlier rounds (bench.round)."""
    compare = settings.bench.compare
    assert compare is not None

    def sweep(role: str, server: str) -> ReportSweep:
        rounds = tuple((earlier or {}).get(server, ())) if role in REPEATED_ROLES else ()
        return ReportSweep(role, server, prefixes[server], rounds)

    sweeps = [sweep("candidate", compare.candidate)] if compare.candidate else []
    sweeps.append(sweep("baseline", compare.baseline))
    sweeps += [sweep("variant", v) for v in compare.variants]
    return sweeps


def report_args(settings: StackSettings, prefixes: dict[str, str], *, namespace: str, results_bucket: Any,
                code: dict[str, str], earlier: dict[str, list[str]] | None = None) -> ReportJobArgs:
    compare = settings.bench.compare
    assert compare is not None
    return ReportJobArgs(
        stack=settings.stack,
        namespace=namespace,
        image=pins().weight_sync_image,
        service_account=REPORT_SERVICE_ACCOUNT,
        results_bucket=results_bucket,
        report_root=f"{results_prefix(settings.stack)}report/",
        sweeps=report_sweeps(settings, prefixes, earlier),
        settings={"current_replicas": compare.current_replicas, "threshold": compare.threshold,
                  "verdict_basis": compare.verdict_basis, "headroom": compare.headroom, "spares": compare.spares,
                  "mix": dict(sorted(compare.mix.items())), "mixed_traffic": compare.mixed_traffic},
        code=code,
        requirements=locked("report"),
        region=settings.region,
    )


def report_reading(bucket: pulumi.Input[str], prefix: str, provider: aws.Provider) -> pulumi.Output[dict[str, Any]]:
    """What the report's prefix says at `pulumi up` (a listing, then one file): {"state": the verdict
    state from summary.json, or "failed" when status.json says so, else None; "reason": why it failed;
    "failures": how many attempts failed (files under failures/)}."""
    invoke = pulumi.InvokeOptions(provider=provider)
    listing = aws.s3.get_objects_output(bucket=bucket, prefix=prefix, opts=invoke)

    def read(values: list[Any]) -> Any:
        name, result = values
        keys = result.keys or []
        failures = len([k for k in keys if k.startswith(f"{prefix}{FAILURES}")])
        for file, parse in ((SUMMARY, _state), (STATUS, _failed)):
            if f"{prefix}{file}" in keys:
                body = aws.s3.get_object_output(bucket=name, key=f"{prefix}{file}", opts=invoke).body
                found = body.apply(lambda text, parse=parse: {**parse(text), "failures": failures})
                if file == SUMMARY and f"{prefix}{STATUS}" in keys:
                    # a written report: which earlier rounds (bench.round) it pooled, from its status.json
                    status = aws.s3.get_object_output(bucket=name, key=f"{prefix}{STATUS}", opts=invoke).body
                    return pulumi.Output.all(found, status).apply(lambda v: {**v[0], **_rounds(v[1])})
                return found
        return {"state": None, "failures": failures}

    return pulumi.Output.all(bucket, listing).apply(read)


def _state(body: str | None) -> dict[str, Any]:
    try:
        return {"state": answer.verdict_state(json.loads(body)) if body else None}
    except ValueError:
        return {"state": None}


def _rounds(body: str | None) -> dict[str, Any]:
    """status.json of a written report that had earlier rounds to pool: {"rounds": one plain sentence}; else {}."""
    try:
        status = json.loads(body) if body else {}
    except ValueError:
        return {}
    rows = status.get("earlier_rounds") if isinstance(status, dict) else None
    if not isinstance(rows, list) or not rows:
        return {}
    pooled = [r for r in rows if isinstance(r, dict) and r.get("pooled")]
    left = [str(r.get("uri")) for r in rows if isinstance(r, dict) and not r.get("pooled")]
    words = f"{len(pooled)} of {len(rows)} earlier rounds pooled into the figures"
    if left:
        words += f"; left out: {', '.join(left)} (why: earlier_rounds in {STATUS} under uri)"
    return {"rounds": words}


def _failed(body: str | None) -> dict[str, Any]:
    """status.json of a report Job that failed: the state and its note; any other status: no state yet."""
    try:
        status = json.loads(body) if body else {}
    except ValueError:
        return {"state": None}
    if not isinstance(status, dict) or status.get("state") != "failed":
        return {"state": None}
    reason = status.get("note") or "the report Job failed; see its log"
    return {"state": "failed", "reason": f"{reason} (updated {status.get('updated_at') or 'at an unknown time'}); "
                                          "the next `pulumi up` runs it again"}


def report_output(uri: pulumi.Output[str], reading: pulumi.Output[dict[str, Any]]) -> dict[str, Any]:
    """The stack output `report`: {"uri", "state"}; for a failed Job, "reason"; for a report that had earlier
    rounds to pool (bench.round), "rounds": how many it pooled and which it left out."""
    out: dict[str, Any] = {"uri": uri, "state": reading.apply(lambda r: r["state"])}
    return pulumi.Output.all(out["uri"], out["state"], reading).apply(
        lambda v: {"uri": v[0], "state": v[1], **{k: v[2][k] for k in ("reason", "rounds") if v[2].get(k)}})


def mixcheck_job_name(stack: str, digest: str) -> str:
    return f"mixcheck-{stack}-{digest[:10]}"[:63]


def report_job_names(settings: StackSettings, prefixes: dict[str, str], *, namespace: str,
                     code: dict[str, str], earlier: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """server -> the report-side Jobs that read its sweep (the report) or run on it (the mixed-traffic
    check), by the names report_job gives them; empty without bench.compare."""
    compare = settings.bench.compare
    if compare is None:
        return {}
    args = report_args(settings, prefixes, namespace=namespace, results_bucket="", code=code, earlier=earlier)
    digest = inputs_hash(args)
    names = {sweep.server: [job_name(settings.stack, digest)] for sweep in args.sweeps}
    if compare.mixed_traffic and compare.candidate:
        names[compare.candidate].append(mixcheck_job_name(settings.stack, digest))
    return names


def mix_check_job(settings: StackSettings, report: ReportJob, servers: dict[str, VllmServer], *,
                  namespace_name: str, weights_bucket: str, code: dict[str, str],
                  depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions) -> MixCheckJob:
    """bench.compare.mixedTraffic: the plan's mix on the candidate's server, once the plan exists."""
    candidate = settings.bench.compare.candidate
    server = servers[candidate]
    return MixCheckJob(
        "mix-check",
        MixCheckJobArgs(
            stack=settings.stack,
            server=candidate,
            namespace=namespace_name,
            image=server.spec.image,
            service_account=BENCH_SERVICE_ACCOUNT,
            base_url=server.url,
            served_model=server.spec.served_model_name,
            tokenizer_uri=f"s3://{weights_bucket}/{model_prefix(settings.server(candidate).profile.hf_id)}",
            report_uri=report.uri,
            configuration=f"{settings.stack}/{candidate}",
            server_pod_labels=selector_labels(server.spec),
            region=settings.region,
            code=code,
            job_name=mixcheck_job_name(settings.stack, report.digest),
            wait_hours=deadline_hours(report.args),
            api_key_secret=settings.security.api_key_secret,
            depends_on=depends_on,
        ),
        opts=opts,
    )


def report_job(settings: StackSettings, prefixes: dict[str, str], earlier: dict[str, list[str]], *,
               namespace_name: str,
               namespace: k8s.core.v1.Namespace, cluster: Cluster, store: WeightStore, account_id: str,
               code: dict[str, str], aws_provider: aws.Provider, bench_jobs: list[pulumi.Resource],
               servers: dict[str, VllmServer], weights_bucket: str, bench_access: list[pulumi.Resource],
               opts: pulumi.ResourceOptions) -> tuple[dict[str, pulumi.Output[Any]] | None, list[pulumi.Resource]]:
    """The report Job of a stack with bench.compare, its identity, and the stack output `report`;
    with the Jobs it created (the report, the mixed-traffic check)."""
    if settings.bench.compare is None:
        return None, []
    args = report_args(settings, prefixes, namespace=namespace_name, results_bucket=store.results_bucket_name,
                       code=code, earlier=earlier)
    prefix = report_prefix(args, inputs_hash(args))
    identity = WorkloadIdentity(
        "report-identity",
        WorkloadIdentityArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            account_id=account_id,
            namespace=namespace_name,
            service_account=REPORT_SERVICE_ACCOUNT,
            # its sweeps and their earlier rounds (read where present)
            statements=report_statements(store.results_bucket_arn,
                                         [p for s in args.sweeps for p in (s.prefix, *s.earlier)], prefix,
                                         settings.storage.kms_key_arn),
            labels={"app.kubernetes.io/name": "vllm-report", **PART_OF},
            depends_on=[namespace, cluster.pod_identity_agent],
        ),
        opts=opts,
    )
    reading = report_reading(store.results_bucket_name, prefix, aws_provider)
    # After the bench Jobs it reads (created, not finished: it waits for their sweeps in S3 itself).
    # A failed attempt found in S3 recreates the Job (a new attempt number in its pod template).
    job = ReportJob("report", replace(args, depends_on=[namespace, identity.association, identity.service_account,
                                                        *bench_jobs],
                                      failed_attempts=reading.apply(lambda r: r["failures"])), opts=opts)
    jobs: list[pulumi.Resource] = [job.job]
    if settings.bench.compare.mixed_traffic:
        jobs.append(mix_check_job(settings, job, servers, namespace_name=namespace_name, weights_bucket=weights_bucket,
                                  code=code, depends_on=[*bench_access, job.job], opts=opts).job)
    return report_output(job.uri, reading), jobs
