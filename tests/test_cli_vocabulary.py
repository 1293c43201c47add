"""One tool, one vocabulary: every `python -m bench` and `python -m stacks` command's parser, walked at test
time (flags added later are checked as they come), against the table below of one meaning -> one
spelling. It fails on a second spelling of a meaning, on a flag that takes another form or default in
another command, on a duration without its unit, on a --help over a screen or two, on an old spelling
that does not say its new name, and on a flag the docs show that no parser has.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from bench.__main__ import COMMANDS, IN_CLUSTER
from bench.__main__ import build_parser as bench_parser
from bench.common import options as O
from stacks.__main__ import build_parser as stacks_parser
from weights.__main__ import build_parser as weights_parser

REPO = Path(__file__).resolve().parents[1]
MAX_HELP_LINES = 100
COLUMNS = 80  # a terminal's width when none is known

# One meaning -> (its one spelling, the spellings it replaced, its default or a reason why defaults differ).
# An old spelling may stay one release, hidden, as an alias that says its new name; nowhere a flag of its own.
PER_COMMAND = object()
VOCABULARY = {
    "the SLO's TTFT p99 limit": ("--slo-ttft-p99-ms", (), PER_COMMAND),
    "the SLO's decode p99 limit": ("--slo-itl-p99-ms", ("--slo-decode-p99-ms",), PER_COMMAND),
    "which p99 the decode limit applies to": ("--slo-decode-metric", (), PER_COMMAND),
    "the sweep compared against": ("--baseline", (), None),
    "the capacity figure of the verdict and the plan": ("--basis", ("--verdict-basis",), "slo"),
    "the verdict's threshold": ("--threshold", (), 1.5),
    "an hourly price": ("--price-per-hour", ("--price",), PER_COMMAND),
    "the replicas serving today": ("--current-replicas", ("--replicas-today",), None),
    "where a command writes": ("--out", ("--output", "--output-dir", "--out-dir"), PER_COMMAND),
    "how long to wait for the server's /health": ("--health-timeout-s", ("--health-timeout", "--server-timeout"),
                                                  PER_COMMAND),
    "how long one benchmark run may take": ("--run-timeout-s", ("--run-timeout", "--timeout-s", "--timeout"),
                                            PER_COMMAND),
    "the first wait between two looks": ("--poll-s", ("--poll-seconds",), PER_COMMAND),
    "the longest wait between two looks": ("--max-poll-s", ("--max-poll-seconds",), 600.0),
    "how often the report Job says where the sweeps stand": ("--log-every-s", ("--log-seconds",), 900.0),
    "between two telemetry samples": ("--telemetry-interval-s", ("--telemetry-interval",), 1.0),
    "how long to wait for instances to go": ("--wait-minutes", ("--timeout-minutes",), PER_COMMAND),
    "the concurrencies a grid measures": ("--concurrencies", (), PER_COMMAND),
}
# Why a meaning's default differs between commands (PER_COMMAND above)
PER_COMMAND_REASONS = {
    "--slo-ttft-p99-ms": "the analyses default to what the sweeps recorded (None), a sweep to 500, the demo to a CPU's",
    "--slo-itl-p99-ms": "as --slo-ttft-p99-ms",
    "--slo-decode-metric": "as --slo-ttft-p99-ms",
    "--price-per-hour": "the manifest's price where a command reads sweeps; the demo's illustrative $1",
    "--out": "build/<command> each (publish: an s3:// prefix, required)",
    "--health-timeout-s": "a cluster's cold start (30 min) against a CPU demo's or one GPU's start",
    "--run-timeout-s": "a sweep's run against a rehearsal's or a mix's whole run",
    "--poll-s": "the report Job looks every minute; mix-check for a plan every 15 s",
    "--wait-minutes": "pre-destroy waits for Karpenter's instances, teardown-check for deletions",
    "--concurrencies": "a GPU sweep's grid, the CPU demo's, gpu-check's and the streamer's points",
}
UNITS = ("-ms", "-s", "-minutes", "-hours")
# A unit spelt another way: seconds are always -s
OTHER_UNIT_SPELLINGS = ("-seconds", "-second", "-secs", "-sec", "-milliseconds", "-msec", "-mins", "-min",
                        "-hrs", "-percent")
TIMED = re.compile(r"timeout|interval|poll|wait|duration|deadline|delay|every")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


PARSERS = {**{f"bench {n}": p for n, p in _subcommands(bench_parser()).items()},
           **{f"stacks {n}": p for n, p in _subcommands(stacks_parser()).items()}}
ALL_FLAGS = {s for p in PARSERS.values() for a in p._actions for s in a.option_strings}


def _help(parser: argparse.ArgumentParser, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    return parser.format_help()


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A parser's own flags (its renamed spellings aside), each to its action."""
    return {s: a for a in parser._actions if not isinstance(a, O.Renamed) for s in a.option_strings}


