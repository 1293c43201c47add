"""Rooms a reader can take in: no module over 600 lines and no folder over 20 modules, unless the
module's docstring (a folder's: its `__init__.py`'s) says why it is so "on purpose". Splitting
along a seam is the usual answer; the reason is for the few places where a split would scatter one
idea. The tests' own folder is flat on purpose, and its index must name every test file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("stacks", "components", "bench", "weights", "policy", "tests")
MAX_LINES = 600
MAX_MODULES = 20
REASON = "on purpose"


def _docstring(path: Path) -> str:
    try:
        return ast.get_docstring(ast.parse(path.read_text())) or ""
    except (OSError, SyntaxError):
        return ""


def _folders(root: Path):
    for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if "__pycache__" in folder.parts or any(part.startswith(".") for part in folder.parts[len(root.parts):]):
            continue
        yield folder


def layout_problems(repo: Path, roots: tuple[str, ...] = ROOTS) -> list[str]:
    problems: list[str] = []
    for name in roots:
        root = repo / name
        if not root.is_dir():
            continue
        for folder in _folders(root):
            modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
            if len(modules) > MAX_MODULES and REASON not in _docstring(folder / "__init__.py"):
                problems.append(f"{folder.relative_to(repo)}/ holds {len(modules)} modules (at most {MAX_MODULES}): "
                                f"split it, or say in its __init__.py why it is one folder {REASON}")
            for module in modules + ([folder / "__init__.py"] if (folder / "__init__.py").exists() else []):
                lines = len(module.read_text().splitlines())
                if lines > MAX_LINES and REASON not in _docstring(module):
                    problems.append(f"{module.relative_to(repo)} has {lines} lines (at most {MAX_LINES}): "
                                    f"split it along a seam, or say in its docstring why it is one module {REASON}")
    return problems


def test_no_module_or_folder_too_large_without_a_reason():
    problems = layout_problems(REPO)
    assert not problems, "\n" + "\n".join(problems)


def test_the_layout_check_can_fail(tmp_path):
    pkg = tmp_path / "bench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package."""\n')
    (pkg / "long.py").write_text('"""Long."""\n' + "x = 1\n" * MAX_LINES)
    (pkg / "kept.py").write_text(f'"""Long {REASON}: one table."""\n' + "x = 1\n" * MAX_LINES)
    wide = pkg / "wide"
    wide.mkdir()
    for i in range(MAX_MODULES + 1):
        (wide / f"m{i}.py").write_text("")
    assert layout_problems(tmp_path, ("bench",)) == [
        f"bench/long.py has {MAX_LINES + 1} lines (at most {MAX_LINES}): split it along a seam, or say in its "
        f"docstring why it is one module {REASON}",
        f"bench/wide/ holds {MAX_MODULES + 1} modules (at most {MAX_MODULES}): split it, or say in its __init__.py "
        f"why it is one folder {REASON}",
    ]
    (wide / "__init__.py").write_text(f'"""Flat {REASON}."""\n')
    assert len(layout_problems(tmp_path, ("bench",))) == 1


def test_the_tests_index_names_every_test_file():
    index = _docstring(REPO / "tests" / "__init__.py")
    named = set(re.findall(r"\b(test_[a-z0-9_]*[a-z0-9])\b", index))
    files = {p.stem for p in (REPO / "tests").glob("test_*.py")}
    assert files - named == set(), "add them to the index in tests/__init__.py"
    assert {n for n in named - files if not n.endswith("_")} == set(), "the index names files that are gone"
