"""Small IAM building blocks shared by the components."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def service_trust_policy(service: str) -> str:
    """Trust policy letting one AWS service principal assume the role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })


def pod_identity_trust_policy(account_id: str, cluster_arn: str, namespace: str, service_account: str) -> dict:
    """Trust policy for EKS Pod Identity, scoped to one service account of one cluster.

    Pod Identity assumes the role and tags the session with the cluster, namespace and service
    account; without conditions on those tags any association in the account could use the role.
    """
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "EksPodIdentity",
            "Effect": "Allow",
            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringEquals": {
                    "aws:SourceAccount": account_id,
                    "aws:RequestTag/eks-cluster-arn": cluster_arn,
                    "aws:RequestTag/kubernetes-namespace": namespace,
                    "aws:RequestTag/kubernetes-service-account": service_account,
                },
            },
        }],
    }


def scoped_pod_identity_trust(
    account_id: pulumi.Input[str], cluster_arn: pulumi.Input[str], namespace: str, service_account: str
) -> pulumi.Output[str]:
    """`pod_identity_trust_policy` as JSON, once the account and cluster ARN are known."""
    return pulumi.Output.all(account_id, cluster_arn).apply(
        lambda v: json.dumps(pod_identity_trust_policy(v[0], v[1], namespace, service_account), sort_keys=True)
    )


def policy_document(statements: list[dict[str, Any]]) -> pulumi.Output[str]:
    """A policy document from statements that may hold Outputs (ARNs, names)."""
    return pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": statements})


def attach_managed_policies(
    name: str, role: aws.iam.Role, policy_arns: list[str], opts: pulumi.ResourceOptions
) -> list[aws.iam.RolePolicyAttachment]:
    """One attachment per AWS-managed policy, named after the policy."""
    return [
        aws.iam.RolePolicyAttachment(
            f"{name}-{arn.rsplit('/', 1)[-1]}", role=role.name, policy_arn=arn, opts=opts
        )
        for arn in policy_arns
    ]


NODE_POLICIES = [
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
]
