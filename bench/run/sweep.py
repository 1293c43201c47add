"""`python -m bench sweep --base-url URL --model NAME --tokenizer DIR`: `vllm bench serve` over scenarios x
concurrencies against a server.

Per scenario and concurrency a warm-up, then the measured run (prompts of its own seed, the
concurrency as the client's cap); a failed or suspect run is retried; --resume runs only what is
missing. Files: docs/files.md#the-sweep-folder; method: docs/benchmark.md#the-sweep.

Exit codes: 0 every run valid; 1 some invalid or suspect; 2 bad arguments (also a --model the server
does not serve, or an --out holding another grid's or SLO's sweep); 3 server not healthy in time (before
the first run, or after a failed run: a server that stopped answering stops the sweep); 4 upload failed;
130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.analysis import answer
from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis.capacity import interval as CAP
from bench.common import options as O
from bench.common import s3
from bench.common.cli import Help, run_one
from bench.common.interrupts import rerun_command
from bench.run import client as bench_client
from bench.run import extra_runs, folder, hardware, s3reach, seeds, sizing
from bench.run import telemetry as T
from bench.run.grid import (RunSpec, UsageError, bench_command, build_plan, config_of, new_run_record,
                            prepare_tokenizer, prompts_for, resolve_vllm, short_hash, whole_prefixes)
from bench.run.runner import (MANIFEST, EtaModel, Runner, ServerGone, fmt_s, load_manifest, log_errors, log_tail,
                              now, write_json)
from bench.run.server import probe_server, wait_for_health
from bench.run.sweep_options import add_arguments

SCHEMA = 1

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_UNHEALTHY, EXIT_UPLOAD, EXIT_TERMINATED = 0, 1, 2, 3, 4, 143
EXIT_INTERRUPTED = 130  # Ctrl-C


class Terminated(Exception):
    pass


class Sweep(Runner):
    """The grid: each (scenario, concurrency) run with its warm-up, validated, retried, recorded."""

    def __init__(self, args: argparse.Namespace, plan: list[RunSpec], vllm: list[str]):
        super().__init__(args, vllm)
        self.plan = plan

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
        # --resume of some scenarios: the folder's other scenarios keep their records (and config)
        asked = {spec.scenario for spec in self.plan}
        runs += [rec for rec in (previous or {}).get("runs", []) if rec.get("scenario") not in asked]
        config["scenarios"] = {**{k: v for k, v in ((previous or {}).get("config") or {}).get("scenarios", {}).items()
                                  if k not in asked}, **config["scenarios"]}
        self.session = {"started_at": self.started_at, "finished_at": None, "resume": bool(args.resume),
                        "executed": [], "skipped_valid": []}
        self.manifest = {
            "schema": SCHEMA,
            "kind": "vllm-poc bench sweep",
            "config_hash": short_hash(config),
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
    def run_once(self, spec: RunSpec, tokenizer: str, attempt: int, requests: int | None = None, *,
                 last: bool) -> tuple[R.RunResult, dict[str, Any]]:
        """One attempt: the burst at the run's concurrency (its warm-up), the run sized from it (or
        `requests`, a retry's size), its telemetry, and whether it held its load for the window
        (`resize_to`: the next attempt's size where it did not); `last`: no other try follows a failure."""
        self.partial.mkdir(exist_ok=True)
        partial_file = self.partial / spec.filename
        partial_file.unlink(missing_ok=True)
        stem = f"{spec.scenario}_c{spec.concurrency}.attempt{attempt}"
        log = self.logs / f"{stem}.log"
        seed = seeds.run_seed(self.args.seed, spec.scenario, spec.concurrency, attempt)
        started_at = now()
        window = T.Window(self.args.metrics_url, self.args.gpu_metrics_url, self.args.telemetry_interval)
        with log.open("w", encoding="utf-8") as fh:
            warm_seed = seeds.run_seed(self.args.seed, spec.scenario, spec.concurrency, attempt, seeds.WARMUP)
            warmup = self.burst(spec, tokenizer, spec.concurrency, spec.warmups, warm_seed, fh)
            n = requests or prompts_for(spec, (warmup or {}).get("req_s"), self.args.window_s,
                                        self.measured.get(spec.scenario))
            cmd = bench_command(self.vllm, self.args, spec, tokenizer, self.partial, seed=seed, num_prompts=n)
            window.start()
            try:
                rc, timed_out, duration = self.run_command(cmd, fh)
            finally:
                window.stop()
        tele = window.summary()
        tele_file = self.logs / f"{stem}.telemetry.json"
        write_json(tele_file, window.record())

        result = R.load_result(partial_file, replace(spec.expectation(), num_prompts=n))
        extra = []
        short = sizing.window_problem(result.raw, spec.concurrency, self.args.window_s) if result.valid else None
        if short:
            extra.append(short)
        if timed_out:
            extra.append(f"timed out after {self.args.run_timeout:.0f} s")
        elif rc is None:
            extra.append("vllm bench serve could not be started")
        elif rc != 0:
            extra.append(f"vllm bench serve exited {rc}")
        if extra or not result.valid:
            errors = log_errors(log)
            if errors:
                extra.append("request errors: " + " / ".join(errors))
            elif not partial_file.exists():
                tail = log_tail(log)
                if tail:
                    extra.append(f"log: {tail}")
        extra.append(R.restart_problem(tele))
        result = result.with_problems(*extra)
        suspect = R.suspect_reason(tele, spec.prefix_cache_check, self.args.suspect_prefix_cache_pct) \
            if result.valid else None

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
            self.measured_rate(spec.scenario, spec.concurrency, result.req_s)
        record = {
            "n": attempt,
            "started_at": started_at,
            "seed": seed,
            "num_prompts": n,
            "steady_window_s": _round(sizing.steady_window(result.raw, spec.concurrency)) if result.completed else None,
            "resize_to": (whole_prefixes(spec, sizing.resize(n, sizing.steady_window(result.raw, spec.concurrency),
                                                          self.args.window_s, spec.concurrency))
                          if short else None),
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
            tries = sizing.Tries(self.args.attempts)
            while True:
                attempt = len(rec["attempts"]) + 1
                resize = rec["attempts"][-1].get("resize_to") if rec["attempts"] else None
                result, attempt_rec = self.run_once(spec, tokenizer, attempt, resize, last=tries.last_failure())
                rec["attempts"].append(attempt_rec)
                eta.observe(spec, attempt_rec["duration_s"], result.duration_s if result.valid else None)
                if not result.valid:
                    self.ensure_serving(spec.label)
                if result.valid and not attempt_rec["suspect"]:
                    break
                if not tries.another(short=attempt_rec["resize_to"] is not None):
                    break
            assert result is not None
            elapsed_run = time.monotonic() - started
            suspect = attempt_rec["suspect"] if result.valid else None
            if result.valid and not suspect:  # a collapsed draft: not retried, it would collapse again
                suspect = R.spec_collapse_reason(result, attempt_rec["telemetry"], self.args.min_spec_acceptance_pct)
            rec.update(
                num_prompts=attempt_rec.get("num_prompts") if result.valid else rec.get("num_prompts"),
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
        n = rec["attempts"][-1].get("num_prompts") if rec["attempts"] else None
        held = rec["attempts"][-1].get("steady_window_s") if rec["attempts"] else None
        head = (f"[{index}/{total}] {spec.label} in={spec.input_len} out={spec.output_len} n={n or spec.num_prompts}"
                + (f" window {held:.1f} s" if held is not None else ""))
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
        return f"{head} {body} | elapsed {fmt_s(elapsed)}, ETA {fmt_s(eta)}"

def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _on_sigterm(signum, _frame):
    # Kubernetes stops a pod (eviction, Spot interruption) with SIGTERM; as PID 1 without a
    # handler Python would ignore it until SIGKILL. Unwind instead: the running bench process is
    # stopped, its combination marked pending, the manifest written and uploaded.
    raise Terminated(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    try:
        args.prices_table = hardware.parse_prices(args.prices)
        args.price_per_hour = _own_price(args)
        args.allowed_capacity_types = hardware.parse_capacity_types(args.capacity_types)
        if args.capacity_type and args.capacity_type not in hardware.CAPACITY_TYPES:
            raise UsageError(f"--capacity-type: {args.capacity_type!r} is not one of "
                             f"{', '.join(hardware.CAPACITY_TYPES)}")
        if args.telemetry_interval <= 0:
            raise UsageError(f"--telemetry-interval-s must be > 0, got {args.telemetry_interval}")
        plan = build_plan(args)
        extra_runs.validate(args)
        vllm = resolve_vllm(args.vllm_bin)
        upload = s3.S3Location.parse(args.upload, option="--upload") if args.upload else None
    except (UsageError, ValueError) as exc:
        print(f"bench sweep: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args.base_url = args.base_url.rstrip("/")
    args.metrics_url = O.metrics_url(args.base_url, args.metrics_url)
    out = Path(args.out)
    refused = folder.refusal(out, _asked(plan), config_of(args, plan)["slo"], args.resume)
    if refused:
        print(f"bench sweep: {refused}", file=sys.stderr)
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
    except (ServerGone, Terminated, KeyboardInterrupt) as exc:
        sweep.stop()
        if sweep.manifest:
            sweep.session["finished_at"] = now()
            sweep.session["interrupted"] = str(exc) or "interrupted"
            for rec in sweep.manifest["runs"]:
                if rec["status"] == "running":
                    rec["status"] = "pending"
            sweep.save_manifest()
        again = rerun_command("bench") + ("" if "--resume" in sys.argv else " --resume")
        kept = sum(rec["status"] == "valid" for rec in sweep.manifest["runs"]) if sweep.manifest else 0
        if isinstance(exc, ServerGone):  # an engine out of GPU memory takes its server down
            print(f"bench sweep: {exc}; the sweep stops: {kept} valid run(s) kept in {out}, the unfinished one "
                  f"marked pending. The server's log says why it stopped; with it serving again: {again}",
                  file=sys.stderr)
            return EXIT_UNHEALTHY
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
        # In the cluster: does S3 resolve inside the ranges the NetworkPolicy allows? (bench/run/s3reach.py)
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
        refused = folder.refusal(out, _asked(plan), config_of(args, plan)["slo"], args.resume)
        if refused:  # what the prefix held, downloaded
            print(f"bench sweep: {refused} (in {upload.uri})", file=sys.stderr)
            return EXIT_USAGE

    try:
        tokenizer = prepare_tokenizer(args.tokenizer, scratch)
    except (s3.S3Error, ValueError) as exc:
        print(f"bench sweep: --tokenizer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"bench sweep: {len(plan)} combinations -> {out}; waiting for {args.base_url}/health "
          f"(up to {args.health_timeout:.0f} s)", flush=True)
    print(extra_runs.budget_line(args, len({s.scenario for s in plan})), flush=True)
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

    sweep.session["finished_at"] = now()
    if sweep.uploader:
        sweep.uploader.retry_failed()
    sweep.save_manifest()
    record_capacity(sweep)
    t = sweep.timing()
    runs = sweep.manifest["runs"]
    print(
        f"bench sweep: {len(runs) - invalid}/{len(runs)} valid; wall {fmt_s(t['wall_s'])}, "
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


def record_capacity(sweep: Sweep) -> None:
    """This side's half of a verdict, recorded where the results are (manifest `capacity`, uploaded):
    per scenario its capacity under the sweep's SLO as an interval (bench.analysis.capacity.interval), so a
    sweep Job leaves its state in S3 whatever a later report decides. `bench report` recomputes it."""
    args = sweep.args
    side = SIDE.load_side(sweep.out)
    caps = CR.side_capacity(side, ttft_ms=args.slo_ttft_p99_ms, decode_ms=args.slo_itl_p99_ms,
                            decode_metric=args.slo_decode_metric)
    scenarios = {}
    for name in side.scenarios:
        got = caps.get(name) or {}
        closed = got.get("closed") or CAP.Capacity(CAP.GRID, CAP.NO_DATA)
        scenarios[name] = {"slo_capacity_interval": closed.as_dict(),
                           "rate_capacity_interval": got["open"].as_dict() if got.get("open") else None}
        line = f"bench sweep: {name} under the SLO: {answer.capacity_words(closed.as_dict())}"
        if got.get("open") and got["open"].known:
            line += f"; by offered rate (the open loop): {answer.capacity_words(got['open'].as_dict())}"
        print(line, flush=True)
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


def _own_price(args: argparse.Namespace) -> float | None:
    """--price-per-hour of this one server: ON_DEMAND whatever the capacity type, or with /SPOT a price per
    capacity type (over --prices), the node's own then recorded."""
    price = args.price_per_hour
    if price is None:
        return None
    if price.label:
        raise UsageError(f"--price-per-hour {price}: a sweep prices its one server; give {str(price).split('=')[1]} "
                         "without LABEL=")
    if price.spot is None:
        return float(price)
    args.prices_table = {**args.prices_table, "on-demand": float(price), "spot": price.spot}
    return None


def _asked(plan: list[RunSpec]) -> dict[str, set[int]]:
    return {name: {s.concurrency for s in plan if s.scenario == name} for name in dict.fromkeys(s.scenario for s in plan)}


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "sweep",
        help="run vllm bench serve over scenarios x concurrencies",
        description=__doc__,
        formatter_class=Help,
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "sweep", argv)


if __name__ == "__main__":  # the bench Job: `python3 -m bench.run.sweep`, this module's imports only
    sys.exit(main(sys.argv[1:]))
