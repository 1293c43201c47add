"""gpu-check's sweep step: `python -m bench sweep` (S1_chat) at a few concurrencies, cross-checked
against vLLM's own `vllm bench serve` at the same points, each side with a measured window of at least
--window-s seconds.

The number of prompts that fills a window depends on the device, so the step first measures the
server's request rate at every point with a short burst of S1_chat-sized requests (`calibrate`). Each
point then runs on its own: the prefix cache emptied (POST /reset_prefix_cache, which the servers'
development mode routes), `bench sweep` at that concurrency sized from the burst (with a margin), the
cache emptied again, `vllm bench serve` sized from the rate the sweep measured. One sweep for every
point would need one prompt count per concurrency slot, which overshoots the fastest point by times;
and a GPU's KV cache keeps every earlier run's prompts, so with a 32,000-word vocabulary thousands of
random prompts come back as prefix-cache hits (22 % at c=64 on an H200). Each side's prefix-cache hit
share is recorded. Each side runs once per point, the sweep first: the gap between the two holds the
run-to-run spread as well as any difference between the clients, and the record says so beside the
signed gaps' range.
"""

from __future__ import annotations

import math
import random
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.common.prometheus import parse as parse_metrics
from bench.demo import gpu_steps as S
from bench.run import telemetry

MARGIN = 1.3  # the sweep's windows are sized from a short burst: aim above the target
SPREAD_NOTE = ("One run per side per point, the sweep's before vllm bench serve's: a gap holds the "
               "run-to-run spread (27-61 % between two identical p99s on the CPU demo, less for means over "
               "longer windows) as well as any difference between the two clients; gaps of one sign at "
               "every point point to a difference, mixed signs to spread.")


def burst_rate(base: str, concurrency: int, requests: int, input_words: int, output_tokens: int,
               vocab_words: int, seed: int, model: str = S.SERVED_NAME) -> float | None:
    """Requests per second of `requests` greedy completions (`input_words` random words in, `output_tokens`
    out, ignore-eos), `concurrency` at a time; None if fewer than half completed."""
    rng = random.Random(seed)
    prompts = [" ".join(f"w{rng.randrange(vocab_words)}" for _ in range(input_words)) for _ in range(requests)]
    done, seconds = S.completions(base, requests, concurrency, output_tokens, prompts=prompts, model=model)
    if done < requests / 2 or seconds <= 0:
        return None
    return done / seconds


def calibrate(base: str, concurrencies: list[int], input_len: int, output_len: int,
              vocab_words: int, model: str = S.SERVED_NAME) -> dict[int, float | None]:
    """Each point's request rate from a burst of max(8, 3 x c) requests, after a warm-up burst at the
    highest concurrency (a server's first requests run slower, and a rate read low sizes windows short)."""
    top = max(concurrencies)
    burst_rate(base, top, max(8, 2 * top), input_len, output_len, vocab_words, seed=499, model=model)
    return {c: burst_rate(base, c, max(8, 3 * c), input_len, output_len, vocab_words, seed=500 + c, model=model)
            for c in concurrencies}


def point_prompts(rate: float | None, concurrency: int, window_s: float, margin: float = MARGIN,
                  cap: int = 6000) -> int:
    """Prompts for one point's sweep run: a window of `window_s` x `margin` at the burst's rate (a point
    without a rate counts 4 requests per second per slot), at least 4 per slot and 16."""
    rate = rate if rate else 4.0 * concurrency
    return int(min(cap, max(16, 4 * concurrency, math.ceil(window_s * margin * rate))))


def reset_prefix_cache(base: str) -> bool:
    """Empty the server's prefix cache between runs (development mode's route); False where it is not routed."""
    try:
        S.post(f"{base}/reset_prefix_cache", timeout=60)
        return True
    except (OSError, ValueError):
        return False


def prefix_counters(base: str) -> tuple[float, float] | None:
    """(prefix-cache queries, hits) in tokens from /metrics, None where the server has no such counters."""
    try:
        values = telemetry.server_values(parse_metrics(S.get_text(f"{base}/metrics")))
    except (OSError, ValueError):
        return None
    if values.get("prefix_cache_queries") is None or values.get("prefix_cache_hits") is None:
        return None
    return values["prefix_cache_queries"], values["prefix_cache_hits"]


