"""`python -m bench sweep`: run `vllm bench serve` over scenarios x concurrencies against a server.

For every (scenario, concurrency) the sweep runs a warm-up `vllm bench serve` (one wave at the
run's concurrency, prompts of its own) and then the measured one with the random dataset (fixed
input/output lengths, ignore-eos, request rate inf, client concurrency cap), TTFT, TPOT, ITL and
E2EL at percentiles 50/90/99. Each process draws prompts with its own seed (`bench.seeds`), so no
run replays another's prompts into the server's prefix cache. Around the measured process the
server's /metrics and the GPU exporter are read (`bench.telemetry`). Files:

    <out>/<scenario>_c<concurrency>.json      raw vLLM result of the valid (or last suspect) attempt
    <out>/<scenario>_c<c>.attempt<n>.invalid.json   raw result of an invalid attempt (kept)
    <out>/<scenario>_c<c>.attempt<n>.suspect.json   raw result of a suspect attempt that was retried
    <out>/logs/<scenario>_c<c>.attempt<n>.log      stdout+stderr of that attempt (warm-up first)
    <out>/logs/<scenario>_c<c>.attempt<n>.telemetry.json   /metrics before/after, samples, GPU
    <out>/manifest.json                        inputs, hardware, server facts, per-run status,
                                               telemetry summary, timing, and at the end this
                                               side's capacity under the SLO per scenario
                                               (`capacity`, intervals as in `bench report`)

A run is valid only by `bench.results.load_result`'s rules (all prompts completed, none failed,
...): `vllm bench serve` exits 0 and writes a file even when every request failed. An invalid run
is retried once (`--attempts`), recorded with its reason, and the sweep goes on; the exit code is
1 when any combination stays invalid or suspect. A run is invalid as well when the server restarted
during it, and suspect when a random-prompt scenario got more than 5 % of its prompt tokens from the
prefix cache (prompts were replayed): a suspect attempt is retried with new prompts.

`--resume` keeps every combination whose result file re-validates against the current plan
(same scenario lengths, prompts, seed, model, hardware, image, server flags: the run hash) and
runs the rest, suspect runs included. With
`--upload s3://bucket/prefix` every file is uploaded as soon as it is written, and `--resume` first
downloads what is already there: a Kubernetes Job restarted after a pod failure or a Spot
interruption continues where it stopped.

Example (inside the vllm/vllm-openai image):

    python3 -m bench sweep --base-url http://gemma-fp8:8000 --model gemma-fp8 \\
        --tokenizer s3://weights/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/ \\
        --out /results --upload s3://results/runs/dev/gemma-fp8/<run id>/ --resume \\
        --instance-type g6e.2xlarge --gpus 1

While it waits for the server, the sweep says every 10 s why (connection refused, the HTTP status,
a timeout). A --model the server does not serve (GET /v1/models) stops it before any run.

Exit codes: 0 every combination valid; 1 some combination invalid; 2 bad arguments (also a --model
the server does not serve);
3 server not healthy in time; 4 results could not be uploaded; 130 stopped by Ctrl-C; 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.run import client as bench_client
from bench.run import extra_runs
from bench.run import hardware
from bench.analysis import results as R
from bench.common import s3
from bench.run import s3reach
from bench.common import scenarios as SC
from bench.run import seeds
from bench.run import telemetry as T
from bench.common import workloads as W
from bench.common.interrupts import rerun_command, stop_process_group
from bench.run.sweep_options import add_measurement_options

# {name: (input tokens, output tokens)} of the default scenarios (bench/scenarios.py, a view of
# bench/workloads.py, which also defines S5_shared_prefix and K_korean, run when named)
DEFAULT_SCENARIOS: dict[str, tuple[int, int]] = SC.lengths()
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
METRIC_PERCENTILES = "50,90,99"
MANIFEST = "manifest.json"
# Each process draws prompts with its own seed (bench.seeds); warm-ups run as a separate process.
SEED_SCHEME = "sha256(sweep seed, scenario, concurrency, attempt, purpose) v1"
LOGS = "logs"
PARTIAL = ".partial"
SCHEMA = 1

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_UNHEALTHY, EXIT_UPLOAD, EXIT_TERMINATED = 0, 1, 2, 3, 4, 143
EXIT_INTERRUPTED = 130  # Ctrl-C


class UsageError(ValueError):
    pass


class Terminated(Exception):
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
    prompt_format: str | None = None  # real-text scenarios: custom or chat (bench.workloads)

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
            num_prompts=self.num_prompts,
            output_len=self.output_len,
            run_hash=self.run_hash,
        )

    def cost(self) -> float:
        """Rough relative run time (token-steps per client slot) used for the ETA."""
        waves = math.ceil(self.num_prompts / self.concurrency)
        return waves * (self.output_len + self.input_len / 32.0)


# ---------------------------------------------------------------------------------------------
# Plan


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
    from dataclasses import replace

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
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--concurrencies: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"--concurrencies: need positive integers, got {text!r}")
    return sorted(set(values))


def warmups_for(setting: str, concurrency: int) -> int:
    if setting == "auto":
        # One warm-up wave at the run's own concurrency, capped: it exercises that batch size.
        return min(concurrency, 8)
    try:
        value = int(setting)
    except ValueError:
        raise UsageError(f"--warmups: expected an integer or 'auto', got {setting!r}") from None
    if value < 0:
        raise UsageError(f"--warmups: must be >= 0, got {value}")
    return value


def _hash(payload: Any) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def build_plan(args: argparse.Namespace) -> list[RunSpec]:
    scenarios = parse_scenarios(args.scenarios, args.scenario or [], args.length_scale)
    concurrencies = parse_concurrencies(args.concurrencies)
    own = parse_scenario_concurrencies(getattr(args, "scenario_concurrencies", None) or [])
    unknown = sorted(set(own) - {sc.name for sc in scenarios})
    if unknown:
        raise UsageError(f"--scenario-concurrencies: {', '.join(unknown)} not among the scenarios to run")
    if args.min_prompts < 1 or args.prompts_per_concurrency < 0:
        raise UsageError("--min-prompts must be >= 1 and --prompts-per-concurrency >= 0")
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
            num_prompts = max(args.min_prompts, args.prompts_per_concurrency * conc)
            if workload.num_prefixes:
                # prefix_repetition makes num_prompts // num_prefixes prompts per prefix: round up
                num_prompts = -(-num_prompts // workload.num_prefixes) * workload.num_prefixes
            warmups = warmups_for(args.warmups, conc)
            if workload.num_prefixes and warmups:
                warmups = -(-warmups // workload.num_prefixes) * workload.num_prefixes
            extra_identity = {"workload": identity, "prompt_format": fmt} if identity else {}
            run_hash = _hash(
                {
                    **extra_identity,
                    "model": args.model,
                    "scenario": sc.name,
                    "input_len": sc.input_len,
                    "output_len": sc.output_len,
                    "concurrency": conc,
                    "num_prompts": num_prompts,
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
                                sc.prefix_cache_check, workload, fmt))
    return plan


def bench_command(vllm: list[str], args: argparse.Namespace, spec: RunSpec, tokenizer: str,
                  result_dir: Path, *, seed: int, num_prompts: int | None = None, filename: str | None = None,
                  phase: str = seeds.MEASURE) -> list[str]:
    """The `vllm bench serve` command line; every flag exists in vLLM 0.26 and 0.32.

    `--num-warmups` is 0: vLLM's warm-up repeats the run's first prompt, which would then be served
    from the prefix cache. The sweep warms up with a separate process and prompts of their own.
    The dataset flags are the scenario's (bench.workloads).
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


