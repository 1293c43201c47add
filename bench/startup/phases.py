"""`python -m bench startup <log or record> [--json] [--instance-type T]`: startup phases.

The input is a vLLM server log or a startup record that the bench stored with its results
(`startup/*.json`, see bench/startup/timeline.py: Kubernetes marks plus the parsed log). With an instance
type (given, or the record's node's), the weight-load rate is held against the instance's baseline
and burst network bandwidth (bench/startup/netlimits.py): `weight_load_gbps` (10^9 bits/s, from the Run:ai
streamer's own byte and second totals), `weight_load_share_of_baseline_pct`,
`weight_load_share_of_burst_pct`; null where the instance type or the bytes are unknown.

The phases are those of the PoC report's startup table: weight load (default loader
`Loading weights took`, Run:ai `[RunAI Streamer] Overall time to stream`), model load,
torch.compile (Dynamo transform, graph compiles, total, compile-cache hit or miss), CUDA graph
capture, engine init, KV cache size and maximum concurrency, and the time from the first log line
to `Application startup complete`. Then vLLM's memory profile (the utilization's share, weights, peak
activation, non-torch memory, CUDA graphs; bench/startup/memory.py), with a warning under the table where
the non-torch figure is negative: the KV cache then took more than the share.

Formats of vLLM 0.26 and 0.32/0.33 are both read: `(EngineCore pid=178) INFO 07-28 10:11:12
[file.py:431] message`, with or without the process prefix, an optional `[backbone] ` tag before
compile messages, `GPU|CPU KV cache size` on one line with the maximum concurrency (0.32+) or on two
(0.26), `took %.2f s` or `seconds`. `kubectl logs --timestamps` prefixes are used when present;
otherwise times come from vLLM's own second-resolution stamps (which carry no year) and the
uvicorn `Application startup complete.` line, which has no stamp, takes the last stamp before it.

Aggregation: a phase logged by several processes (tensor-parallel workers) counts the slowest
process; a phase logged several times by one process (target then draft model) is summed.

Exit codes: 0 printed; 2 bad input (no such file, a file that is neither a vLLM server log nor a
startup record, an --instance-type not in the network table).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable

from bench.common.cli import Help, run_one
from bench.startup import memory, netlimits, timeline
from bench.startup import report as startup_report

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_K8S_TS = re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?)(?:Z|[+-]\d{2}:?\d{2})?\s+")
_PROC = re.compile(r"\((?P<proc>[A-Za-z][\w.-]*)\s+pid=(?P<pid>\d+)\)\s*")
_HEAD = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,]\d+)?\s+"
    r"\[[^\]]*\]\s?"
)
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Rule:
    key: str
    pattern: re.Pattern
    value: Callable[[re.Match], Any]
    how: str = "parallel"  # parallel: sum per process, max across; first; max; min; last


def _r(key: str, pattern: str, value: Callable[[re.Match], Any], how: str = "parallel") -> Rule:
    return Rule(key, re.compile(pattern), value, how)


RULES: tuple[Rule, ...] = (
    _r("weights_download_s", r"Time spent downloading weights for .*?: " + _NUM + r" seconds",
       lambda m: _f(m[1])),
    _r("default_loader_s", r"Loading weights took " + _NUM + r" seconds", lambda m: _f(m[1])),
    _r("runai_stream_s", r"\[RunAI Streamer\] Overall time to stream .+? of all files to \S+?: "
       + _NUM + r"\s*s", lambda m: _f(m[1])),
    _r("runai_stream_size", r"\[RunAI Streamer\] Overall time to stream (.+?) of all files", lambda m: m[1],
       "last"),
    _r("runai_stream_rate", r"\[RunAI Streamer\] Overall time to stream .+?: [0-9.]+\s*s, (.+?/s)",
       lambda m: m[1], "last"),
    _r("model_init_s", r"Initializing model took " + _NUM + r" seconds", lambda m: _f(m[1])),
    _r("model_load_gib", r"Model loading took " + _NUM + r" GiB", lambda m: _f(m[1])),
    _r("model_load_s", r"Model loading took [0-9.]+ GiB(?: memory)? and " + _NUM + r" seconds",
       lambda m: _f(m[1])),
    _r("dynamo_s", r"Dynamo bytecode transform time: " + _NUM + r" s", lambda m: _f(m[1])),
    _r("compile_graphs_s", r"Compiling a graph for (?:compile range .+?|general shape|dynamic shape) takes "
       + _NUM + r" s", lambda m: _f(m[1])),
    _r("compile_cache_load_s", r"Directly load the compiled graph\(s\) for compile range .+? from the cache, "
       r"took " + _NUM + r" s", lambda m: _f(m[1])),
    _r("compile_total_s", r"torch\.compile (?:took|takes|and initial profiling/warmup run together took) "
       + _NUM + r" s in total", lambda m: _f(m[1])),
    _r("cuda_graph_s", r"Graph capturing finished in " + _NUM + r" secs", lambda m: _f(m[1])),
    _r("cuda_graph_gib", r"Graph capturing finished in [0-9.]+ secs, took " + _NUM + r" GiB",
       lambda m: _f(m[1])),
    _r("engine_init_s", r"init engine \(profile, create kv cache, warmup model\) took " + _NUM,
       lambda m: _f(m[1]), "max"),
    _r("engine_init_compilation_s", r"init engine \(profile, create kv cache, warmup model\) took [0-9.]+ "
       r"s(?:econds)? \(compilation: " + _NUM + r" s", lambda m: _f(m[1]), "max"),
    _r("kv_cache_gib", r"Available KV cache memory: " + _NUM + r" GiB", lambda m: _f(m[1]), "max"),
    _r("kv_cache_tokens", r"(?:\b\w+ )?KV cache size: " + _NUM + r" tokens", lambda m: int(_f(m[1])), "max"),
    _r("max_concurrency", r"Maximum concurrency for [0-9,]+ tokens per request: " + _NUM + r"x",
       lambda m: _f(m[1]), "max"),
    _r("max_concurrency_tokens_per_request", r"Maximum concurrency for " + _NUM + r" tokens per request",
       lambda m: int(_f(m[1])), "max"),
    # the memory profile (bench/startup/memory.py), one figure a key; of several workers the lowest non-torch
    *(Rule(memory.phase_key(key), memory.PROFILE, lambda m, key=key: memory.figure(m, key),
           "min" if key == "non_torch" else "first") for key in memory.KEYS),
)

_VERSION = (
    re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)"),
    re.compile(r"vLLM server version (\S+?),"),
    re.compile(r"version\s+(\d+\.\d+\.\d+\S*)\s*$"),
)
_MODEL = (
    re.compile(r"vLLM server version \S+, serving model (\S+)"),
    re.compile(r"\bmodel\s{2,}(\S+)\s*$"),
)
_CACHE_HIT = re.compile(r"Directly load (?:the compiled graph\(s\)|AOT compilation)")
_CACHE_MISS = re.compile(r"Compiling a graph for|saved AOT compiled function|Compiling model again")
_READY = re.compile(r"Application startup complete")

# Rows of the table: (key, label, unit)
TABLE: tuple[tuple[str, str, str], ...] = (
    ("vllm_version", "vLLM version", ""),
    ("weight_load_s", "Weight load", "s"),
    ("weight_loader", "  loader", ""),
    ("runai_stream_size", "  Run:ai streamed", ""),
    ("runai_stream_rate", "  Run:ai rate", ""),
    ("weights_download_s", "  HF download", "s"),
    ("model_init_s", "Model init", "s"),
    ("model_load_s", "Model load", "s"),
    ("model_load_gib", "  model memory", "GiB"),
    ("compile_total_s", "torch.compile total", "s"),
    ("dynamo_s", "  Dynamo transform", "s"),
    ("compile_graphs_s", "  graph compile", "s"),
    ("compile_cache", "  compile cache", ""),
    ("compile_cache_load_s", "  cache load", "s"),
    ("cuda_graph_s", "CUDA graph capture", "s"),
    ("cuda_graph_gib", "  graph memory", "GiB"),
    ("engine_init_s", "Engine init", "s"),
    ("engine_init_compilation_s", "  of which compilation", "s"),
    ("kv_cache_gib", "KV cache memory", "GiB"),
    ("kv_cache_tokens", "KV cache tokens", ""),
    ("max_concurrency", "Max concurrency", "x"),
    ("max_concurrency_tokens_per_request", "  at tokens per request", ""),
    ("memory_budget_gib", "Memory for vLLM (utilization's share)", "GiB"),
    ("memory_weights_gib", "  weights", "GiB"),
    ("memory_peak_activation_gib", "  peak activation", "GiB"),
    ("memory_non_torch_gib", "  non-torch", "GiB"),
    ("memory_cuda_graphs_gib", "  CUDA graphs", "GiB"),
    ("time_to_ready_s", "First log line to startup complete", "s"),
    ("instance_type", "Instance type", ""),
    ("weight_load_gbps", "Weight load rate", "Gbps"),
    ("weight_load_share_of_baseline_pct", "  of baseline network", "%"),
    ("weight_load_share_of_burst_pct", "  of burst network", "%"),
)


@dataclass(frozen=True)
class Line:
    proc: str
    ts: datetime | None
    msg: str


def _stamp(k8s: str | None, vllm: str | None) -> datetime | None:
    if k8s:
        whole, _, frac = k8s.partition(".")
        base = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
        return base + timedelta(microseconds=int((frac + "000000")[:6])) if frac else base
    if vllm:
        # vLLM stamps have no year; 2000 is a leap year, so 02-29 parses.
        return datetime.strptime("2000-" + vllm, "%Y-%m-%d %H:%M:%S")
    return None


def parse_lines(lines: Iterable[str]) -> list[Line]:
    parsed = []
    for raw in lines:
        text = _ANSI.sub("", raw.rstrip("\r\n"))
        k8s = _K8S_TS.match(text)
        if k8s:
            text = text[k8s.end():]
        proc_match = _PROC.search(text)
        proc = f"{proc_match['proc']}:{proc_match['pid']}" if proc_match else ""
        head = _HEAD.search(text)
        msg = text[head.end():] if head else (text[proc_match.end():] if proc_match else text)
        ts = _stamp(k8s["ts"] if k8s else None, head["ts"] if head else None)
        parsed.append(Line(proc, ts, msg.strip()))
    return parsed


def _aggregate(values: list[tuple[str, Any]], how: str) -> Any:
    if how == "first":
        return values[0][1]
    if how == "last":
        return values[-1][1]
    if how == "max":
        return max(v for _, v in values)
    if how == "min":
        return min(v for _, v in values)
    per_proc: dict[str, float] = {}
    for proc, value in values:
        per_proc[proc] = per_proc.get(proc, 0.0) + value
    return round(max(per_proc.values()), 6)


def parse_log(lines: Iterable[str]) -> dict[str, Any]:
    parsed = parse_lines(lines)
    found: dict[str, list[tuple[str, Any]]] = {}
    version = model = None
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    ready_ts: datetime | None = None
    ready = False
    hits = misses = 0
    for line in parsed:
        if line.ts is not None:
            if first_ts is None:
                first_ts = line.ts
            if last_ts is not None and line.ts < last_ts - timedelta(days=180):
                line = Line(line.proc, line.ts.replace(year=line.ts.year + 1), line.msg)  # new year
            last_ts = line.ts
        for rule in RULES:
            match = rule.pattern.search(line.msg)
            if match:
                found.setdefault(rule.key, []).append((line.proc, rule.value(match)))
        if version is None:
            for pattern in _VERSION:
                if (m := pattern.search(line.msg)):
                    version = m[1]
                    break
        if model is None:
            for pattern in _MODEL:
                if (m := pattern.search(line.msg)):
                    model = m[1]
                    break
        hits += bool(_CACHE_HIT.search(line.msg))
        misses += bool(_CACHE_MISS.search(line.msg))
        if not ready and _READY.search(line.msg):
            ready = True
            ready_ts = line.ts or last_ts
    out: dict[str, Any] = {rule.key: None for rule in RULES}
    for rule in RULES:
        if rule.key in found:
            out[rule.key] = _aggregate(found[rule.key], rule.how)
    if out["runai_stream_s"] is not None:
        out["weight_load_s"], out["weight_loader"] = out["runai_stream_s"], "runai_streamer"
    elif out["default_loader_s"] is not None:
        out["weight_load_s"], out["weight_loader"] = out["default_loader_s"], "default"
    else:
        out["weight_load_s"], out["weight_loader"] = None, None
    out["compile_cache"] = ("hit" if hits and not misses else "miss" if misses and not hits
                            else "mixed" if hits else None)
    out["vllm_version"] = version
    out["model"] = model
    out["ready"] = ready
    out["first_log_at"] = first_ts.strftime("%m-%d %H:%M:%S") if first_ts else None
    out["ready_at"] = ready_ts.strftime("%m-%d %H:%M:%S") if ready_ts else None
    out["time_to_ready_s"] = (
        round((ready_ts - first_ts).total_seconds(), 3) if ready and ready_ts and first_ts else None
    )
    out["lines"] = len(parsed)
    return out


def is_vllm_log(phases: dict[str, Any]) -> bool:
    """True when at least one line was recognised as vLLM's (a phase, the version, the model or ready)."""
    return any(value not in (None, False) for key, value in phases.items() if key not in ("lines", "first_log_at"))


