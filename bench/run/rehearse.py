"""`python -m bench rehearse`: replay the plan's peak through the router before the fleet is bought.

One bursty open-loop `vllm bench serve` (the sweep's own command line, as mix-check runs it:
`--request-rate` = the plan's peak rate for the pool, `--burstiness` below 1 for bursts: gamma
inter-arrival times, the same mean rate) goes through the router to the fleet: a few CPU servers
on a laptop, the real fleet in the cluster. While it runs, the pool's metrics are read about once
a second: each server's /metrics (--metrics-url, repeated) or the fleet's Prometheus
(--prometheus-url, the ScaledObjects' own trigger queries for --server). KEDA's and the HPA's rule
is then simulated on those reads with the plan's targets and measured start-up
(bench/run/rehearsal.py), and the rehearsal reports SLO attainment, replica-hours and cost
against the plan. The rehearsal's time is the trace's (vLLM's own duration, ending when the client
exits): the client's start-up before its first request is left out.

    python -m bench rehearse --plan report/plan --pool interactive --base-url http://ROUTER:8000 \\
        --model NAME --tokenizer DIR --metrics-url http://SERVER1:8000/metrics \\
        --metrics-url http://SERVER2:8000/metrics [--duration-s 120] [--burstiness 0.5]

--plan is the folder of `bench plan` (or its plan.json); its `fleet` must have the pool, with
figures (a pool the plan could not size says why). --request-rate replaces the plan's peak (a few
CPU servers carry less than the planned fleet), and the report says so. --out gets rehearsal.json,
rehearsal.md and rehearsal.html (the report's section on its own; give the folder to
`bench report --rehearsal` for the report's), and the run under rehearsal/.

Exit codes: 0 the SLO held; 1 it did not, or no request was answered; 2 bad arguments; 130/143
stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from bench.run import rehearsal as RH
from bench.analysis import results as R
from bench.common import fleet_queries as Q
from bench.common import locations
from bench.common import prometheus as P
from bench.common import options as O
from bench.common import workloads as W
from bench.common.cli import Help, run_one
from bench.common.interrupts import exit_code, signal_name, stop_on_signals, stop_process_group
from bench.run import grid, mixcheck, seeds, telemetry

RUN_DIR = "rehearsal"


class UsageError(ValueError):
    pass


def pool_of(plan: dict[str, Any], name: str) -> dict[str, Any]:
    pools = (plan.get("fleet") or {}).get("pools") or {}
    if name not in pools:
        raise UsageError(f"--pool: the plan has no {name!r} pool (it has {', '.join(pools) or 'none'}); "
                         "make the plan with --fleet-pool POOL=LABEL")
    pool = pools[name]
    if pool.get("reason"):
        raise UsageError(f"--pool {name}: the plan could not size it: {pool['reason']}")
    return pool


def read_prometheus(url: str, queries: dict[str, str]) -> dict[str, float] | None:
    out = {}
    for name, query in queries.items():
        address = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            with urllib.request.urlopen(address, timeout=5) as resp:
                body = json.load(resp)
        except (OSError, ValueError):
            return None
        result = (body.get("data") or {}).get("result") or []
        out[name] = float(result[0]["value"][1]) if result else 0.0
    return out


class Reader:
    """Reads the pool's trigger values about every `interval` s in a thread, from the servers'
    /metrics or from Prometheus."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.reads, self.prom = args, [], []
        self.stopped = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _once(self) -> None:
        t = time.monotonic() - self.t0
        if self.args.prometheus_url:
            values = read_prometheus(self.args.prometheus_url, Q.trigger_queries(self.args.namespace, self.args.server))
            if values is not None:
                self.prom.append((t, values))
            return
        reads = []
        for url in self.args.metrics_url:
            try:
                reads.append(telemetry.server_values(P.parse(telemetry.fetch(url))))
            except (OSError, ValueError):
                reads.append(None)
        self.reads.append((t, reads))

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self._once()
            self.stopped.wait(self.args.scrape_interval_s)

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)
        self._once()  # the state right after the last request

    def samples(self) -> list[tuple[float, dict[str, float]]]:
        return self.prom if self.args.prometheus_url else RH.samples_from(self.reads)


def workload(args: argparse.Namespace, scenario: str) -> W.Workload:
    return W.WORKLOADS[scenario].scaled(args.length_scale)


def command(vllm: list[str], args: argparse.Namespace, scenario: str, rate: float, n: int, tokenizer: str,
            folder: Path) -> list[str]:
    """mix-check's open-loop command at the rehearsal's rate and burstiness, with per-request detail."""
    seed = seeds.run_seed(args.seed, scenario, 0, 1, purpose="rehearsal")
    cmd = mixcheck.command(vllm, args, scenario, rate, n, seed, tokenizer, folder, workload(args, scenario))
    cmd[cmd.index("--burstiness") + 1] = f"{args.burstiness:g}"
    cmd[-1] = "bench_kind=rehearsal"
    at = cmd.index("--metadata")
    return [*cmd[:at], "--save-detailed", *cmd[at:]]