# ---------------------------------------------------------------------------------------------
# Server


def _get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    # A server started with an API key answers /v1 only with it; `vllm bench serve` sends the same
    # OPENAI_API_KEY as a bearer token.
    key = os.environ.get("OPENAI_API_KEY")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""


def health_problem(exc: BaseException) -> str:
    """Why GET /health did not answer, in words."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return ("connection refused (nothing listens at that address yet: the server is not started, or the port "
                "is wrong)")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer in time (the connection or the reply timed out)"
    if isinstance(reason, socket.gaierror):
        return "the host name does not resolve (DNS)"
    if isinstance(reason, ConnectionResetError):
        return "connection reset by the server"
    text = str(reason) or reason.__class__.__name__
    return text


def wait_for_health(base_url: str, timeout_s: float, interval_s: float = 5.0, say_every_s: float = 10.0,
                    say=None) -> float:
    """Poll GET /health until 200; returns the seconds waited, raises TimeoutError.

    Every `say_every_s` seconds it says why it is still waiting (connection refused, the HTTP
    status, a timeout)."""
    say = say or (lambda line: print(line, flush=True))
    start = time.monotonic()
    last = "no answer yet"
    said = start
    while True:
        try:
            status, _ = _get(f"{base_url}/health", timeout=min(10.0, max(timeout_s, 1.0)))
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}" + (" (the server is up but not ready: vLLM answers 503 while it loads the model)"
                                       if status == 503 else "")
        except (OSError, urllib.error.URLError) as exc:
            last = health_problem(exc)
        now = time.monotonic()
        elapsed = now - start
        if elapsed >= timeout_s:
            raise TimeoutError(f"{base_url}/health did not answer 200 within {elapsed:.0f} s (last: {last}); check "
                               "--base-url and the server's log, or wait longer with --health-timeout")
        if now - said >= say_every_s:
            said = now
            say(f"bench sweep: still waiting for {base_url}/health after {elapsed:.0f} s: {last} "
                f"(giving up after {timeout_s:.0f} s)")
        time.sleep(min(interval_s, max(0.1, timeout_s - elapsed), max(0.1, say_every_s - (now - said))))


def probe_server(base_url: str, model: str) -> dict[str, Any]:
    """What the server says about itself; every probe is optional."""
    info: dict[str, Any] = {"base_url": base_url, "model": model}
    for name, path in (("version", "/version"), ("models", "/v1/models"), ("server_info", "/server_info")):
        try:
            status, body = _get(base_url + path)
            if status == 200:
                info[name] = json.loads(body)
        except (OSError, ValueError, urllib.error.URLError):
            pass
    version = info.get("version")
    info["vllm_version"] = version.get("version") if isinstance(version, dict) else None
    models = info.get("models")
    data = [m for m in (models.get("data") or [] if isinstance(models, dict) else []) if isinstance(m, dict)]
    info["served_models"] = [m.get("id") for m in data]
    entry = next((m for m in data if m.get("id") == model), None)
    info["max_model_len"] = entry.get("max_model_len") if entry else None
    info["root"] = entry.get("root") if entry else None
    info.pop("version", None)
    info.pop("models", None)
    if "server_info" in info and len(json.dumps(info["server_info"])) > 200_000:
        info["server_info"] = "(omitted: larger than 200 kB)"
    return info


# ---------------------------------------------------------------------------------------------
# Manifest


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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
        "prompts_per_concurrency": args.prompts_per_concurrency,
        "warmups": args.warmups,
        "seed": args.seed,
        "seed_scheme": SEED_SCHEME,
        "warmup_mode": "separate process, own prompts (--num-warmups 0 in the measured run)",
        "length_scale": args.length_scale,
        "bench_args": args.bench_args or "",
        "percentile_metrics": PERCENTILE_METRICS,
        "metric_percentiles": METRIC_PERCENTILES,
        "attempts": args.attempts,
        "telemetry": {"metrics_url": args.metrics_url, "gpu_metrics_url": args.gpu_metrics_url,
                      "interval_s": args.telemetry_interval,
                      "suspect_prefix_cache_pct": args.suspect_prefix_cache_pct},
    }


def new_run_record(spec: RunSpec) -> dict[str, Any]:
    return {
        "scenario": spec.scenario,
        "concurrency": spec.concurrency,
        "input_len": spec.input_len,
        "output_len": spec.output_len,
        "num_prompts": spec.num_prompts,
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


def load_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------------------------------
# Running


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _log_errors(log: Path, limit: int = 3) -> list[str]:
    """Request errors that `vllm bench serve` prints ("Error 0: Not Found"); first distinct ones."""
    seen: list[str] = []
    try:
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Error ") and ": " in line:
                msg = line.split(": ", 1)[1].strip()[:200]
                if msg and msg not in seen:
                    seen.append(msg)
                    if len(seen) >= limit:
                        break
    except OSError:
        pass
    return seen


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    useful = [l for l in text if l.strip() and "leaked" not in l and not l.startswith((" - ", "$ "))]
    return " | ".join(useful[-lines:])[:400]


class EtaModel:
    """Run time = fixed part (CLI start-up, tokenizer load, warm-ups) + rate x `RunSpec.cost()`.

    The fixed part is each process's wall time minus the benchmark window vLLM reports; the rate
    comes from the windows of valid runs. On a GPU the windows dominate; on small test runs the
    fixed start-up does, and a single proportional factor would be far off for either.
    """

    def __init__(self) -> None:
        self.fixed: list[float] = []
        self.window = 0.0
        self.cost = 0.0

    def observe(self, spec: RunSpec, process_s: float, window_s: float | None) -> None:
        if window_s is not None:
            self.fixed.append(max(0.0, process_s - window_s))
            self.window += window_s
            self.cost += spec.cost()
        else:
            self.fixed.append(process_s)

    def estimate(self, remaining: list[RunSpec]) -> float:
        if not self.fixed:
            return 0.0
        fixed = sum(self.fixed) / len(self.fixed)
        rate = self.window / self.cost if self.cost else 0.0
        return sum(fixed + rate * spec.cost() for spec in remaining)


class Sweep:
    def __init__(self, args: argparse.Namespace, plan: list[RunSpec], vllm: list[str]):
        self.args = args
        self.plan = plan
        self.vllm = vllm
        self.out = Path(args.out)
        self.logs = self.out / LOGS
        self.partial = self.out / PARTIAL
        self.uploader: s3.Uploader | None = None
        self.proc: subprocess.Popen | None = None
        self.manifest: dict[str, Any] = {}
        self.session: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.started_at = _now()
        self.bench_seconds = 0.0
        self.bench_window_seconds = 0.0
        self.health_seconds = 0.0
        self.driver: bench_client.Driver | None = None
        # [end time, GPU-busy seconds, measured?] per bench launch (warm-ups busy, not measured)
        self.launches: list[list[Any]] = []
        self.first_launch: float | None = None
        self.hardware: dict[str, Any] = {}

    # -- files -----------------------------------------------------------------------------
    def publish(self, path: Path) -> None:
        if self.uploader and path.exists():
            self.uploader.upload(path)

    def save_manifest(self) -> None:
        self.session["timing"] = self.timing()
        self.manifest["finished_at"] = self.session.get("finished_at")
        runs = self.manifest["runs"]
        self.manifest["counts"] = {
            status: sum(1 for r in runs if r["status"] == status)
            for status in ("valid", "suspect", "invalid", "pending")
        }
        if self.uploader:
            self.manifest["upload"] = {"uri": self.uploader.loc.uri, "failed": dict(self.uploader.failed)}
        _write_json(self.out / MANIFEST, self.manifest)
        self.publish(self.out / MANIFEST)

    def note_window(self, seconds: float) -> None:
        """A valid run's measured window (vLLM's duration), for the GPU time and the busy share."""
        self.bench_window_seconds += seconds
        if self.launches:
            self.launches[-1][1:] = [seconds, True]

    def busy(self) -> dict[str, Any]:
        """Measured windows / wall time of the runs, and the idle time between two windows."""
        marks = self.launches
        span = marks[-1][0] - self.first_launch if marks and self.first_launch is not None else 0.0
        # Idle between two measured windows: the time since the previous measured run ended that no
        # launch kept the GPU busy (a warm-up's own requests count as busy, not as measured).
        gaps, last, busy = [], None, 0.0
        for k, (end, seconds, measured) in enumerate(marks):
            busy += seconds
            if measured:
                if last is not None:
                    gaps.append(end - marks[last][0] - busy)
                last, busy = k, 0.0
        return {
            "bench_client": "library" if self.driver else "process",
            "runs_wall_s": round(span, 3),
            "busy_share_pct": round(100 * self.bench_window_seconds / span, 1) if span > 0 else None,
            "idle_between_windows_s": round(sum(gaps) / len(gaps), 3) if gaps else None,
        }

    def timing(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        overhead = wall - self.health_seconds - self.bench_seconds
        return {
            **self.busy(),
            "wall_s": round(wall, 3),
            "health_wait_s": round(self.health_seconds, 3),
            "bench_processes_s": round(self.bench_seconds, 3),
            "bench_windows_s": round(self.bench_window_seconds, 3),
            "orchestration_overhead_s": round(overhead, 3),
            "orchestration_overhead_pct": round(100 * overhead / wall, 3) if wall > 0 else 0.0,
        }

    # -- setup -----------------------------------------------------------------------------
    def prepare(self, tokenizer_source: str, server: dict[str, Any]) -> None:
        args = self.args
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        previous = load_manifest(self.out / MANIFEST) if args.resume else None
        config = config_of(args, self.plan)
        records = {}
        if previous:
            for rec in previous.get("runs", []):
                records[(rec.get("scenario"), rec.get("concurrency"))] = rec
        runs = []
        for spec in self.plan:
            rec = records.get((spec.scenario, spec.concurrency))
            if not rec or rec.get("run_hash") != spec.run_hash:
                fresh = new_run_record(spec)
                if rec:
                    fresh["previous"] = {k: rec.get(k) for k in ("run_hash", "status", "reason")}
                rec = fresh
            runs.append(rec)
        self.session = {"started_at": self.started_at, "finished_at": None, "resume": bool(args.resume),
                        "executed": [], "skipped_valid": []}
        self.manifest = {
            "schema": SCHEMA,
            "kind": "vllm-poc bench sweep",
            "config_hash": _hash(config),
            "config": config,
            "label": args.label,
            "tokenizer": tokenizer_source,
            "server": server,
            "served_flags": args.server_args,
            "instance_type": self.hardware.get("instance_type") or args.instance_type,
            "gpus": args.gpus,
            "image": args.image,
            "capacity_type": self.hardware.get("capacity_type"),
            "price_per_hour": self.hardware.get("price_per_hour"),
            "hardware": self.hardware,
            "variant": _variant(args),
            "client": {"vllm_bin": " ".join(self.vllm), "python": sys.version.split()[0]},
            "started_at": (previous or {}).get("started_at") or self.session["started_at"],
            "finished_at": None,
            "sessions": list((previous or {}).get("sessions", [])) + [self.session],
            "runs": runs,
        }
        if previous and previous.get("config_hash") != self.manifest["config_hash"]:
            self.manifest["previous_config_hash"] = previous.get("config_hash")

    # -- one combination ---------------------------------------------------------------------
    def _process(self, cmd: list[str], fh) -> tuple[int | None, bool, float]:
        """Run one `vllm bench serve` with its output in `fh`: (exit code, timed out, seconds).

        With a bench client (bench.client) the run executes in that one long-lived process, its
        output appended to the same log; otherwise in a process of its own.
        """
        fh.write("$ " + shlex.join(cmd) + ("  (in the bench client)" if self.driver else "") + "\n")
        fh.flush()
        started = time.monotonic()
        if self.first_launch is None:
            self.first_launch = started
        rc: int | None = None
        timed_out = False
        if self.driver is not None:
            try:
                rc, timed_out = self.driver.run(cmd[cmd.index("serve") + 1:], fh.name, self.args.run_timeout)
            except RuntimeError as exc:
                print(f"bench sweep: WARNING: {exc}; falling back to a process per run", file=sys.stderr, flush=True)
                self.driver = None
            else:
                fh.seek(0, os.SEEK_END)  # the client appended to the log
                duration = time.monotonic() - started
                self.bench_seconds += duration
                self.launches.append([time.monotonic(), 0.0, False])
                return rc, timed_out, duration
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            fh.write(f"could not start: {exc}\n")
            self.proc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=self.args.run_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._kill()
                rc = self.proc.returncode
            except BaseException:  # SIGTERM/Ctrl-C: the bench runs in its own session
                self._kill()
                raise
            finally:
                self.proc = None
        duration = time.monotonic() - started
        self.bench_seconds += duration
        self.launches.append([time.monotonic(), 0.0, False])
        return rc, timed_out, duration

    def _warm_up(self, spec: RunSpec, tokenizer: str, attempt: int, fh) -> dict[str, Any] | None:
        """One wave of warm-up requests at the run's concurrency, with prompts of their own."""
        if spec.warmups <= 0:
            return None
        seed = seeds.run_seed(self.args.seed, spec.scenario, spec.concurrency, attempt, seeds.WARMUP)
        name = f"{spec.scenario}_c{spec.concurrency}.warmup.json"
        cmd = bench_command(self.vllm, self.args, spec, tokenizer, self.partial, seed=seed,
                            num_prompts=spec.warmups, filename=name, phase=seeds.WARMUP)
        rc, timed_out, duration = self._process(cmd, fh)
        warm = R.load_result(self.partial / name)
        if self.launches and warm.duration_s:
            self.launches[-1][1] = warm.duration_s  # the warm-up's requests keep the GPU busy
        (self.partial / name).unlink(missing_ok=True)
        fh.write(f"--- warm-up done (exit {rc}); measured run follows\n")
        fh.flush()
        return {"seed": seed, "requests": spec.warmups, "rc": rc, "timed_out": timed_out,
                "duration_s": round(duration, 3)}

    def run_once(self, spec: RunSpec, tokenizer: str, attempt: int) -> tuple[R.RunResult, dict[str, Any]]:
        self.partial.mkdir(exist_ok=True)
        partial_file = self.partial / spec.filename
        partial_file.unlink(missing_ok=True)
        stem = f"{spec.scenario}_c{spec.concurrency}.attempt{attempt}"
        log = self.logs / f"{stem}.log"
        seed = seeds.run_seed(self.args.seed, spec.scenario, spec.concurrency, attempt)
        cmd = bench_command(self.vllm, self.args, spec, tokenizer, self.partial, seed=seed)
        started_at = _now()
        window = T.Window(self.args.metrics_url, self.args.gpu_metrics_url, self.args.telemetry_interval)
        with log.open("w", encoding="utf-8") as fh:
            warmup = self._warm_up(spec, tokenizer, attempt, fh)
            window.start()
            try:
                rc, timed_out, duration = self._process(cmd, fh)
            finally:
                window.stop()
        tele = window.summary()
        tele_file = self.logs / f"{stem}.telemetry.json"
        _write_json(tele_file, window.record())

        result = R.load_result(partial_file, spec.expectation())
        extra = []
        if timed_out:
            extra.append(f"timed out after {self.args.run_timeout:.0f} s")
        elif rc is None:
            extra.append("vllm bench serve could not be started")
        elif rc != 0:
            extra.append(f"vllm bench serve exited {rc}")
        if extra or not result.valid:
            errors = _log_errors(log)
            if errors:
                extra.append("request errors: " + " / ".join(errors))
            elif not partial_file.exists():
                tail = _tail(log)
                if tail:
                    extra.append(f"log: {tail}")
        extra.append(T.restart_problem(tele))
        result = result.with_problems(*extra)
        suspect = T.suspect_reason(tele, spec.prefix_cache_check, self.args.suspect_prefix_cache_pct) \
            if result.valid else None

        last = attempt >= self.args.attempts
        if result.valid and (not suspect or last):
            # a suspect last attempt keeps the result's name: the report shows it, flagged, and
            # leaves it out of every figure; `--resume` runs it again
            final = self.out / spec.filename
            os.replace(partial_file, final)
            kept = final
        elif result.valid:
            kept = self.out / R.suspect_filename(spec.scenario, spec.concurrency, attempt)
            os.replace(partial_file, kept)
        elif partial_file.exists():
            kept = self.out / R.invalid_filename(spec.scenario, spec.concurrency, attempt)
            os.replace(partial_file, kept)
        else:
            kept = None
        if result.valid:
            self.note_window(result.duration_s or 0.0)
        record = {
            "n": attempt,
            "started_at": started_at,
            "seed": seed,
            "warmup": warmup,
            "rc": rc,
            "duration_s": round(duration, 3),
            "valid": result.valid,
            "suspect": suspect,
            "reason": result.reason,
            "file": kept.name if kept else None,
            "log": log.relative_to(self.out).as_posix(),
            "telemetry_file": tele_file.relative_to(self.out).as_posix(),
            "telemetry": tele,
        }
        for path in (kept, log, tele_file):
            if path:
                self.publish(path)
        return result, record

    def launch(self, cmd: list[str], log: Path) -> tuple[int | None, bool]:
        """Run one `vllm bench serve` command, output to `log`; (exit code or None, timed out)."""
        with log.open("w", encoding="utf-8") as fh:
            rc, timed_out, _ = self._process(cmd, fh)
        return rc, timed_out

    def _kill(self) -> None:
        if self.driver is not None:
            self.driver.stop()
        # A stop must take seconds: the bench gets 3 s to end on SIGTERM, then it is killed.
        stop_process_group(self.proc, grace_s=3)

    # -- the loop ----------------------------------------------------------------------------
    def execute(self, tokenizer: str) -> int:
        runs = self.manifest["runs"]
        todo: list[tuple[RunSpec, dict[str, Any]]] = []
        for spec, rec in zip(self.plan, runs):
            if self.args.resume:
                existing = R.load_result(self.out / spec.filename, spec.expectation())
                if existing.valid and rec.get("status") == "suspect":
                    existing = existing.with_problems(f"suspect: {rec.get('reason')}")
                if existing.valid:
                    rec.update(status="valid", reason=None)
                    self.session["skipped_valid"].append(spec.filename)
                    continue
                if existing.path:  # present but not valid for this plan: keep it aside
                    n = len(rec.get("stale_files", [])) + 1
                    stale = self.out / R.stale_filename(spec.scenario, spec.concurrency, n)
                    os.replace(self.out / spec.filename, stale)
                    rec.setdefault("stale_files", []).append({"file": stale.name, "reason": existing.reason})
                    self.publish(stale)
            todo.append((spec, rec))
        if self.args.resume:
            print(f"bench sweep: resume: {len(runs) - len(todo)} of {len(runs)} combinations already "
                  f"valid, {len(todo)} to run", flush=True)
        self.save_manifest()

        eta = EtaModel()
        for index, (spec, rec) in enumerate(todo, 1):
            rec["status"] = "running"
            started = time.monotonic()
            result: R.RunResult | None = None
            attempt_rec: dict[str, Any] = {}
            for _ in range(self.args.attempts):
                attempt = len(rec["attempts"]) + 1
                result, attempt_rec = self.run_once(spec, tokenizer, attempt)
                rec["attempts"].append(attempt_rec)
                eta.observe(spec, attempt_rec["duration_s"], result.duration_s if result.valid else None)
                if result.valid and not attempt_rec["suspect"]:
                    break
            assert result is not None
            elapsed_run = time.monotonic() - started
            suspect = attempt_rec["suspect"] if result.valid else None
            rec.update(
                status="suspect" if suspect else ("valid" if result.valid else "invalid"),
                reason=suspect or result.reason,
                suspect=suspect,
                telemetry=attempt_rec["telemetry"],
                duration_s=round(elapsed_run, 3),
            )
            self.session["executed"].append(spec.filename)
            self.save_manifest()
            remaining = eta.estimate([s for s, _ in todo[index:]])
            print(self.progress_line(index, len(todo), spec, rec, result, remaining), flush=True)
        return sum(1 for r in runs if r["status"] != "valid")  # invalid, suspect or not run

    def progress_line(self, index: int, total: int, spec: RunSpec, rec: dict[str, Any],
                      result: R.RunResult, eta: float) -> str:
        tries = rec["attempts"][-1]["n"] if rec["attempts"] else 0
        head = f"[{index}/{total}] {spec.label} in={spec.input_len} out={spec.output_len} n={spec.num_prompts}"
        tele = rec.get("telemetry") or {}
        hits = tele.get("prefix_cache_hit_pct")
        if result.valid:
            body = (f"{rec['status'].upper() if rec['suspect'] else 'valid'} ({rec['duration_s']:.1f} s, "
                    f"attempt {tries}): {result.output_tok_s:.1f} out tok/s, {result.req_s:.2f} req/s, "
                    f"TTFT p99 {result.ttft_p99_ms:.0f} ms, ITL p99 {result.itl_p99_ms:.1f} ms"
                    + (f", prefix-cache hits {hits:.1f}%" if hits is not None else ""))
        else:
            body = f"INVALID ({rec['duration_s']:.1f} s, attempt {tries}): {result.reason}"
        elapsed = time.monotonic() - self.t0
        return f"{head} {body} | elapsed {_fmt_s(elapsed)}, ETA {_fmt_s(eta)}"


