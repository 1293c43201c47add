"""The sweep's grid: scenarios x concurrencies as runs with their hashes, and each run's command line.

`build_plan` turns `bench sweep`'s arguments into RunSpecs, one per (scenario, concurrency), each
with the hash `--resume` re-validates a result file against (scenario lengths, prompts, seed, model,
hardware, image, server flags). `bench_command` is the `vllm bench serve` command line of one run;
the extra runs (bench/run/extra_runs.py) and the mixed-traffic check (bench/run/mixcheck.py) start
from it too. `config_of` and `new_run_record` are the grid's part of the sweep's manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.common import options, s3
from bench.common import scenarios as SC
from bench.common import workloads as W
from bench.run import seeds, sizing

# {name: (input tokens, output tokens)} of the default scenarios (bench/common/scenarios.py, a view
# of bench/common/workloads.py, which also defines S5_shared_prefix and K_korean, run when named)
DEFAULT_SCENARIOS: dict[str, tuple[int, int]] = SC.lengths()
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
METRIC_PERCENTILES = "50,90,99"
# Each process draws prompts with its own seed (bench.run.seeds); warm-ups run as a separate process.
SEED_SCHEME = "sha256(sweep seed, scenario, concurrency, attempt, purpose) v1"


class UsageError(ValueError):
    pass


@dataclass(frozen=True)
class Scenario:
    name: str
    input_len: int
    output_len: int
    prefix_cache_check: bool = True  # random prompts: prefix-cache hits mean replayed prompts
    workload: W.Workload | None = None


@dataclass(frozen=True)
class RunSpec:
    scenario: str
    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int
    warmups: int
    run_hash: str
    prefix_cache_check: bool = True
    workload: W.Workload | None = None
    prompt_format: str | None = None  # real-text scenarios: custom or chat (bench.common.workloads)
    sized: bool = False  # num_prompts is the floor: each run is sized from its burst (bench.run.sizing)

    @property
    def filename(self) -> str:
        return R.result_filename(self.scenario, self.concurrency)

    @property
    def label(self) -> str:
        return f"{self.scenario} c={self.concurrency}"

    def expectation(self) -> R.Expectation:
        return R.Expectation(
            scenario=self.scenario,
            concurrency=self.concurrency,
            num_prompts=None if self.sized else self.num_prompts,
            output_len=self.output_len,
            run_hash=self.run_hash,
        )

    def cost(self) -> float:
        """Rough relative run time (token-steps per client slot) used for the ETA."""
        waves = math.ceil(self.num_prompts / self.concurrency)
        return waves * (self.output_len + self.input_len / 32.0)


def parse_scenarios(
    selected: str | None, overrides: list[str], length_scale: float
) -> list[Scenario]:
    table: dict[str, W.Workload] = dict(W.WORKLOADS)
    added: list[str] = []
    for item in overrides:
        name, sep, lengths = item.partition("=")
        inp, sep2, out = lengths.partition("/")
        try:
            if not (sep and sep2 and name):
                raise ValueError
            pair = (int(inp), int(out))
            custom = name in table and table[name].dataset == "custom"
            if pair[1] < 1 or pair[0] < (0 if custom else 1):
                raise ValueError
        except ValueError:
            raise UsageError(
                f"--scenario {item!r}: expected NAME=INPUT/OUTPUT with positive token counts, "
                "e.g. S1_chat=256/128 (K_korean=0/64 sets the output cap of the prompt set)"
            ) from None
        if R.parse_result_filename(R.result_filename(name, 1)) != (name, 1):
            raise UsageError(f"--scenario {item!r}: name may hold letters, digits, '_' and '-'")
        if name not in table:
            added.append(name)
            table[name] = W.Workload(name, "random", pair[0], pair[1])
        else:
            table[name] = _with_lengths(table[name], *pair)
    if selected:
        names = [n.strip() for n in selected.split(",") if n.strip()]
        unknown = [n for n in names if n not in table]
        if unknown:
            raise UsageError(
                f"--scenarios: unknown {', '.join(unknown)}; known: {', '.join(table)} "
                "(define others with --scenario NAME=INPUT/OUTPUT)"
            )
    else:
        names = list(DEFAULT_SCENARIOS) + added
    if not length_scale > 0:
        raise UsageError(f"--length-scale must be > 0, got {length_scale}")
    scenarios = []
    for name in names:
        workload = table[name].scaled(length_scale)
        known = SC.definition(name)
        scenarios.append(Scenario(name, workload.input_len, workload.output_len,
                                  known.prefix_cache_check if known else True, workload))
    return scenarios


def _with_lengths(workload: W.Workload, inp: int, out: int) -> W.Workload:
    """A named scenario with other lengths; a shared-prefix scenario keeps its prefix share."""
    if workload.dataset == "custom":
        return replace(workload, output_len=out)
    if workload.dataset == "prefix_repetition":
        prefix = min(inp - 1, max(1, round(inp * workload.prefix_len / workload.input_len)))
        return replace(workload, input_len=inp, prefix_len=prefix, output_len=out)
    return replace(workload, input_len=inp, output_len=out)


def parse_scenario_concurrencies(items: list[str]) -> dict[str, list[int]]:
    """--scenario-concurrencies NAME=1,8,64: a scenario's own concurrencies (repeatable)."""
    out = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--scenario-concurrencies {item!r}: expected NAME=C1,C2,..., e.g. K_korean=1,8,64")
        out[name] = parse_concurrencies(values)
    return out


