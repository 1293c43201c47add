"""`python -m bench mix-check`: do the plan's scenarios add up on one replica?

A plan made with `--mix` (or stated loads) sizes the fleet as if each scenario used its own share of
a replica: S1 at 40 % of its capacity and S4 at 50 % of its own fit on one replica together. That
holds only if the scenarios do not slow each other down (long S4 prefills stall S1's decode, for
instance). This command tests it on a real server: every scenario at once, each as one open-loop
`vllm bench serve` process (Poisson arrivals, `--request-rate` = the scenario's share of the planned
per-replica load, burstiness 1), all started together. Poisson streams added together are a Poisson
stream at the total rate with the plan's mix, so the server sees the mixed traffic one replica of
the planned fleet would see. The assumption held when every scenario met the SLO under the mix with
confidence, as a sweep's point does: each TTFT and decode p99's interval within the run, widened by
the run-to-run band (--noise-pct), inside its limit, on at least 100 requests (--min-requests); it
did not hold when a scenario surely missed; otherwise the check could not tell, and says why.

    python -m bench mix-check --plan report/plan --base-url http://SERVER:8000 --model NAME \\
        --tokenizer DIR|s3://weights/models/ORG/NAME/ --out mixed/ [--configuration LABEL] [--duration-s 120]
    python -m bench plan ... --mix S1_chat=0.6,S4_rag=0.4 --mixed-traffic mixed/ --out report/plan

--plan is the folder (or plan.json, or an s3:// prefix, waited for up to --wait-hours) of a plan made
with a mix: its configuration (default: the first) lists `per_replica_req_s`. --rates states the
loads instead (S1_chat=2.5,S2_summary=0.8 req/s), as `gpu-check --experiment priority` does at a share
of the server's saturation. Every scenario sends for one window, so the load stays mixed to its end:
--duration-s, or longer where a scenario's --min-requests at its rate need longer (then that scenario
sets it). Each scenario runs rate x the window requests; without the common window, a slow scenario
held to its fewest requests sent its last ones alone (on 2026-12-07, S4_rag's 100 requests at 0.45
req/s took 220 s, and the other two scenarios' requests ended after 60 and 80 s).

--priority S2_summary=1 sends that scenario's requests with vLLM's `priority` field in their body:
under `vllm serve --scheduling-policy priority` a lower value is served first; the default policy
(first come, first served) accepts the field and ignores it, so the same traffic can be run against
both. Each scenario's end-to-end latency p99 is kept beside its TTFT and decode p99, and the server's
/metrics is read about once a second while the mix runs (the sweep's telemetry: the most requests
running and waiting, the fullest KV cache, the preemptions), which says whether requests queued at
all. Each scenario's TTFT and e2e p99 come with their 95 % intervals within the run (a bootstrap
over its requests), which a comparison of two mixes widens by the run-to-run band. --out (a folder
or s3://bucket/prefix/) gets vLLM's results and logs under mixed/ and mixed_traffic.json (its keys:
docs/files.md#mix-check-mixed_trafficjson).

Exit codes: 0 held; 1 did not hold or could not tell; 2 bad arguments; 130/143 stopped (the
processes are stopped too).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis.capacity import stats as ST
from bench.analysis.mixed_traffic import CHECK_FILE, finding, read_json
from bench.analysis.plan import parse_pairs
from bench.common import locations, s3
from bench.common import options as O
from bench.common import workloads as W
from bench.common.cli import Help, run_one
from bench.common.interrupts import exit_code, signal_name, stop_on_signals, stop_process_group
from bench.common.progress import human_seconds
from bench.run import grid, seeds
from bench.run import telemetry as T

RUN_DIR = "mixed"


class UsageError(ValueError):
    pass


def load_plan(path: Path) -> dict[str, Any]:
    path = path / "plan.json" if path.is_dir() else path
    if not path.is_file():
        raise UsageError(f"--plan: no plan.json at {locations.display(path)} (the --out of `bench plan`)")
    return read_json(path)


def wait_for_plan(value: str, wait_hours: float, scratch: Path, poll_seconds: float = 15.0) -> Path:
    """A local plan.json for --plan: the path itself, or the one under an s3:// prefix, waited for
    while the report Job has not written it yet (up to `wait_hours`)."""
    if not s3.is_s3_uri(value):
        return Path(value)
    loc = s3.S3Location.parse(value, option="--plan")
    client = s3.client()
    started = time.monotonic()
    interval, said = poll_seconds, None
    while True:
        plan = s3.get_json(client, loc, "plan.json")
        if plan is not None:
            (scratch / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
            return scratch / "plan.json"
        waited = time.monotonic() - started
        if waited >= wait_hours * 3600:
            raise UsageError(f"--plan: no plan.json under {loc.uri}" + (f" after {human_seconds(waited)}"
                                                                         if wait_hours else ""))
        if said is None or time.monotonic() - said >= 900:
            print(f"bench mix-check: waiting for the plan in {loc.uri} ({human_seconds(waited)} so far)", flush=True)
            said = time.monotonic()
        time.sleep(min(interval, max(1.0, wait_hours * 3600 - waited)))
        interval = min(300.0, interval * 2)


def per_replica(plan: dict[str, Any], label: str | None) -> tuple[str, dict[str, float]]:
    rows = [r for r in plan.get("configurations") or [] if isinstance(r, dict)]
    if label:
        rows = [r for r in rows if r.get("label") == label]
        if not rows:
            known = ", ".join(str(r.get("label")) for r in plan.get("configurations") or [])
            raise UsageError(f"--configuration: no {label!r} in the plan (it has {known or 'none'})")
    for row in rows:
        rates = row.get("per_replica_req_s")
        if isinstance(rates, dict) and rates:
            return str(row.get("label")), {str(k): float(v) for k, v in rates.items()}
    raise UsageError("--plan: no configuration lists per_replica_req_s; make the plan with --mix (or stated "
                     "--load rates), the traffic this check mixes")


def window_s(rates: dict[str, float], duration_s: float, minimum: int) -> float:
    """Seconds every scenario sends for: `duration_s`, or the longest a scenario's `minimum` requests take."""
    return max([duration_s, *(minimum / rate for rate in rates.values() if rate > 0)])


