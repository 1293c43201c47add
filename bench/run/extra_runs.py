"""After the grid: the SLO capacity search and the open-loop runs at the knee (`sweep --capacity-search`).

Per scenario, once its grid runs are done:

1. Search (closed loop): integer bisection between the highest passing and the lowest failing
   grid concurrency (bench.analysis.capacity.Search), running only extra points. Every run stores
   per-request detail (`--save-detailed`) so the report can put a 95 % bootstrap interval on its
   p99s; a point is screened with the grid's request count, topped up to `--search-requests`
   (default 200) before a pass counts, and repeated (`--search-repeats`, default 2) while its
   interval straddles a limit. Files: `search/<scenario>_c<c>.run<k>.json`.
2. Open loop: Poisson runs (`--request-rate R`, burstiness 1) at 50/75/90/100/110 % of the
   closed-loop SLO capacity in req/s (`--open-loop-rates`), `--max-concurrency` only as a safety
   cap, `--goodput ttft:<limit> tpot:<limit>` from the SLO. Files: `open_loop/<scenario>_rate<R>.json`.

Every run gets its own seed (derived from the sweep seed, scenario, kind, point and run number):
no prompt is replayed into the server's prefix cache. Files are written and uploaded as they are
produced; `--resume` replays the search over the files already there and runs only what is missing.

GPU time: the measured windows (vLLM's `duration`). The extra runs of a scenario may spend at most
`--extra-budget` (default 0.4) x the GPU time of that scenario's grid; a run whose estimated time
(its requests / the req/s the grid measured near that load) would overrun the budget is not started,
and the manifest and the report say where the budget stopped the search or the open loop. The open
loop's requests per rate are sized to the budget left (between --open-loop-min-requests and
--open-loop-requests). `manifest.json` `extra` lists every extra run with its GPU time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from typing import Any

from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.run import grid

KIND_SEARCH, KIND_OPEN = "search", "open_loop"
META_KIND = "bench_kind"
# Order in which open-loop rates are run when the budget cannot pay for all of them.
RATE_PRIORITY = (100, 90, 110, 75, 50)


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    known = set(p._option_string_actions)  # noqa: SLF001 - share SLO flags the sweep may define itself

    def add(flag, *aliases, **kw):
        if flag not in known:
            p.add_argument(flag, *[a for a in aliases if a not in known], **kw)

    add("--capacity-search", action="store_true", default=env("VLLM_POC_CAPACITY_SEARCH") in ("1", "true"),
        help="after the grid, search the SLO capacity per scenario and run open-loop points at it "
             "(env VLLM_POC_CAPACITY_SEARCH=1)")
    add("--no-open-loop", action="store_true", help="with --capacity-search: skip the open-loop runs")
    add("--slo-ttft-p99-ms", type=float, default=500.0, help="SLO: TTFT p99 limit (default: %(default)s)")
    add("--slo-itl-p99-ms", type=float, default=50.0, dest="slo_itl_p99_ms",
        help="SLO: decode (ITL or TPOT) p99 limit (default: %(default)s)")
    add("--slo-decode-metric", choices=("itl", "tpot"), default="itl",
        help="decode metric the SLO limits (default: %(default)s)")
    add("--search-requests", type=int, default=C.DEFAULT_SEARCH_REQUESTS,
        help="requests behind a passing search point (default: %(default)s)")
    add("--search-repeats", type=int, default=C.DEFAULT_REPEATS,
        help="extra runs of a point whose p99 interval straddles a limit (default: %(default)s)")
    add("--search-end-repeats", type=int, default=C.DEFAULT_END_REPEATS,
        help="runs of each end of the final bracket beyond its first, interleaved, that measure the "
             "run-to-run spread (default: %(default)s)")
    add("--noise-pct", type=float, default=C.DEFAULT_NOISE_PCT,
        help="run-to-run band (%% of the mean, 95 %% of single runs) assumed where no point was run twice "
             "(default: %(default)s, measured on a GPU server; a CPU demo spreads 30-60 %%)")
    add("--search-bracket", type=float, default=C.DEFAULT_BRACKET,
        help="stop when fail - pass <= this x pass (default: %(default)s)")
    add("--open-loop-rates", default=",".join(map(str, C.DEFAULT_RATE_PERCENTS)),
        help="offered rates in %% of the closed-loop SLO capacity (default: %(default)s)")
    add("--open-loop-requests", type=int, default=200,
        help="most requests per open-loop run (default: %(default)s)")
    add("--open-loop-min-requests", type=int, default=50,
        help="fewest requests per open-loop run; below that the budget skips the rate (default: %(default)s)")
    add("--open-loop-max-concurrency", type=int, default=0,
        help="safety cap on in-flight open-loop requests (default: the largest grid concurrency)")
    add("--extra-budget", type=float, default=0.4,
        help="GPU time the extra runs of a scenario may add, as a share of its grid's (default: %(default)s)")


def validate(args: argparse.Namespace) -> list[float]:
    if args.search_requests < 1 or args.search_repeats < 0 or not args.search_bracket > 0:
        raise ValueError("--search-requests must be >= 1, --search-repeats >= 0, --search-bracket > 0")
    if args.search_end_repeats < 0 or not 0 <= args.noise_pct < 1000:
        raise ValueError("--search-end-repeats must be >= 0 and --noise-pct between 0 and 1000")
    if args.extra_budget < 0:
        raise ValueError(f"--extra-budget must be >= 0, got {args.extra_budget}")
    if args.open_loop_min_requests < 1 or args.open_loop_requests < args.open_loop_min_requests:
        raise ValueError("--open-loop-requests must be >= --open-loop-min-requests >= 1")
    try:
        percents = [float(v) for v in args.open_loop_rates.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--open-loop-rates: expected comma-separated percents, got {args.open_loop_rates!r}") from None
    if not percents or min(percents) <= 0:
        raise ValueError(f"--open-loop-rates: need positive percents, got {args.open_loop_rates!r}")
    return percents


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


class ExtraRuns:
    def __init__(self, sweep, tokenizer: str, percents: list[float]):
        self.sweep = sweep
        self.args = sweep.args
        self.tokenizer = tokenizer
        self.percents = percents
        self.record: dict[str, Any] = sweep.manifest.setdefault("extra", {"runs": [], "scenarios": {}})
        self.record["settings"] = {
            "slo": {"ttft_p99_ms": self.args.slo_ttft_p99_ms, "decode_p99_ms": self.args.slo_itl_p99_ms,
                    "decode_metric": self.args.slo_decode_metric},
            "search_requests": self.args.search_requests, "search_repeats": self.args.search_repeats,
            "search_bracket": self.args.search_bracket, "search_end_repeats": self.args.search_end_repeats,
            "noise_pct": self.args.noise_pct, "open_loop_rates_pct": percents,
            "open_loop_requests": [self.args.open_loop_min_requests, self.args.open_loop_requests],
            "extra_budget": self.args.extra_budget,
        }

    # -- one run -------------------------------------------------------------------------------
    def _run(self, kind: str, grid_spec, *, concurrency: int, num_prompts: int, name: str,
             seed_parts: tuple, rate: float | None = None) -> tuple[R.RunResult, dict[str, Any] | None]:
        sweep, args = self.sweep, self.args
        folder = sweep.out / (CR.SEARCH_DIR if kind == KIND_SEARCH else CR.OPEN_LOOP_DIR)
        folder.mkdir(exist_ok=True)
        run_hash = grid.short_hash({"grid": grid_spec.run_hash, "kind": kind, "c": concurrency, "n": num_prompts,
                            "rate": rate, "name": name, "slo": self.record["settings"]["slo"]})
        spec = grid.RunSpec(grid_spec.scenario, grid_spec.input_len, grid_spec.output_len, concurrency, num_prompts,
                            grid.warmups_for(args.warmups, concurrency), run_hash)
        expect = spec.expectation()
        final = folder / name
        existing = R.load_result(final, expect)
        if existing.valid:
            self.record["runs"].append(self._entry(kind, spec, rate, name, existing, None, resumed=True))
            return existing, existing.raw
        if final.exists():
            os.replace(final, folder / (name[:-5] + f".stale{int(time.time())}.json"))

        seed = _derived_seed(args.seed, grid_spec.scenario, kind, *seed_parts)
        result: R.RunResult | None = None
        for attempt in range(1, args.attempts + 1):
            sweep.partial.mkdir(exist_ok=True)
            partial = sweep.partial / name
            partial.unlink(missing_ok=True)
            cmd = grid.bench_command(sweep.vllm, args, spec, self.tokenizer, sweep.partial, seed=seed + attempt - 1)
            cmd = _set_flag(cmd, "--result-filename", name)
            cmd = _set_flag(cmd, "--seed", str(seed + attempt - 1))
            cmd = _set_flag(cmd, "--save-detailed")
            cmd = _set_flag(cmd, "--goodput", f"ttft:{args.slo_ttft_p99_ms:g}", f"tpot:{args.slo_itl_p99_ms:g}")
            if rate is not None:
                cmd = _set_flag(cmd, "--request-rate", f"{rate:g}")
                cmd = _set_flag(cmd, "--burstiness", "1.0")
            cmd += [f"{META_KIND}={kind}"]
            log = sweep.logs / f"{kind}.{name[:-5]}.attempt{attempt}.log"
            started = time.monotonic()
            rc, timed_out = sweep.launch(cmd, log)
            process_s = time.monotonic() - started
            result = R.load_result(partial, expect)
            problems = []
            if timed_out:
                problems.append(f"timed out after {args.run_timeout:.0f} s")
            elif rc != 0:
                problems.append(f"vllm bench serve exited {rc}")
            if problems:
                result = result.with_problems(*problems)
            if result.valid:
                os.replace(partial, final)
                sweep.note_window(result.duration_s or 0.0)
                kept = final
            elif partial.exists():
                kept = folder / (name[:-5] + f".attempt{attempt}.invalid.json")
                os.replace(partial, kept)
            else:
                kept = None
            self.record["runs"].append(self._entry(kind, spec, rate, name if result.valid else
                                                   (kept.name if kept else None), result, process_s,
                                                   attempt=attempt, seed=seed + attempt - 1))
            for path in (kept, log):
                if path:
                    sweep.publish(path)
            sweep.save_manifest()
            if result.valid:
                return result, result.raw
        assert result is not None
        return result, None

    def _entry(self, kind, spec, rate, name, result: R.RunResult, process_s, *, resumed=False,
               attempt=None, seed=None) -> dict[str, Any]:
        return {
            "kind": kind, "scenario": spec.scenario, "concurrency": spec.concurrency, "rate": rate,
            "num_prompts": spec.num_prompts, "file": name, "valid": result.valid, "reason": result.reason,
            "gpu_s": round(result.duration_s or 0.0, 3) if result.valid else round(process_s or 0.0, 3),
            "process_s": round(process_s, 3) if process_s is not None else None,
            "attempt": attempt, "seed": seed, "resumed": resumed,
        }

    # -- per scenario ----------------------------------------------------------------------------
    def scenario(self, name: str, specs: list) -> None:
        args, sweep = self.args, self.sweep
        grid = [R.load_result(sweep.out / s.filename, s.expectation()) for s in specs]
        valid = [g for g in grid if g.valid]
        info: dict[str, Any] = self.record["scenarios"].setdefault(name, {})
        grid_gpu = sum(g.duration_s or 0.0 for g in valid)
        budget = args.extra_budget * grid_gpu
        info.update(grid_gpu_s=round(grid_gpu, 3), budget_s=round(budget, 3), stopped=None)
        spent = [0.0]
        if not valid:
            info["stopped"] = "no valid grid run"
            return
        speed = sorted((g.concurrency, g.req_s or 0.0) for g in valid)

        def req_s_at(c: float) -> float:
            return req_s_estimate(speed, c)

        slo = self.record["settings"]["slo"]
        search = C.Search({g.concurrency: g.raw for g in valid if g.raw}, ttft_ms=slo["ttft_p99_ms"],
                          decode_ms=slo["decode_p99_ms"], decode_metric=slo["decode_metric"],
                          min_requests=args.search_requests, repeats=args.search_repeats,
                          bracket=args.search_bracket, end_repeats=args.search_end_repeats,
                          default_noise_pct=args.noise_pct)
        by_c = {s.concurrency: s for s in specs}
        first = specs[0]

        def run_at(c: int, n: int, k: int) -> tuple[dict[str, Any] | None, float, str | None]:
            result, raw = self._run(KIND_SEARCH, by_c.get(c, first), concurrency=c, num_prompts=n,
                                    name=CR.search_filename(name, c, k), seed_parts=(c, k))
            return raw, result.duration_s or n / max(req_s_at(c), 1e-9), result.reason

        runs, spent[0], stopped = drive_search(search, run_at, screen=lambda c: max(args.min_prompts,
                                               args.prompts_per_concurrency * c),
                                               seconds=lambda c, n: n / max(req_s_at(c), 1e-9), budget=budget)
        info["stopped"] = stopped
        raws = search.runs
        info["search"] = search.result()
        info["search_runs"] = runs
        noise = search.noise()
        info["noise"] = {"pct": noise.pct, "measured_pct": noise.measured_pct, "source": noise.source}
        lo, _ = search.bounds()
        hi = search.sure_fail(lo) if lo is not None else None
        if lo is not None and search.decided(lo) is True:
            info["search"].update(confirmed=True)
        print(f"bench sweep: {name}: SLO capacity search ({runs} extra runs): {search_words(lo, hi, search)}"
              + (f"; {info['stopped']}" if info["stopped"] else ""), flush=True)

        if args.no_open_loop:
            return
        if lo is None or search.decided(lo) is not True:
            info["open_loop"] = "skipped: no confirmed closed-loop SLO capacity"
            return
        pass_runs = raws.get(lo) or [g.raw for g in valid if g.concurrency == lo]
        cap_req_s = sum(C._num(r.get("request_throughput")) or 0.0 for r in pass_runs) / len(pass_runs)  # noqa: SLF001
        rates = C.rate_list(cap_req_s, self.percents)
        cap_c = args.open_loop_max_concurrency or max(s.concurrency for s in specs)
        left = budget - spent[0]
        inverse = sum(1.0 / r for r in rates)
        n = min(args.open_loop_requests, int(left / inverse)) if inverse else 0
        if n < args.open_loop_min_requests:
            # Not all rates fit: run the rates nearest the capacity first, at the minimum size.
            order = sorted(rates, key=lambda r: _priority(r, cap_req_s))
            keep, cost = [], 0.0
            for r in order:
                if cost + args.open_loop_min_requests / r <= left + 1e-9:
                    keep.append(r)
                    cost += args.open_loop_min_requests / r
            n = args.open_loop_min_requests
            dropped = [r for r in rates if r not in keep]
            if dropped:
                info["stopped"] = ((info["stopped"] + "; ") if info["stopped"] else "") + (
                    f"open loop: budget left {left:.0f} s pays for {len(keep)} of {len(rates)} rates at "
                    f"{n} requests (skipped {', '.join(f'{r:g}' for r in dropped)} req/s)")
            rates = sorted(keep)
        info["open_loop"] = {"capacity_req_s": round(cap_req_s, 4), "rates": rates, "requests": n,
                             "max_concurrency": cap_c}
        for rate in rates:
            result, _ = self._run(KIND_OPEN, by_c.get(lo, first), concurrency=cap_c, num_prompts=n,
                                  name=CR.open_loop_filename(name, rate), seed_parts=(rate,), rate=rate)
            spent[0] += result.duration_s or n / rate
        info["gpu_s"] = round(spent[0], 3)

    def run(self) -> None:
        order: list[str] = []
        for spec in self.sweep.plan:
            if spec.scenario not in order:
                order.append(spec.scenario)
        for name in order:
            specs = [s for s in self.sweep.plan if s.scenario == name]
            self.scenario(name, specs)
            self.sweep.save_manifest()
        self.summarise()

    def summarise(self) -> dict[str, Any]:
        runs = self.record["runs"]
        grid = sum(v.get("grid_gpu_s", 0.0) for v in self.record["scenarios"].values())
        extra = sum(r["gpu_s"] for r in runs)  # invalid attempts cost their process time
        kinds = {k: sum(1 for r in runs if r["kind"] == k) for k in (KIND_SEARCH, KIND_OPEN)}
        self.record["totals"] = {
            "runs": len(runs), "search_runs": kinds[KIND_SEARCH], "open_loop_runs": kinds[KIND_OPEN],
            "gpu_s": round(extra, 3), "grid_gpu_s": round(grid, 3),
            "added_pct": round(100 * extra / grid, 1) if grid else None,
        }
        self.sweep.save_manifest()
        t = self.record["totals"]
        print(f"bench sweep: extra runs: {t['runs']} ({t['search_runs']} search, {t['open_loop_runs']} open loop), "
              f"GPU time {t['gpu_s']:.1f} s = {t['added_pct']}% of the grid's {t['grid_gpu_s']:.1f} s "
              f"(budget {100 * self.args.extra_budget:.0f}%)", flush=True)
        return t


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


def drive_search(search: C.Search, run_at, *, screen, seconds, budget: float,
                 spent: float = 0.0) -> tuple[int, float, str | None]:
    """Run the search to its end or to the budget: (runs, GPU seconds spent, why it stopped or None).

    `run_at(c, requests, k)` runs the k-th search run at concurrency c and returns (its result with
    per-request detail or None when invalid, its GPU seconds, why it is invalid); `screen(c)` is the
    grid's request count at c and `seconds(c, requests)` the estimated GPU time of a run. A run whose
    estimate, plus the run-to-run band, would overrun `budget` is not started."""
    runs = 0
    while (c := search.next_run()) is not None:
        n = search.requests_for(c, screen=screen(c))
        est = seconds(c, n) * (1 + search.noise().pct / 100)  # a slow run must still fit
        if spent + est > budget + 1e-9:
            return runs, spent, (f"search stopped by the budget before c={c} ({n} requests, about {est:.0f} s; "
                                 f"{spent:.0f} of {budget:.0f} s spent)")
        k = len(search.run_requests.get(c, [])) + 1
        raw, used, why = run_at(c, n, k)
        runs += 1
        spent += used
        if raw is None:
            return runs, spent, f"search stopped: c={c} run {k} invalid ({why})"
        search.observe(c, raw, n)
    return runs, spent, None


def search_words(lo: int | None, hi: int | None, search: C.Search) -> str:
    """Where the search stands, in words."""
    if lo is None:
        return "no concurrency meets the SLO"
    sure = "confirmed with confidence" if search.decided(lo) is True else "not confirmed with confidence"
    above = f"misses it for sure at c={hi}" if hi is not None else "no concurrency above it misses it for sure"
    return f"meets the SLO at c={lo} ({sure}), {above}"


def _priority(rate: float, capacity: float) -> tuple[int, float]:
    pct = 100 * rate / capacity if capacity else 0
    ranks = {p: i for i, p in enumerate(RATE_PRIORITY)}
    nearest = min(ranks, key=lambda p: abs(p - pct))
    return ranks[nearest], abs(nearest - pct)


def run_after_grid(sweep, tokenizer: str) -> None:
    if not getattr(sweep.args, "capacity_search", False):
        return
    percents = validate(sweep.args)
    ExtraRuns(sweep, tokenizer, percents).run()
