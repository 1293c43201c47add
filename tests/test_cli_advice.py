"""Advice that works: every `--flag` the two CLIs' messages name exists where it is named, every folder
a command writes into refuses a file with exit 2, and `bench open` opens a local report folder.

The flag check reads the source, not a list: every string (f-strings' literal parts, with module
constants filled in; docstrings aside) under bench/ and stacks/ that names a `--flag` in prose is
checked against every command whose handler reaches the function holding it (a call graph over the
project's own functions, resolved through imports, that stops at another command's entry: what
`bench demo` prints through `bench report` is report's), and each command's help and description
against its own parser. Within a clause, a flag belongs to the command the clause names
(`python -m stacks teardown-check ... --delete`, `bench sweep --resume`, "a plan made with --mix"),
else, where the clause names another tool (aws, kubectl, pulumi, ...) or the flag is vLLM's, to that
tool; else to the command that prints it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from bench.__main__ import build_parser as bench_parser
from bench.analysis import opener
from bench.analysis import report as REP
from stacks.__main__ import build_parser as stacks_parser
from stacks.settings import REPO
from tests.test_bench_report import G7E_PEAK, L40S_PEAK, write_curve

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# Another tool's flags: a clause naming one of these may name its flags.
OTHER_TOOLS = re.compile(
    r"\b(aws|kubectl|helm|pulumi|pip|uv|docker|crane|git|make|pytest|checkov|chromium|curl|vllm|"
    r"python -m (?!bench\b|stacks\b)[\w.]+)\b")
# vLLM's own flags: `vllm serve` (the flag list the stack checks extraArgs against) and the few of
# `vllm bench serve` the bench's messages name.
VLLM_FLAGS = set(json.loads((REPO / "stacks" / "vllm_flags.json").read_text())["flags"]) | {
    "--num-warmups", "--save-detailed", "--request-rate", "--temperature"}
# A string the call graph reaches but the command never prints, with the reason.
NOT_PRINTED = {
    ("bench", "compare", "--no-charts"): "markup.document's note for pages drawn without charts on request; "
                                         "compare's pages draw none and have no such request",
}
CLAUSE = re.compile(r"(?<=[.;!?])\s+|\n|: ")
PACKAGES = ("bench", "stacks")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


CLIS = {"bench": _subcommands(bench_parser()), "stacks": _subcommands(stacks_parser())}


# --- the source, read as functions, the strings they hold and the functions they reach -----------------


class Source:
    def __init__(self) -> None:
        self.modules: dict[str, ast.Module] = {}
        for package in PACKAGES:
            for path in sorted((REPO / package).rglob("*.py")):
                rel = path.relative_to(REPO).with_suffix("")
                parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
                self.modules[".".join(parts)] = ast.parse(path.read_text(), str(path))
        self.constants = {(m, t.id): n.value.value for m, tree in self.modules.items() for n in tree.body
                          if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                          and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}
        self.strings: dict[tuple[str, str], list[str]] = defaultdict(list)  # node -> prose naming a flag
        self.edges: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
        for module, tree in self.modules.items():
            self._read(module, tree)

    def _imports(self, module: str, tree: ast.Module) -> dict[str, tuple[str, str | None]]:
        """Local name -> (module, attribute or None for a module) for the project's own imports."""
        names: dict[str, tuple[str, str | None]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    base = ".".join(module.split(".")[:-node.level] + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    names[alias.asname or alias.name] = (full, None) if full in self.modules else (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.modules:
                        names[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
        return names

    def _text(self, module: str, node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "... " + name + " ..."
            left, right = self._text(module, node.left), self._text(module, node.right)
            if left is None and right is None:
                return None
            return (left if left is not None else "{}") + (right if right is not None else "{}")
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value.value, ast.Name) and (module, value.value.id) in self.constants:
                    parts.append(self.constants[(module, value.value.id)])
                else:
                    parts.append("{}")
            return "".join(parts)
        return None

    def _read(self, module: str, tree: ast.Module) -> None:
        imports = self._imports(module, tree)
        local = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

        def visit(owner: tuple[str, str], node: ast.AST) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner = (module, child.name)
                    self.edges[owner].add(inner)  # a nested or module-level def belongs to what holds it
                    visit(inner, child)
                    continue
                if _is_docstring(node, child):
                    continue
                text = self._text(module, child)
                if text and " " in text.strip() and FLAG.search(text):
                    self.strings[owner].append(text)
                if isinstance(child, ast.JoinedStr) or (isinstance(child, ast.BinOp) and text is not None):
                    continue  # its parts are not strings of their own
                if isinstance(child, ast.Name):
                    if child.id in local:
                        self.edges[owner].add((module, child.id))
                    elif child.id in imports and imports[child.id][1]:
                        self.edges[owner].add(imports[child.id])  # type: ignore[arg-type]
                    elif (module, child.id) in self.constants:
                        self.edges[owner].add((module, child.id))
                elif isinstance(child, ast.Attribute):
                    base = child.value
                    if isinstance(base, ast.Name) and base.id in imports and imports[base.id][1] is None:
                        self.edges[owner].add((imports[base.id][0], child.attr))
                    elif child.attr in local:
                        self.edges[owner].add((module, child.attr))  # self.method, cls.method
                visit(owner, child)

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit((module, node.name), node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        visit((module, item.name), item)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        visit((module, target.id), node)

    def reached(self, start: tuple[str, str], stops: frozenset[str] = frozenset()) -> set[tuple[str, str]]:
        """What `start` can call, not going into the modules in `stops` (other commands' own)."""
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            todo += [n for n in self.edges.get(node, ()) if n not in seen and n[0] not in stops]
        return seen


def _is_docstring(parent: ast.AST, child: ast.AST) -> bool:
    body = getattr(parent, "body", None)
    return (isinstance(parent, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and bool(body)
            and isinstance(body[0], ast.Expr) and body[0] is child)


SOURCE = Source()


def _handler(parser: argparse.ArgumentParser) -> tuple[str, str]:
    func = parser._defaults["func"]
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    return func.__module__, func.__name__


def _entries() -> dict[tuple[str, str], frozenset[str]]:
    """For each command, the modules of the other commands' handlers: what it prints through them is
    theirs to check (`bench demo` runs `bench report`, whose messages name report's flags)."""
    handlers = {(cli, command): _handler(parser)[0] for cli, commands in CLIS.items()
                for command, parser in commands.items()}
    return {key: frozenset(m for m in handlers.values() if m != own) for key, own in handlers.items()}


def _named_commands(clause: str, cli: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The commands a clause names outright (`python -m stacks api-path`, `bench sweep`, `` `sweep` ``),
    and those it names as a bare word ("a plan made with --mix")."""
    explicit = {(m.group(1), m.group(2)) for m in re.finditer(r"\b(bench|stacks) ([a-z][a-z-]*)", clause)
                if m.group(2) in CLIS[m.group(1)]}
    explicit |= {(cli, m) for m in re.findall(r"`([a-z][a-z-]*)[` ]", clause) if m in CLIS[cli]}
    words = {w.lower() for w in re.findall(r"[A-Za-z][a-z-]*", clause)}
    words |= {w[:-1] for w in words if w.endswith("s")}
    return explicit, {(cli, c) for c in CLIS[cli] if len(c) > 3 and c in words}


def flag_problem(flag: str, clause: str, cli: str, command: str) -> str | None:
    """Why `flag` in `clause`, printed by `cli command`, names nothing that exists; None when it does."""
    explicit, words = _named_commands(clause, cli)
    candidates = explicit | words | {(cli, command)}
    if any(flag in _flags(CLIS[c][n]) for c, n in candidates) or (cli, command, flag) in NOT_PRINTED:
        return None
    if OTHER_TOOLS.search(clause) or flag in VLLM_FLAGS:
        return None
    where = " or ".join(sorted(f"python -m {c} {n}" for c, n in explicit | {(cli, command)}))
    return f"{where} has no {flag}"


def advice_problems() -> list[str]:
    problems = set()
    entries = _entries()
    for cli, commands in CLIS.items():
        for command, parser in commands.items():
            reached = SOURCE.reached(_handler(parser), entries[(cli, command)])
            texts = [t for node in reached for t in SOURCE.strings.get(node, [])]
            texts += [a.help for a in parser._actions if a.help] + [parser.description or ""]
            for text in texts:
                for clause in CLAUSE.split(text):
                    for flag in FLAG.findall(clause):
                        if (problem := flag_problem(flag, clause, cli, command)) is not None:
                            problems.add(f"{problem}, but a message `{cli} {command}` can print names it: "
                                         f"{clause.strip()[:140]!r}")
    return sorted(problems)


def test_the_scan_sees_the_advice_it_checks():
    """The scanner finds what it is for: the address advice, reached from api-path through a call."""
    assert SOURCE.strings[("stacks.ops.api_access", "egress_address")]
    assert ("stacks.ops.api_access", "egress_address") in SOURCE.reached(_handler(CLIS["stacks"]["api-path"]))
    assert ("stacks.ops.api_access", "egress_address") in SOURCE.reached(_handler(CLIS["stacks"]["preflight"]))
    assert flag_problem("--delete", "run `python -m stacks teardown-check dev --delete`", "stacks", "pre-destroy") \
        is None
    assert flag_problem("--yes", "run `python -m stacks pre-destroy dev --yes`", "stacks", "api-path") \
        == "python -m stacks api-path or python -m stacks pre-destroy has no --yes"
    assert flag_problem("--max-session-duration", "aws iam update-role --max-session-duration 10800", "stacks",
                        "preflight") is None
    assert flag_problem("--resume", "run it again (`bench sweep --resume`)", "bench", "report") is None


def test_every_flag_a_message_names_exists_in_that_command():
    assert advice_problems() == []


def test_a_flag_named_but_missing_is_found(monkeypatch):
    """Take --address away from api-path (as it was when its lookup error advised it): the check fails."""
    parser = CLIS["stacks"]["api-path"]
    action = next(a for a in parser._actions if "--address" in a.option_strings)
    monkeypatch.setattr(parser, "_actions", [a for a in parser._actions if a is not action])
    problems = advice_problems()
    assert any(p.startswith("python -m stacks api-path has no --address") for p in problems), problems


# --- every folder a command writes into refuses a file ------------------------------------------------


def _writers() -> list[tuple[str, str, str]]:
    """(cli, command, argument) for every `--out` and every positional DIR a command writes into."""
    found = []
    for cli, commands in CLIS.items():
        for command, parser in commands.items():
            for action in parser._actions:
                if "--out" in action.option_strings:
                    found.append((cli, command, "--out"))
    found.append(("bench", "fetch", "DIR"))  # `bench fetch URI DIR` copies into DIR
    return found


def test_the_writers_are_all_found():
    names = {f"{cli} {command}" for cli, command, _ in _writers()}
    assert {"bench report", "bench plan", "bench compare", "bench sweep", "bench open", "bench demo",
            "bench mix-check", "bench streamer", "bench timeline", "bench fetch", "stacks render"} <= names


@pytest.mark.parametrize("cli,command,argument", _writers())
def test_an_existing_file_as_output_folder_exits_2_with_the_fix(cli, command, argument, tmp_path, capsys):
    existing = tmp_path / "report.md"
    existing.write_text("a file\n")
    parser = bench_parser() if cli == "bench" else stacks_parser()
    argv = [command, "s3://bucket/in/", str(existing)] if argument == "DIR" else [command, "--out", str(existing)]
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}: {existing} is a file; this takes a folder to write into (made if missing): " \
           f"name a folder, e.g. {tmp_path / 'report'}" in err
    # under a file, too
    below = existing / "more"
    with pytest.raises(SystemExit):
        parser.parse_args([*argv[:-1], str(below)])
    assert f"{below} lies under {existing}, which is a file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "plan", "compare"])
def test_report_plan_compare_with_a_file_as_out_exit_2_not_a_traceback(command, tmp_path, capsys):
    from bench.__main__ import main

    write_curve(tmp_path / "g7e", G7E_PEAK)
    existing = tmp_path / "taken"
    existing.write_text("")
    inputs = {"report": [str(tmp_path / "g7e")], "plan": [str(tmp_path / "g7e")],
              "compare": [str(tmp_path / "g7e"), str(tmp_path / "g7e")]}[command]
    with pytest.raises(SystemExit) as stop:
        main([command, *inputs, "--out", str(existing)])
    assert stop.value.code == 2 and "is a file" in capsys.readouterr().err


# --- bench open on a local report folder --------------------------------------------------------------


@pytest.fixture(scope="module")
def report_folder(tmp_path_factory) -> Path:
    """A demo-like folder: build/demo/report written by `bench report` from two sweeps."""
    root = tmp_path_factory.mktemp("demo")
    write_curve(root / "runs" / "g7e", G7E_PEAK)
    write_curve(root / "runs" / "l40s", L40S_PEAK)
    assert REP.main([str(root / "runs" / "g7e"), "--baseline", str(root / "runs" / "l40s"), "--price-per-hour", "1.5",
                     "--baseline-price-per-hour", "2.76", "--capacity-type", "spot", "--baseline-capacity-type",
                     "on-demand", "--no-charts", "--no-progress", "--out", str(root / "report")]) == 0
    return root


def test_bench_open_opens_a_local_report_folder(report_folder, capsys):
    capsys.readouterr()
    folder = report_folder / "report"
    assert opener.main([str(folder)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    page = "report.html" if (folder / "report.html").is_file() else "report.md"
    assert lines[0] == str((folder / page).resolve())
    summary = json.loads((folder / "summary.json").read_text())
    assert lines[1].startswith(f"Verdict {summary['verdict']['state'].upper()}")
    assert err == ""
    # the demo's own folder (build/demo) opens its report/
    assert opener.main([str(report_folder)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == str((folder / page).resolve())


def test_bench_open_on_a_folder_without_a_report_says_what_to_pass(tmp_path, capsys):
    assert opener.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no report.html or report.md" in err and "build/demo/report" in err
    assert opener.main([str(tmp_path / "missing")]) == 2
    assert "expected a report folder, the stack output `report` as JSON or an s3:// prefix" in \
        capsys.readouterr().err
