"""Every image the stacks render runs by digest, or is listed as tag-only with its reason."""

from __future__ import annotations

import re
from typing import Any

from stacks.versions import pins, tag_only_images
from tests.fixtures import pod_security_standards as pss

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


def test_workloads_run_the_pinned_images(dev):
    # servers and bench Jobs: vLLM; weight syncs and GPU node checks: the plain Python image
    assert rendered_images(dev) == {pins().vllm_image, pins().weight_sync_image}
    assert pins().weight_sync_image.startswith("python:3.12.12-slim-bookworm@sha256:")
