"""Karpenter v1: IAM through Pod Identity, the Spot interruption queue, and its Helm charts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.cluster import SYSTEM_LABEL, SYSTEM_TAINT_KEY
from components.iam import (
    NODE_POLICIES,
    attach_managed_policies,
    policy_document,
    scoped_pod_identity_trust,
    service_trust_policy,
)

CHART_REPOSITORY = "oci://public.ecr.aws/karpenter"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "karpenter"

# EventBridge events Karpenter acts on (Karpenter 1.14 reference template). The pattern key is
# `detail-type`, with a hyphen: a camelCase key matches nothing and Spot warnings are silently lost.
INTERRUPTION_EVENTS = {
    "health": ("aws.health", "AWS Health Event"),
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "instance-state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


@dataclass(frozen=True)
class KarpenterArgs:
    cluster_name: str  # as configured; used inside IAM conditions and tags
    cluster: pulumi.Input[str]  # the cluster's resolved name: orders everything after the control plane
    cluster_arn: pulumi.Input[str]
    region: str
    account_id: str
    chart_version: str
    # Resources the controller needs before it starts (system nodes, pod identity agent).
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    replicas: int = 2


def _arn(service: str, region: str, account: str, resource: str) -> str:
    return f"arn:aws:{service}:{region}:{account}:{resource}"


def controller_policy_statements(
    *, cluster_name: str, region: str, account_id: str, node_role_arn: pulumi.Input[str],
    queue_arn: pulumi.Input[str], cluster_arn: pulumi.Input[str],
) -> dict[str, list[dict]]:
    """The controller's permissions, grouped as in Karpenter 1.14's reference policies.

    Every mutating action is scoped to this cluster through the tags Karpenter writes
    (`kubernetes.io/cluster/<name>=owned`, `eks:eks-cluster-name`, `karpenter.sh/nodepool`), so the
    controller cannot touch instances, launch templates or instance profiles of anything else.
    """
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    nodepool_tagged = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    ec2 = lambda resource: _arn("ec2", region, "*", resource)  # noqa: E731
    launched = [ec2(r) for r in ("fleet/*", "instance/*", "volume/*", "network-interface/*",
                                 "launch-template/*", "spot-instances-request/*")]
    profile = f"arn:aws:iam::{account_id}:instance-profile/*"
    region_tag = {"aws:ResourceTag/topology.kubernetes.io/region": region}
    return {
        "node-lifecycle": [
            {"Sid": "RunFromSharedResources", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
             "Resource": [f"arn:aws:ec2:{region}::image/*", f"arn:aws:ec2:{region}::snapshot/*"]
             + [ec2(r) for r in ("security-group/*", "subnet/*", "capacity-reservation/*", "placement-group/*")]},
            {"Sid": "RunFromOwnLaunchTemplates", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet"], "Resource": ec2("launch-template/*"),
             "Condition": {"StringEquals": owned, "StringLike": nodepool_tagged}},
            {"Sid": "LaunchTaggedForCluster", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"], "Resource": launched,
             "Condition": {"StringEquals": request_owned,
                           "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "TagOnCreate", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": launched,
             "Condition": {"StringEquals": {**request_owned,
                                            "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                           "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "TagOwnInstances", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": ec2("instance/*"),
             "Condition": {"StringEquals": owned, "StringLike": nodepool_tagged,
                           "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                           "ForAllValues:StringEquals": {
                               "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]}}},
            {"Sid": "DeleteOwn", "Effect": "Allow",
             "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
             "Resource": [ec2("instance/*"), ec2("launch-template/*")],
             "Condition": {"StringEquals": owned, "StringLike": nodepool_tagged}},
        ],
        "iam-integration": [
            {"Sid": "PassNodeRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": node_role_arn,
             "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}},
            {"Sid": "CreateInstanceProfile", "Effect": "Allow", "Action": "iam:CreateInstanceProfile",
             "Resource": profile,
             "Condition": {"StringEquals": {**request_owned, "aws:RequestTag/topology.kubernetes.io/region": region},
                           "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "TagInstanceProfile", "Effect": "Allow", "Action": "iam:TagInstanceProfile", "Resource": profile,
             "Condition": {"StringEquals": {**owned, **region_tag, **request_owned,
                                            "aws:RequestTag/topology.kubernetes.io/region": region},
                           "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                                          "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "ManageInstanceProfile", "Effect": "Allow",
             "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                        "iam:DeleteInstanceProfile"],
             "Resource": profile,
             "Condition": {"StringEquals": {**owned, **region_tag},
                           "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
        ],
        "eks-integration": [
            {"Sid": "DescribeCluster", "Effect": "Allow", "Action": "eks:DescribeCluster", "Resource": cluster_arn},
        ],
        "interruption": [
            {"Sid": "ReadInterruptionQueue", "Effect": "Allow",
             "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"], "Resource": queue_arn},
        ],
        "zonal-shift": [
            {"Sid": "ReadZonalShift", "Effect": "Allow", "Action": "arc-zonal-shift:GetManagedResource",
             "Resource": "*", "Condition": {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn}}},
        ],
        "resource-discovery": [
            {"Sid": "DescribeInRegion", "Effect": "Allow",
             "Action": [f"ec2:Describe{what}" for what in (
                 "CapacityReservations", "Images", "Instances", "InstanceStatus", "InstanceTypeOfferings",
                 "InstanceTypes", "LaunchTemplates", "PlacementGroups", "SecurityGroups",
                 "SpotPriceHistory", "Subnets")],
             "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": region}}},
            {"Sid": "ReadAmiParameters", "Effect": "Allow", "Action": "ssm:GetParameter",
             "Resource": f"arn:aws:ssm:{region}::parameter/aws/service/*"},
            {"Sid": "ReadPrices", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
            {"Sid": "ListInstanceProfiles", "Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"},
            {"Sid": "ReadInstanceProfiles", "Effect": "Allow", "Action": "iam:GetInstanceProfile", "Resource": profile},
        ],
    }


class Karpenter(pulumi.ComponentResource):
    """Karpenter's AWS side and its controller, running on the system nodes.

    `releases` are what NodePools and EC2NodeClasses must depend on: Pulumi then deletes them while
    the controller still runs, so Karpenter drains and terminates its own instances on destroy.
    """

    node_role: aws.iam.Role
    queue: aws.sqs.Queue
    releases: list[k8s.helm.v3.Release]

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:karpenter:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster_name = args.cluster_name

        # -- nodes ---------------------------------------------------------------------------
        self.node_role = aws.iam.Role(
            f"{name}-node",
            name=f"KarpenterNodeRole-{cluster_name}",
            assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
            opts=child,
        )
        node_policies = attach_managed_policies(f"{name}-node", self.node_role, NODE_POLICIES, child)
        node_access = aws.eks.AccessEntry(
            f"{name}-node",
            cluster_name=args.cluster,
            principal_arn=self.node_role.arn,
            type="EC2_LINUX",
            opts=child,
        )

        # -- interruption queue ---------------------------------------------------------------
        self.queue = aws.sqs.Queue(
            f"{name}-interruption",
            name=cluster_name,
            message_retention_seconds=300,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        queue_policy = aws.sqs.QueuePolicy(
            f"{name}-interruption",
            queue_url=self.queue.url,
            policy=policy_document([
                {"Sid": "EventsDeliver", "Effect": "Allow",
                 "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                 "Action": "sqs:SendMessage", "Resource": self.queue.arn},
                {"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*",
                 "Resource": self.queue.arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            ]),
            opts=child,
        )
        event_resources: list[pulumi.Resource] = [queue_policy]
        for key, (source, detail_type) in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{key}",
                name=f"{cluster_name}-{key}"[:64],
                description=f"Karpenter interruption handling: {detail_type}",
                event_pattern=json.dumps({"source": [source], "detail-type": [detail_type]}),
                opts=child,
            )
            target = aws.cloudwatch.EventTarget(
                f"{name}-{key}",
                rule=rule.name,
                target_id="KarpenterInterruptionQueueTarget",
                arn=self.queue.arn,
                opts=child,
            )
            event_resources += [rule, target]

        # -- controller identity ---------------------------------------------------------------
        controller_role = aws.iam.Role(
            f"{name}-controller",
            name=f"KarpenterController-{cluster_name}",
            assume_role_policy=scoped_pod_identity_trust(
                args.account_id, args.cluster_arn, NAMESPACE, SERVICE_ACCOUNT),
            opts=child,
        )
        statements = controller_policy_statements(
            cluster_name=cluster_name, region=args.region, account_id=args.account_id,
            node_role_arn=self.node_role.arn, queue_arn=self.queue.arn, cluster_arn=args.cluster_arn,
        )
        controller_policies = [
            aws.iam.RolePolicy(
                f"{name}-controller-{group}",
                name=f"karpenter-{group}",
                role=controller_role.id,
                policy=policy_document(group_statements),
                opts=child,
            )
            for group, group_statements in statements.items()
        ]
        association = aws.eks.PodIdentityAssociation(
            f"{name}-controller",
            cluster_name=args.cluster,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=controller_role.arn,
            opts=child,
        )

        # -- charts ------------------------------------------------------------------------------
        # The chart's own crds/ folder is installed only on first install and never upgraded;
        # the karpenter-crd chart keeps the CRDs in step with the controller.
        crd_release = k8s.helm.v3.Release(
            f"{name}-crd",
            name="karpenter-crd",
            chart=f"{CHART_REPOSITORY}/karpenter-crd",
            version=args.chart_version,
            namespace=NAMESPACE,
            opts=child.merge(pulumi.ResourceOptions(depends_on=list(args.depends_on))),
        )
        values = {
            "replicas": args.replicas,
            "settings": {"clusterName": cluster_name, "interruptionQueue": self.queue.name},
            # Pod Identity injects credentials but not the region; without it the controller asks
            # IMDS, which the hop limit of 1 blocks for pods (karpenter-provider-aws #8219).
            "controller": {
                "env": [{"name": "AWS_REGION", "value": args.region}],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            },
            "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
            "nodeSelector": {"kubernetes.io/os": "linux", SYSTEM_LABEL: "system"},
            "tolerations": [{"key": SYSTEM_TAINT_KEY, "operator": "Exists"}],
        }
        release = k8s.helm.v3.Release(
            name,
            name="karpenter",
            chart=f"{CHART_REPOSITORY}/karpenter",
            version=args.chart_version,
            namespace=NAMESPACE,
            skip_crds=True,
            values=values,
            # Deleted before its IAM role, association, queue and rules: the controller keeps its
            # permissions and interruption feed until it is gone.
            opts=child.merge(pulumi.ResourceOptions(depends_on=[
                crd_release, association, node_access, *node_policies, *controller_policies,
                *event_resources, *args.depends_on,
            ])),
        )
        self.releases = [crd_release, release]
        self.register_outputs({
            "nodeRoleName": self.node_role.name,
            "queueName": self.queue.name,
        })