def parse_concurrencies(text: str) -> list[int]:
    """"1,2,4" -> [1, 2, 4]: whole numbers of 1 or more, each once, in increasing order (a repeat or a
    step back is a typo, so it is refused rather than quietly sorted away)."""
    try:
        return options.increasing(text)
    except ValueError as exc:
        raise UsageError(f"--concurrencies: {exc}") from None


def warmups_for(setting: str, concurrency: int) -> int:
    if setting == "auto":
        # The burst: two waves at the run's own concurrency; its request rate sizes the run.
        return sizing.burst_requests(concurrency)
    try:
        value = int(setting)
    except ValueError:
        raise UsageError(f"--warmups: expected an integer or 'auto', got {setting!r}") from None
    if value < 0:
        raise UsageError(f"--warmups: must be >= 0, got {value}")
    return value


def short_hash(payload: Any) -> str:
    """12 hex digits of the SHA-256 of a JSON value (a run's or a configuration's identity)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def build_plan(args: argparse.Namespace) -> list[RunSpec]:
    scenarios = parse_scenarios(args.scenarios, args.scenario or [], args.length_scale)
    concurrencies = parse_concurrencies(args.concurrencies)
    own = parse_scenario_concurrencies(getattr(args, "scenario_concurrencies", None) or [])
    unknown = sorted(set(own) - {sc.name for sc in scenarios})
    if unknown:
        raise UsageError(f"--scenario-concurrencies: {', '.join(unknown)} not among the scenarios to run")
    check_sizing(args)
    if args.attempts < 1:
        raise UsageError(f"--attempts must be >= 1, got {args.attempts}")
    plan = []
    for sc in scenarios:
        workload = sc.workload or W.Workload(sc.name, "random", sc.input_len, sc.output_len)
        try:
            fmt = W.prompt_format(workload, getattr(args, "prompt_format", "auto") or "auto")
            identity = workload.identity() if workload.dataset != "random" else None
        except (ValueError, FileNotFoundError) as exc:
            raise UsageError(str(exc)) from None
        sc_concurrencies = own.get(sc.name) or (
            sorted(workload.concurrencies) if workload.concurrencies else concurrencies)
        for conc in sc_concurrencies:
            num_prompts = args.min_prompts
            if workload.num_prefixes:
                # prefix_repetition makes num_prompts // num_prefixes prompts per prefix: round up
                num_prompts = -(-num_prompts // workload.num_prefixes) * workload.num_prefixes
            warmups = warmups_for(args.warmups, conc)
            if workload.num_prefixes and warmups:
                warmups = -(-warmups // workload.num_prefixes) * workload.num_prefixes
            extra_identity = {"workload": identity, "prompt_format": fmt} if identity else {}
            run_hash = short_hash(
                {
                    **extra_identity,
                    "model": args.model,
                    "scenario": sc.name,
                    "input_len": sc.input_len,
                    "output_len": sc.output_len,
                    "concurrency": conc,
                    "sizing": {"window_s": args.window_s, "min_prompts": args.min_prompts,
                               "rule": "burst at the run's concurrency v1"},
                    "warmups": warmups,
                    "seed": args.seed,
                    "seed_scheme": SEED_SCHEME,
                    "extra": args.bench_args or "",
                    # the hardware and server: a result from another pool or image is not this run
                    "instance_type": args.instance_type,
                    "gpus": args.gpus,
                    "image": args.image,
                    "server_args": args.server_args or "",
                }
            )
            plan.append(RunSpec(sc.name, sc.input_len, sc.output_len, conc, num_prompts, warmups, run_hash,
                                sc.prefix_cache_check, workload, fmt, sized=True))
    return plan


def check_sizing(args: argparse.Namespace) -> None:
    """--window-s and --min-prompts: a run must hold its load long enough, on enough requests."""
    if getattr(args, "prompts_per_concurrency", None) is not None:
        raise UsageError("--prompts-per-concurrency is gone: every run is sized by time from a burst at its "
                         "load; set --window-s (seconds each run holds its load, default "
                         f"{sizing.DEFAULT_WINDOW_S:g})")
    if not args.window_s >= sizing.MIN_WINDOW_S:
        raise UsageError(f"--window-s {args.window_s:g}: a run of under {sizing.MIN_WINDOW_S:g} s measures start-up, "
                         f"not throughput; give {sizing.MIN_WINDOW_S:g} or more (default {sizing.DEFAULT_WINDOW_S:g})")
    if args.min_prompts < sizing.MIN_REQUESTS:
        raise UsageError(f"--min-prompts {args.min_prompts}: a p99 of fewer than {sizing.MIN_REQUESTS} requests is "
                         f"about the slowest one; give {sizing.MIN_REQUESTS} or more")


def prompts_for(spec: RunSpec, req_s: float | None, window_s: float, measured: dict[int, float] | None = None) -> int:
    """A run's requests: its window at the burst's rate (bench.run.sizing; no lower than a lighter load
    of the scenario measured), at least the spec's floor; a shared-prefix scenario's count rounded up
    to whole prefixes."""
    n = sizing.closed_loop_requests(sizing.rate_for(req_s, measured or {}, spec.concurrency), spec.concurrency,
                                    window_s, floor=spec.num_prompts)
    return whole_prefixes(spec, n)


def whole_prefixes(spec: RunSpec, n: int, *, closed_loop: bool = True) -> int:
    """`n` requests, rounded up to whole prefixes for a shared-prefix scenario (vLLM's prefix_repetition
    dataset makes n // prefixes prompts per prefix, so a remainder would never be sent) and, for a
    closed-loop run, to whole waves of its concurrency too (sizing.whole_waves): a multiple of both. An
    open-loop run's concurrency is only its cap, so its count keeps no waves."""
    prefixes = spec.workload.num_prefixes if spec.workload else 0
    unit = math.lcm(prefixes or 1, spec.concurrency if closed_loop else 1)
    return sizing.whole_waves(n, unit) if unit > 1 else n


def bench_command(vllm: list[str], args: argparse.Namespace, spec: RunSpec, tokenizer: str,
                  result_dir: Path, *, seed: int, num_prompts: int | None = None, filename: str | None = None,
                  phase: str = seeds.MEASURE) -> list[str]:
    """The `vllm bench serve` command line; every flag exists in vLLM 0.26 and 0.32.

    `--num-warmups` is 0: vLLM's warm-up repeats the run's first prompt, which would then be served
    from the prefix cache. The sweep warms up with a separate process and prompts of their own.
    The dataset flags are the scenario's (bench.common.workloads).
    """
    workload = spec.workload or W.Workload(spec.scenario, "random", spec.input_len, spec.output_len)
    cmd = [
        *vllm, "bench", "serve",
        *W.request_args(workload, fmt=spec.prompt_format, scratch=result_dir),
        "--base-url", args.base_url,
        "--model", args.model,
        "--tokenizer", tokenizer,
        "--num-prompts", str(num_prompts or spec.num_prompts),
        "--max-concurrency", str(spec.concurrency),
        "--request-rate", "inf",
        "--num-warmups", "0",
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", METRIC_PERCENTILES,
        "--seed", str(seed),
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",  # per-request detail: a run's p99 intervals and window, a burst's rate after its first wave
        "--result-dir", str(result_dir),
        "--result-filename", filename or spec.filename,
    ]
    cmd += shlex.split(args.bench_args or "")
    cmd += [
        "--metadata",
        f"{R.META_SCENARIO}={spec.scenario}",
        f"{R.META_CONCURRENCY}={spec.concurrency}",
        f"{R.META_INPUT_LEN}={spec.input_len}",
        f"{R.META_OUTPUT_LEN}={spec.output_len}",
        f"{R.META_RUN_HASH}={spec.run_hash}",
        f"{R.META_SEED}={seed}",
        f"{R.META_PHASE}={phase}",
    ]
    return cmd


def resolve_vllm(value: str | None) -> list[str]:
    if value:
        parts = shlex.split(value)
        if len(parts) == 1 and not shutil.which(parts[0]) and not Path(parts[0]).is_file():
            raise UsageError(f"--vllm-bin: {value!r} is not an executable")
        return parts
    found = shutil.which("vllm")
    if found:
        return [found]
    raise UsageError("no `vllm` on PATH: pass --vllm-bin (or set VLLM_POC_VLLM_BIN)")


def prepare_tokenizer(source: str, scratch: Path) -> str:
    if s3.is_s3_uri(source):
        loc = s3.S3Location.parse(source, option="--tokenizer")
        files = s3.download_tokenizer(loc, scratch)
        print(f"bench sweep: tokenizer: {len(files)} files from {loc.uri}", flush=True)
        return str(scratch)
    return source


def config_of(args: argparse.Namespace, plan: list[RunSpec]) -> dict[str, Any]:
    scenarios = {}
    for spec in plan:
        known = SC.definition(spec.scenario)
        scenarios[spec.scenario] = {"input_len": spec.input_len, "output_len": spec.output_len,
                                    "dataset": known.dataset if known else "random",
                                    "prefix_cache_check": spec.prefix_cache_check}
        if spec.workload and spec.workload.dataset != "random":
            scenarios[spec.scenario].update(spec.workload.identity(), prompt_format=spec.prompt_format)
    return {
        "model": args.model,
        "scenarios": scenarios,
        "concurrencies": sorted({s.concurrency for s in plan}),
        "min_prompts": args.min_prompts,
        "window_s": args.window_s,
        "warmups": args.warmups,
        "seed": args.seed,
        "seed_scheme": SEED_SCHEME,
        "warmup_mode": "separate process, own prompts (--num-warmups 0 in the measured run)",
        "length_scale": args.length_scale,
        "bench_args": args.bench_args or "",
        "percentile_metrics": PERCENTILE_METRICS,
        "metric_percentiles": METRIC_PERCENTILES,
        "attempts": args.attempts,
        # the SLO the sweep judges its runs with; `bench report`, `plan` and `compare` default to it
        "slo": {"ttft_p99_ms": args.slo_ttft_p99_ms, "decode_p99_ms": args.slo_itl_p99_ms,
                "decode_metric": args.slo_decode_metric},
        "telemetry": {"metrics_url": args.metrics_url, "gpu_metrics_url": args.gpu_metrics_url,
                      "interval_s": args.telemetry_interval,
                      "suspect_prefix_cache_pct": args.suspect_prefix_cache_pct,
                      "min_spec_acceptance_pct": args.min_spec_acceptance_pct},
    }


def new_run_record(spec: RunSpec) -> dict[str, Any]:
    return {
        "scenario": spec.scenario,
        "concurrency": spec.concurrency,
        "input_len": spec.input_len,
        "output_len": spec.output_len,
        "num_prompts": None if spec.sized else spec.num_prompts,  # a sized run's, once it ran
        "warmups": spec.warmups,
        "run_hash": spec.run_hash,
        "file": spec.filename,
        "status": "pending",
        "reason": None,
        "prefix_cache_check": spec.prefix_cache_check,
        "suspect": None,
        "telemetry": None,
        "duration_s": None,
        "attempts": [],
    }

