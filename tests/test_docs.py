"""The README, docs/ and Pulumi.yaml say what the code does: config table, commands, flags, links, paths."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bench.__main__ import build_parser as bench_parser
from stacks.__main__ import build_parser as stacks_parser
from stacks.ops.config_reference import embedded, markdown

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# Every page a reader is sent to: the README first, then docs/ (and any other Markdown the repository keeps).
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONFIG_PAGE = REPO / "docs" / "configuration.md"


def subcommands(parser) -> set[str]:
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(action.choices)


def test_config_table_in_the_docs_is_generated_from_the_settings():
    assert embedded(CONFIG_PAGE) == markdown()


def test_config_reference_check_reads_the_docs_page_by_default(tmp_path, capsys):
    from stacks.__main__ import main as stacks_main

    assert stacks_main(["config-reference", "--check"]) == 0
    stale = tmp_path / "configuration.md"
    stale.write_text(CONFIG_PAGE.read_text().replace("| `aws:region` |", "| `aws:regions` |"))
    assert stacks_main(["config-reference", "--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().out


def test_config_table_documents_every_key_with_its_default():
    table = markdown()
    for key in ("vllm-poc:gpuPools[].instanceType", "vllm-poc:servers[].maxNumSeqs", "vllm-poc:bench.concurrencies",
                "vllm-poc:storage.teardown", "vllm-poc:network.privateSubnets", "aws:region"):
        assert f"`{key}`" in table
    assert all(line.count("|") >= 5 for line in table.splitlines())


def test_every_command_the_docs_name_exists():
    text = "\n".join(page.read_text() for page in PAGES)
    stacks_commands = set(re.findall(r"python -m stacks ([a-z-]+)", text))
    bench_commands = set(re.findall(r"python3? -m bench ([a-z-]+)", text))
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


# --- every flag the README and docs/ show exists in that command's --help -----------------------

_CLI = re.compile(r"(?:python3?|\.venv/bin/python) -m (bench|stacks|weights) ([a-z][a-z-]*)")
_INLINE = re.compile(r"`(?:(?:python3?|\.venv/bin/python) -m )?(bench|stacks|weights) ([a-z][a-z-]*)((?: [^`]*)?)`")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _logical_lines(text: str) -> list[str]:
    """A page's code blocks, continuation lines (ending in a backslash) joined."""
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


def test_every_flag_the_docs_show_is_in_that_commands_help():
    commands = [(package, command, flags, f"{page.relative_to(REPO)}: {where}")
                for page in PAGES for package, command, flags, where in readme_commands(page.read_text())]
    assert {p for p, _, _, _ in commands} == {"bench", "stacks", "weights"}
    assert sum(len(flags) for _, _, flags, _ in commands) > 100  # the parse found the docs' flags
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


# --- the README stays short; every link and every repository path the docs name resolves ----------

README_MAX_LINES = 300
# Folders of this repository: a backticked path starting with one of them names a file or folder here.
REPO_FOLDERS = ("bench", "stacks", "components", "weights", "policy", "tests", "security", "docs", ".ci", ".github")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_PATH = re.compile(rf"`((?:{'|'.join(re.escape(f) for f in REPO_FOLDERS)})/[^`\s]*)`")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, block = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            block = not block
        elif not block:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text lower-cased, punctuation dropped, each space a hyphen."""
    text = re.sub(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML adds no text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(text):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_anchor(m[1])
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Relative links of one page whose file or #anchor does not exist, as 'page: target (why)'."""
    text = page.read_text() if text is None else text
    broken = []
    for line in _prose(text):
        line = _CODE_SPAN.sub("", line)  # `[text](target)` in code is no link
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not this repository's
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{where} (no heading with that anchor in {dest.relative_to(REPO)})")
    return broken


def missing_paths(page: Path, text: str | None = None) -> list[str]:
    """Repository paths a page names in backticks (`bench/sweep.py`) that do not exist."""
    text = page.read_text() if text is None else text
    return [f"{page.relative_to(REPO)}: {path}" for path in _PATH.findall(text)
            if not re.search(r"[<>*{}]|\.\.\.", path) and not (REPO / path).exists()]


def test_readme_fits_a_few_screens():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, \
        f"README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"


def test_every_relative_link_in_the_docs_resolves():
    others = (p for folder in REPO_FOLDERS if folder != "docs" for p in (REPO / folder).rglob("*.md"))
    pages = PAGES + sorted(others)
    assert len(PAGES) >= 8  # README and the docs it points to
    assert sum(len(_LINK.findall("\n".join(_prose(p.read_text())))) for p in pages) > 40  # the parse found links
    assert [b for page in pages for b in broken_links(page)] == []


def test_every_page_in_docs_is_linked_from_the_readme():
    linked = {(REPO / t.partition("#")[0]).resolve() for t in _LINK.findall(README)}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_every_repository_path_the_docs_name_exists():
    assert sum(len(_PATH.findall(p.read_text())) for p in PAGES) > 20
    assert [m for page in PAGES for m in missing_paths(page)] == []


def test_github_anchors_follow_githubs_rules():
    assert github_anchor("From `pulumi up` to the answer") == "from-pulumi-up-to-the-answer"
    assert github_anchor("Image pre-caching (`gpuPools[].imageCache`, off by default)") == \
        "image-pre-caching-gpupoolsimagecache-off-by-default"
    assert github_anchor("Compile cache: no hostPath, S3 with hashes") == "compile-cache-no-hostpath-s3-with-hashes"
    assert github_anchor("S1_chat and [the plan](plan.md)") == "s1_chat-and-the-plan"
    assert anchors("# Notes\n## Notes\n```\n# not a heading\n```\n## Notes\n") == {"notes", "notes-1", "notes-2"}


def test_the_link_and_path_checks_can_fail():
    page = REPO / "docs" / "architecture.md"
    sample = ("See [ops](operations.md#no-such-heading), [gone](missing.md), [top](#the-packages), "
              "[web](https://example.com/x.md) and `[not a link](nowhere.md)`.\n"
              "```\n[in a block](nowhere.md)\n```\n"
              "Code lives in `bench/no_such_module.py` and `bench/`; `runs/<stack>/` is S3.\n")
    assert broken_links(page, sample) == [
        "docs/architecture.md: operations.md#no-such-heading (no heading with that anchor in docs/operations.md)",
        "docs/architecture.md: missing.md (no such file)",
    ]
    assert missing_paths(page, sample) == ["docs/architecture.md: bench/no_such_module.py"]
