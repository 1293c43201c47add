"""The report Job: from the stack's bench sweeps in S3 to the answer, written beside them in S3.

One Job per stack that names a comparison (`bench.compare`). It runs `python -m bench publish`
(bench/analysis/publish/): it waits in the cluster until every sweep it reads has finished (it polls their
manifests in S3; `pulumi up` never waits for it, `pulumi.com/skipAwait`), then runs `bench report`,
`bench plan` and, for variants, `bench compare` on those sweeps with the prices and capacity types
they recorded, and uploads every file as it is written to `runs/<stack>/report/<hash>/`.

The hash in its name and prefix covers what decides the answer: the comparison settings, the
sweeps' results prefixes (each named by its bench Job's own hash: hardware, image, flags, sweep
settings, bench code), the bench code, the image and the report's requirements. A change to any of
them is a new Job and a new prefix; an unchanged `pulumi up` leaves the finished Job alone. A sweep
resumed after a Spot interruption keeps its prefix: the Job waits for it to finish, and a sweep
that changes after its report was written is reported again when the Job runs next.

With `bench.round` past 1 every sweep carries the prefixes of its configuration's earlier rounds
(`ReportSweep.earlier`): in the hash (a new report per round), in the identity's read grant, and passed
to publish as `--candidate-repeat`, `--baseline-repeat`, `--variant-repeat`, which pools those it finds
finished and names the others; it waits only for the current round.

Image: the pinned plain Python image the weight sync uses (tens of MB, on the system nodes), with
the bench package from an immutable ConfigMap and its pinned requirements (the `report` extra:
boto3, matplotlib, numpy, with every transitive dependency locked in requirements-report.lock)
pip-installed at start, retried in the pod for about an hour. A failed Job (status.json `failed`,
one more file under failures/) shows in the stack output `report` as `"state": "failed"` with the
reason, and the next `pulumi up` recreates it (a new attempt number in its pod template). The vLLM image would do without pip for boto3,
but it lists no matplotlib (vLLM's `bench` extra holds it, and the image installs vLLM without
that extra), and at ~25 GB it would take minutes and half a system node's disk. So the pod carries
the internet-egress label for PyPI (HTTPS to public addresses, nothing private); besides, it has
only what every pod in the namespace has: DNS, the Pod Identity agent and S3. No Kubernetes token,
the restricted pod security of every workload, and an identity that reads only the sweeps it
reports on (and its own prefix) and writes only its own report prefix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod, code_volume
from components.cluster import SYSTEM_LABEL, SYSTEM_TAINT_KEY
from components.labels import PART_OF
from components.network_policy import INTERNET_EGRESS_LABEL
from components.pod_security import harden
from components.workload_identity import _kms, _list_condition, _objects

DEPS_DIR = "/opt/deps"
REQUIREMENTS = "requirements-report.txt"
# `python -m bench publish` exit code for arguments a retry cannot fix
FINAL_EXIT_CODE = 2
# The bench Jobs' deadline is 12 h; the report waits a little longer, then reports what is there.
WAIT_HOURS = 13
# With the mixed-traffic check: how long the plan waits for it (once the plan exists, its Job's runs take
# up to mix_check_job.RUN_TIMEOUT_S, 55 min, where a scenario's share of the mix is slow).
MIXED_TRAFFIC_WAIT_HOURS = 2
# The install is retried in the pod, for up to about an hour (a PyPI or NAT outage), long before the
# report's own wait ends: the pins are the whole locked set (requirements-report.lock, generated from
# the `report` extra with its transitive dependencies), installed with --no-deps so nothing floats.
INSTALL_TRIES = 8
_SCRIPT = (
    "n=1\n"
    "until python -m pip install --quiet --no-cache-dir --disable-pip-version-check --root-user-action=ignore "
    f"--only-binary=:all: --no-deps --target {DEPS_DIR} -r {bench_pod.CODE_DIR}/bench/{REQUIREMENTS}; do\n"
    f'  [ "$n" -ge {INSTALL_TRIES} ] && {{ echo "report: pip install failed {INSTALL_TRIES} times; giving up" >&2; exit 1; }}\n'
    '  echo "report: pip install failed (try $n); again in $((n * 60)) s" >&2; sleep $((n * 60)); n=$((n + 1))\n'
    "done\n"
    'exec python -m bench publish "$@"\n'
)
# Pod template annotation: the attempt after failed ones (the count of failures/ under the report's
# prefix, read at `pulumi up`): a new value replaces the failed Job under the same name.
ATTEMPT_ANNOTATION = "vllm-poc/report-attempt"
# The sweeps whose earlier rounds are pooled: the report's sides (`bench report --repeat`, `--baseline-repeat`)
# and the variants (`bench compare`, one label per variant's rounds).
REPEATED_ROLES = ("candidate", "baseline", "variant")


@dataclass(frozen=True)
class ReportSweep:
    role: str  # candidate, baseline or variant
    server: str
    prefix: str  # runs/<stack>/<server>/<bench hash>/ in the results bucket
    # The same configuration's earlier rounds (bench.round), oldest first: pooled where found in S3
    earlier: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReportJobArgs:
    stack: str
    namespace: str
    image: str
    service_account: str
    results_bucket: pulumi.Input[str]
    report_root: str  # runs/<stack>/report/
    sweeps: Sequence[ReportSweep]
    # bench publish settings: current_replicas, threshold, verdict_basis, headroom, spares, mix
    settings: dict[str, Any]
    code: dict[str, str]  # bench package: file name -> source
    requirements: Sequence[str]
    region: str
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = ()
    # failed attempts so far (read from S3 at `pulumi up`): each new count recreates the Job
    failed_attempts: pulumi.Input[int] = 0


def inputs_hash(args: ReportJobArgs) -> str:
    """What decides the answer (see the module docstring); names the Job and the report prefix."""
    payload = {
        "stack": args.stack,
        "settings": args.settings,
        "sweeps": [[s.role, s.server, s.prefix, *([list(s.earlier)] if s.earlier else [])] for s in args.sweeps],
        "image": args.image,
        "requirements": list(args.requirements),
        "code": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(args.code.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def report_prefix(args: ReportJobArgs, digest: str) -> str:
    return f"{args.report_root}{digest[:10]}/"


def job_name(stack: str, digest: str) -> str:
    return f"report-{stack}-{digest[:10]}"[:63]


def publish_args(args: ReportJobArgs, bucket: pulumi.Input[str], prefix: str) -> list[pulumi.Input[str]]:
    """`python -m bench publish` arguments (bucket may be an Output)."""

    def uri(key: str) -> pulumi.Input[str]:
        return f"s3://{bucket}/{key}" if isinstance(bucket, str) else pulumi.Output.concat("s3://", bucket, "/", key)

    argv: list[pulumi.Input[str]] = []
    for sweep in args.sweeps:
        argv += [f"--{sweep.role}", uri(sweep.prefix)]
    # Earlier rounds of each sweep: publish pools those it finds, and names the others.
    for sweep in args.sweeps:
        if sweep.role in REPEATED_ROLES:
            for earlier in sweep.earlier:
                argv += [f"--{sweep.role}-repeat", uri(earlier)]
    s = args.settings
    argv += ["--out", uri(prefix), "--current-replicas", str(s["current_replicas"]),
             "--threshold", f"{s['threshold']:g}", "--basis", s["verdict_basis"],
             "--headroom", f"{s['headroom']:g}", "--spares", str(s["spares"]), "--wait-hours", str(WAIT_HOURS)]
    if s.get("mix"):
        argv += ["--mix", ",".join(f"{k}={v:g}" for k, v in sorted(s["mix"].items()))]
    if s.get("mixed_traffic"):
        argv += ["--mixed-traffic-wait-hours", str(MIXED_TRAFFIC_WAIT_HOURS)]
    return argv


def deadline_hours(args: ReportJobArgs) -> int:
    return WAIT_HOURS + (MIXED_TRAFFIC_WAIT_HOURS if args.settings.get("mixed_traffic") else 0) + 1


def report_statements(results_bucket_arn: pulumi.Input[str], read_prefixes: Sequence[str], write_prefix: str,
                      kms_key_arn: str | None = None) -> list[dict]:
    """Read the sweeps it reports on and its own prefix; write only its own prefix."""
    for prefix in [*read_prefixes, write_prefix]:
        if not prefix.endswith("/") or "*" in prefix:
            raise ValueError(f"prefix {prefix!r} must be a literal prefix ending in '/'")
    readable = [*read_prefixes, write_prefix]
    return [
        {
            "Sid": "ReadSweepsAndOwnReport",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": _objects(results_bucket_arn, *(f"{p}*" for p in readable)),
        },
        {
            # Listing a sweep's folder (the download) and telling a missing manifest from a denied one.
            "Sid": "ListSweepsAndOwnReport",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [results_bucket_arn],
            "Condition": _list_condition(readable),
        },
        {
            "Sid": "WriteOwnReport",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
            "Resource": _objects(results_bucket_arn, f"{write_prefix}*"),
        },
        *_kms(kms_key_arn, ["kms:Decrypt", "kms:GenerateDataKey"]),
    ]


def template_metadata(labels: dict[str, str], failed_attempts: int) -> dict[str, Any]:
    """The pod template's metadata: after failed attempts, the attempt number (a new template, so
    `pulumi up` replaces the failed Job, which Kubernetes never starts again by itself)."""
    meta: dict[str, Any] = {"labels": labels}
    if failed_attempts:
        meta["annotations"] = {ATTEMPT_ANNOTATION: str(int(failed_attempts) + 1)}
    return meta


def job_manifest(args: ReportJobArgs, name: str, code_config_map: str, bucket: pulumi.Input[str],
                 prefix: str) -> dict[str, Any]:
    """The Job as applied (plain data, so tests can check it without Pulumi)."""
    labels = {"app.kubernetes.io/name": "vllm-report", "app.kubernetes.io/instance": args.stack, **PART_OF,
              **args.labels}
    container = {
        "name": "publish",
        "image": args.image,
        "command": ["sh", "-ec", _SCRIPT, "publish"],
        "args": publish_args(args, bucket, prefix),
        "env": [
            {"name": "PYTHONPATH", "value": f"{bench_pod.CODE_DIR}:{DEPS_DIR}"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "AWS_REGION", "value": args.region},
            {"name": "AWS_DEFAULT_REGION", "value": args.region},
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "2Gi"},
            # A CPU limit: it shares the system nodes with Karpenter and CoreDNS, and mostly waits.
            "limits": {"cpu": "1", "memory": "1536Mi"},
        },
        "volumeMounts": [
            {"name": "code", "mountPath": f"{bench_pod.CODE_DIR}/bench", "readOnly": True},
            {"name": "deps", "mountPath": DEPS_DIR},
        ],
    }
    pod_spec = harden({
        "serviceAccountName": args.service_account,
        "restartPolicy": "Never",
        # On SIGTERM it stops within seconds; what it uploaded stays, the next pod starts over from S3.
        "terminationGracePeriodSeconds": 30,
        # The system nodes: it needs no GPU and must not keep a GPU node up while it waits.
        "nodeSelector": {SYSTEM_LABEL: "system"},
        "tolerations": [{"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [
            {"name": "code", "configMap": {"name": code_config_map,
                                           "items": code_volume.items([*args.code, REQUIREMENTS])}},
            {"name": "deps", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    })
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": args.namespace,
            "labels": labels,
            # It waits for sweeps that take hours: `pulumi up` creates it and moves on.
            "annotations": {"pulumi.com/skipAwait": "true"},
        },
        "spec": {
            # Each retry starts over from S3 (the sweeps and what it already uploaded).
            "backoffLimit": 3,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {"action": "FailJob", "onExitCodes": {"containerName": "publish", "operator": "In",
                                                       "values": [FINAL_EXIT_CODE]}},
            ]},
            "activeDeadlineSeconds": deadline_hours(args) * 3600,
            # No ttlSecondsAfterFinished: Pulumi manages the Job, and one that deleted itself would be
            # created again by the next `pulumi up --refresh` (a new run nobody asked for).
            # PyPI for its requirements: HTTPS to public addresses (components/network_policy.py).
            "template": {"metadata": _attempt_metadata({**labels, INTERNET_EGRESS_LABEL[0]: INTERNET_EGRESS_LABEL[1]},
                                                       args.failed_attempts),
                         "spec": pod_spec},
        },
    }


def _attempt_metadata(labels: dict[str, str], failed_attempts: pulumi.Input[int]) -> Any:
    if isinstance(failed_attempts, int):
        return template_metadata(labels, failed_attempts)
    return pulumi.Output.from_input(failed_attempts).apply(lambda n: template_metadata(labels, n or 0))


class ReportJob(pulumi.ComponentResource):
    """The stack's report Job and its code (see the module docstring)."""

    job: k8s.batch.v1.Job
    code: k8s.core.v1.ConfigMap
    uri: pulumi.Output[str]

    def __init__(self, name: str, args: ReportJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:ReportJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.args = args
        self.digest = inputs_hash(args)
        self.job_name = job_name(args.stack, self.digest)
        self.prefix = report_prefix(args, self.digest)
        files = {**args.code, REQUIREMENTS: "".join(f"{r}\n" for r in args.requirements)}
        self.code = bench_pod.code_config_map(
            f"{name}-code", self.job_name, args.namespace,
            {"app.kubernetes.io/name": "vllm-report", **PART_OF}, files, child)
        manifest = job_manifest(args, self.job_name, self.job_name, args.results_bucket, self.prefix)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.code, *args.depends_on])),
        )
        self.uri = pulumi.Output.concat("s3://", args.results_bucket, "/", self.prefix)
        self.register_outputs({"jobName": self.job_name, "uri": self.uri})
