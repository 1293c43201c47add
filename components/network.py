"""The VPC the cluster runs in: created here, or an existing one described by ids."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

DISCOVERY_TAG = "karpenter.sh/discovery"


@dataclass(frozen=True)
class NetworkArgs:
    cluster_name: str
    region: str
    # create a VPC ...
    vpc_cidr: str = "10.40.0.0/16"
    availability_zones: list[str] = field(default_factory=list)
    nat_per_az: bool = False
    ecr_endpoints: bool = False  # ECR api/dkr interface endpoints: image pulls skip the NAT gateway
    # ... or use an existing one
    vpc_id: str | None = None
    private_subnets: dict[str, str] | None = None  # {az: subnet id}
    public_subnets: dict[str, str] | None = None


# Subnets are keyed by the zone's letter, never by its place in the zone list: zone a always gets
# slot 0, b slot 1, ... so that adding, dropping or reordering zones moves no other subnet.
ZONE_LETTERS = "abcdefg"


def zone_slot(zone: str) -> int:
    """The zone's fixed slot in the VPC's address plan: its letter (ap-northeast-2c -> 2)."""
    letter = zone[-1]
    if letter not in ZONE_LETTERS:
        raise ValueError(f"{zone}: the address plan has slots for zones a to {ZONE_LETTERS[-1]} only")
    return ZONE_LETTERS.index(letter)


def subnet_cidrs(vpc_cidr: str, zones: list[str]) -> dict[str, tuple[str, str]]:
    """{zone: (private CIDR, public CIDR)}: one large private and one small public subnet per AZ.

    The VPC is cut into eighths: the private subnet of the zone with letter slot i takes eighth i
    (pods draw VPC addresses with the VPC CNI), and the last eighth is split eight ways, one part per
    slot, for the public subnets (NAT gateways and load balancers only). A zone's CIDRs depend on
    its letter alone.
    """
    net = ipaddress.ip_network(vpc_cidr)
    eighths = list(net.subnets(prefixlen_diff=3))
    public = list(eighths[7].subnets(prefixlen_diff=3))
    return {zone: (str(eighths[zone_slot(zone)]), str(public[zone_slot(zone)])) for zone in zones}


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    public_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:network:Network", name, None, opts)
        self._child = pulumi.ResourceOptions(parent=self)
        if args.vpc_id is None:
            self._create(name, args)
        else:
            self._use_existing(name, args)
        self.register_outputs({
            "vpcId": self.vpc_id,
            "privateSubnetIds": self.private_subnet_ids,
            "publicSubnetIds": self.public_subnet_ids,
        })

    def _use_existing(self, name: str, args: NetworkArgs) -> None:
        # Karpenter finds node subnets by tag; on subnets the stack does not own, it adds only that
        # one tag (aws.ec2.Tag), which `pulumi destroy` removes again.
        self.vpc_id = pulumi.Output.from_input(args.vpc_id)
        self.private_subnet_ids = pulumi.Output.from_input(list((args.private_subnets or {}).values()))
        self.public_subnet_ids = pulumi.Output.from_input(list((args.public_subnets or {}).values()))
        for az, subnet_id in sorted((args.private_subnets or {}).items()):
            aws.ec2.Tag(
                f"{name}-discovery-{az}",
                resource_id=subnet_id,
                key=DISCOVERY_TAG,
                value=args.cluster_name,
                opts=self._child,
            )

    def _create(self, name: str, args: NetworkArgs) -> None:
        zones = args.availability_zones
        cidrs = subnet_cidrs(args.vpc_cidr, zones)
        cluster_tag = f"kubernetes.io/cluster/{args.cluster_name}"

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": f"{args.cluster_name}-vpc"},
            opts=self._child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{args.cluster_name}-igw"}, opts=self._child
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={"Name": f"{args.cluster_name}-public"},
            opts=self._child,
        )

        public_subnets, private_subnets, nats = [], [], []
        for index, az in enumerate(zones):
            suffix = az[-1]
            public = aws.ec2.Subnet(
                f"{name}-public-{suffix}",
                vpc_id=vpc.id,
                cidr_block=cidrs[az][1],
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={"Name": f"{args.cluster_name}-public-{az}", "kubernetes.io/role/elb": "1",
                      cluster_tag: "shared"},
                opts=self._child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{suffix}", subnet_id=public.id, route_table_id=public_rt.id, opts=self._child
            )
            public_subnets.append(public)
            if args.nat_per_az or index == 0:
                eip = aws.ec2.Eip(f"{name}-nat-{suffix}", domain="vpc",
                                  tags={"Name": f"{args.cluster_name}-nat-{az}"}, opts=self._child)
                nats.append(aws.ec2.NatGateway(
                    f"{name}-nat-{suffix}",
                    allocation_id=eip.id,
                    subnet_id=public.id,
                    tags={"Name": f"{args.cluster_name}-nat-{az}"},
                    opts=self._child.merge(pulumi.ResourceOptions(depends_on=[igw])),
                ))

        private_rts = []
        for index, az in enumerate(zones):
            suffix = az[-1]
            nat = nats[index] if args.nat_per_az else nats[0]
            private = aws.ec2.Subnet(
                f"{name}-private-{suffix}",
                vpc_id=vpc.id,
                cidr_block=cidrs[az][0],
                availability_zone=az,
                tags={"Name": f"{args.cluster_name}-private-{az}", "kubernetes.io/role/internal-elb": "1",
                      cluster_tag: "shared", DISCOVERY_TAG: args.cluster_name},
                opts=self._child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-rt-{suffix}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={"Name": f"{args.cluster_name}-private-{az}"},
                opts=self._child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{suffix}", subnet_id=private.id, route_table_id=rt.id, opts=self._child
            )
            private_subnets.append(private)
            private_rts.append(rt)

        # Weights stream from S3 at up to 100 Gbps per node (g6e.12xlarge); a gateway endpoint keeps
        # that traffic off the NAT gateway, where it would be both a bottleneck and a per-GB charge.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts] + [public_rt.id],
            tags={"Name": f"{args.cluster_name}-s3"},
            opts=self._child,
        )

        if args.ecr_endpoints:
            self._ecr_endpoints(name, args, vpc, private_subnets)

        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private_subnets])
        self.public_subnet_ids = pulumi.Output.all(*[s.id for s in public_subnets])

    def _ecr_endpoints(self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc,
                       private_subnets: list[aws.ec2.Subnet]) -> None:
        """ECR's API and registry endpoints in the private subnets, with private DNS: a node's image pull
        (manifest from dkr, token from api, layers from S3 through the gateway endpoint) never crosses
        the NAT gateway, whose per-GB charge a ~25 GB vLLM image per GPU node would otherwise pay."""
        group = aws.ec2.SecurityGroup(
            f"{name}-ecr-endpoints",
            vpc_id=vpc.id,
            description="HTTPS from the VPC to the ECR interface endpoints",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=443, to_port=443,
                                                      cidr_blocks=[args.vpc_cidr], description="HTTPS from the VPC")],
            tags={"Name": f"{args.cluster_name}-ecr-endpoints"},
            opts=self._child,
        )
        for service in ("ecr.api", "ecr.dkr"):
            aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}",
                vpc_id=vpc.id,
                service_name=f"com.amazonaws.{args.region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[s.id for s in private_subnets],
                security_group_ids=[group.id],
                tags={"Name": f"{args.cluster_name}-{service}"},
                opts=self._child,
            )
