"""The EKS cluster: control plane, a small system node group, managed add-ons, a Kubernetes provider."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.iam import NODE_POLICIES, attach_managed_policies, service_trust_policy
from components.network import DISCOVERY_TAG

SYSTEM_LABEL = "vllm-poc/role"
SYSTEM_TAINT_KEY = "CriticalAddonsOnly"


def system_placement() -> dict[str, object]:
    """`nodeSelector` and `tolerations` that put a pod on the system node group (its label, and its
    CriticalAddonsOnly taint tolerated): for what is neither a GPU workload nor allowed to wait for a
    Karpenter node (controllers, charts' components, the router, the Jobs that run before any GPU node)."""
    return {"nodeSelector": {SYSTEM_LABEL: "system"},
            "tolerations": [{"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
# The add-ons the cluster needs from EKS. They are installed as managed add-ons after the system node
# group exists: CoreDNS on a cluster without nodes stays DEGRADED until the create times out.
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")
# The VPC CNI's network policy agent enforces the workloads' NetworkPolicies (without it they are
# accepted and ignored).
ADDON_CONFIGURATION = {"vpc-cni": json.dumps({"enableNetworkPolicy": "true"}, sort_keys=True)}
# IMDSv2 only, and a hop limit of 1: a pod (one hop further than the node) cannot reach the node
# role's credentials; hostNetwork add-ons (VPC CNI, Pod Identity agent) are on the node itself.
IMDS_OPTIONS = {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1}
ROOT_DEVICE = "/dev/xvda"  # AL2023 EKS AMIs


# EKS node group names are at most 63 characters and a prefix gets 26 more (AWS provider's unique suffix).
NODE_GROUP_PREFIX_MAX = 37


def system_node_group_prefix(cluster_name: str) -> str:
    """`<cluster>-system-`, the cluster name shortened where the prefix would pass 37 characters."""
    suffix = "-system-"
    return f"{cluster_name[:NODE_GROUP_PREFIX_MAX - len(suffix)]}{suffix}"


def system_launch_template(name: str, args: ClusterArgs, opts: pulumi.ResourceOptions) -> aws.ec2.LaunchTemplate:
    """The system node group's launch template: instance metadata and the root volume."""
    return aws.ec2.LaunchTemplate(
        name,
        name_prefix=f"{args.name}-system-",
        update_default_version=True,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(**IMDS_OPTIONS),
        block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
            device_name=ROOT_DEVICE,
            ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                volume_size=args.system_disk_size_gib, volume_type="gp3", encrypted="true",
                delete_on_termination="true"),
        )],
        tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(
            resource_type="instance", tags={**args.tags, "Name": f"{args.name}-system"})],
        tags=args.tags,
        opts=opts,
    )


@dataclass(frozen=True)
class ClusterArgs:
    name: str
    kubernetes_version: str
    region: str
    account_id: str
    vpc_id: pulumi.Input[str]
    private_subnet_ids: pulumi.Input[list[str]]
    public_subnet_ids: pulumi.Input[list[str]]
    system_instance_types: list[str]
    system_min_size: int = 2
    system_desired_size: int = 2
    system_max_size: int = 3
    system_disk_size_gib: int = 50
    # Empty: the API endpoint is private.
    public_access_cidrs: list[str] = field(default_factory=list)
    # Admitted to the endpoint's private address on 443 (rules on the cluster security group, which
    # otherwise admits only itself): a runner or bastion in the VPC, a peered network.
    private_access_security_groups: list[str] = field(default_factory=list)
    private_access_cidrs: list[str] = field(default_factory=list)
    admin_role_arns: list[str] = field(default_factory=list)
    log_types: list[str] = field(default_factory=list)
    log_retention_days: int = 14
    tags: dict[str, str] = field(default_factory=dict)


def log_group_name(cluster_name: str) -> str:
    """The log group EKS writes control-plane logs to (it would create it itself, without retention)."""
    return f"/aws/eks/{cluster_name}/cluster"


