"""The Python code the Jobs mount, read from the repository as {path in its package: source}.

A Job that runs one module (`python -m bench.run.sweep`, `python -m bench.startup.collect`,
`python -m bench.startup.streamer`, `python -m bench.run.release`), and the server's compile-cache
steps (`python -m weights.compile_cache`, which imports two modules of bench/common/), mount only
what that module imports: the modules reached from there through every import of the package,
function-local ones included, with the `__init__.py` of each package on the way. A module that
moves, or that starts importing another, takes what it needs along without a list to keep up to
date. The report Job and the mixed-traffic check run `python -m bench ...`, which imports every
command: they mount the whole bench package.

That closure is also what names a Job (its hash): a sweep is keyed by the code that produces its
numbers, so an edit to the report's pages, the demo, the docs or the tests renames no sweep and
restarts no server, and an edit to the sweep's own code does (`measured_code`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "bench"
WEIGHTS_DIR = REPO / "weights"


def package_code(folder: Path) -> dict[str, str]:
    """Every module of a package, sub-packages included: {path in the package: source}."""
    return {path.relative_to(folder).as_posix(): path.read_text()
            for path in sorted(folder.rglob("*.py")) if "__pycache__" not in path.parts}


def bench_code() -> dict[str, str]:
    """The whole bench package, as `python -m bench` needs it."""
    return package_code(BENCH_DIR)


def weights_code() -> dict[str, str]:
    """The weights package, as the weight-sync Job and the compile-cache steps mount it."""
    return package_code(WEIGHTS_DIR)


def _module_path(code: dict[str, str], module: str) -> str | None:
    """`bench.startup.collect` -> `startup/collect.py` (or a package's `__init__.py`), if in `code`."""
    parts = module.split(".")[1:]
    for path in ("/".join(parts) + ".py" if parts else None, "/".join([*parts, "__init__.py"])):
        if path in code:
            return path
    return None


@functools.lru_cache(maxsize=2048)
def _imported(source: str, package: str) -> frozenset[str]:
    """The modules of `package` that a module's source imports (anywhere in it), as dotted names. Kept per
    source: a render asks for the same modules' imports for every Job, and parsing them was half its time."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == package}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == package:
            # `from bench.startup import phases` imports a module; `from bench.common.s3 import x` a name.
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return frozenset(found)


def imported_code(code: dict[str, str], sources: Iterable[str], package: str = "bench") -> dict[str, str]:
    """The files of `code` (a package's, {path: source}) that the given sources need: the modules
    they import from `package`, what those import in turn, and each package's `__init__.py`."""
    paths: set[str] = set()
    todo = [module for source in sources for module in _imported(source, package)]
    while todo:
        module = todo.pop()
        path = _module_path(code, module)
        if path is None or path in paths:
            continue  # a name imported from a module, not a module; or one already taken
        paths.add(path)
        todo.extend(_imported(code[path], package))
        parents = module.split(".")[:-1]
        todo.extend(".".join(parents[:n]) for n in range(1, len(parents) + 1))
    return {path: code[path] for path in sorted(paths)}


def module_code(code: dict[str, str], module: str) -> dict[str, str]:
    """What `python -m <module>` needs of the bench package `code`: the module and what it imports."""
    return imported_code(code, [f"import {module}"])


def weights_helpers() -> dict[str, str]:
    """The bench modules the weights package imports (the weight-sync Job mounts them beside it)."""
    return imported_code(bench_code(), weights_code().values())


# The modules a target's sweep runs: the sweep itself and the start-up record written under its prefix.
SWEEP_MODULE = "bench.run.sweep"
TIMELINE_MODULE = "bench.startup.collect"
COMPILE_CACHE_MODULE = "weights.compile_cache"


def measured_code(code: dict[str, str]) -> dict[str, str]:
    """What produces a sweep's results prefix (of the bench package `code`): the sweep's closure and
    the start-up timeline's, which writes into the same prefix. Its hash keys the sweep."""
    return {**module_code(code, SWEEP_MODULE), **module_code(code, TIMELINE_MODULE)}


def compile_cache_code() -> tuple[dict[str, str], dict[str, str]]:
    """(the weights modules, the bench modules) that `python -m weights.compile_cache` imports: what
    the server pod's cache steps mount, and so all of the code its pod template depends on."""
    weights = imported_code(weights_code(), [f"import {COMPILE_CACHE_MODULE}"], package="weights")
    return weights, imported_code(bench_code(), weights.values())