def _kind(action: argparse.Action) -> tuple:
    """What a flag accepts: a value or none, of which kind, out of which choices."""
    kind = getattr(action.type, "kind", None) or getattr(action.type, "__name__", "str")
    return (action.nargs != 0, "str" if kind == "Path" else kind, tuple(action.choices or ()))


def _shown(parser: argparse.ArgumentParser, flag: str, monkeypatch) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", _help(parser, monkeypatch)) is not None


# --- one meaning, one spelling, one form, one default ----------------------------------------------------


def vocabulary_problems(parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    problems = []
    for command, parser in parsers.items():
        for action in parser._actions:
            for flag in action.option_strings:
                for meaning, (spelling, old, _) in VOCABULARY.items():
                    if flag not in old:
                        continue
                    if not isinstance(action, O.Renamed):
                        problems.append(f"{command}: {flag} is a second spelling of {meaning}; call it {spelling}")
                    elif action.new.option_strings[0] != spelling:
                        problems.append(f"{command}: {flag} says it is now {action.new.option_strings[0]}, not "
                                        f"{spelling}")
    return problems


def test_each_meaning_has_one_spelling_in_every_command():
    assert vocabulary_problems(PARSERS) == []
    seen = {spelling for spelling, _, _ in VOCABULARY.values()} & ALL_FLAGS
    assert len(seen) == len(VOCABULARY)  # the walk sees every meaning of the table in some parser
    # and the shared definitions say the same renames the table does (streamer's --concurrency aside: one
    # --concurrency is a count of parallel transfers in stage-weights, another meaning, not a second spelling)
    assert {old: new for new, olds, _ in VOCABULARY.values() for old in olds if old in O.RENAMED} == {
        old: new for old, new in O.RENAMED.items() if old != "--concurrency"}


def test_the_vocabulary_check_can_fail():
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("--verdict-basis")
    q = argparse.ArgumentParser(prog="y")
    action = q.add_argument("--health-timeout-s")
    q.add_argument("--server-timeout", action=O.Renamed, dest="health_timeout_s", new=action)
    r = argparse.ArgumentParser(prog="z")
    wrong = r.add_argument("--run-timeout-s")
    r.add_argument("--health-timeout", action=O.Renamed, dest="run_timeout_s", new=wrong)
    assert vocabulary_problems({"x": p, "y": q, "z": r}) == [
        "x: --verdict-basis is a second spelling of the capacity figure of the verdict and the plan; call it --basis",
        "z: --health-timeout says it is now --run-timeout-s, not --health-timeout-s",
    ]


def test_a_flag_takes_the_same_form_in_every_command():
    forms: dict[str, dict[tuple, list[str]]] = {}
    for command, parser in PARSERS.items():
        for flag, action in _flags(parser).items():
            forms.setdefault(flag, {}).setdefault(_kind(action), []).append(command)
    differ = {flag: kinds for flag, kinds in forms.items() if len(kinds) > 1}
    assert differ == {}
    assert len([f for f, kinds in forms.items() if sum(map(len, kinds.values())) > 1]) > 20  # shared flags seen


def test_a_meaning_has_its_default_everywhere():
    for meaning, (spelling, _, default) in VOCABULARY.items():
        found = {command: _flags(p)[spelling] for command, p in PARSERS.items() if spelling in _flags(p)}
        assert found, meaning
        if default is PER_COMMAND:
            assert PER_COMMAND_REASONS[spelling]
            continue
        assert {command: a.default for command, a in found.items()} == {command: default for command in found}


def test_every_out_defaults_to_build_command(monkeypatch):
    for command, parser in PARSERS.items():
        out = _flags(parser).get("--out")
        if out is None:
            continue
        name = command.split()[1]
        if out.required:
            assert command == "bench publish"  # its files go to S3 only
        elif command == "bench open":
            assert "build/open/<stack>/<hash>" in _help(parser, monkeypatch)
        elif command == "stacks render":
            assert "build/render/STACK" in _help(parser, monkeypatch)
        else:
            assert out.default == f"build/{name}", command


def test_every_duration_names_its_unit(monkeypatch):
    problems = []
    for command, parser in PARSERS.items():
        for flag, action in _flags(parser).items():
            if action.help is argparse.SUPPRESS and not _shown(parser, flag, monkeypatch):
                continue  # a test hook, not part of the command's vocabulary
            if flag.endswith(OTHER_UNIT_SPELLINGS):
                problems.append(f"{command} {flag}: spell the unit {UNITS}")
            elif TIMED.search(flag) and not flag.endswith(UNITS) and action.nargs != 0:
                problems.append(f"{command} {flag}: a duration ends in its unit {UNITS}")
    assert problems == []


# --- old spellings keep working one release, and say their new name ------------------------------------


def _required_argv(parser: argparse.ArgumentParser) -> list[str]:
    argv = []
    for action in parser._actions:
        if action.option_strings and action.required:
            argv += [action.option_strings[0], "x"]
        elif not action.option_strings and action.nargs not in ("?", "*") and action.dest != "help":
            argv.append("x")
    return argv


def _value(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[-1])]
    return ["2"] if _kind(action)[1] not in ("increasing whole numbers",) else ["1,2"]