def _on_sigterm(signum, _frame):
    # Kubernetes stops a pod (eviction, Spot interruption) with SIGTERM; as PID 1 without a
    # handler Python would ignore it until SIGKILL. Unwind instead: the running bench process is
    # stopped, its combination marked pending, the manifest written and uploaded.
    raise Terminated(f"signal {signum}")


def prepare_tokenizer(source: str, scratch: Path) -> str:
    if s3.is_s3_uri(source):
        loc = s3.S3Location.parse(source, option="--tokenizer")
        files = s3.download_tokenizer(loc, scratch)
        print(f"bench sweep: tokenizer: {len(files)} files from {loc.uri}", flush=True)
        return str(scratch)
    return source


def run(args: argparse.Namespace) -> int:
    try:
        args.prices_table = hardware.parse_prices(args.prices)
        args.allowed_capacity_types = hardware.parse_capacity_types(args.capacity_types)
        if args.capacity_type and args.capacity_type not in hardware.CAPACITY_TYPES:
            raise UsageError(f"--capacity-type: {args.capacity_type!r} is not one of "
                             f"{', '.join(hardware.CAPACITY_TYPES)}")
        if args.telemetry_interval <= 0:
            raise UsageError(f"--telemetry-interval must be > 0, got {args.telemetry_interval}")
        plan = build_plan(args)
        extra_runs.validate(args)
        vllm = resolve_vllm(args.vllm_bin)
        upload = s3.S3Location.parse(args.upload, option="--upload") if args.upload else None
    except (UsageError, ValueError) as exc:
        print(f"bench sweep: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args.base_url = args.base_url.rstrip("/")
    if args.metrics_url is None:
        args.metrics_url = f"{args.base_url}/metrics"
    elif args.metrics_url.lower() in ("", "none"):
        args.metrics_url = None
    out = Path(args.out)
    if not args.resume and _has_results(out):
        print(f"bench sweep: {out} already holds a sweep; pass --resume to continue it or choose "
              "another --out", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(args, plan, vllm)
    try:
        driver_cmd = bench_client.driver_command(args.bench_client, vllm, bool(args.vllm_bin), args.bench_client_cmd)
    except ValueError as exc:
        print(f"bench sweep: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if driver_cmd:
        sweep.driver = bench_client.Driver(driver_cmd, bench_client.driver_env())
    previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-tokenizer-") as scratch:
            return _run(sweep, upload, Path(scratch))
    except (Terminated, KeyboardInterrupt) as exc:
        sweep._kill()
        if sweep.manifest:
            sweep.session["finished_at"] = _now()
            sweep.session["interrupted"] = str(exc) or "interrupted"
            for rec in sweep.manifest["runs"]:
                if rec["status"] == "running":
                    rec["status"] = "pending"
            sweep.save_manifest()
        again = rerun_command("bench") + ("" if "--resume" in sys.argv else " --resume")
        kept = sum(rec["status"] == "valid" for rec in sweep.manifest["runs"]) if sweep.manifest else 0
        print(f"bench sweep: stopped by {'SIGTERM' if isinstance(exc, Terminated) else 'Ctrl-C'}; "
              f"{kept} valid run(s) kept in {out}, unfinished runs marked pending. Resume with: {again}",
              file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if sweep.driver is not None:
            sweep.driver.stop()
        shutil.rmtree(sweep.partial, ignore_errors=True)


def _run(sweep: Sweep, upload: s3.S3Location | None, scratch: Path) -> int:
    args, out, plan = sweep.args, sweep.out, sweep.plan
    if upload:
        # In the cluster: does S3 resolve inside the ranges the NetworkPolicy allows? (bench/s3reach.py)
        reach = s3reach.check_from_env(upload.bucket, stack=(args.label or "").split("/", 1)[0] or None)
        if reach.message:
            print(f"bench sweep: {reach.message}", file=sys.stderr, flush=True)
        if reach.blocked:
            return EXIT_UPLOAD
        try:
            sweep.uploader = s3.Uploader(upload, out)
            remote = next(s3.iter_objects(upload), None)
            if remote and not args.resume:
                print(f"bench sweep: {upload.uri} already holds files; pass --resume to continue that "
                      "sweep or choose another prefix", file=sys.stderr)
                return EXIT_USAGE
            if args.resume:
                got = s3.download_prefix(upload, out, only_missing=True)
                print(f"bench sweep: resume: {len(got)} files downloaded from {upload.uri}", flush=True)
        except (s3.S3Error, Exception) as exc:  # credentials, endpoint, missing bucket
            print(f"bench sweep: --upload {upload.uri}: {exc}", file=sys.stderr)
            return EXIT_UPLOAD

    try:
        tokenizer = prepare_tokenizer(args.tokenizer, scratch)
    except (s3.S3Error, ValueError) as exc:
        print(f"bench sweep: --tokenizer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"bench sweep: {len(plan)} combinations -> {out}; waiting for {args.base_url}/health "
          f"(up to {args.health_timeout:.0f} s)", flush=True)
    try:
        sweep.health_seconds = wait_for_health(args.base_url, args.health_timeout, args.health_interval,
                                               args.health_say_every)
    except TimeoutError as exc:
        print(f"bench sweep: {exc}", file=sys.stderr)
        return EXIT_UNHEALTHY
    server = probe_server(args.base_url, args.model)
    served = [str(m) for m in server["served_models"] if m]
    if served and args.model not in served:
        print(f"bench sweep: --model {args.model}: the server at {args.base_url} does not serve it; it serves "
              f"{', '.join(served)} (GET /v1/models). Pass one of them; no run was started.", file=sys.stderr)
        return EXIT_USAGE
    sweep.hardware = hardware.resolve(
        node_name=args.node_name, configured_instance_type=args.instance_type, gpus=args.gpus,
        capacity_type=args.capacity_type, allowed_capacity_types=args.allowed_capacity_types,
        prices=args.prices_table, price_per_hour=args.price_per_hour, image=args.image)
    hw = sweep.hardware
    print(f"bench sweep: hardware: {hw['instance_type'] or 'instance type unknown'} x {hw['gpus']} GPU, "
          f"capacity {hw['capacity_type'] or 'unknown'}, price "
          f"{'$%.4f/h' % hw['price_per_hour'] if hw['price_per_hour'] else 'unknown'}"
          + "".join(f"; {n}" for n in hw["notes"]), flush=True)
    sweep.prepare(args.tokenizer, server)
    invalid = sweep.execute(tokenizer)
    extra_runs.run_after_grid(sweep, tokenizer)

    sweep.session["finished_at"] = _now()
    if sweep.uploader:
        sweep.uploader.retry_failed()
    sweep.save_manifest()
    record_capacity(sweep)
    t = sweep.timing()
    runs = sweep.manifest["runs"]
    print(
        f"bench sweep: {len(runs) - invalid}/{len(runs)} valid; wall {_fmt_s(t['wall_s'])}, "
        f"vllm bench serve processes {t['bench_processes_s']:.1f} s, health wait {t['health_wait_s']:.1f} s, "
        f"orchestration overhead {t['orchestration_overhead_s']:.1f} s ({t['orchestration_overhead_pct']:.2f}%), "
        f"measured benchmark windows {t['bench_windows_s']:.1f} s",
        flush=True,
    )
    if t["busy_share_pct"] is not None:
        idle = t["idle_between_windows_s"]
        print(f"bench sweep: busy share {t['busy_share_pct']:.1f}% (measured windows / wall of the runs, "
              f"{t['bench_client']} client); idle between two measured windows "
              f"{'-' if idle is None else f'{idle:.2f} s'} per run", flush=True)
    for rec in runs:
        if rec["status"] != "valid":
            print(f"bench sweep: {rec['status'].upper()} {rec['scenario']} c={rec['concurrency']}: {rec['reason']}",
                  file=sys.stderr)
    if sweep.uploader and not sweep.uploader.retry_failed():
        print(f"bench sweep: not uploaded to {upload.uri}: {', '.join(sweep.uploader.failed)}", file=sys.stderr)
        return EXIT_UPLOAD
    return EXIT_INVALID if invalid else EXIT_OK


def record_capacity(sweep: "Sweep") -> None:
    """This side's half of a verdict, recorded where the results are (manifest `capacity`, uploaded):
    per scenario its capacity under the sweep's SLO as an interval (bench.verdict), so a sweep
    Job leaves its state in S3 whatever a later report decides. `bench report` recomputes it."""
    from bench.analysis import capacity_report as CR
    from bench.analysis import report as RP
    from bench.analysis import verdict as V

    args = sweep.args
    side = RP.load_side(sweep.out)
    caps = CR.scenario_capacity(sweep.out, [r for r in side.runs if side.usable(r)], ttft_ms=args.slo_ttft_p99_ms,
                                decode_ms=args.slo_itl_p99_ms, decode_metric=args.slo_decode_metric)
    scenarios = {}
    for name in side.scenarios:
        got = caps.get(name) or {}
        closed = got.get("closed") or V.Capacity(V.GRID, V.NO_DATA)
        scenarios[name] = {"slo_capacity_interval": closed.as_dict(),
                           "rate_capacity_interval": got["open"].as_dict() if got.get("open") else None}
        print(f"bench sweep: {name} under the SLO: {V.capacity_text(closed)}", flush=True)
    sweep.manifest["capacity"] = {
        "slo": {"ttft_p99_ms": args.slo_ttft_p99_ms, "decode_p99_ms": args.slo_itl_p99_ms,
                "decode_metric": args.slo_decode_metric},
        "scenarios": scenarios,
    }
    sweep.save_manifest()


def _variant(args: argparse.Namespace) -> dict[str, Any] | None:
    """--variant: what this server changes from its base (recorded for `bench compare`)."""
    text = getattr(args, "variant", None)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {"raw": text}
    return value if isinstance(value, dict) else {"raw": value}


def _has_results(out: Path) -> bool:
    if not out.is_dir():
        return False
    return (out / MANIFEST).exists() or any(R.parse_result_filename(p.name) for p in out.iterdir())


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "sweep",
        help="run vllm bench serve over scenarios x concurrencies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", required=True, help="server URL, e.g. http://gemma-fp8:8000")
    p.add_argument("--model", required=True, help="served model name (as in GET /v1/models)")
    p.add_argument("--tokenizer", required=True,
                   help="local tokenizer folder, or s3://bucket/prefix of the model folder "
                        "(tokenizer files are downloaded, weights are not)")
    p.add_argument("--out", required=True, help="output folder for results, logs and manifest.json")
    p.add_argument("--scenarios", help="comma-separated scenario names to run (default: S1_chat, "
                   "S2_summary, S3_moderation, S4_rag and any added with --scenario)")
    p.add_argument("--scenario", action="append", metavar="NAME=IN/OUT",
                   help="set or add a scenario's input/output tokens, e.g. S1_chat=32/8 (repeatable)")
    p.add_argument("--scenario-concurrencies", action="append", metavar="NAME=C1,C2",
                   help="a scenario's own concurrencies, e.g. K_korean=1,8,64 (repeatable; default: the "
                        "scenario's own, K_korean 1,8, else --concurrencies)")
    p.add_argument("--prompt-format", choices=("auto", "custom", "chat"), default="auto",
                   help="how K_korean's prompts are sent: custom (vLLM custom dataset, client-side chat "
                        "template; needs pandas), chat (/v1/chat/completions, server-side template) or "
                        "auto (custom where pandas is installed) (default: auto)")
    p.add_argument("--variant", default=_env("VLLM_POC_VARIANT"),
                   help="JSON: what this server changes from its base (recorded for `bench compare`)")
    p.add_argument("--length-scale", type=float, default=1.0,
                   help="multiply every scenario length (tests; outputs stay >= 2 tokens)")
    p.add_argument("--concurrencies", default=",".join(map(str, DEFAULT_CONCURRENCIES)),
                   help="comma-separated client concurrencies (default: %(default)s)")
    p.add_argument("--prompts-per-concurrency", type=int, default=8,
                   help="prompts per run = max(--min-prompts, this x concurrency) (default: %(default)s)")
    p.add_argument("--min-prompts", type=int, default=32,
                   help="lower bound of prompts per run; p99 needs samples (default: %(default)s)")
    p.add_argument("--warmups", default="auto",
                   help="warm-up requests per run, or 'auto' = min(concurrency, 8) (default: auto)")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default: %(default)s)")
    p.add_argument("--bench-args", default=_env("VLLM_POC_BENCH_ARGS"),
                   help="extra `vllm bench serve` arguments, one shell-quoted string "
                        "(env VLLM_POC_BENCH_ARGS), e.g. '--temperature 0'")
    p.add_argument("--attempts", type=int, default=2,
                   help="attempts per combination before it is recorded invalid (default: %(default)s)")
    p.add_argument("--run-timeout", type=float, default=3600.0,
                   help="seconds one vllm bench serve may run (default: %(default)s)")
    p.add_argument("--health-timeout", type=float, default=1800.0,
                   help="seconds to wait for GET /health = 200 (default: %(default)s)")
    p.add_argument("--health-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--health-say-every", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--resume", action="store_true",
                   help="skip combinations whose result file re-validates against this plan")
    p.add_argument("--upload", default=_env("VLLM_POC_RESULTS_URI"),
                   help="s3://bucket/prefix to upload every file to as it is written "
                        "(env VLLM_POC_RESULTS_URI); with --resume, download from there first")
    p.add_argument("--vllm-bin", default=_env("VLLM_POC_VLLM_BIN"),
                   help="vllm executable or command (default: `vllm` on PATH; env VLLM_POC_VLLM_BIN)")
    p.add_argument("--label", default=_env("VLLM_POC_LABEL"),
                   help="name of this configuration in reports (env VLLM_POC_LABEL)")
    p.add_argument("--instance-type", default=_env("VLLM_POC_INSTANCE_TYPE"),
                   help="recorded in the manifest (env VLLM_POC_INSTANCE_TYPE)")
    p.add_argument("--gpus", type=int, default=_env("VLLM_POC_GPUS", "1"),
                   help="GPUs behind the server, for per-GPU ratios (env VLLM_POC_GPUS, default 1)")
    p.add_argument("--price-per-hour", type=float, default=_env("VLLM_POC_PRICE_PER_HOUR"),
                   help="hourly price of those GPUs whatever the capacity type; wins over --prices "
                        "(env VLLM_POC_PRICE_PER_HOUR)")
    add_measurement_options(p)
    extra_runs.add_arguments(p)
    bench_client.add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sweep", *argv])
    return args.func(args)
