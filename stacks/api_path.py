"""The way to the Kubernetes API: the paths a stack opens, and the checks every deploy-time reader of
a stack file runs (the program, render, preflight).

`pulumi up` talks to the cluster's API from the first Kubernetes resource on, and `pulumi destroy`
(and `pre-destroy`) to the last; the endpoint is private unless told otherwise. Two paths, both set
under `vllm-poc:cluster`, chosen explicitly:

  public   publicAccessCidrs: the endpoint also answers on the internet, to these CIDRs only (a
           laptop's or a CI runner's egress address, as a /32);
  private  privateAccessSecurityGroups / privateAccessCidrs: 443 ingress rules on the EKS cluster
           security group, for a runner or bastion inside an existing VPC (network.vpcId) or a
           network peered with it. A VPC the stack creates has nothing inside it before the first
           `up`, so there the public path is needed.

A stack with no path is refused wherever its file is read for a deploy (the program, render,
preflight): `pulumi up` would otherwise create the network and the cluster (about 20 minutes,
billed) and then time out at the first Kubernetes resource, and the stack could not be destroyed
cleanly either. The shipped stack files carry a documentation address (203.0.113.10/32) so that
they render offline as they are; preflight and a preview or `up` in a real account refuse it, and
`python -m stacks allow-my-address <stack>` (stacks/ops/api_access.py) replaces it with this
machine's egress address.
"""

from __future__ import annotations

import ipaddress

ALLOW_COMMAND = "allow-my-address"
CLUSTER_KEY = "vllm-poc:cluster"
# Address ranges reserved for documentation and examples: never a real machine's.
DOCUMENTATION_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"))
# The account id AWS's own documentation uses, and the offline render's mocks answer with: the one
# account where a placeholder address is not an error.
DOCUMENTATION_ACCOUNT = "123456789012"


def is_placeholder(cidr: str) -> bool:
    net = ipaddress.ip_network(cidr, strict=False)
    return any(net.version == doc.version and net.subnet_of(doc) for doc in DOCUMENTATION_NETWORKS)


def placeholders(settings) -> list[str]:
    return [c for c in settings.cluster.public_access_cidrs if is_placeholder(c)]


def private_sources(settings) -> list[str]:
    cluster = settings.cluster
    return [*cluster.private_access_security_groups, *cluster.private_access_cidrs]


def api_path_problems(settings) -> list[str]:
    """Why a stack leaves no way to its Kubernetes API (empty when it has one), each naming the key."""
    cluster, stack = settings.cluster, settings.stack
    if cluster.public_access_cidrs:
        return []
    allow = f"python -m stacks {ALLOW_COMMAND} {stack}"
    if not private_sources(settings):
        return [
            f"{CLUSTER_KEY}: no way to the Kubernetes API: the endpoint is private (no publicAccessCidrs) and the "
            "cluster security group admits nothing on 443 (no privateAccessSecurityGroups or privateAccessCidrs); "
            "`pulumi up` would create the network and the cluster (about 20 minutes, billed) and then time out at "
            "the first Kubernetes resource, and `pulumi destroy` could not reach the cluster either. Put this "
            f"machine's egress address into publicAccessCidrs with `{allow}`, or, for a runner inside an existing "
            "VPC (network.vpcId), list its security group in privateAccessSecurityGroups"]
    if settings.network.create_vpc:
        return [
            f"{CLUSTER_KEY}: the only way to the Kubernetes API is private (privateAccessSecurityGroups/"
            "privateAccessCidrs), but the stack creates its VPC in the same `pulumi up`: nothing is inside it or "
            "peered with it when the first Kubernetes resource is created. Add the deploying machine to "
            f"publicAccessCidrs (`{allow}`), or deploy into an existing VPC (network.vpcId) that the runner is in"]
    return []


def placeholder_problem(settings) -> str | None:
    """The stack file still carries a documentation address: fine offline, never in a real account."""
    found = placeholders(settings)
    if not found:
        return None
    return (f"{CLUSTER_KEY}.publicAccessCidrs: {', '.join(found)} is a documentation address, the shipped "
            "placeholder, never a real machine's: nothing could reach the Kubernetes API through it. Put this "
            f"machine's egress address in its place: python -m stacks {ALLOW_COMMAND} {settings.stack}")
