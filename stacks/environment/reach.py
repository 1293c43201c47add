"""Who may reach whom in an environment: default deny, then each server's clients, its bench, start-up and
mixed-traffic pods, and the S3 ranges the Jobs read (components/network_policy.py). Kept out of the
composition (stacks/environment/__init__.py) so that it reads top to bottom; it calls `network_policies`.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.mix_check_job import pod_labels as mixcheck_pod_labels
from components.network_policy import BenchReach, NetworkPolicies, NetworkPoliciesArgs, ServerReach
from components.vllm_server import VllmServer, selector_labels
from stacks import s3_ranges
from stacks.environment.release import RELEASE_POD_LABELS, release_gpus
from stacks.settings import StackSettings

BENCH_POD_NAME = "vllm-bench"
STARTUP_POD_NAME = "vllm-startup"


def job_labels(pod_name: str, target: str) -> dict[str, str]:
    """The labels of a benchmarked server's bench or start-up pod."""
    return {"app.kubernetes.io/name": pod_name, "app.kubernetes.io/instance": target}


def vpc_cidr_of(settings: StackSettings, aws_provider: aws.Provider) -> str:
    if settings.network.create_vpc:
        return settings.network.vpc_cidr
    return aws.ec2.get_vpc(id=settings.network.vpc_id, opts=pulumi.InvokeOptions(provider=aws_provider)).cidr_block


def network_policies(settings: StackSettings, servers: dict[str, VllmServer], *, namespace_name: str,
                     namespace: k8s.core.v1.Namespace, aws_provider: aws.Provider,
                     opts: pulumi.ResourceOptions) -> NetworkPolicies:
    """Default deny plus what each workload needs (components/network_policy.py)."""
    invoke = pulumi.InvokeOptions(provider=aws_provider)
    vpc_cidr = vpc_cidr_of(settings, aws_provider)
    # The AWS-managed prefix list the S3 gateway endpoint routes to (read at deploy time; a
    # NetworkPolicy takes CIDRs, and `pulumi up` refreshes them; stacks/s3_ranges.py notices drift).
    prefix_list = s3_ranges.prefix_list_name(settings.region)
    s3_cidrs = aws.ec2.get_prefix_list(name=prefix_list, opts=invoke).cidr_blocks
    security = settings.security
    compare = settings.bench.compare
    mixed_traffic_server = compare.candidate if compare is not None and compare.mixed_traffic else None
    reach = [
        ServerReach(
            name=name,
            pod_labels=selector_labels(server.spec),
            port=server.spec.port,
            client_namespaces=list(security.dev_endpoint_namespaces if settings.server(name).sleep_mode
                                   else security.client_namespaces),
            bench_pod_labels=job_labels(BENCH_POD_NAME, name) if name in settings.bench.targets else None,
            startup_pod_labels=job_labels(STARTUP_POD_NAME, name) if name in settings.bench.targets else None,
            mixcheck_pod_labels=mixcheck_pod_labels(name) if name == mixed_traffic_server else None,
        )
        for name, server in servers.items()
    ]
    # The sweep reads its own node (capacity type, instance type) from the API server; the start-up Job reads
    # pods, events, nodes and NodeClaims, and times /sleep and /wake_up.
    benches = [
        BenchReach(name=f"{prefix}{target}", pod_labels=job_labels(pod, target),
                   server_pod_labels=selector_labels(servers[target].spec), port=servers[target].spec.port,
                   kubernetes_api=True)
        for prefix, pod in (("", BENCH_POD_NAME), ("startup-", STARTUP_POD_NAME))
        for target in settings.bench.targets
    ] + [
        # The mixed-traffic check: its server's API port, nothing more.
        BenchReach(
            name=f"mixcheck-{name}",
            pod_labels=mixcheck_pod_labels(name),
            server_pod_labels=selector_labels(servers[name].spec),
            port=servers[name].spec.port,
            telemetry=False,
        )
        for name in [mixed_traffic_server] if name
    ]
    return NetworkPolicies(
        "network-policies",
        NetworkPoliciesArgs(namespace=namespace_name, vpc_cidr=vpc_cidr, s3_cidrs=list(s3_cidrs or []),
                            s3_prefix_list=prefix_list,
                            ranges_parameter=s3_ranges.parameter_name(settings.cluster.name),
                            servers=reach, benches=benches, depends_on=[namespace],
                            api_clients={"gpu-release": dict(RELEASE_POD_LABELS)} if release_gpus(settings) else {}),
        opts=opts,
    )
