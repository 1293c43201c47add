"""The benchmark Job: one scenario sweep against one vLLM server, results streamed to S3.

The Job runs `python3 -m bench.run.sweep` in the server's own image (vLLM, python3 and boto3 are
there; nothing is built), with that module and what it imports mounted from an immutable ConfigMap and the stack's prompt
set (one ConfigMap every bench Job shares) projected beside it. It is created once
the server's Deployment is available, and `pulumi up` does not wait for the sweep (skipAwait).

Its name carries a hash of everything that shapes the numbers (server flags and image, sweep
settings, the code the sweep and its start-up record run, the prompt set; not the report's code): a changed configuration starts a new sweep under a new results prefix, and
an unchanged `pulumi up` leaves the finished Job alone. On a pod restart (a failure, a Spot
interruption) the next pod downloads what the last one uploaded and runs only what is missing.

The pod knows its node (`NODE_NAME`, `HOST_IP` from the downward API): the sweep reads the node's
capacity type and instance type through the Kubernetes API (`BenchNodeAccess`: `get` on nodes,
nothing else) and samples the DCGM exporter on the same node during each run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import bench_pod
from components.gpu_telemetry import metrics_url as gpu_metrics_url
from components.labels import PART_OF
from components.pod_security import harden
from components.vllm_server import api_key_env

# `python -m bench sweep` exit codes that end the Job (see bench.run.sweep)
FINAL_EXIT_CODES = (1, 2)


@dataclass(frozen=True)
class BenchJobArgs:
    server: str  # server name; the Job selects that server's node through its pod labels
    namespace: str
    image: str
    service_account: str
    base_url: str
    served_model: str
    tokenizer_uri: str  # s3:// prefix of the model folder; only tokenizer files are fetched
    results_uri: pulumi.Input[str]  # s3://<results bucket>/runs/<stack>/<server>/<config hash>/
    sweep_args: list[str]  # scenarios, concurrencies, prompts, metadata for the manifest
    server_pod_labels: dict[str, str]
    region: str
    code: dict[str, str]  # what `bench.run.sweep` imports: path in the package -> source
    config_hash: str  # covers the code and the prompt set
    prompts: BenchPromptSet | None = None  # the stack's prompt set
    labels: dict[str, str] = field(default_factory=dict)
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    deadline_hours: int = 12
    # Secret holding the servers' API key (`api-key` entry), passed on as OPENAI_API_KEY
    api_key_secret: str | None = None
    # Mount the service-account token: only for a sweep that reads the Kubernetes API
    kubernetes_api: bool = False


# What the bench's service account may do in the cluster: read a node by name (its own, to learn
# its capacity type and instance type). No list or watch, no other resource.
NODE_READ_RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


class BenchNodeAccess(pulumi.ComponentResource):
    """Cluster-wide read of single nodes for the bench service account (nodes are not namespaced)."""

    def __init__(self, name: str, namespace: str, service_account: str, labels: dict[str, str] | None = None,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:BenchNodeAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on or []))
        meta = {"labels": {**PART_OF, **(labels or {})}}
        self.role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata={"name": f"{namespace}-{service_account}-node-reader", **meta},
            rules=NODE_READ_RULES, opts=child)
        self.binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding", metadata={"name": f"{namespace}-{service_account}-node-reader", **meta},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                      "name": self.role.metadata["name"]},
            subjects=[{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
            opts=child)
        self.register_outputs({"role": self.role.metadata["name"]})


class BenchPromptSet(pulumi.ComponentResource):
    """The stack's prompt set (the Korean marketplace prompts), once: every bench Job projects its
    ConfigMap into its code's data/ folder, so a stack of several targets carries the prompts once."""

    config_map: k8s.core.v1.ConfigMap
    files: list[str]  # the ConfigMap's keys, the prompt files' names

    def __init__(self, name: str, namespace: str, files: dict[str, str], labels: dict[str, str] | None = None,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:BenchPromptSet", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on or []))
        self.files = sorted(files)
        self.config_map = bench_pod.prompt_config_map(
            f"{name}-config-map", namespace, {"app.kubernetes.io/name": "vllm-bench", **PART_OF, **(labels or {})},
            files, child)
        self.register_outputs({"name": self.config_map.metadata["name"]})


def job_name(server: str, config_hash: str) -> str:
    return f"bench-{server}-{config_hash[:10]}"[:63]


class BenchJob(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    code: k8s.core.v1.ConfigMap
    results_uri: pulumi.Output[str]

    def __init__(self, name: str, args: BenchJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:bench:BenchJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {
            "app.kubernetes.io/name": "vllm-bench",
            "app.kubernetes.io/instance": args.server,
            "vllm-poc/config-hash": args.config_hash[:10],
            **PART_OF,
            **args.labels,
        }
        # Named after its Job: two targets with the same settings share a hash but not a name.
        self.code = bench_pod.code_config_map(
            f"{name}-code", f"bench-code-{args.server}-{args.config_hash[:10]}", args.namespace, labels,
            args.code, child)
        self.results_uri = pulumi.Output.from_input(args.results_uri)
        command = [
            "python3", "-m", "bench.run.sweep",
            "--base-url", args.base_url,
            "--model", args.served_model,
            "--tokenizer", args.tokenizer_uri,
            "--out", bench_pod.RESULTS_DIR,
            "--resume",
            # the DCGM exporter of the node the Job shares with the server
            "--gpu-metrics-url", gpu_metrics_url(),
            *args.sweep_args,
        ]
        container = {
            "name": "bench",
            "image": args.image,
            "command": command,
            "env": [
                *bench_pod.env(args.region, self.results_uri),
                *api_key_env(args.api_key_secret, "OPENAI_API_KEY"),
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            ],
            "resources": {
                # `vllm bench serve` is one client process; it must not take the server's GPU. No
                # CPU limit: a throttled client adds its own delay to every latency it measures.
                "requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "2Gi"},
                "limits": {"memory": "4Gi"},
            },
            "volumeMounts": bench_pod.volume_mounts(),
        }
        pod_spec = harden({
            "serviceAccountName": args.service_account,
            "restartPolicy": "Never",
            # On SIGTERM the sweep stops its client and uploads the manifest before exiting.
            "terminationGracePeriodSeconds": 90,
            "containers": [container],
            "volumes": bench_pod.volumes(self.code, args.code, *((args.prompts.config_map, args.prompts.files)
                                                                 if args.prompts else ())),
            # On the server's own node: the ~25 GB image is already there, and the client's traffic
            # stays off the network between nodes.
            **bench_pod.on_server_node(args.server_pod_labels),
        # kubernetes_api: the sweep reads its node's labels with the token (BenchNodeAccess)
        }, kubernetes_api=args.kubernetes_api)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={
                "name": job_name(args.server, args.config_hash),
                "namespace": args.namespace,
                "labels": labels,
                "annotations": {"pulumi.com/skipAwait": "true"},
            },
            spec={
                # Each retry resumes from S3; a Spot interruption or eviction does not use up a retry.
                "backoffLimit": 4,
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    # The sweep finished with combinations that stayed invalid after their retry (1), or
                    # its arguments are wrong (2): both are recorded in S3, and rerunning costs GPU hours
                    # without changing the answer. Anything else (server not up yet, an upload error,
                    # a crash) is retried and resumes.
                    {"action": "FailJob", "onExitCodes": {"containerName": "bench", "operator": "In", "values": list(FINAL_EXIT_CODES)}},
                ]},
                "activeDeadlineSeconds": args.deadline_hours * 3600,
                # No ttlSecondsAfterFinished: Pulumi manages the Job, and one that deleted itself would be
                # created again by the next `pulumi up --refresh` (a whole new run against the live server).
                "template": {
                    "metadata": {
                        "labels": labels,
                        # Blocks Karpenter consolidation and drift of the node (and so of the server
                        # on it) for as long as the sweep runs.
                        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                    },
                    "spec": pod_spec,
                },
            },
            opts=child.merge(pulumi.ResourceOptions(
                depends_on=[self.code, *([args.prompts.config_map] if args.prompts else []), *args.depends_on])),
        )
        self.register_outputs({"jobName": self.job.metadata["name"], "resultsUri": self.results_uri})
