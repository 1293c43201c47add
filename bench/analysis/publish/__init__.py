"""`python -m bench publish`: wait for the sweeps in S3, then write the report, the plan and the compare.

The report Job of a stack runs this (components/report_job.py); it runs on a laptop just as well:

    python -m bench publish --candidate s3://RESULTS/runs/g7e/nvfp4-g7e/HASH/ \\
        --baseline s3://RESULTS/runs/g7e/nvfp4-l40s/HASH/ --current-replicas 12 \\
        --out s3://RESULTS/runs/g7e/report/HASH/

1. Wait. Every sweep named (`--candidate`, `--baseline`, each `--variant`) must be finished: its
   manifest.json says the sweep ended (`finished_at`) with no combination pending or running. A
   sweep stopped by a Spot interruption uploads a manifest with pending runs and is resumed by its
   Job's next pod, so it is waited for, never reported half done. The manifests are read every
   `--poll-s`, backing off to `--max-poll-s` while nothing changes; a line says where
   each sweep stands at least every `--log-every-s`, and `status.json` under --out says the same
   for `bench open`. After `--wait-hours` the report is written from what is there, saying which
   sweeps did not finish (a verdict never passes on missing runs).
2. Write, with the prices, capacity types and SLO the sweeps recorded in their manifests (an SLO
   flag given here is passed on, and each step says where it differs from the recorded one):
   `bench report CANDIDATE --baseline BASELINE` (report.md, summary.json, charts, plan/),
   `bench plan` of the candidate (or the variants) against the baseline's current fleet (plan.md,
   plan.json, plan.png) and, with variants, `bench compare` (compare.md, compare.json), every file
   uploaded as it is written. Without --candidate the report covers the baseline alone. With
   `--mixed-traffic-wait-hours`, it then waits for `bench mix-check` (the stack's mix-check Job
   reads the plan just written and runs its mix on the candidate's server) to put
   mixed_traffic.json under --out, and plans again with it: the plan says whether its scenarios
   added up.
   Earlier rounds (`--candidate-repeat`, `--baseline-repeat`: the same configuration swept again from a
   fresh server, the stack's `bench.round`) are not waited for: each whose sweep has finished is pooled
   into its side (`bench report --repeat`, `--baseline-repeat`); one with no finished sweep (never run,
   or the configuration changed between rounds) is left out, and the log, status.json and inputs.json
   say which and why.
3. Record `inputs.json`: each sweep's address and the SHA-256 of the manifest it was read at, the
   settings, and whether every sweep had finished. A rerun whose sweeps are unchanged writes
   nothing; a sweep that changed while the report was written (or since the last run) is reported
   again, so the files never describe a sweep older than its manifest.

Exit codes: 0 written (or already up to date); 1 S3 or a report step failed; 2 bad arguments;
130 Ctrl-C; 143 SIGTERM (nothing is lost: the next run starts over from S3).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench.analysis import answer, compare, plan, report
from bench.analysis import mixed_traffic as MT
from bench.analysis.publish.sweeps import (STATUS, Sweep, iso, now, read_manifest, read_rounds, record_failure,
                                           round_rows, rounds_left_out, rounds_of, status, wait_for_sweeps)
from bench.analysis.side import SLO_FLAGS, slo_given
from bench.common import locations, s3
from bench.common import options as O
from bench.common.cli import Help, run_one
from bench.common.interrupts import Interrupted, exit_code, signal_name, stop_on_signals
from bench.common.progress import human_seconds

INPUTS = "inputs.json"
# How often the same written report is re-checked against sweeps that change while it is written.
MAX_ROUNDS = 3


class UsageError(ValueError):
    pass


def _commands(args: argparse.Namespace, local: dict[str, str], out: str, rounds: dict[str, list[str]] | None = None,
              labels: dict[str, str] | None = None) -> list[tuple[str, list[str], Callable[[list[str]], int]]]:
    """The report, plan and compare runs, as `python -m bench` argument lists; `rounds`: a sweep's key in
    `local` -> local folders of its earlier rounds, pooled by the report (candidate, baseline) and by the
    compare (a variant's, under its label from `labels`)."""
    steps = []
    subject = local.get("candidate") or local["baseline"]
    slo = _slo_flags(args)
    report_args = [subject, "--out", out, "--threshold", f"{args.threshold:g}", "--basis",
                   args.basis, "--current-replicas", str(args.current_replicas), "--no-progress"]
    rounds = rounds or {}
    if local.get("candidate"):
        report_args += ["--baseline", local["baseline"]]
        report_args += [a for d in rounds.get("candidate", []) for a in ("--repeat", d)]
        report_args += [a for d in rounds.get("baseline", []) for a in ("--baseline-repeat", d)]
    else:  # the report covers the baseline alone: its rounds are the subject's
        report_args += [a for d in rounds.get("baseline", []) for a in ("--repeat", d)]
    if args.no_charts:
        report_args.append("--no-charts")
    steps.append(("report", report_args + slo, report.main))
    planned = [k for k in sorted(local) if k.startswith("variant:")] or ["candidate" if local.get("candidate")
                                                                         else "baseline"]
    plan_args = [*(local[k] for k in planned), "--baseline", local["baseline"], "--current-replicas",
                 str(args.current_replicas), "--basis", args.basis, "--headroom", f"{args.headroom:g}", "--spares",
                 str(args.spares), "--out", out, "--no-progress"]
    # the plan pools the same rounds as the report and the compare: one figure on every page
    plan_args += [a for k in planned for d in rounds.get(k, []) for a in ("--repeat", d)]
    plan_args += [a for d in rounds.get("baseline", []) for a in ("--baseline-repeat", d)]
    if args.mix:
        plan_args += ["--mix", args.mix]
    if args.no_charts:
        plan_args.append("--no-charts")
    steps.append(("plan", plan_args + slo, plan.main))
    keys = [k for k in sorted(local) if k.startswith("variant:")]
    if keys:
        pooled = [(k, d) for k in keys for d in rounds.get(k, [])]
        named = ["--labels", ",".join((labels or {})[k] for k in [*keys, *(k for k, _ in pooled)])] if pooled else []
        steps.append(("compare", [*(local[k] for k in keys), *(d for _, d in pooled), *named, "--out", out,
                                  "--no-progress", *slo], compare.main))
    return steps


def _slo_flags(args: argparse.Namespace) -> list[str]:
    """The SLO flags given to publish, passed on; without them each step judges with the SLO the
    sweeps recorded (and says where a flag differs from it)."""
    flags = []
    for key, value in slo_given(args).items():
        if value is not None:
            flags += [SLO_FLAGS[key], value if isinstance(value, str) else f"{value:g}"]
    return flags


def write_report(args: argparse.Namespace, sweeps: list[Sweep], complete: bool,
                 earlier: list[Sweep] | None = None) -> int:
    """Download the sweeps once, run report, plan and compare on them into --out; record inputs.json.
    `earlier`: earlier rounds, each pooled into its side where its sweep has finished (rounds.pooled)."""
    out = s3.S3Location.parse(args.out, option="--out")
    earlier = earlier or []
    with locations.session("bench-publish-", progress=False) as current:
        local: dict[str, str] = {}
        keys = [s.role if s.role != "variant" else f"variant:{i:02d}" for i, s in enumerate(sweeps)]
        for key, sweep in zip(keys, sweeps):
            local[key] = current.fetch(sweep.loc.uri, f"--{sweep.role}")
        labels = {key: sweep.label for key, sweep in zip(keys, sweeps)}
        fetched = {id(sweep): current.fetch(sweep.loc.uri, f"--{sweep.role}") for sweep in rounds_of(earlier)}

        def rounds() -> dict[str, list[str]]:  # the rounds still pooled (a step may have refused some)
            by_key: dict[str, list[str]] = {}
            for sweep in rounds_of(earlier):
                by_key.setdefault(keys[sweep.of], []).append(fetched[id(sweep)])
            return by_key

        done = []
        for name in [step[0] for step in _commands(args, local, out.uri)]:
            ((_, argv, main),) = [st for st in _commands(args, local, out.uri, rounds(), labels) if st[0] == name]
            print(f"bench publish: bench {name} -> {out.uri}", flush=True)
            rc = main(argv)
            # the rounds this step was given: the compare pools the variants', the report the sides', the plan all
            step_rounds = [s for s in rounds_of(earlier)
                           if name == "plan" or (s.side == "variant") == (name == "compare")]
            if rc == 2 and step_rounds:
                # It said why above; the rounds are extra measurements, never a reason for no report.
                for sweep in step_rounds:
                    sweep.refused = "its settings differ from this round's, or its folder could not be read"
                print(f"bench publish: bench {name} would not pool the earlier rounds (see above); writing the "
                      f"{name} from this round alone", flush=True)
                ((name, argv, main),) = [st for st in _commands(args, local, out.uri) if st[0] == name]
                rc = main(argv)
            if rc in (130, 143):  # the step was stopped (and said what it kept): stop with its code
                raise Interrupted(rc - 128)
            # plan exits 1 when a candidate cannot carry the load at the SLO: that is an answer, not a failure
            if rc not in (0, 1) or (rc == 1 and name != "plan"):
                print(f"bench publish: bench {name} failed (exit {rc})", file=sys.stderr)
                return 1
            done.append({"command": name, "exit": rc,
                         "argv": [locations.display(a) if a.startswith(str(current.scratch)) else a for a in argv]})
        mixed = None
        if args.mixed_traffic_wait_hours > 0:
            mixed = mixed_traffic(args, sweeps, out, _commands(args, local, out.uri, rounds(), labels), done)
    inputs = {
        "sweeps": [{"role": s.role, "label": s.label, "uri": s.loc.uri, "manifest_sha256": s.digest,
                    "state": s.state()[0]} for s in sweeps],
        "earlier_rounds": round_rows(earlier),
        "complete": complete,
        "settings": {"current_replicas": args.current_replicas, "threshold": args.threshold,
                     "verdict_basis": args.basis, "headroom": args.headroom, "spares": args.spares,
                     "mix": args.mix, "slo_flags": _slo_flags(args)},
        "commands": done,
        "mixed_traffic": mixed,
        "written_at": iso(now()),
    }
    s3.put_json(s3.client(), out, INPUTS, inputs)
    return 0


def mixed_traffic(args: argparse.Namespace, sweeps: list[Sweep], out: s3.S3Location,
                  steps: list[tuple[str, list[str], Callable[[list[str]], int]]], done: list[dict[str, Any]]) -> str:
    """Wait for `bench mix-check` (its Job reads the plan just written) and plan again with its finding."""
    client = s3.client()
    s3.put_json(client, out, STATUS, status("waiting for the mixed-traffic check", sweeps,
                                         now() + timedelta(hours=args.mixed_traffic_wait_hours)))
    started, interval, said = time.monotonic(), args.poll_s, None
    while s3.get_json(client, out, MT.CHECK_FILE) is None:
        waited = time.monotonic() - started
        if waited >= args.mixed_traffic_wait_hours * 3600:
            print(f"bench publish: no mixed-traffic check in {out.uri} after {human_seconds(waited)}; the plan "
                  "stands without it", flush=True)
            return "not received"
        if said is None or time.monotonic() - said >= args.log_every_s:
            print(f"bench publish: waiting for the mixed-traffic check ({human_seconds(waited)} so far)", flush=True)
            said = time.monotonic()
        time.sleep(interval)
        interval = min(args.max_poll_s, interval * 2)
    (name, argv, main), = [step for step in steps if step[0] == "plan"]
    argv = [*argv, "--mixed-traffic", out.uri]
    print(f"bench publish: bench plan with the mixed-traffic check -> {out.uri}", flush=True)
    rc = main(argv)
    if rc in (130, 143):
        raise Interrupted(rc - 128)
    done.append({"command": name, "exit": rc, "argv": [locations.display(a) if a.startswith("/") else a for a in argv]})
    return "included" if rc in (0, 1) else "failed"


def labels(sweeps: list[Sweep]) -> dict[str, str]:
    return {s.role: s.label for s in sweeps if s.role in ("candidate", "baseline")}


def say_answer(client: Any, out: s3.S3Location, sweeps: list[Sweep]) -> None:
    summary = s3.get_json(client, out, "summary.json")
    plan = s3.get_json(client, out, "plan.json")
    print(f"bench publish: {answer.verdict_line(summary, labels(sweeps))}", flush=True)
    line = answer.plan_line(plan)
    if line:
        print(f"bench publish: {line}", flush=True)
    if plan and plan.get("mixed_traffic"):
        print(f"bench publish: mixed traffic: {MT.finding(plan['mixed_traffic'])}", flush=True)
    print(f"bench publish: report in {out.uri} (python -m bench open {out.uri})", flush=True)


def parse(args: argparse.Namespace) -> tuple[s3.S3Location, list[Sweep], list[Sweep]]:
    """--out, the sweeps waited for, and the earlier rounds (read where present)."""
    if not args.baseline:
        raise UsageError("give --baseline, the s3:// prefix of the sweep of the hardware serving today")
    if not args.candidate and not args.variant:
        raise UsageError("give --candidate (the sweep the verdict is about) or --variant (two or more)")
    if args.variant and len(args.variant) < 2:
        raise UsageError("--variant: give at least two sweeps to compare")
    out = s3.S3Location.parse(args.out, option="--out")
    if not out.prefix:
        raise UsageError(f"--out: {out.uri} has no prefix; use s3://<results>/runs/<stack>/report/<hash>/")
    sweeps = [Sweep("baseline", s3.S3Location.parse(args.baseline, option="--baseline"))]
    if args.candidate:
        sweeps.insert(0, Sweep("candidate", s3.S3Location.parse(args.candidate, option="--candidate")))
    sweeps += [Sweep("variant", s3.S3Location.parse(v, option="--variant")) for v in args.variant or []]
    if args.candidate_repeat and not args.candidate:
        raise UsageError("--candidate-repeat needs --candidate (the sweep it repeats): give --candidate too, or "
                         "leave --candidate-repeat out")
    earlier = [Sweep(f"{side}-repeat", s3.S3Location.parse(uri, option=f"--{side}-repeat"))
               for side in ("candidate", "baseline", "variant") for uri in getattr(args, f"{side}_repeat") or []]
    for sweep in earlier:
        sweep.of = _repeated(sweep, sweeps)
    args.current_replicas = O.current_replicas(args)
    for option, value in (("--poll-s", args.poll_s), ("--max-poll-s", args.max_poll_s),
                          ("--log-every-s", args.log_every_s), ("--wait-hours", args.wait_hours),
                          ("--current-replicas", args.current_replicas)):
        if not value > 0:
            raise UsageError(f"{option} must be positive, got {value:g}")
    if args.mixed_traffic_wait_hours < 0:
        raise UsageError("--mixed-traffic-wait-hours must be >= 0")
    if args.mixed_traffic_wait_hours > 0 and not args.mix:
        raise UsageError("--mixed-traffic-wait-hours needs --mix: the check runs the plan's mix")
    if args.spares < 0 or not 0 <= args.headroom < 1:
        raise UsageError("--spares must be >= 0 and --headroom in [0, 1)")
    return out, sweeps, earlier


def _folder(loc: s3.S3Location) -> tuple[str, str]:
    """A results prefix's bucket and parent folder: runs/<stack>/<server>/ for runs/<stack>/<server>/<hash>/."""
    return loc.bucket, loc.prefix.rstrip("/").rpartition("/")[0]


def _repeated(sweep: Sweep, sweeps: list[Sweep]) -> int:
    """The index of the sweep an earlier round repeats: the candidate's or the baseline's; for a variant's, the
    --variant in the same folder (the stack keeps every round of a server under runs/<stack>/<server>/)."""
    if sweep.side != "variant":
        return next(i for i, s in enumerate(sweeps) if s.role == sweep.side)
    found = [i for i, s in enumerate(sweeps) if s.role == "variant" and _folder(s.loc) == _folder(sweep.loc)]
    if len(found) != 1:
        raise UsageError(f"--variant-repeat {sweep.loc.uri}: {len(found) or 'no'} --variant in the same folder; "
                         "give an earlier round of one variant, kept beside it as the stack keeps each server's "
                         "rounds (runs/<stack>/<server>/<hash>/)")
    return found[0]


def run(args: argparse.Namespace) -> int:
    try:
        out, sweeps, earlier = parse(args)
    except (UsageError, ValueError) as exc:
        print(f"bench publish: {exc}", file=sys.stderr)
        return 2
    try:
        with stop_on_signals():
            client = s3.client()
            for round_no in range(1, MAX_ROUNDS + 1):
                complete = wait_for_sweeps(client, out, sweeps, args)
                read_rounds(client, earlier)
                before = [s.digest for s in [*sweeps, *earlier]]
                recorded = s3.get_json(client, out, INPUTS) or {}
                read = [*(recorded.get("sweeps") or []), *(recorded.get("earlier_rounds") or [])]
                if recorded and [r.get("manifest_sha256") for r in read] == before \
                        and recorded.get("complete") == complete \
                        and (args.mixed_traffic_wait_hours <= 0 or recorded.get("mixed_traffic") == "included"):
                    print(f"bench publish: {out.uri} already holds the report of these sweeps", flush=True)
                    say_answer(client, out, sweeps)
                    return 0
                rc = write_report(args, sweeps, complete, earlier)
                if rc:
                    record_failure(client, out, status("failed", sweeps, now(), "a report step failed; see the Job log"))
                    return rc
                for sweep in [*sweeps, *earlier]:
                    sweep.manifest = read_manifest(client, sweep)
                if [s.digest for s in [*sweeps, *earlier]] == before:
                    notes = [None if complete else "written before every sweep finished: see inputs.json",
                             rounds_left_out(earlier)]
                    s3.put_json(client, out, STATUS, status("written", sweeps, now(),
                                                            "; ".join(n for n in notes if n) or None, earlier))
                    say_answer(client, out, sweeps)
                    return 0
                print(f"bench publish: a sweep changed while its report was written (round {round_no}); "
                      "writing it again", flush=True)
            print(f"bench publish: the sweeps kept changing over {MAX_ROUNDS} rounds; the report in {out.uri} "
                  "is from the last one (inputs.json says which manifests)", file=sys.stderr)
            return 0
    except KeyboardInterrupt as exc:
        print(f"bench publish: stopped by {signal_name(exc)}; whatever is in {out.uri} stays (inputs.json is "
              "written last, so a rerun writes the report again). Rerun the same command to finish.", file=sys.stderr)
        return exit_code(exc)
    except (s3.S3Error, ValueError) as exc:
        print(f"bench publish: {exc}", file=sys.stderr)
        return 2
    except locations.botocore_errors() as exc:  # credentials, endpoint, permissions: the Job retries
        print(f"bench publish: S3: {exc}", file=sys.stderr)
        return 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("publish", help="the report Job: wait for sweeps in S3, then write report, plan and "
                                              "compare to S3",
                              description=__doc__, formatter_class=Help)
    p.add_argument("--candidate", metavar="URI", help="s3:// prefix of the sweep the verdict is about")
    O.add_baseline(p, help="s3:// prefix of the sweep of the hardware serving today (required)")
    p.add_argument("--variant", action="append", metavar="URI",
                   help="s3:// prefix of a variant's sweep, compared side by side (repeat; two or more)")
    p.add_argument("--candidate-repeat", action="append", metavar="URI",
                   help="s3:// prefix of an earlier round of the candidate's configuration (a sweep from another "
                        "fresh server): pooled into its figures where that sweep has finished, else left out "
                        "and named; never waited for (repeat)")
    p.add_argument("--baseline-repeat", action="append", metavar="URI",
                   help="the same for the baseline (repeat)")
    p.add_argument("--variant-repeat", action="append", metavar="URI",
                   help="the same for a variant, pooled by `bench compare` under its label: an earlier round in "
                        "the same folder as its --variant, runs/<stack>/<server>/<hash>/ (repeat)")
    O.add_out(p, "publish", "the report, plan and compare files", required=True)
    O.add_current_replicas(p)
    O.add_threshold(p)
    O.add_basis(p, "the verdict and the plan")
    O.add_slo(p, recorded_by="the sweeps recorded")  # passed on to report, plan and compare
    p.add_argument("--headroom", type=O.share, default=0.0, help="plan headroom, e.g. 0.2 (default: %(default)s)")
    p.add_argument("--spares", type=O.at_least_zero(int), default=0, help="plan spares (default: %(default)s)")
    p.add_argument("--mix", metavar="S=SHARE,...",
                   help="plan mix, shares of requests per scenario, e.g. S1_chat=0.4,S2_summary=0.6")
    p.add_argument("--mixed-traffic-wait-hours", type=O.at_least_zero(float), default=0.0,
                   help="after the plan, wait up to this long for `bench mix-check` to write mixed_traffic.json "
                        "under --out, then plan again with its finding (default: %(default)s, no check)")
    p.add_argument("--no-charts", action="store_true", help="draw no charts (report and plan)")
    O.add_poll(p, 60.0, "the manifests")
    O.add_renamed(p, "--max-poll-s", type=O.above_zero(float), default=600.0, metavar="SECONDS",
                  help="longest wait between two looks while nothing changes (default: %(default)s)")
    O.add_renamed(p, "--log-every-s", type=O.above_zero(float), default=900.0, metavar="SECONDS",
                  help="say where the sweeps stand at least this often (default: %(default)s)")
    p.add_argument("--wait-hours", type=O.above_zero(float), default=13.0,
                   help="write the report from what is there after this long (default: %(default)s, past the "
                        "bench Jobs' 12 h deadline)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "publish", argv)
