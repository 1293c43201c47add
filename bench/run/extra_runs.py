"""After the grid: the SLO capacity search to a known width, within a GPU-time budget (`sweep --capacity-search`).

Per scenario, once the grid is done:

1. Closed loop: bisection over concurrencies between the highest load that meets the SLO with
   confidence and the lowest that misses it for sure (bench.analysis.capacity.search.Search), until the
   capacity is known within `--target-width` (1.22: +-10 %), each end widened by its run-to-run band.
   Every run is sized by time like the grid's (bench.run.sizing): a burst at its concurrency sizes
   it; a repeat of a point runs at that point's first size, so repeats are comparable and measure
   the run-to-run band. Files: `search/<scenario>_c<c>.run<k>.json`.
2. Open loop, where the closed loop cannot narrow the answer (two neighbouring concurrencies further
   apart in throughput than the target; `--open-loop always` runs it everywhere): the same bisection
   over offered Poisson rates (`--request-rate R`, burstiness 1, `--max-concurrency` only as a safety
   cap), which can be split continuously. Files: `open_loop/<scenario>_rate<R>.run<k>.json`.

Every run gets its own seed (derived from the sweep seed, scenario, kind, load and run number): no
prompt is replayed into the server's prefix cache. Files are written and uploaded as they are
produced; `--resume` replays the search over the files already there and runs only what is missing.

GPU time: the wall time of every `vllm bench serve` process the sweep starts (bursts and measured
runs). `--budget-minutes` bounds a whole invocation (grid first, then the searches); it is said before
the first run and accounted for at the end, and what is left after the grid is shared out between
the scenarios in order (what one leaves goes to the next). A run whose estimate would overrun its
scenario's share is not started; the sweep then says how wide the answer is and what another
`--resume` would buy. `manifest.json` `extra` lists every extra run with its GPU time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from typing import Any

from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.analysis.capacity import interval as CAP
from bench.analysis.capacity import search as S
from bench.run import grid, seeds, sizing

KIND_SEARCH, KIND_OPEN = "search", "open_loop"
META_KIND = "bench_kind"
OPEN_LOOP_MODES = ("auto", "always", "never")
DEFAULT_BUDGET_MINUTES = 60.0
# Flags of the earlier search and what replaced them (a clear refusal, not a silent change of meaning).
GONE = {
    "search_requests": "--min-prompts (every run is sized by time, at least 100 requests)",
    "search_bracket": "--target-width (the capacity's interval, in tok/s, bands included)",
    "extra_budget": "--budget-minutes (GPU minutes for the whole sweep)",
    "open_loop_rates": "--open-loop (the rates are bisected, not listed)",
    "open_loop_requests": "--window-s (open-loop runs are sized by time)",
    "open_loop_min_requests": "--min-prompts",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    known = set(p._option_string_actions)  # noqa: SLF001 - share SLO flags the sweep may define itself

    def add(flag, *aliases, **kw):
        if flag not in known:
            p.add_argument(flag, *[a for a in aliases if a not in known], **kw)

    add("--capacity-search", action="store_true", default=env("VLLM_POC_CAPACITY_SEARCH") in ("1", "true"),
        help="after the grid, search the SLO capacity per scenario to --target-width "
             "(env VLLM_POC_CAPACITY_SEARCH=1)")
    add("--slo-ttft-p99-ms", type=float, default=500.0, help="SLO: TTFT p99 limit (default: %(default)s)")
    add("--slo-itl-p99-ms", type=float, default=50.0, dest="slo_itl_p99_ms",
        help="SLO: decode (ITL or TPOT) p99 limit (default: %(default)s)")
    add("--slo-decode-metric", choices=("itl", "tpot"), default="itl",
        help="decode metric the SLO limits (default: %(default)s)")
    add("--budget-minutes", type=float, default=DEFAULT_BUDGET_MINUTES,
        help="GPU minutes this invocation may spend, grid and search together; the search shares out what "
             "the grid leaves (default: %(default)s)")
    add("--target-width", type=float, default=S.TARGET_WIDTH,
        help="stop when the throughputs at the capacity's two ends are within this factor "
             "(default: %(default)s, i.e. +-10 %%)")
    add("--point-width", type=float, default=S.POINT_WIDTH,
        help="then bisect above the pass end while the next load tried lies further than this in throughput "
             "(default: %(default)s; at --target-width or above: none)")
    add("--search-repeats", type=int, default=S.DEFAULT_REPEATS,
        help="comparable repeats of a point whose p99 interval straddles a limit (default: %(default)s)")
    add("--search-end-repeats", type=int, default=S.DEFAULT_END_REPEATS,
        help="comparable repeats of each end of the bracket where only the band keeps it wide (default: %(default)s)")
    add("--noise-pct", type=float, default=C.DEFAULT_NOISE_PCT,
        help="run-to-run band (%% of the mean, 95 %% of single runs) assumed until repeats measure it "
             "(default: %(default)s)")
    add("--search-max-concurrency", type=int, default=0,
        help="highest concurrency the search may try above the grid (default: 4 x the grid's highest)")
    add("--open-loop", choices=OPEN_LOOP_MODES, default="auto",
        help="the open-loop rate search: auto (where neighbouring concurrencies are too far apart), always, "
             "never (default: %(default)s)")
    add("--no-open-loop", action="store_true", help=argparse.SUPPRESS)
    add("--open-loop-max-concurrency", type=int, default=0,
        help="safety cap on in-flight open-loop requests (default: 4 x the grid's highest concurrency)")
    for gone in GONE:
        add("--" + gone.replace("_", "-"), default=None, help=argparse.SUPPRESS)


def validate(args: argparse.Namespace) -> None:
    for gone, instead in GONE.items():
        if getattr(args, gone, None) is not None:
            raise ValueError(f"--{gone.replace('_', '-')} is gone with the search it tuned: use {instead}")
    if not args.target_width > 1:
        raise ValueError(f"--target-width must be above 1 (hi / lo of the interval), got {args.target_width:g}")
    if not args.point_width > 1:
        raise ValueError(f"--point-width must be above 1 (a factor in throughput; at or above --target-width "
                         f"{args.target_width:g} the search stops at its target), got {args.point_width:g}")
    if args.search_repeats < 0 or args.search_end_repeats < 0:
        raise ValueError("--search-repeats and --search-end-repeats must be 0 or more")
    if not 0 <= args.noise_pct < 1000:
        raise ValueError(f"--noise-pct must be between 0 and 1000, got {args.noise_pct:g}")
    if not args.budget_minutes > 0:
        raise ValueError(f"--budget-minutes must be above 0 (GPU minutes), got {args.budget_minutes:g}")
    if args.search_max_concurrency < 0 or args.open_loop_max_concurrency < 0:
        raise ValueError("--search-max-concurrency and --open-loop-max-concurrency must be 0 (the default) or more")
    if getattr(args, "no_open_loop", False):
        args.open_loop = "never"


def _set_flag(cmd: list[str], flag: str, *values: str) -> list[str]:
    """Set (or add, before --metadata) a flag of a `vllm bench serve` command line."""
    cmd = list(cmd)
    if flag in cmd:
        i = cmd.index(flag)
        n = 1
        while i + n < len(cmd) and not cmd[i + n].startswith("--"):
            n += 1
        cmd[i:i + n] = [flag, *values]
        return cmd
    at = cmd.index("--metadata") if "--metadata" in cmd else len(cmd)
    cmd[at:at] = [flag, *values]
    return cmd


def _derived_seed(*parts: Any) -> int:
    blob = json.dumps(parts, separators=(",", ":")).encode()
    return int(hashlib.sha256(blob).hexdigest()[:8], 16) % (2**31 - 1)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class ExtraRuns:
    def __init__(self, sweep, tokenizer: str):
        self.sweep = sweep
        self.args = sweep.args
        self.tokenizer = tokenizer
        self.record: dict[str, Any] = sweep.manifest.setdefault("extra", {})
        self.record.setdefault("runs", [])
        self.record.setdefault("scenarios", {})
        self.record["settings"] = {
            "slo": {"ttft_p99_ms": self.args.slo_ttft_p99_ms, "decode_p99_ms": self.args.slo_itl_p99_ms,
                    "decode_metric": self.args.slo_decode_metric},
            "window_s": self.args.window_s, "min_prompts": self.args.min_prompts,
            "target_width": self.args.target_width, "point_width": self.args.point_width,
            "search_repeats": self.args.search_repeats,
            "search_end_repeats": self.args.search_end_repeats, "noise_pct": self.args.noise_pct,
            "open_loop": self.args.open_loop, "budget_minutes": self.args.budget_minutes,
        }

    # -- one run -------------------------------------------------------------------------------
    def _run(self, kind: str, grid_spec, *, load: float, requests: int | None, name: str, seed_parts: tuple,
             rate: float | None = None, cap: int | None = None) -> tuple[R.RunResult, float]:
        """One search or open-loop run (a closed-loop one after its burst), tried again as `sizing.Tries`
        says when it failed or did not hold its load for the window (then larger): (its result, the GPU
        seconds its processes took)."""
        sweep, args = self.sweep, self.args
        folder = sweep.out / (CR.SEARCH_DIR if kind == KIND_SEARCH else CR.OPEN_LOOP_DIR)
        folder.mkdir(exist_ok=True)
        concurrency = int(cap if rate is not None else load)
        run_hash = grid.short_hash({"grid": grid_spec.run_hash, "kind": kind, "load": load, "name": name,
                                    "slo": self.record["settings"]["slo"]})
        spec = grid.RunSpec(grid_spec.scenario, grid_spec.input_len, grid_spec.output_len, concurrency,
                            args.min_prompts, grid_spec.warmups if rate is None else 0, run_hash,
                            grid_spec.prefix_cache_check, grid_spec.workload, grid_spec.prompt_format)
        final = folder / name
        existing = R.load_result(final, R.Expectation(grid_spec.scenario, concurrency))
        if existing.valid:
            self.record["runs"].append(self._entry(kind, spec, rate, name, existing, None, resumed=True))
            return existing, 0.0
        if final.exists():
            os.replace(final, folder / (name[:-5] + f".stale{int(time.time())}.json"))
        seed = _derived_seed(args.seed, grid_spec.scenario, kind, *seed_parts)
        result: R.RunResult | None = None
        spent = 0.0
        tries, attempt = sizing.Tries(args.attempts), 0
        repeat = requests is not None  # a repeat keeps its point's size
        while True:
            attempt += 1
            sweep.partial.mkdir(exist_ok=True)
            partial = sweep.partial / name
            partial.unlink(missing_ok=True)
            log = sweep.logs / f"{kind}.{name[:-5]}.attempt{attempt}.log"
            started = time.monotonic()
            with log.open("w", encoding="utf-8") as fh:
                warm = None
                if rate is None and spec.warmups:
                    warm_seed = _derived_seed(args.seed, grid_spec.scenario, kind, *seed_parts, attempt, seeds.WARMUP)
                    warm = sweep.burst(spec, self.tokenizer, concurrency, sizing.burst_requests(concurrency),
                                       warm_seed, fh)
                if rate is not None:
                    n = requests or sizing.open_loop_requests(rate, args.window_s, floor=args.min_prompts)
                else:
                    n = requests or grid.prompts_for(spec, (warm or {}).get("req_s"), args.window_s,
                                                     sweep.measured.get(grid_spec.scenario))
                cmd = grid.bench_command(sweep.vllm, args, spec, self.tokenizer, sweep.partial,
                                         seed=seed + attempt - 1, num_prompts=n, filename=name)
                cmd = _set_flag(cmd, "--goodput", f"ttft:{args.slo_ttft_p99_ms:g}", f"tpot:{args.slo_itl_p99_ms:g}")
                if rate is not None:
                    cmd = _set_flag(cmd, "--request-rate", f"{rate:g}")
                    cmd = _set_flag(cmd, "--burstiness", "1.0")
                cmd += [f"{META_KIND}={kind}"]
                rc, timed_out, _ = sweep.run_command(cmd, fh)
            process_s = time.monotonic() - started
            spent += process_s
            result = R.load_result(partial, R.Expectation(grid_spec.scenario, concurrency, n, grid_spec.output_len))
            problems = []
            if timed_out:
                problems.append(f"timed out after {args.run_timeout:.0f} s")
            elif rc != 0:
                problems.append(f"vllm bench serve exited {rc}")
            short = None
            if result.valid and rate is None:
                short = sizing.window_problem(result.raw, concurrency, args.window_s)
            elif result.valid and (result.duration_s or 0.0) + 1e-9 < args.window_s:
                short = f"it lasted {result.duration_s:.1f} s, less than the {args.window_s:g} s window"
            problems += [short] if short else []
            if problems:
                result = result.with_problems(*problems)
            if result.valid:
                os.replace(partial, final)
                sweep.note_window(result.duration_s or 0.0)
                if rate is None:
                    sweep.measured_rate(grid_spec.scenario, concurrency, result.req_s)
                kept = final
            elif partial.exists():
                kept = folder / (name[:-5] + f".attempt{attempt}.invalid.json")
                os.replace(partial, kept)
            else:
                kept = None
            self.record["runs"].append(self._entry(kind, spec, rate, name if result.valid else
                                                   (kept.name if kept else None), result, process_s,
                                                   attempt=attempt, seed=seed + attempt - 1, requests=n))
            for path in (kept, log):
                if path:
                    sweep.publish(path)
            sweep.save_manifest()
            if result.valid:
                return result, spent
            # a server gone stops the sweep (ServerGone), not each run after it
            sweep.ensure_serving(f"the {kind.replace('_', '-')} run {folder.name}/{name[:-5]}")
            if short and repeat:
                break  # a short repeat is not run larger: it would be no repeat
            if not tries.another(short=bool(short)):
                break
            if short:
                held = sizing.steady_window(result.raw, concurrency) if rate is None else result.duration_s
                requests = grid.whole_prefixes(spec, sizing.resize(n, held, args.window_s, concurrency),
                                               closed_loop=rate is None)
        assert result is not None
        return result, spent

    def _entry(self, kind, spec, rate, name, result: R.RunResult, process_s, *, resumed=False,
               attempt=None, seed=None, requests=None) -> dict[str, Any]:
        return {
            "kind": kind, "scenario": spec.scenario, "concurrency": spec.concurrency, "rate": rate,
            "num_prompts": requests or result.num_prompts, "file": name, "valid": result.valid,
            "reason": result.reason, "gpu_s": round(process_s or 0.0, 3),
            "window_s": round(result.duration_s, 3) if result.valid and result.duration_s else None,
            "attempt": attempt, "seed": seed, "resumed": resumed,
        }

    # -- per scenario ----------------------------------------------------------------------------
    def scenario(self, name: str, specs: list, budget_s: float) -> float:
        """The searches of one scenario within `budget_s` GPU seconds; returns what they spent."""
        args, sweep = self.args, self.sweep
        loaded = [(s, R.load_result(sweep.out / s.filename, R.Expectation(s.scenario, s.concurrency))) for s in specs]
        valid = [(s, g) for s, g in loaded if g.valid and g.raw]
        info: dict[str, Any] = {"budget_s": round(budget_s, 1), "stopped": None}
        self.record["scenarios"][name] = info
        if not valid:
            info["stopped"] = "no valid grid run to start from"
            return 0.0
        slo = self.record["settings"]["slo"]
        top = max(s.concurrency for s in specs)
        common = dict(ttft_ms=slo["ttft_p99_ms"], decode_ms=slo["decode_p99_ms"], decode_metric=slo["decode_metric"],
                      target=args.target_width, point=args.point_width, repeats=args.search_repeats,
                      end_repeats=args.search_end_repeats,
                      default_noise_pct=args.noise_pct)
        closed = S.Search(**common, ceiling=args.search_max_concurrency or 4 * top)
        for s, g in valid:
            closed.observe(s.concurrency, g.raw, s.filename)
        for c, runs in CR.search_runs(sweep.out).get(name, {}).items():
            for result, raw in runs:
                closed.observe(c, raw, CAP.run_file(result))
        by_c = {s.concurrency: s for s in specs}
        first = specs[0]
        speed = sorted((g.concurrency, g.req_s or 0.0) for _, g in valid)
        for _, g in valid:  # a --resume's grid runs size the search's runs too
            sweep.measured_rate(name, g.concurrency, g.req_s)

        def closed_run(step: S.Step, k: int) -> tuple[R.RunResult, float]:
            c = int(step.load)
            return self._run(KIND_SEARCH, by_c.get(c, first), load=c, requests=step.requests,
                             name=CR.search_filename(name, c, k), seed_parts=(c, k))

        def closed_estimate(step: S.Step) -> float:
            c = int(step.load)
            rate = req_s_estimate(speed, c)
            n = step.requests or sizing.closed_loop_requests(rate, c, args.window_s, floor=args.min_prompts)
            return (n + sizing.burst_requests(c)) / max(rate, 1e-9)

        def say(loop: str):
            return lambda line: print(f"bench sweep: {name}: {loop}, {line}", flush=True)

        spent, runs, stop = drive(closed, closed_run, closed_estimate, budget_s, say=say("closed loop"))
        info["closed"] = self._summary(closed, runs, spent, stop)
        print(f"bench sweep: {name}: capacity search, closed loop ({runs} extra runs, {minutes(spent)}): "
              f"{closed.standing()}" + (f"; {stop}" if stop else ""), flush=True)
        wanted = args.open_loop == "always" or (args.open_loop == "auto" and closed.stopped == S.ADJACENT)
        if not wanted or stop:
            if args.open_loop != "never" and stop and closed.stopped is None:
                info["open_loop"] = "not run: the budget ended first"
            info["gpu_s"] = round(spent, 1)
            return spent
        lo, hi = closed.bounds()
        start = closed.req_s(lo) if lo is not None else None
        if not start:
            info["open_loop"] = "not run: no concurrency meets the SLO with confidence to start from"
            info["gpu_s"] = round(spent, 1)
            return spent
        cap = args.open_loop_max_concurrency or 4 * top
        rates = S.Search(**common, integer=False, floor=start / 64, ceiling=max(start * 8, closed.req_s(hi) or 0))
        for rate, runs_at in CR.open_loop_runs(sweep.out).get(name, {}).items():
            for result, raw in runs_at:
                rates.observe(rate, raw, CAP.run_file(result))
        pass_spec = by_c.get(int(lo), first)

        def open_run(step: S.Step, k: int) -> tuple[R.RunResult, float]:
            return self._run(KIND_OPEN, pass_spec, load=step.load, requests=step.requests,
                             name=CR.open_loop_filename(name, step.load, k), seed_parts=(step.load, k),
                             rate=step.load, cap=cap)

        def open_estimate(step: S.Step) -> float:
            n = step.requests or sizing.open_loop_requests(step.load, args.window_s, floor=args.min_prompts)
            served = [r.req_s for search in (closed, rates) for load in search.loads() for r in search.runs(load)
                      if r.req_s]
            return open_loop_seconds(n, step.load, max(served) if served else None)

        if lo == 1:
            estimate = one_at_a_time(closed, slo["ttft_p99_ms"], args.window_s, args.min_prompts)
            if estimate:
                info["open_loop_estimate"] = estimate
                print(f"bench sweep: {name}: before the open loop: {estimate['words']}", flush=True)
        first_rate = S.Step(float(f"{start:.4g}"), False, "the closed loop's pass end, offered as a Poisson rate")
        used, opened, why = drive(rates, open_run, open_estimate, budget_s - spent, first=first_rate,
                                   say=say("open loop"))
        spent += used
        info["open_loop"] = {**self._summary(rates, opened, used, why), "max_concurrency": cap}
        print(f"bench sweep: {name}: capacity search, open loop ({opened} runs, {minutes(used)}): "
              f"{rates.standing()}" + (f"; {why}" if why else ""), flush=True)
        info["gpu_s"] = round(spent, 1)
        return spent

    def _summary(self, search: S.Search, runs: int, spent: float, stop: str | None) -> dict[str, Any]:
        noise = search.noise()
        lo, hi = search.bounds()
        return {"runs": runs, "gpu_s": round(spent, 1), "load_pass": lo, "load_fail": hi,
                "width": None if search.width() is None else round(search.width(), 4),
                "stopped": stop or search.stop_words(), "reached_target": search.stopped == S.NARROW,
                "noise": {"pct": noise.pct, "measured_pct": noise.measured_pct, "source": noise.source,
                          "repeats": noise.repeats, "by_figure": noise.bands()}, "standing": search.standing()}

    def run(self) -> None:
        order: list[str] = []
        for spec in self.sweep.plan:
            if spec.scenario not in order:
                order.append(spec.scenario)
        budget = self.args.budget_minutes * 60
        for i, name in enumerate(order):
            left = budget - self.sweep.bench_seconds
            share = max(0.0, left) / (len(order) - i)
            specs = [s for s in self.sweep.plan if s.scenario == name]
            self.scenario(name, specs, share)
            self.sweep.save_manifest()
        self.summarise()

    def summarise(self) -> dict[str, Any]:
        runs = self.record["runs"]
        extra = sum(r["gpu_s"] for r in runs)
        total = self.sweep.bench_seconds
        kinds = {k: sum(1 for r in runs if r["kind"] == k and not r.get("resumed")) for k in (KIND_SEARCH, KIND_OPEN)}
        self.record["totals"] = {
            "runs": kinds[KIND_SEARCH] + kinds[KIND_OPEN], "search_runs": kinds[KIND_SEARCH],
            "open_loop_runs": kinds[KIND_OPEN], "gpu_s": round(extra, 1), "grid_gpu_s": round(total - extra, 1),
            "total_gpu_s": round(total, 1), "budget_s": round(self.args.budget_minutes * 60, 1),
        }
        self.sweep.save_manifest()
        t = self.record["totals"]
        print(f"bench sweep: GPU time {minutes(t['total_gpu_s'])} of the {minutes(t['budget_s'])} budget "
              f"(grid {minutes(t['grid_gpu_s'])}, capacity search {minutes(t['gpu_s'])} in {t['runs']} runs: "
              f"{t['search_runs']} closed loop, {t['open_loop_runs']} open loop)", flush=True)
        return t


STATE_WORDS = {S.PASS: "meets the SLO with confidence", S.FAIL: "misses it for sure",
               S.SOFT: "too close to the limit to call yet"}


def drive(search: S.Search, run, estimate, budget_s: float, *, first: S.Step | None = None,
          say=None) -> tuple[float, int, str | None]:
    """Run a search to its end or to its budget: (GPU seconds spent, runs, why it stopped short or None).

    `run(step, k)` runs the k-th run at the step's load and returns (its result, its GPU seconds);
    `estimate(step)` is a run's expected GPU seconds. A run whose estimate, plus the output tok/s run-to-run
    band, would overrun the budget is not started. `say(line)`, where given, hears of each run before it starts
    (its load, why, and the GPU time it should take: an open-loop run at a low rate lasts many minutes)
    and after it ends (its figures and where its load now stands)."""
    say = say or (lambda line: None)
    spent, runs = 0.0, 0
    lost: dict[float, int] = {}  # runs at a load that stayed invalid (their numbers are not reused)
    while True:
        step = first if first is not None and not search.loads() else search.next_step()
        if step is None:
            return spent, runs, None
        # padded by the output tok/s band, the figure a run's length follows (not the widest band: a decode
        # p99 spread of 215 % once priced a 23 s run at 77 s and stopped a search with a third of its budget)
        est = estimate(step) * (1 + search.noise().figure(C.OUTPUT_TOK_S) / 100)
        # placing the pass end is optional: a new load starts only where the budget also holds the repeat a
        # new pass end may need, a repeat where it holds that run; without, the search ends at its target
        room = est if step.repeat else 2 * est
        if step.past_target and spent + room > budget_s + 1e-9:
            search.stopped = S.NARROW
            what = "repeat" if step.repeat else "run and its repeat"
            say(f"the target is reached; the budget left ({budget_s - spent:.0f} s) holds no {what} at "
                f"{search.words(step.load)} (about {room:.0f} s) to place the pass end further")
            return spent, runs, None
        if spent + est > budget_s + 1e-9:
            return spent, runs, budget_words(search, step, est, spent, budget_s)
        load = search.key(step.load)
        k = len(search.runs(load)) + 1 + lost.get(load, 0)
        say(f"{search.words(step.load)} run {k}{' (a repeat)' if step.repeat else ''}, about {minutes(est)} "
            f"of GPU time ({spent:.0f} of {budget_s:.0f} s spent): {step.why}")
        result, used = run(step, k)
        runs += 1
        spent += used
        if result.valid:
            search.observe(step.load, result.raw, CAP.run_file(result))
            say(f"{search.words(step.load)} run {k} valid ({used:.0f} s): {result.output_tok_s:.1f} out tok/s, "
                f"TTFT p99 {result.ttft_p99_ms:.0f} ms; {search.words(step.load)} "
                f"{STATE_WORDS[search.state(load)]}")
            continue
        say(f"{search.words(step.load)} run {k} INVALID ({used:.0f} s): {result.reason}")
        if step.repeat:
            # a repeat keeps its point's size; one that no longer holds the window at that size (the
            # server sped up) is not comparable: the point is not repeated again
            lost[load] = lost.get(load, 0) + 1
            search.exhausted.add(load)
            continue
        return spent, runs, f"{search.words(step.load)} run {k} stayed invalid: {result.reason}"


def one_at_a_time(closed: S.Search, ttft_ms: float, window_s: float, floor: int) -> dict[str, Any] | None:
    """Where only c=1 meets the SLO, said before the open loop spends its budget: the rate below which Poisson
    arrivals could meet the TTFT p99 (S.queued_prefill_rate, from c=1's median TTFT) and how long one run of
    the open loop lasts there. None where c=1's runs have no median TTFT or a queued prefill still meets it."""
    p50s = [r.raw["p50_ttft_ms"] for r in closed.runs(1) if isinstance(r.raw.get("p50_ttft_ms"), (int, float))]
    prefill = sum(p50s) / len(p50s) if p50s else None
    rate = S.queued_prefill_rate(prefill, ttft_ms)
    served = closed.req_s(1)
    if rate is None or prefill is None or not served:
        return None
    requests = sizing.open_loop_requests(rate, window_s, floor=floor)
    tok_s = rate * (closed.tok_s(1) or 0.0) / served
    window = 2 * prefill - ttft_ms
    words = (f"at c=1 a request's TTFT is {prefill:.0f} ms (the median) of the {ttft_ms:.0f} ms limit: offered as "
             f"Poisson arrivals, one that comes within the first {window:.0f} ms of another's prefill waits past the "
             f"limit; a TTFT p99 within the limit allows that for under 1 % of the requests, which holds only "
             f"below about {rate:.3g} req/s ({tok_s:.1f} tok/s; the closed loop's c=1 serves {served:.3g} req/s), "
             f"where a run of {requests} "
             f"requests lasts about {minutes(requests / rate)} (an estimate from the closed loop's TTFTs, not a "
             "measurement; the open loop's runs measure it)")
    return {"prefill_ms": round(prefill, 1), "window_ms": round(window, 1), "rate_req_s": round(rate, 4),
            "tok_s": round(tok_s, 1), "requests": requests, "run_s": round(requests / rate, 1), "words": words}


def budget_words(search: S.Search, step: S.Step, est: float, spent: float, budget_s: float) -> str:
    """Where the budget stopped a search: how wide the answer is, and what another --resume buys."""
    width = search.width()
    now = f"known to {width:.2f}x" if width else "without an upper end yet" if search.bounds()[0] is not None \
        else "not found yet"
    more = 1
    if width and width > search.target:
        more = 1 + max(0, math.ceil(math.log2(math.log(width) / math.log(search.target))))
    return (f"the GPU budget stopped it before {search.words(step.load)} (about {est:.0f} s; {spent:.0f} of "
            f"{budget_s:.0f} s spent): the capacity is {now}; --resume with about {minutes(more * est)} more "
            f"budget (--budget-minutes) would run about {more} more run{'s' if more != 1 else ''} toward the "
            f"{search.target:g}x target")


def open_loop_seconds(requests: int, rate: float, served_req_s: float | None) -> float:
    """How long an open-loop run lasts: its requests at the offered rate while the server keeps up, and at the
    most it has served (req/s, any run of the scenario so far) past that, where the requests queue and drain
    at the server's pace. Offering 375 req/s to a server that serves 78 sent 2,065 requests in 28 s, not 5.5:
    estimated at the offered rate, that run overran the budget by 16 s."""
    pace = min(rate, served_req_s) if served_req_s else rate
    return requests / max(pace, 1e-9)


def req_s_estimate(speed: list[tuple[int, float]], c: float) -> float:
    """req/s at concurrency c from the grid's (concurrency, req/s) points: linear between them."""
    pts = sorted((x, y) for x, y in speed if y > 0)
    if not pts:
        return 0.0
    if c <= pts[0][0]:
        return pts[0][1] * c / pts[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= c <= x1:
            return y0 + (y1 - y0) * (c - x0) / (x1 - x0)
    return pts[-1][1]


def budget_line(args: argparse.Namespace, scenarios: int) -> str:
    search = ("then the capacity search shares out what the grid leaves" if args.capacity_search
              else "no capacity search (--capacity-search)")
    return (f"bench sweep: GPU budget {args.budget_minutes:g} min for this invocation (--budget-minutes): the grid of "
            f"{scenarios} scenario{'s' if scenarios != 1 else ''} first, {search}; every run holds its load for "
            f"at least {args.window_s:g} s on at least {args.min_prompts} requests")


def run_after_grid(sweep, tokenizer: str) -> None:
    if not getattr(sweep.args, "capacity_search", False):
        return
    ExtraRuns(sweep, tokenizer).run()