RENAMED = [(command, action) for command, parser in PARSERS.items() for action in parser._actions
           if isinstance(action, O.Renamed)]


@pytest.mark.parametrize("command, alias", RENAMED, ids=[f"{c} {a.option_strings[0]}" for c, a in RENAMED])
def test_an_old_spelling_works_and_says_its_new_name(command, alias, capsys):
    parser = PARSERS[command]
    old, new = alias.option_strings[0], alias.new.option_strings[0]
    assert O.RENAMED[old] == new
    argv = _required_argv(parser)
    with_new = parser.parse_args(argv + [new, *_value(alias.new)])
    assert capsys.readouterr().err == ""
    with_old = parser.parse_args(argv + [old, *_value(alias.new)])
    err = capsys.readouterr().err
    assert vars(with_old) == vars(with_new)
    assert err.splitlines() == [f"python -m {command}: {old} is now {new} (the old name works until the next "
                                "release)"]


def test_every_renamed_spelling_is_an_alias_somewhere():
    assert {a.option_strings[0] for _, a in RENAMED} == set(O.RENAMED)


# --- values that cannot be right: exit 2, the flag and the reason ------------------------------------------


BAD = [("--threshold", "0", "0 cannot be right: give a number above 0 (the ratio per GPU the candidate must reach"),
       ("--threshold", "-1", "-1 cannot be right"),
       ("--price-per-hour", "0", "0 cannot be right: a price is above 0"),
       ("--price-per-hour", "g7e=0/1", "g7e=0/1 cannot be right: a price is above 0"),
       ("--price-per-hour", "cheap", "cheap is not a price: give [LABEL=]ON_DEMAND[/SPOT]"),
       ("--concurrencies", "4,2,2", "4,2,2 names 2 twice; give each concurrency once: 2,4"),
       ("--concurrencies", "4,2", "4,2 is not in increasing order; give 2,4"),
       ("--current-replicas", "0", "0 cannot be right: give a whole number above 0"),
       ("--health-timeout-s", "0", "0 cannot be right"),
       ("--slo-ttft-p99-ms", "-5", "-5 cannot be right: give a number above 0 (a limit of 0 ms is met by no request)"),
       ("--headroom", "1", "1 cannot be right: give a share from 0 to below 1")]