def requests_for(rate: float, window: float, minimum: int) -> int:
    return max(minimum, math.ceil(round(rate * window, 6)))


def parse_rates(text: str) -> dict[str, float]:
    """--rates: SCENARIO=REQ_PER_S pairs (the plan's own pair reader), each rate above 0."""
    try:
        rates = parse_pairs(text, "--rates")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for name, rate in rates.items():
        if rate <= 0:
            raise UsageError(f"--rates {name}={rate:g}: expected SCENARIO=REQ_PER_S above 0, e.g. S1_chat=2.5")
    if not rates:
        raise UsageError("--rates: give SCENARIO=REQ_PER_S pairs, e.g. S1_chat=2.5,S2_summary=0.8")
    return rates


def parse_priority(text: str | None, scenarios: dict[str, float]) -> dict[str, int]:
    """--priority: SCENARIO=INTEGER pairs for scenarios of this check (vLLM serves a lower value first)."""
    out: dict[str, int] = {}
    for item in filter(None, (i.strip() for i in (text or "").split(","))):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = int(value) if sep else int("x")
        except ValueError:
            raise UsageError(f"--priority {item}: expected SCENARIO=INTEGER, e.g. S2_summary=1 "
                             "(vLLM serves a lower value first)") from None
    unknown = [s for s in out if s not in scenarios]
    if unknown:
        raise UsageError(f"--priority: {', '.join(unknown)} not among this check's scenarios "
                         f"({', '.join(sorted(scenarios))})")
    return out


def command(vllm: list[str], args: argparse.Namespace, scenario: str, rate: float, n: int, seed: int,
            tokenizer: str, result_dir: Path, workload: W.Workload | None = None,
            priority: int | None = None) -> list[str]:
    """One open-loop `vllm bench serve` of a scenario (the sweep's own command line, at a rate)."""
    workload = workload or W.WORKLOADS[scenario]
    spec = grid.RunSpec(scenario, workload.input_len, workload.output_len, args.max_concurrency, n, 0,
                     run_hash=f"mixed-{scenario}", workload=workload,
                     prompt_format=W.prompt_format(workload, "auto"))
    cmd = grid.bench_command(vllm, args, spec, tokenizer, result_dir, seed=seed, filename=f"{scenario}.json")
    at = cmd.index("--request-rate")
    cmd[at + 1] = f"{rate:g}"
    at = cmd.index("--metadata")
    extra = ["--extra-body", json.dumps({"priority": priority})] if priority is not None else []
    return [*cmd[:at], "--burstiness", "1.0", "--goodput", f"ttft:{args.slo_ttft_p99_ms:g}",
            f"tpot:{args.slo_itl_p99_ms:g}", *extra, *cmd[at:], "bench_kind=mixed"]