def parse_file(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8", errors="replace") as fh:
        return parse_log(fh)


def format_table(phases: dict[str, Any]) -> str:
    rows = []
    for key, label, unit in TABLE:
        value = phases.get(key)
        if value is None:
            shown = "-"
        elif isinstance(value, float):
            shown = f"{value:,.2f}"
        elif isinstance(value, int):
            shown = f"{value:,}"
        else:
            shown = str(value)
        rows.append((label, f"{shown} {unit}".rstrip() if value is not None else shown))
    width = max(len(label) for label, _ in rows)
    lines = [f"{'Phase'.ljust(width)}  Value", f"{'-' * width}  -----"]
    lines += [f"{label.ljust(width)}  {value}" for label, value in rows]
    if not phases.get("ready"):
        lines.append("(no `Application startup complete` line: the server did not finish starting)")
    if warned := memory.warning(memory.from_phases(phases)):
        lines.append(f"Warning: {warned}")
    return "\n".join(lines)


def with_limits(phases: dict[str, Any], instance_type: str | None) -> dict[str, Any]:
    """The phases plus the weight-load rate against the instance's network (contract keys)."""
    out = dict(phases)
    out["weight_bytes"] = netlimits.parse_size(phases.get("runai_stream_size"))
    out["instance_type"] = instance_type
    seconds = phases.get("runai_stream_s") if out["weight_bytes"] else None
    out.update(netlimits.weight_load(out["weight_bytes"], seconds, instance_type))
    return out


def load(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(log phases, startup record or None) from a log file or a stored record."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if timeline.is_record(data):
            return dict(data.get("log") or {}), data
    return parse_log(text.splitlines()), None


def run(args: argparse.Namespace) -> int:
    path = Path(args.log)
    if not path.is_file():
        print(f"bench startup: no such log file or record: {path}", file=sys.stderr)
        return 2
    if args.instance_type and netlimits.limit(args.instance_type) is None:
        print(f"bench startup: --instance-type {args.instance_type} is not in the network table; "
              f"use one of {', '.join(sorted(netlimits.NETWORK))}", file=sys.stderr)
        return 2
    phases, record = load(path)
    if record is None and not is_vllm_log(phases):
        print(f"bench startup: {path} does not look like a vLLM server log or a startup record: none of "
              f"{phases['lines']} line(s) matched vLLM's startup messages (give the server's log, e.g. "
              "`kubectl logs --timestamps deploy/<server>`, or a stored startup/<pod>.json)", file=sys.stderr)
        return 2
    instance_type = args.instance_type or (record or {}).get("instance_type")
    out = with_limits(phases, instance_type)
    if record is not None:
        out["timeline"] = {k: v for k, v in record.items() if k != "log"}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(format_table(out))
        if record is not None:
            print()
            print(startup_report.timeline_table(record))
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "startup", help="startup phases from a vLLM server log or a stored startup record", description=__doc__,
        formatter_class=Help,
    )
    p.add_argument("log", help="server log file (e.g. `kubectl logs --timestamps deploy/<server>`) or a "
                   "stored startup record (results' startup/*.json)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--instance-type", default=None,
                   help="instance the log comes from (default: the record's node); gives the weight-load "
                   "rate's share of its network bandwidth")
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "startup", argv)