REFUSALS = [(command, flag, value, why) for flag, value, why in BAD for command, parser in PARSERS.items()
            if flag in _flags(parser)]


@pytest.mark.parametrize("command, flag, value, why", REFUSALS, ids=[f"{c} {f} {v}" for c, f, v, _ in REFUSALS])
def test_a_value_that_cannot_be_right_exits_2_with_the_reason(command, flag, value, why, capsys):
    parser = PARSERS[command]
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(_required_argv(parser) + [f"{flag}={value}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {flag}: {why}" in err and "Traceback" not in err


def test_every_kind_of_refusal_is_met_by_some_command():
    assert {flag for _, flag, _, _ in REFUSALS} == {flag for flag, _, _ in BAD}


# --- help that fits a screen or two; the long references in docs/ ------------------------------------------


def test_every_help_fits_a_hundred_lines(monkeypatch):
    too_long = {command: len(_help(parser, monkeypatch).splitlines()) for command, parser in PARSERS.items()}
    too_long["bench"] = len(_help(bench_parser(), monkeypatch).splitlines())
    too_long["stacks"] = len(_help(stacks_parser(), monkeypatch).splitlines())
    assert {c: n for c, n in too_long.items() if n > MAX_HELP_LINES} == {}
    assert len(too_long) == len(PARSERS) + 2 > 20


def test_the_help_check_can_fail(monkeypatch):
    p = argparse.ArgumentParser(prog="x", description="\n".join(["a line"] * MAX_HELP_LINES),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    assert len(_help(p, monkeypatch).splitlines()) > MAX_HELP_LINES


def test_the_references_a_help_names_are_in_docs(monkeypatch):
    from tests.test_docs import anchors

    named = set()
    for parser in PARSERS.values():
        named |= set(re.findall(r"docs/([a-z-]+\.md)#([a-z0-9_-]+)", _help(parser, monkeypatch)))
    assert ("files.md", "report-summaryjson-and-the-reports-files") in named
    assert ("files.md", "the-sweep-folder") in named
    for page, anchor in sorted(named):
        assert anchor in anchors((REPO / "docs" / page).read_text()), f"docs/{page}#{anchor}"


def test_bench_help_lists_what_a_person_types_apart_from_the_jobs(monkeypatch):
    text = _help(bench_parser(), monkeypatch)
    people, _, jobs = text.partition("run by the stack's Jobs in the cluster:")
    listed = lambda part: set(re.findall(r"^  ([a-z][a-z-]*)  ", part, re.M))  # noqa: E731
    assert listed(jobs) == {"publish", "timeline", "streamer", "fetch"}
    assert listed(people) == set(_subcommands(bench_parser())) - listed(jobs)
    assert len(COMMANDS) + len(IN_CLUSTER) == len(_subcommands(bench_parser()))


# --- the docs show no flag that no parser has, and no old spelling ------------------------------------------

# Flags of other tools the docs show (aws, kubectl, pulumi, pip, docker, pytest, the repository's own scripts, vLLM's
# benchmark client and router), which no parser here has
OTHER_TOOLS = {
    "--aws-service-name", "--role-name", "--max-session-duration", "--secret", "--secrets-provider", "--diff",
    "--block-device-mappings", "--description", "--iam-instance-profile", "--image-id", "--name", "--output",
    "--query", "--snapshot-ids", "--subnet-id", "--tag-specifications", "--volume-id", "--from-literal",
    "--recursive", "--secret-string", "--repository-name", "--replicas", "--refresh", "--policy-pack",
    "--policy-pack-config", "--no-deps", "--framework", "--ci", "--control", "--demo", "--fresh", "--size",
    "--no-compile", "--dist", "--versions", "--goodput", "--num-warmups", "--save-detailed", "--enable-igw",
    "--policy", "--service-discovery", "--wasm-middleware", "--rm", "--entrypoint", "--only-binary",
    "--require-hashes", "--path",  # pulumi config set --path (a key inside a structured value)
    "--max-num-seq",  # docs/verification.md: the typo `vllm serve` refuses, as an example
}


def _doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _all_parser_flags() -> set[str]:
    flags = set(ALL_FLAGS)
    for verb in _subcommands(weights_parser()).values():
        flags |= {s for a in verb._actions for s in a.option_strings}
        for nested in verb._actions:
            if isinstance(nested, argparse._SubParsersAction):
                flags |= {s for p in nested.choices.values() for a in p._actions for s in a.option_strings}
    return flags


def undocumented(text: str, known: set[str]) -> set[str]:
    return {f for f in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text) if f not in known}


def test_every_flag_the_docs_show_exists_somewhere():
    vllm = set(json.loads((REPO / "stacks" / "vllm_flags.json").read_text())["flags"])
    known = _all_parser_flags() | vllm | OTHER_TOOLS
    missing = {f"{page.relative_to(REPO)}: {flag}" for page in _doc_pages() for flag in undocumented(page.read_text(), known)}
    assert missing == set()
    assert undocumented("use `--no-such-flag` with --out", known) == {"--no-such-flag"}


def test_the_docs_use_the_new_spellings():
    """An old spelling appears only in the vocabulary table's last column, which names it."""
    old = set(O.RENAMED) - {"--concurrency"}  # a count of parallel transfers in stage-weights and weights
    found = []
    for page in _doc_pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if page.name == "benchmark.md" and line.startswith("| ") and line.rstrip().endswith("|"):
                line = line.rstrip()[:-1].rsplit("|", 1)[0]  # the table's last column lists old spellings
            found += [f"{page.name}:{n}: {o}" for o in sorted(old) if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", line)]
    assert found == []


def test_the_docs_vocabulary_table_is_the_code_s():
    text = (REPO / "docs" / "benchmark.md").read_text()
    table = text[text.index("### One vocabulary"):]
    table = table[:table.index("\n\n", table.index("| meaning"))]
    rows = [r.split("|") for r in table.splitlines() if r.startswith("| ") and not r.startswith("| meaning")]
    olds = {o for r in rows for o in re.findall(r"--[a-z][a-z0-9-]*", r[-2])}
    assert olds == set(O.RENAMED) - {"--concurrency"}  # streamer's own rename is said in its help
    shown = {f for r in rows for f in re.findall(r"--[a-z][a-z0-9-]*", r[2])}
    assert shown <= ALL_FLAGS
    assert {s for s, _, _ in VOCABULARY.values()} - {"--concurrencies"} <= shown | {"--max-poll-s", "--log-every-s"}


def test_the_readme_names_each_command_with_its_own_purpose():
    readme = (REPO / "README.md").read_text()
    missing = []
    for command, parser in PARSERS.items():
        (cli, name) = command.split()
        top = bench_parser() if cli == "bench" else stacks_parser()
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        purpose = next(c.help for c in sub._choices_actions if c.dest == name)
        if f"| `{name}` | {purpose} |" not in readme:
            missing.append(f"| `{name}` | {purpose} |")
    assert missing == []


def test_help_output_is_for_people(monkeypatch):
    """No Python repr in a help: no None, no [...] lists, no <function ...>."""
    for command, parser in PARSERS.items():
        text = _help(parser, monkeypatch)
        assert not re.search(r"\(default: None\)|<function|<lambda>|\bdefault: \[", text), command
