"""The mixed-traffic check Job: the plan's scenarios at once on the candidate's server.

With `bench.compare.mixedTraffic`, `pulumi up` also creates this Job beside the report Job. It runs
`python3 -m bench mix-check` (bench/run/mixcheck.py) in the candidate server's image on the server's
node (no GPU requested; the image is already there), with the bench's service account (tokenizer
files, the stack's results prefix). It waits for the report Job's plan.json in S3, runs one
open-loop `vllm bench serve` per scenario at the same time, at the plan's per-replica rates, and
writes mixed_traffic.json (and the runs under mixed/) into the report's prefix, where the report Job
picks it up and plans again. `pulumi up` does not wait for it (skipAwait). "Did not hold" is a
finding, written to S3 and into the plan; the Job succeeds with it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod
from components.labels import PART_OF
from components.pod_security import harden
from components.vllm_server import api_key_env

POD_NAME = "vllm-mixcheck"
# bench mix-check: 0 held, 1 did not hold (or could not tell); both are answers, written to S3
FINDING_EXIT_CODES = (0, 1)
FINAL_EXIT_CODE = 2
# How long the scenarios' runs may take: the hour the Job's deadline leaves once the plan is there, less
# five minutes for the rest. bench mix-check sends every scenario for one window, as long as the slowest
# scenario needs for its 100 requests (the fewest a p99 can pass on), and refuses a window longer than this
# up front (exit 2): 55 min reach down to 0.03 req/s a replica, where its default of 30 min stopped at 0.056.
RUN_TIMEOUT_S = 3300


@dataclass(frozen=True)
class MixCheckJobArgs:
    stack: str
    server: str  # the candidate server; the pod runs on its node
    namespace: str
    image: str
    service_account: str
    base_url: str
    served_model: str
    tokenizer_uri: str
    report_uri: pulumi.Input[str]  # s3://<results>/runs/<stack>/report/<hash>/ (plan in, check out)
    configuration: str  # the plan's label of the candidate (<stack>/<server>)
    server_pod_labels: dict[str, str]
    region: str
    code: dict[str, str]
    job_name: str
    wait_hours: int
    api_key_secret: str | None = None
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


def pod_labels(server: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": POD_NAME, "app.kubernetes.io/instance": server}


def command(args: MixCheckJobArgs) -> list[pulumi.Input[str]]:
    head = ["python3", "-m", "bench", "mix-check", "--wait-hours", str(args.wait_hours),
            "--base-url", args.base_url, "--model", args.served_model, "--tokenizer", args.tokenizer_uri,
            "--configuration", args.configuration, "--run-timeout-s", str(RUN_TIMEOUT_S)]
    # A finding (held or not) ends the Job successfully; only bad arguments fail it.
    script = (shlex.join(head) + ' --plan "$1" --out "$1"; rc=$?; '
              f'if [ "$rc" -le {max(FINDING_EXIT_CODES)} ]; then exit 0; fi; exit "$rc"')
    return ["sh", "-c", script, "mix-check", args.report_uri]


class MixCheckJob(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: MixCheckJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:MixCheckJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {**pod_labels(args.server), **PART_OF}
        code = bench_pod.code_config_map(f"{name}-code", args.job_name, args.namespace, labels, args.code, child)
        container = {
            "name": "mix-check",
            "image": args.image,
            "command": command(args),
            "env": [
                {"name": "PYTHONPATH", "value": bench_pod.CODE_DIR},
                {"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "AWS_REGION", "value": args.region},
                {"name": "AWS_DEFAULT_REGION", "value": args.region},
                *api_key_env(args.api_key_secret, "OPENAI_API_KEY"),
            ],
            # One client process per scenario; no CPU limit, as the bench client (a throttled client
            # adds its own delay to every latency it measures).
            "resources": {"requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "2Gi"},
                          "limits": {"memory": "4Gi"}},
            "volumeMounts": bench_pod.volume_mounts(),
        }
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": args.job_name, "namespace": args.namespace, "labels": labels,
                      "annotations": {"pulumi.com/skipAwait": "true"}},
            spec={
                "backoffLimit": 2,
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {"action": "FailJob", "onExitCodes": {"containerName": "mix-check", "operator": "In",
                                                           "values": [FINAL_EXIT_CODE]}},
                ]},
                "activeDeadlineSeconds": (args.wait_hours + 1) * 3600,
                # No ttlSecondsAfterFinished: Pulumi manages the Job, and one that deleted itself would be
                # created again by the next `pulumi up --refresh` (a new run nobody asked for).
                "template": {
                    "metadata": {"labels": labels,
                                 # The candidate's node stays while the check runs, as during its sweep.
                                 "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                    "spec": harden({
                        "serviceAccountName": args.service_account,
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 30,
                        "containers": [container],
                        "volumes": bench_pod.volumes(code, args.code),
                        **bench_pod.on_server_node(args.server_pod_labels),
                    }),
                },
            },
            opts=child.merge(pulumi.ResourceOptions(depends_on=[code, *args.depends_on])),
        )
        self.register_outputs({"jobName": args.job_name})
