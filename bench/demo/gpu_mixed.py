"""An experiment's mixed load (`gpu-check --experiment priority`): after a variant's sweeps, every scenario at
once through `python -m bench mix-check --rates`, open loop, each at `utilization` x an equal share x its
saturation rate (the request rate its sweep measured at the highest concurrency), the batch scenarios sent
with a lower priority (a higher value). The rates are fixed by the first variant that measured them and
kept in the record, so every variant gets the same traffic and differs in one server flag only.

With equal shares the load is `utilization` of saturation in the sense a plan uses: the sum over the
scenarios of rate / saturation rate. vLLM's default policy accepts the priority field and ignores it,
so the first-come-first-served variant is sent the very same requests.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.analysis.capacity import stats as ST
from bench.common.interrupts import run_logged
from bench.demo import gpu_steps as S
from bench.run.sizing import MIN_REQUESTS  # a p99 of fewer requests is about the slowest one


@dataclass(frozen=True)
class MixedLoad:
    batch: tuple[str, ...]  # scenarios sent at the lower priority
    utilization: float = 0.81
    duration_s: float = 60.0  # the least window every scenario sends for (mix-check lengthens it for MIN_REQUESTS)
    batch_priority: int = 1


FIGURES = (("ttft_p99_ms", "TTFT p99"), ("decode_p99_ms", "ITL p99"), ("e2e_p50_ms", "e2e p50"),
           ("e2e_p99_ms", "e2e p99"))
# The p99s compared between variants, each with its interval within the run (mix-check's bootstrap)
COMPARED = (("e2e_p99_ms", "e2e_p99_ci_ms", "e2e p99"), ("ttft_p99_ms", "ttft_p99_ci_ms", "TTFT p99"))
# One run per variant: each p99's interval is widened by the run-to-run band the sweep assumes for a point run
# once (bench/analysis/capacity/stats.py, DEFAULT_NOISE_PCT), so a change reads as clear only where two runs of
# one variant would not be expected to differ as much
NOISE_PCT = ST.DEFAULT_NOISE_PCT


def saturation_req_s(sweep: Path) -> tuple[int, float] | None:
    """(concurrency, request rate) of the sweep's valid run at its highest concurrency; None without one."""
    runs = []
    for path in sweep.glob("*_c*.json"):
        if R.parse_result_filename(path.name) is None:
            continue
        run = R.load_result(path)
        if run.valid and run.req_s:
            runs.append((run.concurrency, run.req_s))
    return max(runs) if runs else None