class Cluster(pulumi.ComponentResource):
    """EKS in API authentication mode with a pinned version and no default node group.

    Attributes other components use: `name` (resolves once the control plane exists, so anything
    built on it waits for the cluster), `arn`, `security_group_id` (the EKS-managed cluster security
    group, which both the system nodes and Karpenter's nodes use), `provider` (Kubernetes), and
    `addons` / `system_nodes` / `pod_identity_agent`, for ordering.
    """

    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    system_nodes: eks.ManagedNodeGroup
    addons: dict[str, aws.eks.Addon]
    pod_identity_agent: aws.eks.Addon

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Declared before the cluster so EKS finds it: retention applies, and `pulumi destroy` deletes it.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=log_group_name(args.name),
            retention_in_days=args.log_retention_days,
            opts=child,
        )
        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.name,
            version=args.kubernetes_version,
            authentication_mode=eks.AuthenticationMode.API,
            # The identity running `pulumi up` is made admin by EKS itself (creator permissions); these
            # entries are for everyone else, and config refuses the creator's own role.
            access_entries={
                f"admin-{index}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn="arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                        )
                    },
                )
                for index, arn in enumerate(args.admin_role_arns)
            },
            vpc_id=args.vpc_id,
            private_subnet_ids=args.private_subnet_ids,
            public_subnet_ids=args.public_subnet_ids,
            node_associate_public_ip_address=False,
            endpoint_public_access=bool(args.public_access_cidrs),
            endpoint_private_access=True,
            public_access_cidrs=args.public_access_cidrs or None,
            enabled_cluster_log_types=args.log_types,
            skip_default_node_group=True,
            # Nodes (system and Karpenter's) use the security group EKS creates for the cluster.
            skip_default_security_groups=True,
            create_oidc_provider=False,  # workloads get AWS access through Pod Identity
            # Managed add-ons are created below, after the node group; EKS's bootstrap add-ons keep
            # the first nodes working until then.
            use_default_vpc_cni=True,
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=False),
            tags=args.tags,
            opts=child.merge(pulumi.ResourceOptions(depends_on=[self.log_group])),
        )
        # With skip_default_security_groups this is the security group EKS itself created. Name and
        # ARN are derived from it rather than read through `eks_cluster` (a resource reference), so
        # they carry the dependency on the finished cluster without a lookup.
        self.security_group_id = self.eks.cluster_security_group_id
        self.name = self.security_group_id.apply(lambda _: args.name)
        self.arn = pulumi.Output.concat(f"arn:aws:eks:{args.region}:{args.account_id}:cluster/", self.name)
        self.kubeconfig = pulumi.Output.secret(self.eks.kubeconfig_json)

        self.api_access_rules = self._private_api_access(name, args, child)

        aws.ec2.Tag(
            f"{name}-sg-discovery",
            resource_id=self.security_group_id,
            key=DISCOVERY_TAG,
            value=args.name,
            opts=child,
        )

        self.system_node_role = node_role = aws.iam.Role(
            f"{name}-system-node",
            name=f"{args.name}-system-node",
            assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
            opts=child,
        )
        attachments = attach_managed_policies(f"{name}-system-node", node_role, NODE_POLICIES, child)
        system_template = system_launch_template(f"{name}-system", args, child)
        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks,
            # Named by a prefix, never fixed: a change EKS cannot make in place (instance types, subnets, role,
            # AMI type) replaces the group, and Pulumi creates the new one before deleting the old, so the system
            # pods move onto new nodes first. A fixed name would make that create collide with the old group.
            node_group_name_prefix=system_node_group_prefix(args.name),
            node_role=node_role,
            ami_type="AL2023_x86_64_STANDARD",
            capacity_type="ON_DEMAND",
            instance_types=args.system_instance_types,
            # The root volume size lives in the launch template (EKS refuses both).
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=system_template.id, version=system_template.latest_version.apply(str)),
            subnet_ids=args.private_subnet_ids,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.system_min_size,
                desired_size=args.system_desired_size,
                max_size=args.system_max_size,
            ),
            labels={SYSTEM_LABEL: "system"},
            # Only pods that tolerate CriticalAddonsOnly (Karpenter, CoreDNS, add-on DaemonSets) land
            # here; GPU workloads go to Karpenter's nodes.
            taints=[aws.eks.NodeGroupTaintArgs(key=SYSTEM_TAINT_KEY, value="true", effect="NO_SCHEDULE")],
            opts=child.merge(pulumi.ResourceOptions(depends_on=attachments)),
        )

        after_nodes = child.merge(pulumi.ResourceOptions(depends_on=[self.system_nodes]))
        self.addons = {
            addon: aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=self.name,
                addon_name=addon,
                configuration_values=ADDON_CONFIGURATION.get(addon),
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                opts=after_nodes,
            )
            for addon in ADDONS
        }
        # Pod Identity associations only take effect where the agent runs: workloads wait for it.
        self.pod_identity_agent = self.addons["eks-pod-identity-agent"]

        # A stable identifier keeps every Kubernetes resource from being replaced when the kubeconfig
        # is unknown during a preview (pulumi-eks #764).
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=args.name,
            enable_server_side_apply=True,
            opts=child,
        )

        self.register_outputs({"name": self.name, "arn": self.arn, "securityGroupId": self.security_group_id})

    def _private_api_access(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions
                            ) -> list[aws.vpc.SecurityGroupIngressRule]:
        """HTTPS to the API endpoint's private address from each listed source, on the cluster security group."""
        sources = [("sg", group, {"referenced_security_group_id": group}) for group in args.private_access_security_groups]
        sources += [("cidr", cidr, {"cidr_ipv4": cidr}) for cidr in args.private_access_cidrs]
        return [
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-api-from-{source.replace('/', '-').replace('.', '-')}",
                security_group_id=self.security_group_id,
                ip_protocol="tcp",
                from_port=443,
                to_port=443,
                description=f"Kubernetes API from {source} (vllm-poc:cluster.privateAccess"
                            f"{'SecurityGroups' if kind == 'sg' else 'Cidrs'})",
                tags=args.tags,
                opts=opts,
                **where,
            )
            for kind, source, where in sources
        ]
