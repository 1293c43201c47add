"""gpu-check's sweep step: `python -m bench sweep` (S1_chat) at a few concurrencies, cross-checked
against vLLM's own `vllm bench serve` at the same points, each side with a measured window of at least
--window-s seconds.

The number of prompts that fills a window depends on the device, so the step first measures the
server's request rate at every point with a short burst of S1_chat-sized requests (`calibrate`). The
sweep takes one --min-prompts and one --prompts-per-concurrency for all its points: the slowest point
per concurrency slot sets them (with a margin), so every point's window is at least the target and the
fastest ones run longer. Each `vllm bench serve` run is then sized from the rate the sweep measured at
its point. Each side runs once per point, the sweep's points first: the gap between the two holds the
run-to-run spread as well as any difference between the clients, and the record says so beside the
signed gaps' range.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.demo import gpu_steps as S

MARGIN = 1.3  # the sweep's windows are sized from a short burst: aim above the target
SPREAD_NOTE = ("One run per side per point, the sweep's points before vllm bench serve's: a gap holds the "
               "run-to-run spread (27-61 % between two identical p99s on the CPU demo, less for means over "
               "longer windows) as well as any difference between the two clients; gaps of one sign at "
               "every point point to a difference, mixed signs to spread.")


def burst_rate(base: str, concurrency: int, requests: int, input_words: int, output_tokens: int,
               vocab_words: int, seed: int) -> float | None:
    """Requests per second of `requests` completions (`input_words` random words in, `output_tokens` out,
    ignore-eos), `concurrency` at a time; None if fewer than half completed."""
    rng = random.Random(seed)
    prompts = [" ".join(f"w{rng.randrange(vocab_words)}" for _ in range(input_words)) for _ in range(requests)]
    done, lock = [0], threading.Lock()

    def worker():
        while True:
            with lock:
                if not prompts:
                    return
                prompt = prompts.pop()
            try:
                S.post(f"{base}/v1/completions", {"model": S.SERVED_NAME, "prompt": prompt,
                                                  "max_tokens": output_tokens, "ignore_eos": True}, timeout=120)
                with lock:
                    done[0] += 1
            except (OSError, ValueError):
                pass

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if done[0] < requests / 2 or seconds <= 0:
        return None
    return done[0] / seconds


def calibrate(base: str, concurrencies: list[int], input_len: int, output_len: int,
              vocab_words: int) -> dict[int, float | None]:
    """Each point's request rate from a burst of max(8, 3 x c) requests, after a warm-up burst at the
    highest concurrency (a server's first requests run slower, and a rate read low sizes windows short)."""
    top = max(concurrencies)
    burst_rate(base, top, max(8, 2 * top), input_len, output_len, vocab_words, seed=499)
    return {c: burst_rate(base, c, max(8, 3 * c), input_len, output_len, vocab_words, seed=500 + c)
            for c in concurrencies}


def sweep_sizes(rates: dict[int, float | None], window_s: float, margin: float = MARGIN,
                cap: int = 6000) -> tuple[int, int]:
    """(--min-prompts, --prompts-per-concurrency) so that every point's window is at least
    `window_s` x `margin` at the burst's rates: the smallest concurrency sets the floor, the highest
    rate per concurrency slot among the others sets the per-concurrency count. A point without a rate
    counts 4 requests per second per slot."""
    per_slot = {c: (r if r else 4.0 * c) / c for c, r in rates.items()}
    lowest = min(per_slot)
    min_prompts = max(16, math.ceil(window_s * margin * per_slot[lowest] * lowest))
    others = [v for c, v in per_slot.items() if c != lowest] or [per_slot[lowest]]
    per_concurrency = max(4, math.ceil(window_s * margin * max(others)))
    highest = max(per_slot)
    per_concurrency = min(per_concurrency, max(4, cap // highest))
    return min(min_prompts, cap), per_concurrency


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
    folder = check.out / "sweep"
    shutil.rmtree(folder, ignore_errors=True)
    input_len, output_len = round(256 * args.length_scale), max(2, round(128 * args.length_scale))
    rates = calibrate(server.url, args.concurrency_list, input_len, output_len, args.vocab_words)
    min_prompts, per_c = sweep_sizes(rates, args.window_s)
    argv = [python, "-m", "bench", "sweep", "--base-url", server.url, "--model", S.SERVED_NAME,
            "--tokenizer", str(check.model_dir), "--out", str(folder / "bench"), "--scenarios", "S1_chat",
            "--length-scale", f"{args.length_scale:g}", "--concurrencies", ",".join(map(str, args.concurrency_list)),
            "--min-prompts", str(min_prompts), "--prompts-per-concurrency", str(per_c), "--health-timeout", "60",
            "--bench-client", "library", "--instance-type", args.instance_type, "--gpus", "1",
            "--label", "gpu-check", "--server-args", " ".join(check.flags()), "--vllm-bin", str(check.vllm_wrapper())]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.sweep_timeout)
    bench_s = round(time.monotonic() - t0, 1)
    (check.logs / "sweep.log").write_text(proc.stdout + proc.stderr)
    problems = [] if proc.returncode == 0 else [f"bench sweep exited {proc.returncode} (logs/sweep.log)"]
    points = []
    t0 = time.monotonic()
    for c in args.concurrency_list:
        run = R.load_result(folder / "bench" / R.result_filename("S1_chat", c))
        prompts = S.cli_prompts(run.req_s, c, args.window_s * 1.1)
        cli_dir = folder / "vllm-bench-serve"
        cli = subprocess.run([python, "-m", "vllm.entrypoints.cli.main", *S.cli_argv(
            url=server.url, tokenizer=check.model_dir, concurrency=c, prompts=prompts,
            input_len=run.input_len or input_len, output_len=run.output_len or output_len, out=cli_dir,
            seed=9000 + c)], env=env, capture_output=True, text=True, timeout=args.sweep_timeout)
        with (check.logs / "vllm-bench-serve.log").open("a") as fh:
            fh.write(f"==== c={c} rc={cli.returncode}\n{cli.stdout[-6000:]}{cli.stderr[-4000:]}\n")
        theirs = R.load_result(cli_dir / R.result_filename("S1_chat", c))
        gap = signed_gap(run.output_tok_s, theirs.output_tok_s)
        points.append({"concurrency": c, "burst_req_s": round(rates[c], 2) if rates[c] else None,
                       "bench": run_figures(run), "vllm_bench_serve": run_figures(theirs),
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
    out = {"scenario": "S1_chat", "server": check.server_name, "length_scale": args.length_scale,
           "window_s": args.window_s, "agree_pct": args.agree_pct, "min_prompts": min_prompts,
           "prompts_per_concurrency": per_c, "bench_s": bench_s, "cli_s": round(time.monotonic() - t0, 1),
           "points": points, "spread": summary(points, args.window_s)}
    if problems:
        raise S.Broken("; ".join(problems), out)
    return out
