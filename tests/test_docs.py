"""The README and Pulumi.yaml say what the code does: config table, commands, project settings."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bench.__main__ import build_parser as bench_parser
from stacks.__main__ import build_parser as stacks_parser
from stacks.config_reference import embedded, markdown

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