def replay(args: argparse.Namespace, vllm: list[str], tokenizer: str, scenario: str, rate: float,
           out: Path) -> tuple[dict[str, Any], dict[str, Any], list, float]:
    folder = out / RUN_DIR
    folder.mkdir(parents=True, exist_ok=True)
    n = mixcheck.requests_for(rate, args.duration_s, args.min_requests)
    cmd = command(vllm, args, scenario, rate, n, tokenizer, folder)
    reader = Reader(args)
    with (folder / f"{scenario}.log").open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        reader.start()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:
            log.write(f"stopped after {args.run_timeout:g} s\n")
        finally:
            stop_process_group(proc, 5)
            ended = time.monotonic() - reader.t0
            reader.stop()
    expect = R.Expectation(scenario=scenario, concurrency=args.max_concurrency, num_prompts=n,
                           output_len=workload(args, scenario).output_len)
    path = folder / f"{scenario}.json"
    result = R.load_result(path, expect)
    detail = json.loads(path.read_text()) if path.is_file() else {}
    sent = detail.get("ttfts") or []
    requests = RH.attainment(sent, detail.get("itls") or [[] for _ in sent],
                             detail.get("errors") or ["" for _ in sent],
                             ttft_ms=args.slo_ttft_p99_ms, itl_ms=args.slo_itl_p99_ms)
    run = {"valid": result.valid, "reason": result.reason, "requests": n,
           "achieved_req_s": result.req_s if result.valid else None,
           "ttft_p99_ms": result.ttft_p99_ms if result.valid else None,
           "itl_p99_ms": result.itl_p99_ms if result.valid else None}
    for name in (f"{scenario}.json", f"{scenario}.log"):
        if (folder / name).exists():
            locations.written(folder / name)
    # The trace is vLLM's `duration` up to the process's end (its start-up before the first request is not
    # the fleet's time); reads are re-timed from the trace's start.
    trace_s = detail.get("duration") if isinstance(detail.get("duration"), (int, float)) else ended
    samples = trace_window(reader.samples(), ended - trace_s, ended)
    return requests, run, samples, trace_s


def trace_window(samples: list[tuple[float, dict[str, float]]], start: float,
                 end: float) -> list[tuple[float, dict[str, float]]]:
    """The reads from the trace's start (the one just before it included, at 0) to its end, re-timed."""
    before = [s for s in samples if s[0] <= start]
    inside = [(t - start, v) for t, v in samples if start < t <= end + 1.0]
    return ([(0.0, before[-1][1])] if before else []) + inside