def judge(result: R.RunResult, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    """A scenario's row. It meets the SLO as a sweep's point does: with confidence (each p99's interval within
    the run, widened by the run-to-run band, inside its limit, on at least MIN_P99_REQUESTS requests); it misses
    where an interval lies wholly above a limit; otherwise the run cannot tell (`meets_slo` null)."""
    decode = result.tpot_p99_ms if args.slo_decode_metric == "tpot" else result.itl_p99_ms
    samples = ST.samples_from_result(result.raw) if result.valid else None
    state = slo_state(result, samples, decode, args) if result.valid else None
    return {"offered_req_s": round(rate, 4), "achieved_req_s": result.req_s if result.valid else None,
            "requests": result.num_prompts, "valid": result.valid, "reason": result.reason,
            "ttft_p99_ms": result.ttft_p99_ms if result.valid else None,
            "decode_p99_ms": decode if result.valid else None,
            "e2e_p50_ms": result.e2el_p50_ms if result.valid else None,
            "e2e_p99_ms": result.e2el_p99_ms if result.valid else None,
            "meets_slo": {ST.PASS: True, ST.FAIL: False}.get(state) if result.valid else None,
            "slo_state": state,
            "ttft_p99_ci_ms": _interval(samples.ttft_ms if samples else None),
            "e2e_p99_ci_ms": _interval(samples.e2e_ms if samples else None)}


TOO_FEW = "too_few_requests"


def slo_state(result: R.RunResult, samples: ST.Samples | None, decode: float | None,
              args: argparse.Namespace) -> str:
    """pass (with confidence), fail (a sure miss), straddle (an interval reaches across a limit), unmeasured
    (a decode latency streaming does not resolve) or too_few_requests (no sure miss, on fewer than
    MIN_P99_REQUESTS requests, whose p99 is about the slowest one). A run without per-request detail is judged
    on its summary: a sure miss or a straddle, never a pass."""
    limits = dict(ttft_ms=args.slo_ttft_p99_ms, decode_ms=args.slo_itl_p99_ms, decode_metric=args.slo_decode_metric,
                  noise_pct=args.noise_pct)
    if samples is None:
        summary = ST.judge_summary(result.ttft_p99_ms, decode, requests=int(result.num_prompts or 0), **limits)
        return ST.FAIL if summary.state == ST.FAIL else ST.STRADDLE
    judged = ST.judge_samples(samples, **limits)
    if judged.state in (ST.PASS, ST.STRADDLE) and judged.requests < ST.MIN_P99_REQUESTS:
        return TOO_FEW
    return judged.state


def _interval(values: Any) -> list[float] | None:
    """The p99's 95 % interval within this one run (a bootstrap over its requests), None without per-request
    detail or with fewer than the requests a p99 interval needs. Two runs' figures differ beyond it as well: a
    comparison widens it by the run-to-run band."""
    return ST.ci_json(ST.p99_interval(values) if values else None)


def held(scenarios: dict[str, dict[str, Any]]) -> bool | None:
    """False where a scenario surely missed the SLO; True where every one met it with confidence; else null:
    an invalid run, or a p99 the run cannot place on either side of its limit."""
    if any(row.get("meets_slo") is False for row in scenarios.values()):
        return False
    if all(row.get("meets_slo") is True for row in scenarios.values()):  # true only for a valid run
        return True
    return None


def run_mix(args: argparse.Namespace, vllm: list[str], tokenizer: str, rates: dict[str, float], window: float,
            out: Path, priority: dict[str, int] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each scenario's row, and the server's telemetry over the whole mix."""
    folder = out / RUN_DIR
    folder.mkdir(parents=True, exist_ok=True)
    procs: dict[str, tuple[subprocess.Popen, Any, int]] = {}
    workloads = {scenario: W.WORKLOADS[scenario].scaled(args.length_scale) for scenario in rates}
    server = T.Window(args.metrics_url)
    server.start()
    try:
        for scenario, rate in sorted(rates.items()):
            n = requests_for(rate, window, args.min_requests)
            seed = seeds.run_seed(args.seed, scenario, 0, 1, purpose="mixed")
            cmd = command(vllm, args, scenario, rate, n, seed, tokenizer, folder, workloads[scenario],
                          priority=(priority or {}).get(scenario))
            log = (folder / f"{scenario}.log").open("w")
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            procs[scenario] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True), log, n)
        print(f"bench mix-check: {len(procs)} scenarios at once for about {human_seconds(window)}: "
              + ", ".join(f"{s} {r:g} req/s ({procs[s][2]} requests)" for s, r in sorted(rates.items())), flush=True)
        deadline = time.monotonic() + args.run_timeout
        for scenario, (proc, log, _n) in procs.items():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop_process_group(proc, 5)
                log.write(f"stopped after {args.run_timeout:g} s\n")
    finally:
        for proc, log, _n in procs.values():
            stop_process_group(proc, 5)
            log.close()
        server.stop()
    rows = {}
    for scenario, (proc, _log, n) in procs.items():
        expect = R.Expectation(scenario=scenario, concurrency=args.max_concurrency, num_prompts=n,
                               output_len=workloads[scenario].output_len)
        result = R.load_result(folder / f"{scenario}.json", expect)
        if proc.returncode not in (0, None) and result.valid:
            result = result.with_problems(f"vllm bench serve exited {proc.returncode}")
        rows[scenario] = judge(result, rates[scenario], args)
        if priority and scenario in priority:
            rows[scenario]["priority"] = priority[scenario]
        for name in (f"{scenario}.json", f"{scenario}.log"):
            if (folder / name).exists():
                locations.written(folder / name)
    return rows, server.summary()


def run(args: argparse.Namespace) -> int:
    if not args.duration_s > 0 or args.min_requests < 1 or args.max_concurrency < 1 or not args.run_timeout > 0 \
            or args.wait_hours < 0 or not args.poll_s > 0:
        print("bench mix-check: --duration-s and --run-timeout-s must be positive, --min-requests and "
              "--max-concurrency >= 1, --wait-hours >= 0, --poll-s > 0", file=sys.stderr)
        return 2
    if (args.plan is None) == (args.rates is None):
        print("bench mix-check: give the loads one way: --plan (a plan made with --mix) or --rates "
              "SCENARIO=REQ_PER_S,...", file=sys.stderr)
        return 2
    out = Path(args.out)
    args.metrics_url = O.metrics_url(args.base_url, args.metrics_url)
    try:
        with stop_on_signals(), tempfile.TemporaryDirectory(prefix="bench-mix-") as scratch:
            try:
                if args.plan is not None:
                    plan = load_plan(wait_for_plan(args.plan, args.wait_hours, Path(scratch), args.poll_s))
                    label, rates = per_replica(plan, args.configuration)
                else:
                    plan, label, rates = {}, args.configuration, parse_rates(args.rates)
                priority = parse_priority(args.priority, rates)
                if priority and "--extra-body" in shlex.split(args.bench_args or ""):
                    raise UsageError("--priority puts the priority in vLLM's extra request body, and --bench-args "
                                     "sets that body too: give one of them")
                slo = SIDE.choose_slo([("the plan", {"config": {"slo": plan.get("slo")}})], SIDE.slo_given(args),
                                      SIDE.SLO_FLAGS, noun="")
                for note in slo.notes:
                    print(f"bench mix-check: SLO: {note}", file=sys.stderr)
                args.slo_ttft_p99_ms, args.slo_itl_p99_ms = slo.ttft_p99_ms, slo.decode_p99_ms
                args.slo_decode_metric = slo.decode_metric
                unknown = [s for s in rates if s not in W.WORKLOADS]
                if unknown:
                    raise UsageError(f"the plan's scenarios {', '.join(unknown)} are not bench scenarios "
                                     f"({', '.join(W.WORKLOADS)})")
                window = window_s(rates, args.duration_s, args.min_requests)
                if window > args.run_timeout:
                    slowest = min((s for s, r in rates.items() if r > 0), key=rates.get, default=None)
                    why = (f"--duration-s {args.duration_s:g}" if window == args.duration_s else
                           f"{slowest}'s {args.min_requests} requests (--min-requests) at {rates[slowest]:g} req/s")
                    raise UsageError(f"every scenario would send for {human_seconds(window)} ({why}), longer than "
                                     f"--run-timeout-s {args.run_timeout:g} allows the runs: raise --run-timeout-s, "
                                     "or lower --min-requests or --duration-s")
                vllm = grid.resolve_vllm(args.vllm_bin)
                tokenizer = grid.prepare_tokenizer(args.tokenizer, Path(scratch))
            except (UsageError, grid.UsageError, s3.S3Error, ValueError) as exc:
                print(f"bench mix-check: {exc}", file=sys.stderr)
                return 2
            out.mkdir(parents=True, exist_ok=True)
            rows, telemetry = run_mix(args, vllm, tokenizer, rates, window, out, priority)
    except KeyboardInterrupt as exc:
        print(f"bench mix-check: stopped by {signal_name(exc)}; the runs were stopped, nothing was judged. "
              "Run the same command again.", file=sys.stderr)
        return exit_code(exc)
    check = {
        "configuration": label,
        "per_replica_req_s": dict(sorted(rates.items())),
        "rates_from": "plan" if args.plan is not None else "--rates",
        "priority": dict(sorted(priority.items())),
        "duration_s": args.duration_s,
        "window_s": round(window, 1),
        "slo": {"ttft_p99_ms": args.slo_ttft_p99_ms, "decode_p99_ms": args.slo_itl_p99_ms,
                "decode_metric": args.slo_decode_metric},
        "scenarios": rows,
        "held": held(rows),
        "telemetry": telemetry,
    }
    (out / CHECK_FILE).write_text(json.dumps(check, indent=2) + "\n", encoding="utf-8")
    locations.written(out / CHECK_FILE)
    print(f"bench mix-check: {finding(check)} -> {locations.display(out / CHECK_FILE)}")
    return 0 if check["held"] else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("mix-check", help="run the plan's scenarios at once on a server: do they add up?",
                              description=__doc__, formatter_class=Help)
    p.add_argument("--plan", help="plan.json, or its folder or s3:// prefix (`bench plan --mix`); this or --rates")
    p.add_argument("--rates", metavar="SCENARIO=REQ_PER_S,...",
                   help="the loads stated instead of a plan's, e.g. S1_chat=2.5,S2_summary=0.8")
    p.add_argument("--base-url", required=True, help="the server, e.g. http://SERVER:8000")
    O.add_metrics_url(p, "about once a second while the mix runs")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder or s3:// model prefix")
    O.add_out(p, "mix-check", "mixed_traffic.json and mixed/")
    p.add_argument("--configuration", help="plan configuration to check (default: the first with a per-replica mix); "
                                           "with --rates, a label for the server checked")
    p.add_argument("--priority", metavar="SCENARIO=INTEGER,...",
                   help="vLLM request priority per scenario, sent in the request body (a lower value is served first "
                        "under `vllm serve --scheduling-policy priority`; ignored by the default policy)")
    p.add_argument("--wait-hours", type=O.at_least_zero(float), default=0.0,
                   help="with an s3:// --plan: wait up to this long for plan.json to appear, as the report Job "
                        "writes it once the sweeps finish (default: %(default)s, no waiting)")
    O.add_poll(p, 15.0, "the plan (up to 5 min)")
    p.add_argument("--duration-s", type=O.above_zero(float), default=120.0,
                   help="how long the mix runs at least: every scenario sends rate x the window, which is this or "
                        "longer where a scenario's --min-requests need longer (default: %(default)s)")
    p.add_argument("--min-requests", type=O.above_zero(int), default=ST.MIN_P99_REQUESTS,
                   help=f"fewest requests per scenario; below {ST.MIN_P99_REQUESTS} a p99 is about the slowest request, "
                        "and the scenario can miss the SLO but never meet it with confidence (default: %(default)s)")
    p.add_argument("--noise-pct", type=O.at_least_zero(float), default=ST.DEFAULT_NOISE_PCT,
                   help="run-to-run band (%% of a figure) that widens each p99's interval within the run before it "
                        "is set against its limit, as the sweeps assume for a point run once; a CPU server "
                        "spreads far more (default: %(default)s)")
    p.add_argument("--max-concurrency", type=O.above_zero(int), default=64,
                   help="safety cap on in-flight requests per scenario (default: %(default)s)")
    O.add_run_timeout(p, 1800.0, "the scenarios' runs")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default: %(default)s)")
    p.add_argument("--length-scale", type=O.above_zero(float), default=1.0,
                   help="factor on every scenario's lengths (tests)")
    O.add_slo(p, recorded_by="the plan recorded (plan.json slo)")
    p.add_argument("--bench-args", default=os.environ.get("VLLM_POC_BENCH_ARGS"),
                   help="extra `vllm bench serve` arguments, one shell-quoted string")
    p.add_argument("--vllm-bin", default=os.environ.get("VLLM_POC_VLLM_BIN") or None,
                   help="vllm executable or command (default: `vllm` on PATH; env VLLM_POC_VLLM_BIN)")
    O.add_no_progress(p)
    p.set_defaults(func=locations.remote_io(run, command="mix-check", inputs=()))
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "mix-check", argv)
