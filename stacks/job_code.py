"""The Python code the Jobs and pods mount, read from the repository as {file: source}.

The weights package runs in the weight sync Jobs and, beside each server with a compile cache, in
the pull and push steps; those steps also import a few bench modules (weights/compile_cache.py
imports them), mounted beside it.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "bench"
WEIGHTS_DIR = REPO / "weights"
# The bench modules the weights package imports (weights/compile_cache.py: progress, interrupts).
WEIGHTS_HELPERS = ("__init__.py", "interrupts.py", "progress.py")


def weights_code() -> dict[str, str]:
    """The weights package, as the weight-sync Job and the compile-cache steps mount it."""
    return {path.name: path.read_text() for path in sorted(WEIGHTS_DIR.glob("*.py"))}


def weights_helpers() -> dict[str, str]:
    """The bench modules the weights package imports (the compile-cache steps mount them beside it)."""
    return {name: (BENCH_DIR / name).read_text() for name in WEIGHTS_HELPERS}
