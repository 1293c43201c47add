"""The README and Pulumi.yaml say what the code does: config table, commands, project settings."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bench.__main__ import build_parser as bench_parser
from stacks.__main__ import build_parser as stacks_parser
from stacks.ops.config_reference import embedded, markdown

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def subcommands(parser) -> set[str]:
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(action.choices)


def test_readme_config_table_is_generated_from_the_settings():
    assert embedded(REPO / "README.md") == markdown()


def test_config_table_documents_every_key_with_its_default():
    table = markdown()
    for key in ("vllm-poc:gpuPools[].instanceType", "vllm-poc:servers[].maxNumSeqs", "vllm-poc:bench.concurrencies",
                "vllm-poc:storage.teardown", "vllm-poc:network.privateSubnets", "aws:region"):
        assert f"`{key}`" in table
    assert all(line.count("|") >= 5 for line in table.splitlines())


def test_every_command_the_readme_names_exists():
    stacks_commands = set(re.findall(r"python -m stacks ([a-z-]+)", README))
    bench_commands = set(re.findall(r"python3? -m bench ([a-z-]+)", README))
    assert stacks_commands and bench_commands
    assert stacks_commands <= subcommands(stacks_parser())
    assert bench_commands <= subcommands(bench_parser())


def test_the_two_entry_points_exist():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^render:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()
    assert "make render STACK=dev" in README and "make test" in README


def test_pulumi_project_uses_the_pinned_virtualenv():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "vllm-poc"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert (REPO / "requirements.txt").read_text().strip().endswith("-e .")


# --- every flag the README shows exists in that command's --help ------------------------------

_CLI = re.compile(r"(?:python3?|\.venv/bin/python) -m (bench|stacks|weights) ([a-z][a-z-]*)")
_INLINE = re.compile(r"`(?:(?:python3?|\.venv/bin/python) -m )?(bench|stacks|weights) ([a-z][a-z-]*)((?: [^`]*)?)`")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _logical_lines(text: str) -> list[str]:
    """The README's code blocks, continuation lines (ending in a backslash) joined."""
    out, block, pending = [], False, ""
    for line in text.splitlines():
        if line.strip().startswith("```"):
            block, pending = not block, ""
            continue
        if not block:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def readme_commands(text: str = README) -> list[tuple[str, str, set[str], str]]:
    """(package, command, flags shown, where) for every command line and inline command span."""
    found = []
    for line in _logical_lines(text):
        code = re.sub(r"\s#\s.*$", "", line)  # a trailing shell comment is prose
        code = re.sub(r"\$\([^)]*\)", "ARG", code)  # another command's flags: $(pulumi stack output --json)
        starts = list(_CLI.finditer(code))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(code)
            found.append((m[1], m[2], set(_FLAG.findall(code[m.end():end])), line.strip()))
    for m in _INLINE.finditer(text):
        found.append((m[1], m[2], set(_FLAG.findall(m[3])), m[0]))
    return found


def _help(package: str, command: str) -> str | None:
    import contextlib
    import io

    from weights.__main__ import build_parser as weights_parser

    parser = {"bench": bench_parser, "stacks": stacks_parser, "weights": weights_parser}[package]()
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    sub = action.choices.get(command)
    if sub is None:
        return None
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        sub.print_help()
        # a command with verbs of its own (`weights compile-cache push|pull`): their help counts too
        for nested in sub._actions:
            if nested.__class__.__name__ == "_SubParsersAction":
                for verb in nested.choices.values():
                    verb.print_help()
    return buffer.getvalue()


def test_every_flag_the_readme_shows_is_in_that_commands_help():
    commands = readme_commands()
    assert {p for p, _, _, _ in commands} == {"bench", "stacks", "weights"}
    assert sum(len(flags) for _, _, flags, _ in commands) > 100  # the parse found the README's flags
    missing = []
    for package, command, flags, where in commands:
        text = _help(package, command)
        if text is None:
            missing.append(f"python -m {package} {command}: no such command ({where})")
            continue
        for flag in sorted(flags):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                missing.append(f"python -m {package} {command} {flag}: not in its --help ({where[:120]})")
    assert missing == []


def test_the_readme_flag_check_can_fail():
    sample = "```bash\npython -m bench report DIR \\\n    --no-such-flag --out OUT   # a --comment-flag\n```\n" \
             "and `bench timeline --sleep-wake-url URL`\n"
    commands = readme_commands(sample)
    assert ("bench", "report", {"--no-such-flag", "--out"}) in [(p, c, f) for p, c, f, _ in commands]
    assert ("bench", "timeline", {"--sleep-wake-url"}) in [(p, c, f) for p, c, f, _ in commands]
    assert "--no-such-flag" not in _help("bench", "report") and "--out" in _help("bench", "report")
