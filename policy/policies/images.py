"""Rules on container images: pinned by a tag other than latest or by a digest, and (advisory) by digest."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .values import is_unknown
from .workloads import container_label, containers


# Rule: container images are pinned (no `latest`, no missing tag)


_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None if it is (a tag other than latest, or a digest)."""
    _, at, digest = image.partition("@")
    if at:
        return None if _DIGEST.fullmatch(digest) else f"has a malformed digest '{digest}'"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (pulls 'latest')"
    tag = last.split(":", 1)[1]
    if tag == "latest":
        return "uses the tag 'latest'"
    if not tag:
        return "has an empty tag"
    return None


def check_image_tags(resource_type: str, props: Mapping[str, Any], name: str = "",
                     config: Mapping[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    items = containers(resource_type, props)
    if is_unknown(items):
        return messages
    for container in items:
        image = container.get("image")
        if not isinstance(image, str):
            continue
        problem = image_problem(image)
        if problem:
            messages.append(
                f"{container_label(name, container)}: image '{image}' {problem}; pin a version tag "
                f"(e.g. from [tool.vllm-poc.pins] in pyproject.toml) or a digest '@sha256:...'.")
    return messages


# Rule (advisory): container images are pinned by digest


def check_image_digests(resource_type: str, props: Mapping[str, Any], name: str = "",
                        config: Mapping[str, Any] | None = None) -> list[str]:
    """A tag can be moved to other content; a digest cannot. Advisory: a tag-only image is
    sometimes the only choice (no digest published for it), and the project lists those with the
    reason in pyproject's pins."""
    messages: list[str] = []
    items = containers(resource_type, props)
    if is_unknown(items):
        return messages
    for container in items:
        image = container.get("image")
        if isinstance(image, str) and "@" not in image:
            messages.append(
                f"{container_label(name, container)}: image '{image}' is pinned by tag only; the "
                f"registry can move a tag to other content. Pin the digest too ('<tag>@sha256:...', "
                f"[tool.vllm-poc.pins] in pyproject.toml) or list the image as tag-only with a reason.")
    return messages