def queue(telemetry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server's queue while the mix ran, from mix-check's telemetry (/metrics about once a second): the most
    requests running and waiting, the fullest KV cache and the preemptions; None where /metrics was not read
    before and after the mix. A policy that orders waiting requests (priority) acts only when some wait, or when
    a full KV cache makes it choose which running request to preempt."""
    if not telemetry or not telemetry.get("measured"):
        return None
    return {"samples": telemetry["samples"], "interval_s": telemetry.get("interval_s"),
            "running_max": telemetry.get("requests_running_max"), "waiting_max": telemetry.get("requests_waiting_max"),
            "kv_cache_usage_max_pct": telemetry.get("kv_cache_usage_max_pct"),
            "preemptions": telemetry.get("preemptions")}


def rates(load: MixedLoad, saturation: dict[str, float]) -> dict[str, float]:
    """Each scenario's offered rate: `utilization` x an equal share x its saturation rate."""
    share = load.utilization / len(saturation)
    return {s: round(share * r, 4) for s, r in sorted(saturation.items())}


def priorities(load: MixedLoad, scenarios: list[str]) -> dict[str, int]:
    return {s: load.batch_priority for s in scenarios if s in load.batch}


def argv(check, load: MixedLoad, label: str, offered: dict[str, float], folder: Path) -> list[str]:
    order = sorted(offered)
    cmd = [check.runtime.python, "-m", "bench", "mix-check", "--rates", ",".join(f"{s}={offered[s]:g}" for s in order),
           "--configuration", label, "--base-url", check.server.url, "--model", check.server.name,
           "--tokenizer", str(check.model_dir), "--out", str(folder), "--duration-s", f"{load.duration_s:g}",
           "--min-requests", str(MIN_REQUESTS), "--vllm-bin", str(check.vllm_wrapper()),
           "--length-scale", f"{check.args.length_scale:g}"]  # the sweeps' lengths (a CPU rehearsal scales them)
    ranks = priorities(load, order)
    if ranks:
        cmd += ["--priority", ",".join(f"{s}={p}" for s, p in ranks.items())]
    return cmd


def run(check, load: MixedLoad, label: str, variant_dir: Path, record: dict[str, Any],
        scenarios: list[str]) -> dict[str, Any]:
    """The mixed load on the variant's running server; its rates from the record, else from this variant's
    sweeps of every scenario in `scenarios` (the experiment's, whichever command swept them; then kept in the
    record for the others)."""
    mixed = record.setdefault("mixed", {})
    if not mixed.get("rates"):
        found, unswept, invalid = {}, [], []
        for scenario in scenarios:
            if (point := saturation_req_s(variant_dir / scenario)) is not None:
                found[scenario] = point
            elif (variant_dir / scenario / "manifest.json").is_file():
                invalid.append(scenario)
            else:
                unswept.append(scenario)
        if unswept or invalid:
            reasons = ([f"{', '.join(invalid)}: its sweep has no valid run"] if invalid else []) + (
                [f"{', '.join(unswept)}: not swept by {label} yet (the same command with --scenarios "
                 f"{','.join(unswept)} sweeps it, then runs the mixed load)"] if unswept else [])
            return {"status": "not run", "reason": "no saturation rate for " + "; ".join(reasons)}
        mixed.update(saturation={s: {"concurrency": c, "req_s": r, "measured_by": label}
                                 for s, (c, r) in found.items()},
                     rates=rates(load, {s: r for s, (_, r) in found.items()}), utilization=load.utilization,
                     priority=priorities(load, scenarios), duration_s=load.duration_s)
    folder = variant_dir / "mixed"
    t0 = time.monotonic()
    log = variant_dir / "mix-check.log"
    rc = run_logged(argv(check, load, label, mixed["rates"], folder), log, env=check.runtime.env)
    result_file = folder / "mixed_traffic.json"
    if rc not in (0, 1) or not result_file.is_file():
        tail = (log.read_text(errors="replace").strip() or "no output").splitlines()[-1][:300]
        return {"status": "broken", "rc": rc, "reason": f"bench mix-check exited {rc}: {tail}"}
    check_result = json.loads(result_file.read_text())
    rows = {s: {k: r.get(k) for k in ("offered_req_s", "achieved_req_s", "requests", "valid", "reason", "priority",
                                      *(key for key, _ in FIGURES), "meets_slo", "slo_state",
                                      *(ci for _, ci, _ in COMPARED))}
            for s, r in (check_result.get("scenarios") or {}).items()}
    return {"status": "ok", "rc": rc, "seconds": round(time.monotonic() - t0, 1), "dir": str(folder),
            "window_s": check_result.get("window_s"), "held": check_result.get("held"), "scenarios": rows,
            "queue": queue(check_result.get("telemetry"))}


def changes(record: dict[str, Any]) -> dict[str, Any] | None:
    """Each other variant's mixed-load p99s against the first's (the experiment's order), per scenario: the change
    and whether it is clear of the noise: the two runs' intervals (each within its run, widened by the run-to-run
    band) do not overlap. `clear` is null where a run has no interval (no per-request detail, or under 100
    requests). None until two variants ran the mix."""
    done = {label: v["mixed"] for label, v in (record.get("variants") or {}).items()
            if (v.get("mixed") or {}).get("status") == "ok"}
    if len(done) < 2:
        return None
    band = ST.band(NOISE_PCT, 1)
    first, *others = list(done)
    rows, skipped = [], []
    for other in others:
        for scenario in sorted(done[first]["scenarios"]):
            a, b = done[first]["scenarios"][scenario], (done[other]["scenarios"].get(scenario) or {})
            invalid = [label for label, row in ((first, a), (other, b)) if not row.get("valid")]
            if invalid:
                skipped.append({"variant": other, "against": first, "scenario": scenario,
                                "reason": f"{' and '.join(invalid)}'s run {'was' if len(invalid) == 1 else 'were'} "
                                          "invalid"})
                continue
            for key, ci_key, _ in COMPARED:
                before, after = a.get(key), b.get(key)
                if not (_positive(before) and _positive(after)):
                    continue
                wide = [ST.widen(ci, band) if ci else None for ci in (a.get(ci_key), b.get(ci_key))]
                clear = None if None in wide else bool(wide[0][1] < wide[1][0] or wide[1][1] < wide[0][0])
                rows.append({"variant": other, "against": first, "scenario": scenario, "figure": key,
                             "before_ms": round(before, 3), "after_ms": round(after, 3),
                             "change_pct": round(100 * (after - before) / before, 2),
                             "intervals_ms": [ST.ci_json(w) for w in wide],
                             "clear": clear})
    return {"noise_pct": NOISE_PCT, "rows": rows, "not_compared": skipped}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0


def _ms(value: Any) -> str:
    return f"{value:,.0f} ms" if isinstance(value, (int, float)) else "not measured"


def _queue_line(q: dict[str, Any] | None) -> str:
    if not q:
        return "the server's queue during the mix: not read (its /metrics did not answer)"

    def said(key: str, text: str, missing: str) -> str:
        value = q.get(key)
        return text.format(value) if isinstance(value, (int, float)) else missing

    every = said("interval_s", ", about every {:g} s", "")
    parts = [said("running_max", "at most {:g} requests running", "running requests not read"),
             said("waiting_max", "{:g} waiting", "waiting requests not read"),
             said("kv_cache_usage_max_pct", "the KV cache at most {:g} % full", "the KV cache's use not read"),
             said("preemptions", "{:g} preempted", "preemptions not read")]
    line = (f"the server's queue during the mix (its /metrics read before, after and {q['samples']} times "
            f"between{every}): " + ", ".join(parts))
    if q.get("waiting_max") == 0 and q.get("preemptions") == 0:
        line += (": no read showed a request waiting and none was preempted, so a policy that orders waiting "
                 "requests (priority) had nothing to order at this load")
    return line


def markdown(record: dict[str, Any]) -> list[str]:
    """experiment.md's lines on the mixed load: the rates, each variant's figures per scenario, and the change
    from the first variant to each other (one run each: a change inside run-to-run noise is no finding)."""
    mixed = record.get("mixed") or {}
    runs = {label: v["mixed"] for label, v in (record.get("variants") or {}).items() if v.get("mixed")}
    if not mixed.get("rates") and not runs:
        return []
    offered = ", ".join(f"{s} {r:g} req/s" for s, r in (mixed.get("rates") or {}).items()) or "not set"
    ranks = mixed.get("priority") or {}
    said = (", ".join(f"{s} at priority {p}" for s, p in ranks.items()) + ", the rest at 0") if ranks else \
        "every request at priority 0"
    windows = [m["window_s"] for m in runs.values() if isinstance(m.get("window_s"), (int, float))]
    held_for = (f"every scenario sending for about {max(windows):,.0f} s" if windows else
                f"about {float(mixed.get('duration_s') or 0):g} s")
    lines = ["", f"**Mixed load at {100 * float(mixed.get('utilization') or 0):.0f} % of saturation** "
                 f"(`bench mix-check --rates`: {offered}; {said}; one run per variant, {held_for})", ""]
    for label, m in runs.items():
        if m.get("status") != "ok":
            lines.append(f"- {label}: {m.get('status')}: {m.get('reason')}")
    done = {label: m for label, m in runs.items() if m.get("status") == "ok"}
    if not done:
        return lines
    lines += ["| Variant | Scenario | " + " | ".join(name for _, name in FIGURES) + " | meets the SLO |",
              "|---|---|" + "---|" * (len(FIGURES) + 1)]
    for label, m in done.items():
        for scenario, row in sorted(m["scenarios"].items()):
            if not row.get("valid"):
                lines.append(f"| {label} | {scenario} | invalid: {str(row.get('reason')).replace('|', '/')} |"
                             + " |" * len(FIGURES))
                continue
            slo = {True: "yes", False: "no"}.get(row.get("meets_slo"), "cannot tell")
            lines.append(f"| {label} | {scenario} | " + " | ".join(_ms(row.get(k)) for k, _ in FIGURES) + f" | {slo} |")
    lines.append("")
    for label, m in done.items():
        lines.append(f"- {label}: {_queue_line(m.get('queue'))}")
    lines += _change_lines(mixed.get("changes"))
    return lines


def _change_lines(found: dict[str, Any] | None) -> list[str]:
    """The record's changes (`changes`), a line per variant against the first."""
    if not found or not (found.get("rows") or found.get("not_compared")):
        return []
    words = {True: "clear", False: "within the noise", None: "no interval"}
    by_variant: dict[tuple[str, str], list[str]] = {}
    names = {key: name for key, _, name in COMPARED}
    for row in found.get("rows") or []:
        by_variant.setdefault((row["variant"], row["against"]), []).append(
            f"{row['scenario']} {names.get(row['figure'], row['figure'])} {row['change_pct']:+.1f} % "
            f"({words[row['clear']]})")
    for row in found.get("not_compared") or []:
        by_variant.setdefault((row["variant"], row["against"]), []).append(
            f"{row['scenario']} not compared ({row['reason']})")
    lines = []
    for (other, first), parts in by_variant.items():
        lines += ["", f"- {other} against {first}: " + "; ".join(parts) + "."]
    lines += ["", f"One run per variant. A change is clear where the two runs' p99 intervals (each a bootstrap over "
                  f"its requests, widened by the run-to-run band of {found['noise_pct']:g} % the sweeps assume for a "
                  "point run once) do not overlap; within the noise, two runs of one variant could differ as much; no "
                  f"interval, a run of fewer than {ST.MIN_P99_REQUESTS} requests or without per-request detail."]
    return lines
