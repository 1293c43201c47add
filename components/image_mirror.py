"""Docker Hub images through an ECR pull-through cache: authenticated, cached in the account, same digests.

Anonymous Docker Hub pulls are limited per IPv4 address and hour, and every node of the VPC leaves
through one NAT address; a retried `up`, Spot churn or a teardown and re-up within the hour can hit
the limit (ImagePullBackOff). An ECR pull-through cache rule fetches each image from Docker Hub once,
with the account's Docker Hub credentials (a Secrets Manager secret named `ecr-pullthroughcache/...`,
which AWS requires for this upstream), and serves it from the account's registry. The cache keeps the
upstream manifest, so `<registry>/<prefix>/vllm/vllm-openai:<tag>@sha256:<digest>` is the same image,
by the same digest, as `vllm/vllm-openai:<tag>@sha256:<digest>`.

The rewrite is one stack transformation (`mirror_transformation`) over every container of every
Kubernetes object the stack declares: the components and the Jobs' identities keep the Docker Hub
reference (a Job is not renamed by turning the mirror on), and what the cluster pulls is the mirror's.
Nodes create the cache's repositories on first pull and import the upstream image: both actions are
granted on the prefix's repositories only, on each node role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

DOCKER_HUB_REGISTRY = "registry-1.docker.io"
_DOCKER_HUB_HOSTS = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def docker_hub_path(image: str) -> str | None:
    """The repository path on Docker Hub of an image reference (`python:3.12` -> `library/python:3.12`),
    or None when the reference names another registry."""
    for host in _DOCKER_HUB_HOSTS:
        if image.startswith(host):
            image = image[len(host):]
            break
    else:
        first = image.split("/", 1)[0]
        if "/" in image and ("." in first or ":" in first or first == "localhost"):
            return None  # a registry host: public.ecr.aws/..., nvcr.io/..., <account>.dkr.ecr...
    return image if "/" in image.split("@", 1)[0].split(":", 1)[0] else f"library/{image}"


def mirrored_image(image: str, registry: str, prefix: str) -> str:
    """The reference the cluster pulls: Docker Hub images through the cache, tag and digest kept;
    any other registry's image unchanged."""
    path = docker_hub_path(image)
    return image if path is None else f"{registry}/{prefix}/{path}"


def _rewrite(value: Any, registry: str, prefix: str, in_containers: bool = False) -> Any:
    if isinstance(value, pulumi.Output):
        return value.apply(lambda v: _rewrite(v, registry, prefix, in_containers))
    if isinstance(value, list):
        return [_rewrite(v, registry, prefix, in_containers) for v in value]
    if isinstance(value, dict):
        out = {k: _rewrite(v, registry, prefix, k in _CONTAINER_LISTS) for k, v in value.items()}
        if in_containers and isinstance(out.get("image"), str):
            out["image"] = mirrored_image(out["image"], registry, prefix)
        return out
    return value


def mirror_transformation(registry: str, prefix: str) -> pulumi.ResourceTransformation:
    """A stack transformation pointing every Kubernetes container's Docker Hub image at the cache."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if not args.type_.startswith("kubernetes:") or "spec" not in args.props:
            return None
        return pulumi.ResourceTransformationResult(
            {**args.props, "spec": _rewrite(args.props["spec"], registry, prefix)}, args.opts)

    return transform


@dataclass(frozen=True)
class ImageMirrorArgs:
    region: str
    account_id: str
    repository_prefix: str  # the cache's repositories: <prefix>/<Docker Hub path>
    credential_arn: pulumi.Input[str]  # Secrets Manager secret ecr-pullthroughcache/... (username, accessToken)
    node_role_names: dict[str, pulumi.Input[str]]  # every role whose nodes pull: {label: role name}

    @property
    def registry(self) -> str:
        return f"{self.account_id}.dkr.ecr.{self.region}.amazonaws.com"


class ImageMirror(pulumi.ComponentResource):
    """The pull-through cache rule for Docker Hub, and the node roles' right to fill it."""

    rule: aws.ecr.PullThroughCacheRule

    def __init__(self, name: str, args: ImageMirrorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-poc:images:ImageMirror", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.registry = args.registry
        self.prefix = args.repository_prefix
        self.rule = aws.ecr.PullThroughCacheRule(
            f"{name}-docker-hub",
            ecr_repository_prefix=args.repository_prefix,
            upstream_registry_url=DOCKER_HUB_REGISTRY,
            credential_arn=args.credential_arn,
            opts=child,
        )
        repositories = (f"arn:aws:ecr:{args.region}:{args.account_id}:repository/"
                        f"{args.repository_prefix}/*")
        policy = json.dumps({"Version": "2012-10-17", "Statement": [{
            "Sid": "FillThePullThroughCache",
            "Effect": "Allow",
            # the first pull of an image creates its repository under the prefix and imports it
            "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
            "Resource": repositories,
        }]}, sort_keys=True)
        for label, role in sorted(args.node_role_names.items()):
            aws.iam.RolePolicy(f"{name}-{label}", role=role, policy=policy, opts=child)
        self.register_outputs({"registry": self.registry, "prefix": self.prefix})