def hit_pct(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[0] - before[0] <= 0:
        return None
    return round(100.0 * (after[1] - before[1]) / (after[0] - before[0]), 1)


def signed_gap(ours: float | None, theirs: float | None) -> float | None:
    """(ours - theirs) as a percentage of theirs: positive where the bench read higher."""
    if not ours or not theirs:
        return None
    return round(100.0 * (ours - theirs) / theirs, 1)


def run_figures(run: R.RunResult) -> dict[str, Any]:
    return {"valid": run.valid, "problems": list(run.problems), "prompts": run.num_prompts,
            "duration_s": run.duration_s, "output_tok_s": run.output_tok_s, "req_s": run.req_s,
            "ttft_p50_ms": run.ttft_p50_ms, "itl_p50_ms": run.itl_p50_ms, "input_len": run.input_len,
            "output_len": run.output_len}


def summary(points: list[dict[str, Any]], window_s: float) -> dict[str, Any]:
    """The spread of the comparison: the signed gaps' range, whether they share a sign, the shortest
    window on each side and the points whose window fell short of the target."""
    gaps = [p["bench_minus_cli_pct"] for p in points if p.get("bench_minus_cli_pct") is not None]
    windows = {side: [p[side]["duration_s"] for p in points if p[side].get("duration_s")]
               for side in ("bench", "vllm_bench_serve")}
    words = {"bench": "bench", "vllm_bench_serve": "vllm bench serve"}
    short = [f"c={p['concurrency']} {words[side]} {p[side]['duration_s']:.1f} s" for p in points
             for side in ("bench", "vllm_bench_serve")
             if p[side].get("duration_s") is not None and p[side]["duration_s"] < window_s]
    return {"gap_range_pct": [min(gaps), max(gaps)] if gaps else None,
            "largest_apart_pct": max(abs(g) for g in gaps) if gaps else None,
            "gaps_one_sign": (all(g > 0 for g in gaps) or all(g < 0 for g in gaps)) if len(gaps) > 1 else None,
            "shortest_window_s": {side: (round(min(v), 1) if v else None) for side, v in windows.items()},
            "short_windows": short, "note": SPREAD_NOTE}


def sweep(check) -> dict[str, Any]:
    """The step (bench/demo/gpu_check.py calls it with its Check, a server up)."""
    args, server, python, env = check.args, check.server, check.runtime.python, check.runtime.env
    gpus = getattr(args, "tensor_parallel_size", 1)
    folder = check.out / "sweep"
    shutil.rmtree(folder, ignore_errors=True)
    input_len, output_len = round(256 * args.length_scale), max(2, round(128 * args.length_scale))
    rates = calibrate(server.url, args.concurrency_list, input_len, output_len, args.vocab_words, server.name)
    problems: list[str] = []
    points = []
    resets = []
    t0 = time.monotonic()
    for c in args.concurrency_list:
        prompts = point_prompts(rates[c], c, args.window_s)
        resets.append(reset_prefix_cache(server.url))
        before = prefix_counters(server.url)
        argv = [python, "-m", "bench", "sweep", "--base-url", server.url, "--model", server.name,
                "--tokenizer", str(check.model_dir), "--out", str(folder / f"bench-c{c}"), "--scenarios", "S1_chat",
                "--length-scale", f"{args.length_scale:g}", "--concurrencies", str(c),
                # the sweep sizes its run from its own burst; the floor carries this step's own estimate
                "--min-prompts", str(max(100, prompts)), "--window-s", f"{max(5.0, args.window_s):g}",
                "--health-timeout-s", "60", "--bench-client", "library",
                "--instance-type", args.instance_type, "--gpus", str(gpus), "--label", "gpu-check",
                "--server-args", shlex.join(check.flags()), "--vllm-bin", str(check.vllm_wrapper())]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.sweep_timeout)
        bench_hits = hit_pct(before, prefix_counters(server.url))
        with (check.logs / "sweep.log").open("a") as fh:
            fh.write(f"==== c={c} rc={proc.returncode}\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            problems.append(f"c={c}: bench sweep exited {proc.returncode} (logs/sweep.log)")
        run = R.load_result(folder / f"bench-c{c}" / R.result_filename("S1_chat", c))
        resets.append(reset_prefix_cache(server.url))
        before = prefix_counters(server.url)
        cli_dir = folder / "vllm-bench-serve"
        cli = subprocess.run([python, "-m", "vllm.entrypoints.cli.main", *S.cli_argv(
            url=server.url, tokenizer=check.model_dir, concurrency=c,
            prompts=S.cli_prompts(run.req_s, c, args.window_s * 1.15),
            input_len=run.input_len or input_len, output_len=run.output_len or output_len, out=cli_dir,
            seed=9000 + c, model=server.name)], env=env, capture_output=True, text=True, timeout=args.sweep_timeout)
        cli_hits = hit_pct(before, prefix_counters(server.url))
        with (check.logs / "vllm-bench-serve.log").open("a") as fh:
            fh.write(f"==== c={c} rc={cli.returncode}\n{cli.stdout[-6000:]}{cli.stderr[-4000:]}\n")
        theirs = R.load_result(cli_dir / R.result_filename("S1_chat", c))
        gap = signed_gap(run.output_tok_s, theirs.output_tok_s)
        points.append({"concurrency": c, "burst_req_s": round(rates[c], 2) if rates[c] else None,
                       "bench": {**run_figures(run), "prefix_cache_hit_pct": bench_hits,
                                 "per_gpu_output_tok_s": round(run.output_tok_s / gpus, 1) if run.output_tok_s else None},
                       "vllm_bench_serve": {**run_figures(theirs), "prefix_cache_hit_pct": cli_hits},
                       "vllm_bench_serve_rc": cli.returncode, "bench_minus_cli_pct": gap,
                       "apart_pct": abs(gap) if gap is not None else None})
        if not run.valid:
            problems.append(f"c={c}: the bench's run is not valid ({run.reason})")
        if cli.returncode != 0 or not theirs.valid:
            problems.append(f"c={c}: vllm bench serve failed (rc {cli.returncode}; {theirs.reason or 'no problem'})")
        elif gap is not None and abs(gap) > args.agree_pct:
            problems.append(f"c={c}: the bench measured {run.output_tok_s:,.0f} output tok/s, vllm bench serve "
                            f"{theirs.output_tok_s:,.0f} ({abs(gap):.0f} % apart, more than --agree-pct "
                            f"{args.agree_pct:g})")
    out = {"scenario": "S1_chat", "server": check.server_name, "gpus": gpus, "length_scale": args.length_scale,
           "window_s": args.window_s, "agree_pct": args.agree_pct, "prefix_cache_reset": all(resets),
           "seconds": round(time.monotonic() - t0, 1), "points": points, "spread": summary(points, args.window_s)}
    if problems:
        raise S.Broken("; ".join(problems), out)
    return out
