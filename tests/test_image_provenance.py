"""Every image the stacks render runs by digest, or is listed as tag-only with its reason."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from components.image_mirror import docker_hub_path, mirrored_image
from stacks.loader import load_settings
from stacks.ops import mocks
from stacks.versions import pins, tag_only_images
from tests.fixtures import pod_security_standards as pss
from tests.fixtures.pulumi_stack import render_with, stack_config

DIGEST = re.compile(r"^[^@\s]+:[^@/\s]+@sha256:[0-9a-f]{64}$")  # repository:tag@sha256:<64 hex>


def helm_images(values: Any) -> list[str]:
    """String `image` values anywhere in a Helm release's values."""
    found = []
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "image" and isinstance(value, str):
                found.append(value)
            else:
                found += helm_images(value)
    elif isinstance(values, list):
        for value in values:
            found += helm_images(value)
    return found


def rendered_images(rendered) -> set[str]:
    images = set()
    for _, spec in pss.pod_specs(rendered.kubernetes_objects()):
        for key in ("initContainers", "containers"):
            images |= {c["image"] for c in spec.get(key) or []}
    for release in rendered.helm_releases():
        images |= set(helm_images(release["values"]))
    return images


def test_pins_carry_tag_and_digest():
    p = pins()
    assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", p.vllm_image_tag)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", p.vllm_image_digest)
    assert p.vllm_image == f"{p.vllm_image_tag}@{p.vllm_image_digest}"


def test_every_rendered_image_is_digest_pinned_or_listed_tag_only(all_stacks):
    allowed = tag_only_images()
    seen: set[str] = set()
    for stack, rendered in all_stacks.items():
        images = rendered_images(rendered)
        assert images, stack
        seen |= images
        for image in images:
            assert DIGEST.match(image) or image in allowed, (
                f"{stack}: image {image!r} has no digest; pin it in pyproject's [tool.vllm-poc.pins] or "
                "list it in [tool.vllm-poc.tag-only-images] with the reason")
    for image, reason in allowed.items():
        assert len(reason.split()) >= 5, f"tag-only image {image} needs a reason"
        assert image in seen, f"tag-only entry {image} is rendered by no stack: remove it"


def test_workloads_run_the_pinned_images_through_the_pull_through_cache(dev):
    # servers and bench Jobs: vLLM; weight syncs and GPU node checks: the plain Python image; both
    # from the stack's ECR pull-through cache (Docker Hub path under the cluster's prefix), same digest
    registry = f"{mocks.ACCOUNT_ID}.dkr.ecr.ap-northeast-2.amazonaws.com/vllm-poc-dev"
    assert rendered_images(dev) == {f"{registry}/{pins().vllm_image}", f"{registry}/library/{pins().weight_sync_image}"}
    assert pins().weight_sync_image.startswith("python:3.12.12-slim-bookworm@sha256:")


def test_every_docker_hub_image_of_every_stack_comes_from_its_cache_by_the_pinned_digest(all_stacks):
    pinned = {pins().vllm_image, pins().weight_sync_image}
    for stack, rendered in all_stacks.items():
        settings = load_settings(stack)
        registry = f"{mocks.ACCOUNT_ID}.dkr.ecr.{settings.region}.amazonaws.com"
        (rule,) = rendered.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
        assert rule.inputs["upstreamRegistryUrl"] == "registry-1.docker.io"
        assert rule.inputs["credentialArn"].split(":secret:")[1].startswith("ecr-pullthroughcache/docker-hub-")
        prefix = rule.inputs["ecrRepositoryPrefix"]
        assert prefix == settings.cluster.name
        for _, spec in pss.pod_specs(rendered.kubernetes_objects()):
            for container in (spec.get("initContainers") or []) + spec["containers"]:
                image = container["image"]
                # a digest survives the mirror: the cache serves the upstream manifest as it is
                assert DIGEST.match(image), f"{stack}: {image}"
                assert docker_hub_path(image) is None, f"{stack}: {image} is pulled from Docker Hub"
                upstream = image.removeprefix(f"{registry}/{prefix}/").removeprefix("library/")
                assert upstream in pinned, f"{stack}: {image} is not a pinned image through {registry}/{prefix}"
        # the nodes may fill the cache under this prefix, and nothing else
        statements = [json.loads(p.inputs["policy"])["Statement"] for p in rendered.of_type("aws:iam/rolePolicy:RolePolicy")
                      if p.parent_name == "image-mirror"]
        assert len(statements) == 2
        assert all(s == [{"Sid": "FillThePullThroughCache", "Effect": "Allow",
                          "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                          "Resource": f"arn:aws:ecr:{settings.region}:{mocks.ACCOUNT_ID}:repository/{prefix}/*"}]
                   for s in statements)


@pytest.mark.parametrize("image, path", [
    ("python:3.12@sha256:" + "a" * 64, "library/python:3.12@sha256:" + "a" * 64),
    ("docker.io/library/python:3.12", "library/python:3.12"),
    ("vllm/vllm-openai:v0.26.0", "vllm/vllm-openai:v0.26.0"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", None),
    ("public.ecr.aws/karpenter/controller:1.14.1", None),
    ("localhost:5000/x:1", None),
    ("123456789012.dkr.ecr.ap-northeast-2.amazonaws.com/vllm-poc-dev/vllm/vllm-openai:v0.26.0", None),
])
def test_only_docker_hub_references_are_mirrored(image, path):
    assert docker_hub_path(image) == path
    mirrored = mirrored_image(image, "r.example", "p")
    assert mirrored == (image if path is None else f"r.example/p/{path}")
    assert mirrored.partition("@")[2] == image.partition("@")[2]  # the digest is never touched


def test_the_mirror_can_be_turned_off_and_a_missing_secret_is_refused_naming_the_key():
    off = render_with(cluster={**stack_config()["vllm-poc:cluster"], "imageMirror": {"enabled": False}})
    assert not off.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
    assert rendered_images(off) == {pins().vllm_image, pins().weight_sync_image}
    mocks.MISSING_SECRETS.add("ecr-pullthroughcache/docker-hub")
    try:
        with pytest.raises(Exception, match=r"vllm-poc:cluster.imageMirror.credentialSecret: no secret "
                                            r"ecr-pullthroughcache/docker-hub .*enabled: false"):
            render_with()
    finally:
        mocks.MISSING_SECRETS.clear()
