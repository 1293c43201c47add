"""Weights before servers: the weight-sync Jobs (one per model) and the GPU node checks (one per pool).

Order on `pulumi up`: the syncs (Hub -> S3 on the system nodes, or a check of a `stage-weights`
upload), then one node of each pool that has servers (so the GPU node does not idle through a sync),
then the servers, which depend on both.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import Cluster
from components.gpu_node_check import GpuNodeCheck, GpuNodeCheckArgs
from components.labels import PART_OF
from components.weight_store import WeightStore, model_prefix
from components.weight_sync import WeightSync, WeightSyncArgs, token_secret, weight_sync_statements
from components.workload_identity import WorkloadIdentity, WorkloadIdentityArgs
from stacks import serving
from stacks.job_code import weights_code
from stacks.settings import StackSettings
from stacks.versions import extra, pins

WEIGHT_SYNC_SERVICE_ACCOUNT = "vllm-weight-sync"
HF_TOKEN_SECRET = "hf-token"


def weight_syncs(settings: StackSettings, namespace_name: str, cluster: Cluster, store: WeightStore,
                 namespace: k8s.core.v1.Namespace, weights_bucket: str, account_id: str,
                 opts: pulumi.ResourceOptions) -> dict[str, WeightSync]:
    """One Job per model the servers load: a Hub sync, or (weights.source stage-weights) a staging check."""
    model_ids = settings.model_ids()
    if not model_ids:
        return {}
    identity = WorkloadIdentity(
        "weight-sync-identity",
        WorkloadIdentityArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            account_id=account_id,
            namespace=namespace_name,
            service_account=WEIGHT_SYNC_SERVICE_ACCOUNT,
            statements=weight_sync_statements(store.weights_bucket_arn, model_ids, settings.storage.kms_key_arn),
            labels={"app.kubernetes.io/name": "vllm-weight-sync", **PART_OF},
            depends_on=[namespace, cluster.pod_identity_agent],
        ),
        opts=opts,
    )
    waits: list[pulumi.Resource] = [namespace, store, identity.association, identity.service_account,
                                    cluster.system_nodes]
    hub = settings.weights.source == "hub"
    secret = None
    if hub and settings.hf_token is not None:
        secret = token_secret(HF_TOKEN_SECRET, namespace_name, settings.hf_token.get_secret_value(),
                              opts.merge(pulumi.ResourceOptions(depends_on=[namespace])))
        waits.append(secret)
    versions = pins()
    code = weights_code()
    syncs = {}
    for model in model_ids:
        dest = f"s3://{weights_bucket}/{model_prefix(model).rstrip('/')}"
        syncs[model] = WeightSync(
            f"weights-{model.replace('/', '-').lower()}",
            WeightSyncArgs(
                model_id=model,
                revision=settings.weights.revisions.get(model, "main"),
                bucket=weights_bucket,
                mode="hub" if hub else "check",
                namespace=namespace_name,
                image=versions.weight_sync_image,
                service_account=WEIGHT_SYNC_SERVICE_ACCOUNT,
                code=code,
                requirements=extra("weight-sync"),
                region=settings.region,
                token_secret=HF_TOKEN_SECRET if secret is not None else None,
                scratch_gib=settings.weights.scratch_gib,
                timeout_s=settings.weights.sync_timeout_minutes * 60,
                stage_hint=f"python -m stacks stage-weights <snapshot of {model}> {dest}",
                depends_on=waits,
            ),
            opts=opts,
        )
    return syncs


def gpu_node_checks(settings: StackSettings, namespace_name: str, namespace: k8s.core.v1.Namespace,
                    node_pools: Mapping[str, pulumi.Resource], syncs: Mapping[str, WeightSync],
                    opts: pulumi.ResourceOptions) -> dict[str, GpuNodeCheck]:
    """One node check per pool with servers, after the syncs of the models its servers load."""
    checks: dict[str, GpuNodeCheck] = {}
    for pool_name in sorted({server.pool for server in settings.servers}):
        pool = settings.pool(pool_name)
        models = {m for server in settings.servers if server.pool == pool_name for m in serving.server_model_ids(server)}
        checks[pool_name] = GpuNodeCheck(
            f"gpu-node-{pool_name}",
            GpuNodeCheckArgs(
                pool=pool_name,
                instance_type=pool.instance_type,
                namespace=namespace_name,
                image=pins().weight_sync_image,
                depends_on=[namespace, *[node_pools[n] for n in (pool_name, f"{pool_name}-on-demand") if n in node_pools],
                            *(syncs[m].job for m in sorted(models))],
            ),
            opts=opts,
        )
    return checks
