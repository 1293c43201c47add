"""Parse `vllm serve` argument lists with vLLM's own CLI parser; runs inside .venv-vllm.

Reads a JSON list of {"id": str, "args": [str, ...]} on stdin (the arguments after `vllm serve`)
and prints one JSON object per input, in order, as a JSON list on stdout:
{"id", "ok", "error", "parsed": {...}}. Importing vLLM takes most of the run time, so every list
goes through one process.

Beyond argparse (unknown flags, bad choices, malformed JSON values), each list is turned into
EngineArgs the way `vllm serve` does, and the JSON-valued options are handed to the config classes
that will receive them (loader, KV cache, multimodal limits, speculative decoding), so that a key
vLLM does not know fails here rather than on a GPU node. Abbreviated flags are refused too: argparse
accepts any unique prefix, and a prefix that is unique in one vLLM version need not be in another.

With `--flags`, the output is {"vllm": version, "results": [...], "flags": {...}}, the flag table
of stacks/ops/vllm_flags_dump.py (what `python -m stacks.ops.vllm_flags generate` writes) from the same
parser, so the checked-in list is compared without a second vLLM import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import typing


def _build():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    command = ServeSubcommand()
    serve_parser = command.subparser_init(subparsers)
    return parser, serve_parser, command


def _exact_flags(args: list[str], serve_parser) -> None:
    known = set(serve_parser._option_string_actions)  # noqa: SLF001 (argparse keeps them here)
    for token in args:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0].split(".", 1)[0]
        normalized = "--" + name[2:].replace("_", "-")
        if name not in known and normalized not in known:
            raise ValueError(f"unrecognized or abbreviated flag: {name}")


def _check_configs(engine_args) -> dict:
    from pydantic import TypeAdapter
    from vllm.config import CacheConfig, MultiModalConfig, SpeculativeConfig
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    for name in ("model_loader_extra_config", "speculative_config", "limit_mm_per_prompt"):
        value = getattr(engine_args, name)
        # Some options fall back to the raw string when their value is not valid JSON.
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"--{name.replace('_', '-')} is not a JSON object: {value!r}")
    CacheConfig(cache_dtype=engine_args.kv_cache_dtype,
                gpu_memory_utilization=engine_args.gpu_memory_utilization)
    get_model_loader(LoadConfig(load_format=engine_args.load_format,
                                model_loader_extra_config=engine_args.model_loader_extra_config))
    if engine_args.limit_mm_per_prompt:
        MultiModalConfig(limit_per_prompt=engine_args.limit_mm_per_prompt)
    spec = engine_args.speculative_config
    if spec is not None:
        fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        if unknown := set(spec) - fields:
            raise ValueError(f"unknown speculative-config keys: {sorted(unknown)}")
        if spec.get("method") is not None:
            hints = typing.get_type_hints(SpeculativeConfig)
            TypeAdapter(hints["method"]).validate_python(spec["method"])
    return {
        "model": engine_args.model,
        "served_model_name": engine_args.served_model_name,
        "load_format": engine_args.load_format,
        "model_loader_extra_config": engine_args.model_loader_extra_config,
        "tensor_parallel_size": engine_args.tensor_parallel_size,
        "max_model_len": engine_args.max_model_len,
        "max_num_seqs": engine_args.max_num_seqs,
        "gpu_memory_utilization": engine_args.gpu_memory_utilization,
        "kv_cache_dtype": engine_args.kv_cache_dtype,
        "enable_prefix_caching": engine_args.enable_prefix_caching,
        "speculative_config": spec,
        "scheduling_policy": engine_args.scheduling_policy,
        "limit_mm_per_prompt": engine_args.limit_mm_per_prompt,
        "enable_sleep_mode": engine_args.enable_sleep_mode,
        "quantization": engine_args.quantization,
        "hf_overrides": engine_args.hf_overrides,
        "_registries": {
            "tool_parsers": ToolParserManager.list_registered(),
            "reasoning_parsers": ReasoningParserManager.list_registered(),
        },
    }


def check(args: list[str], parser, serve_parser, command) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs

    _exact_flags(args, serve_parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(["serve", *args])
    except SystemExit as exc:  # argparse reports through exit(2)
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        raise ValueError(lines[-1] if lines else f"argparse exit {exc.code}") from None
    # As ServeSubcommand.cmd does: the positional model wins.
    if namespace.model_tag is not None:
        namespace.model = namespace.model_tag
    command.validate(namespace)
    parsed = _check_configs(AsyncEngineArgs.from_cli_args(namespace))
    registries = parsed.pop("_registries")
    if namespace.tool_call_parser and namespace.tool_call_parser not in registries["tool_parsers"]:
        raise ValueError(f"unknown tool call parser {namespace.tool_call_parser!r}")
    if namespace.reasoning_parser and namespace.reasoning_parser not in registries["reasoning_parsers"]:
        raise ValueError(f"unknown reasoning parser {namespace.reasoning_parser!r}")
    parsed["tool_call_parser"] = namespace.tool_call_parser
    parsed["reasoning_parser"] = namespace.reasoning_parser
    parsed["enable_auto_tool_choice"] = namespace.enable_auto_tool_choice
    return parsed


def _dump_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "stacks" / "ops" / "vllm_flags_dump.py"
    spec = importlib.util.spec_from_file_location("vllm_flags_dump", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    cases = json.load(sys.stdin)
    parser, serve_parser, command = _build()
    results = []
    for case in cases:
        try:
            parsed = check(list(case["args"]), parser, serve_parser, command)
            results.append({"id": case["id"], "ok": True, "error": None, "parsed": parsed})
        except Exception as exc:  # noqa: BLE001 (every failure is a result)
            results.append({"id": case["id"], "ok": False,
                            "error": f"{type(exc).__name__}: {exc}", "parsed": None})
    if "--flags" in sys.argv[1:]:
        dump = _dump_module()
        output = {"vllm": dump.vllm_version(), "results": results, "flags": dump.flag_table(serve_parser)}
        json.dump(output, sys.stdout, default=str)
    else:
        json.dump(results, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
