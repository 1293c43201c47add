"""The bench's wings import one way (bench/__init__.py draws the map): run -> analysis -> startup ->
common, demo on top, and weights/ reaches only bench/common/. Imports anywhere in a module count,
function-local ones too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"

# What each wing may import of the bench besides itself (bench/__init__.py says why).
MAY_IMPORT = {
    "common": set(),
    "startup": {"common"},
    "analysis": {"startup", "common"},
    "run": {"analysis", "common"},
    "demo": {"run", "analysis", "startup", "common"},
}


def _imported(path: Path) -> set[str]:
    """The dotted names a module imports, absolute (`from bench.x import y` gives `bench.x`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def _wing_of(name: str) -> str | None:
    """`bench.run.sweep` -> `run`; None for what is not in a wing (the package itself, other packages)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "bench" and len(parts) > 1 and parts[1] in MAY_IMPORT else None


def crossings(root: Path = BENCH) -> list[str]:
    """Every import from one wing into another that the map does not allow, as `file -> module`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        wing = rel.parts[0] if len(rel.parts) > 1 else None
        if wing not in MAY_IMPORT:
            continue  # bench/__main__.py registers every wing's commands
        for name in sorted(_imported(path)):
            other = _wing_of(name)
            if other not in (None, wing) and other not in MAY_IMPORT[wing]:
                found.append(f"bench/{rel.as_posix()} -> {name}")
    return found


def test_each_wing_imports_only_the_wings_below_it():
    assert {p.name for p in BENCH.iterdir() if (p / "__init__.py").is_file()} == set(MAY_IMPORT)
    assert crossings() == []


def test_the_wing_check_can_fail(tmp_path):
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "report.py").write_text("def f():\n    from bench.run import sweep\n")
    assert crossings(tmp_path) == ["bench/analysis/report.py -> bench.run", "bench/analysis/report.py -> bench.run.sweep"]


def test_weights_reach_only_the_shared_pieces_of_the_bench():
    reached = {name for path in (REPO / "weights").rglob("*.py") for name in _imported(path)
               if name.split(".")[0] == "bench"}
    assert reached and all(name.startswith("bench.common.") for name in reached), reached


def test_the_map_in_the_package_docstring_names_every_wing():
    doc = ast.get_docstring(ast.parse((BENCH / "__init__.py").read_text())) or ""
    for wing in MAY_IMPORT:
        assert f"    {wing}/" in doc, wing
    assert "run -> analysis -> startup -> common" in doc