def run(args: argparse.Namespace) -> int:
    def usage(message: str) -> int:
        print(f"bench rehearse: {message}", file=sys.stderr)
        return 2

    if not args.duration_s > 0 or args.min_requests < 1 or args.max_concurrency < 1 or not args.run_timeout > 0 \
            or not args.burstiness > 0 or not args.scrape_interval_s > 0 or not args.length_scale > 0:
        return usage("--duration-s, --run-timeout-s, --burstiness, --scrape-interval-s and --length-scale must be positive, "
                     "--min-requests and --max-concurrency >= 1")
    if args.request_rate is not None and not args.request_rate > 0:
        return usage("--request-rate must be positive (or left out: the plan's peak)")
    if bool(args.metrics_url) == bool(args.prometheus_url):
        return usage("give the servers' --metrics-url (repeated) or the fleet's --prometheus-url, one of them")
    if args.prometheus_url and not args.server:
        return usage("--prometheus-url needs --server (the server Deployment of the pool, as its ScaledObject)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return usage(f"--out: {out} is a file; give a folder (rehearsal.json, .md and .html go into it)")
    try:
        with stop_on_signals(), tempfile.TemporaryDirectory(prefix="bench-rehearse-") as scratch:
            try:
                plan = mixcheck.load_plan(Path(args.plan))
                pool = pool_of(plan, args.pool)
                scenario = args.scenario or (pool.get("capacity") or {}).get("scenario")
                if scenario not in W.WORKLOADS:
                    raise UsageError(f"--scenario: {scenario!r} is not a bench scenario ({', '.join(W.WORKLOADS)})")
                peak = RH.planned_peak_req_s(plan, pool)
                rate = args.request_rate or peak
                if rate is None:
                    raise UsageError(f"the plan has no request rate for the {args.pool} pool; give --request-rate")
                slo = plan["fleet"]["slo"]
                args.slo_ttft_p99_ms, args.slo_itl_p99_ms = slo["ttft_p99_ms"], slo["itl_p99_ms"]
                vllm = grid.resolve_vllm(args.vllm_bin)
                tokenizer = grid.prepare_tokenizer(args.tokenizer, Path(scratch))
            except (UsageError, mixcheck.UsageError, grid.UsageError, ValueError, KeyError) as exc:
                return usage(str(exc))
            out.mkdir(parents=True, exist_ok=True)
            requests, result, samples, duration = replay(args, vllm, tokenizer, scenario, rate, out)
    except KeyboardInterrupt as exc:
        print(f"bench rehearse: stopped by {signal_name(exc)}; the run was stopped, nothing was judged. "
              "Run the same command again.", file=sys.stderr)
        return exit_code(exc)
    report = {"scenario": scenario, "request_rate": rate, "planned_peak_req_s": peak,
              "rate_from": "--request-rate" if args.request_rate else "plan", "burstiness": args.burstiness,
              "duration_s": round(duration, 3), "base_url": args.base_url,
              **RH.account(plan=plan, pool_name=args.pool, samples=samples, duration_s=duration, requests=requests,
                           run=result)}
    (out / RH.FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    source = locations.display(out / RH.FILE)
    (out / RH.MARKDOWN).write_text(RH.markdown(report, source), encoding="utf-8")
    (out / RH.HTML).write_text(RH.html_section(report, source), encoding="utf-8")
    for name in (RH.FILE, RH.MARKDOWN, RH.HTML):
        locations.written(out / name)
    req = report["requests"]
    print(f"bench rehearse: {req['met']} of {req['sent']} requests met the SLO; "
          f"{report['replica_hours']['autoscaled']:.4f} replica-hours autoscaled vs "
          f"{report['replica_hours']['planned']:.4f} planned -> {locations.display(out / RH.FILE)}")
    return 0 if report["held"] else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("rehearse", help="replay the plan's peak through the router; SLO, replica-hours, cost",
                              description=__doc__, formatter_class=Help)
    p.add_argument("--plan", required=True, help="plan.json or its folder (`bench plan --out`)")
    p.add_argument("--base-url", required=True, help="the router (or one server), e.g. http://ROUTER:8000")
    p.add_argument("--model", required=True, help="served model name of the pool")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder or s3:// model prefix")
    O.add_out(p, "rehearse", "rehearsal.json, rehearsal.md, rehearsal.html and the run", s3=False)
    p.add_argument("--pool", default="interactive", help="the plan's fleet pool to rehearse (default: %(default)s)")
    p.add_argument("--metrics-url", action="append", default=[],
                   help="a server's /metrics (repeat per server); or use --prometheus-url")
    p.add_argument("--prometheus-url", help="the fleet's Prometheus (reads the ScaledObject's trigger queries)")
    p.add_argument("--namespace", default="vllm", help="with --prometheus-url: the servers' namespace")
    p.add_argument("--server", help="with --prometheus-url: the pool's server Deployment")
    p.add_argument("--scenario", help="scenario to replay (default: the one the pool's capacity was measured in)")
    p.add_argument("--request-rate", type=O.above_zero(float),
                   help="req/s instead of the plan's peak (say why in your notes)")
    p.add_argument("--burstiness", type=O.above_zero(float), default=0.5,
                   help="vllm bench serve's burstiness: below 1 burstier than Poisson (default: %(default)s)")
    p.add_argument("--length-scale", type=O.above_zero(float), default=1.0,
                   help="scale the scenario's input and output lengths, as the sweep's (default: %(default)s)")
    p.add_argument("--duration-s", type=O.above_zero(float), default=120.0,
                   help="requests = rate x this (default: %(default)s)")
    p.add_argument("--min-requests", type=O.above_zero(int), default=20, help="fewest requests (default: %(default)s)")
    p.add_argument("--max-concurrency", type=O.above_zero(int), default=256,
                   help="safety cap on in-flight requests (default: %(default)s)")
    p.add_argument("--scrape-interval-s", type=O.above_zero(float), default=1.0,
                   help="seconds between reads (default: %(default)s)")
    O.add_run_timeout(p, 1800.0, "the run")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default: %(default)s)")
    p.add_argument("--bench-args", default=os.environ.get("VLLM_POC_BENCH_ARGS"),
                   help="extra `vllm bench serve` arguments, one shell-quoted string")
    p.add_argument("--vllm-bin", default=os.environ.get("VLLM_POC_VLLM_BIN") or None,
                   help="vllm executable or command (default: `vllm` on PATH; env VLLM_POC_VLLM_BIN)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "rehearse", argv)
