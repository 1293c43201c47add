"""The import graph of the project's packages, read from the code with `ast` (nothing is imported).

Rules, each with the reason a reader can rely on it:

* no import cycle between modules: a module can be read, tested and moved knowing only what it
  imports. Function-local imports count (they dodge a cycle at run time, not in the design), and so
  do imports under `if TYPE_CHECKING:` (a type that needs the other module is a dependency on it);
* the plain-Python side (bench/, weights/) imports nothing of the Pulumi side (stacks/,
  components/, pulumi and its providers): the bench Jobs and the weight Jobs run it in images that
  have neither;
* the Pulumi program (stacks/ outside stacks/ops/) and the components never import the operator
  commands (stacks/ops/), and the components never import the program: data flows config ->
  stacks -> components;
* the policy pack (policy/) imports no project package: it runs in a virtualenv of its own;
* an import inside a function is there to keep a heavy optional dependency out of start-up: one of
  HEAVY_OPTIONAL, or a line that says why (`# local import: <reason>`, on the import or just above).

An edge `a -> b` is drawn for `import b`, `from b import x` and `from a_package import b` where `b`
is a module of the project; the package `__init__` modules that Python runs on the way are not
edges (else every package that lists its modules in `__init__` would close a loop with each of them).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("stacks", "components", "bench", "weights", "policy")
PLAIN_SIDE = ("bench", "weights")
PULUMI_SIDE = ("stacks", "components")
OPERATOR_COMMANDS = "stacks.ops"
# Third-party packages slow to import or absent where most of the code runs: loading them only in
# the function that needs them keeps `--help`, config errors and the offline render quick, and keeps
# modules importable in the Jobs' images that lack them.
HEAVY_OPTIONAL = frozenset({
    "boto3", "botocore",  # the AWS SDK: about half a second, and only the commands that call AWS need it
    "huggingface_hub",  # the weight sync Job alone
    "matplotlib",  # charts: the report pages alone
    "playwright",  # the page checks in a browser
    "runai_model_streamer",  # in the vLLM image only
    "tokenizers", "torch", "transformers", "vllm",  # the vLLM stack: .venv-vllm and the images only
    "tqdm",  # progress bars: only on a terminal
})
LOCAL_IMPORT_NOTE = "# local import:"


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (a project module) or the dotted name as written (anything else)
    line: int
    local: bool  # inside a function
    reason: str | None  # the `# local import:` note, if any


@dataclass
class Graph:
    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            if imp.target in self.modules and imp.target != imp.source:
                out[imp.source].add(imp.target)
        return out

    def where(self, source: str, target: str) -> str:
        lines = sorted({i.line for i in self.imports if i.source == source and i.target == target})
        return f"{self.modules[source].as_posix()}:{','.join(map(str, lines))}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if not any(part in ("venv", ".venv", "__pycache__") for part in path.relative_to(root).parts):
                found[module_name(root, path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _note(lines: list[str], node: ast.stmt) -> str | None:
    """The `# local import: <reason>` on the import's lines or in the comment just above it."""
    start = node.lineno - 1
    while start > 0 and lines[start - 1].strip().startswith("#"):
        start -= 1
    for text in lines[start:node.end_lineno or node.lineno]:
        if LOCAL_IMPORT_NOTE in text:
            reason = text.split(LOCAL_IMPORT_NOTE, 1)[1].strip()
            return reason or None
    return None


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """The project module `name` means (itself, or the closest package above it), else `name`."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return name


def read_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    siblings = path.parent
    found: list[Import] = []

    def absolute(base: str | None, level: int) -> str:
        if not level:
            return base or ""
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (level - 1)]
        return ".".join([*anchor, *([base] if base else [])])

    def script_sibling(name: str) -> str:
        # A package's __main__.py may be run as a script with its folder first on sys.path (the
        # Pulumi CLI runs policy/__main__.py so): a bare name there can be a sibling module.
        top = name.split(".")[0]
        if path.name == "__main__.py" and top not in PACKAGES and (
                (siblings / f"{top}.py").is_file() or (siblings / top / "__init__.py").is_file()):
            return f"{package}.{name}"
        return name

    def add(target: str, node: ast.stmt, local: bool) -> None:
        imp = Import(module, _resolve(target, modules), node.lineno, local, _note(lines, node) if local else None)
        if imp not in found:  # `from b import x, y` is one import of b
            found.append(imp)

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(script_sibling(alias.name), child, local)
            elif isinstance(child, ast.ImportFrom):
                base = script_sibling(absolute(child.module, child.level)) if not child.level else \
                    absolute(child.module, child.level)
                for alias in child.names:
                    candidate = f"{base}.{alias.name}" if base else alias.name
                    add(candidate if candidate in modules else base, child, local)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                visit(child, local)  # counted as imports (see the module docstring)
            else:
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(text, filename=str(path)), False)
    return found


def build_graph(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> Graph:
    modules = find_modules(root, packages)
    graph = Graph(modules)
    for module, path in modules.items():
        graph.imports += read_imports(module, path, modules)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The modules that import each other: each strongly connected component of two or more (Tarjan)."""
    edges = graph.edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        # Iterative: a deep import chain must not hit the recursion limit.
        work = [(node, iter(sorted(edges[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == current:
                            break
                    if len(members) > 1:
                        components.append(sorted(members))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(components)


def _loop(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(edges[node] & inside):
            if child == start:
                return paths[node] + [start]
            if child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return component  # not reached: a component of two or more has a loop


def describe_cycle(graph: Graph, component: list[str]) -> str:
    """One loop through the component, then every arrow among its modules (each one to undo or keep)."""
    edges = graph.edges()
    inside = set(component)
    arrows = [f"{a} -> {b} ({graph.where(a, b)})" for a in component for b in sorted(edges[a] & inside)]
    return (f"import cycle {' -> '.join(_loop(component, edges))}; arrows among its {len(component)} modules: "
            + "; ".join(arrows))


def _package(module: str) -> str:
    return module.split(".")[0]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def direction_problems(graph: Graph) -> list[str]:
    problems = []
    for imp in graph.imports:
        target_top = imp.target.split(".")[0]
        where = f"{graph.modules[imp.source].as_posix()}:{imp.line}"
        source_top = _package(imp.source)
        if source_top in PLAIN_SIDE and (target_top in PULUMI_SIDE or target_top.startswith("pulumi")):
            problems.append(f"{where}: {imp.source} imports {imp.target}; bench/ and weights/ are plain Python "
                            "run in images without the Pulumi side: move what both need to the bench side or "
                            "into a data file both read")
        if source_top == "policy" and target_top in PACKAGES and target_top != "policy":
            problems.append(f"{where}: {imp.source} imports {imp.target}; the policy pack runs in its own "
                            "virtualenv without the project")
        if _in(imp.target, OPERATOR_COMMANDS) and not _in(imp.source, OPERATOR_COMMANDS) \
                and imp.source not in ("stacks.__main__",):
            problems.append(f"{where}: {imp.source} imports the operator command module {imp.target}; the "
                            "Pulumi program and the components never depend on the commands")
        if source_top == "components" and target_top == "stacks":
            problems.append(f"{where}: {imp.source} imports {imp.target}; components receive settings as "
                            "typed Args and never import the program")
    return problems


def local_import_problems(graph: Graph) -> list[str]:
    problems = []
    for imp in graph.imports:
        if not imp.local or imp.reason or imp.target.split(".")[0] in HEAVY_OPTIONAL:
            continue
        problems.append(f"{graph.modules[imp.source].as_posix()}:{imp.line}: {imp.source} imports {imp.target} "
                        f"inside a function; import it at the top, or say why it waits ({LOCAL_IMPORT_NOTE} <reason>)")
    return problems


def _relative(problems: list[str], root: Path) -> list[str]:
    return [p.replace(f"{root.as_posix()}/", "") for p in problems]


# --------------------------------------------------------------------------------------------------
# The project


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_every_package_is_read(graph):
    for package in PACKAGES:
        assert package in graph.modules, f"{package}/__init__.py not found"
    assert len(graph.edges()) == len(graph.modules)
    assert sum(len(targets) for targets in graph.edges().values()) > 50  # the graph is really read


def test_no_import_cycles(graph):
    found = [describe_cycle(graph, loop) for loop in cycles(graph)]
    assert not found, "\n" + "\n".join(_relative(found, REPO))


def test_imports_flow_one_way(graph):
    problems = direction_problems(graph)
    assert not problems, "\n" + "\n".join(_relative(problems, REPO))


def test_function_local_imports_keep_heavy_dependencies_out_of_start_up(graph):
    problems = local_import_problems(graph)
    assert not problems, "\n" + "\n".join(_relative(problems, REPO))


# --------------------------------------------------------------------------------------------------
# The checks themselves, on planted packages


def _plant(root: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        init = root / package / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("")
    return build_graph(root)


def test_a_planted_cycle_is_found_through_a_function_local_import(tmp_path):
    graph = _plant(tmp_path, {
        "stacks/settings/__init__.py": "from stacks.settings.base import ConfigError\n",
        "stacks/settings/base.py": "class ConfigError(ValueError):\n    pass\n",
        "stacks/a.py": "from stacks import b\n",
        "stacks/b.py": "def f():\n    from stacks.c import g  # local import: planted\n    return g\n",
        "stacks/c.py": "import stacks.a\n",
    })
    found = cycles(graph)
    assert found == [["stacks.a", "stacks.b", "stacks.c"]]
    assert _relative([describe_cycle(graph, found[0])], tmp_path) == [
        "import cycle stacks.a -> stacks.b -> stacks.c -> stacks.a; arrows among its 3 modules: "
        "stacks.a -> stacks.b (stacks/a.py:1); stacks.b -> stacks.c (stacks/b.py:2); stacks.c -> stacks.a (stacks/c.py:1)"]
    # a package importing its own modules is no loop
    assert not any("stacks.settings" in loop for loop in found)


def test_a_planted_cycle_under_type_checking_and_relative_imports_is_found(tmp_path):
    graph = _plant(tmp_path, {
        "policy/rules/__init__.py": "",
        "policy/rules/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "policy/rules/b.py": "from . import a\n",
    })
    assert cycles(graph) == [["policy.rules.a", "policy.rules.b"]]


def test_the_policy_entry_point_imports_its_sibling_by_bare_name(tmp_path):
    graph = _plant(tmp_path, {
        "policy/__main__.py": "from rules import PACK\n",
        "policy/rules/__init__.py": "PACK = 1\n",
    })
    assert graph.edges()["policy.__main__"] == {"policy.rules"}


def test_planted_wrong_way_imports_are_refused(tmp_path):
    graph = _plant(tmp_path, {
        "bench/plan.py": "def f():\n    from stacks import catalog  # local import: planted\n",
        "stacks/catalog.py": "",
        "weights/hub.py": "import pulumi_aws\n",
        "components/store.py": "from stacks.ops.render import x\nfrom stacks import catalog\n",
        "stacks/ops/__init__.py": "",
        "stacks/ops/render.py": "from stacks import catalog\n",
        "stacks/__main__.py": "from stacks.ops import render\n",
        "policy/rules.py": "from stacks import catalog\n",
    })
    problems = _relative(direction_problems(graph), tmp_path)
    assert sorted(p.split(";")[0] for p in problems) == [
        "bench/plan.py:2: bench.plan imports stacks.catalog",
        "components/store.py:1: components.store imports stacks.ops.render",
        "components/store.py:1: components.store imports the operator command module stacks.ops.render",
        "components/store.py:2: components.store imports stacks.catalog",
        "policy/rules.py:1: policy.rules imports stacks.catalog",
        "weights/hub.py:1: weights.hub imports pulumi_aws",
    ]


def test_planted_function_local_imports_need_a_heavy_dependency_or_a_reason(tmp_path):
    graph = _plant(tmp_path, {
        "stacks/a.py": (
            "def quiet():\n"
            "    import boto3\n"
            "    # local import: the Pulumi runtime, once the arguments hold\n"
            "    from stacks import b\n"
            "    from stacks import c  # local import: planted\n"
            "def loud():\n"
            "    from stacks import b\n"
            "    import json\n"
            "    from stacks import c  # local import:\n"
        ),
        "stacks/b.py": "",
        "stacks/c.py": "",
    })
    problems = _relative(local_import_problems(graph), tmp_path)
    assert [p.split(" inside")[0] for p in problems] == [
        "stacks/a.py:7: stacks.a imports stacks.b",
        "stacks/a.py:8: stacks.a imports json",
        "stacks/a.py:9: stacks.a imports stacks.c",
    ]
