"""The project's own Python as pods mount it from ConfigMaps, read from the working tree.

The weights package runs in the weight sync Jobs and, beside each server with a compile cache, in
the pull and push steps; those steps also import a few bench helpers (weights/compile_cache.py
imports them), mounted as a package of their own.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WEIGHTS_DIR = REPO / "weights"
# What the pull and push steps run besides the weights package (weights/compile_cache.py imports them).
CACHE_STEP_HELPERS = ("__init__.py", "interrupts.py", "progress.py")


def weights_code() -> dict[str, str]:
    """The weights package as the sync Job and the compile-cache steps mount it."""
    return {path.name: path.read_text() for path in sorted(WEIGHTS_DIR.glob("*.py"))}


def compile_cache_code() -> tuple[dict[str, str], dict[str, str]]:
    """(the weights package, the bench helpers it uses) as the server pod mounts them."""
    bench = REPO / "bench"
    return weights_code(), {name: (bench / name).read_text() for name in CACHE_STEP_HELPERS}
