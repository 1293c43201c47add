"""The rehearsal's accounting: did the fleet hold the SLO, and what did it cost, against the plan?

`bench rehearse` (bench/run/rehearse.py) replays a bursty open-loop trace through the router and
reads the servers' metrics about once a second; this module turns that into the figures:

- SLO attainment: the share of the requests sent that met the SLO each on its own: answered, its
  TTFT within the TTFT limit and its own 99th-percentile inter-token latency within the ITL limit
  (a failed request misses). Beside it, the run's TTFT p99 and ITL p99 as vLLM reports them.
- the autoscaler: the plan's pool (its replica bounds, its running/waiting/KV-cache targets, its
  measured start-up and scale-down timing) through KEDA's and the HPA's rule
  (bench.analysis.fleet.simulate) on the scraped samples. What it says is what the fleet would have
  asked for under this trace; replicas asked for serve only after the start-up time, so `short_s`
  counts the seconds the serving replicas were fewer than the rule wanted.
- replica-hours: the replicas asked for (a replica is paid for from the moment it is asked for)
  integrated over the run, each sample holding until the next and the last until the run ended
  (nothing counts past the run's end);
  the plan's: its maxReplicas (the fixed fleet it would buy for that peak) over the same time.
- cost: replica-hours x the configuration's hourly price in the plan (on-demand, and Spot where the
  plan has one).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from bench.analysis import markup, rehearsal_words
from bench.analysis import fleet as F
from bench.analysis import summary as S

FILE = S.REHEARSAL_FILE
MARKDOWN = "rehearsal.md"
HTML = "rehearsal.html"


def pool_triggers(pool: dict[str, Any]) -> list[F.Trigger]:
    """The pool's ScaledObject triggers, as the stack renders them (stacks/environment/fleet.py)."""
    return [F.Trigger("running", float(pool["running_per_replica"]), True),
            F.Trigger("waiting", float(pool["waiting_per_replica"]), True),
            F.Trigger("kv-cache", float(pool["kv_cache_usage"]), False)]


def planned_peak_req_s(plan: dict[str, Any], pool: dict[str, Any]) -> float | None:
    """The request rate the plan sized the pool for: its replicas less the spares, each at the SLO
    capacity's request rate less the headroom."""
    req_s = (pool.get("capacity") or {}).get("req_s")
    if not isinstance(req_s, (int, float)) or pool.get("max_replicas") is None:
        return None
    serving = max(1, int(pool["max_replicas"]) - int(plan.get("spares") or 0))
    return round(serving * float(req_s) * (1.0 - float(plan.get("headroom") or 0.0)), 4)


def _p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def attainment(ttfts_s: Sequence[float], itls_s: Sequence[Sequence[float]], errors: Sequence[str], *,
               ttft_ms: float, itl_ms: float) -> dict[str, Any]:
    """Per request (vLLM's detailed result: ttfts, itls, errors, one entry each): answered and within
    both limits. {"sent", "answered", "met", "attainment"} (attainment None when nothing was sent)."""
    sent = len(ttfts_s)
    met = answered = 0
    for ttft, itl, error in zip(ttfts_s, itls_s, errors):
        if error or ttft is None or ttft <= 0:
            continue
        answered += 1
        p99 = _p99(itl)
        if ttft * 1000.0 <= ttft_ms and (p99 is None or p99 * 1000.0 <= itl_ms):
            met += 1
    return {"sent": sent, "answered": answered, "met": met,
            "attainment": None if sent == 0 else round(met / sent, 4)}


def _spans(steps: Sequence[F.Step], end_s: float) -> list[tuple[F.Step, float]]:
    """Each step with the seconds it holds: until the next, the last until end_s; nothing past end_s."""
    ends = [*(s.t for s in steps[1:]), end_s]
    return [(step, max(0.0, min(until, end_s) - step.t)) for step, until in zip(steps, ends)]


def replica_hours(steps: Sequence[F.Step], end_s: float) -> float:
    """The replicas asked for, integrated over time (each step holds until the next; the last until end_s)."""
    return sum(step.replicas * span for step, span in _spans(steps, end_s)) / 3600.0


def short_seconds(steps: Sequence[F.Step], end_s: float) -> float:
    """Seconds during which fewer replicas served than the rule recommended (waiting for start-ups)."""
    return sum(span for step, span in _spans(steps, end_s) if step.ready < step.recommended)


def simulate(samples: list[tuple[float, dict[str, float]]], pool: dict[str, Any]) -> list[F.Step]:
    lo = int(pool["min_replicas"])
    return F.simulate(samples, pool_triggers(pool), lo=lo, hi=int(pool["max_replicas"]), start=max(lo, 1),
                      startup_s=float(pool["startup_s"]), down_window_s=float(pool["scale_down_window_s"]),
                      down_period_s=float(pool["scale_down_period_s"]))


def _money(hours: float, price: float | None) -> float | None:
    return None if price is None else round(hours * price, 4)


def account(*, plan: dict[str, Any], pool_name: str, samples: list[tuple[float, dict[str, float]]],
            duration_s: float, requests: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """rehearsal.json (without the trace's own settings, which the command adds)."""
    pool = plan["fleet"]["pools"][pool_name]
    row = next((r for r in plan.get("configurations") or [] if r.get("label") == pool.get("configuration")), {})
    steps = simulate(samples, pool)
    hours = replica_hours(steps, duration_s)
    planned = int(pool["max_replicas"]) * duration_s / 3600.0
    on_demand, spot = row.get("usd_hour_on_demand"), row.get("usd_hour_spot")
    slo = plan["fleet"]["slo"]
    held = (requests["attainment"] is not None and run.get("ttft_p99_ms") is not None
            and run.get("itl_p99_ms") is not None and run["ttft_p99_ms"] <= slo["ttft_p99_ms"]
            and run["itl_p99_ms"] <= slo["itl_p99_ms"])
    return {
        "pool": pool_name, "configuration": pool.get("configuration"),
        "slo": {"ttft_p99_ms": slo["ttft_p99_ms"], "itl_p99_ms": slo["itl_p99_ms"]},
        "requests": requests, "run": run, "held": held if requests["sent"] else None,
        "autoscaler": {
            "min_replicas": pool["min_replicas"], "max_replicas": pool["max_replicas"],
            "startup_s": pool["startup_s"], "samples": len(steps),
            "peak_replicas": max((s.replicas for s in steps), default=None),
            "short_s": round(short_seconds(steps, duration_s), 1),
            "steps": [{"t": round(s.t, 2), "values": {k: round(v, 4) for k, v in s.values.items()},
                       "recommended": s.recommended, "replicas": s.replicas, "ready": s.ready} for s in steps],
        },
        "replica_hours": {"autoscaled": round(hours, 6), "planned": round(planned, 6)},
        "usd_hour": {"on_demand": on_demand, "spot": spot},
        "cost_usd": {"autoscaled_on_demand": _money(hours, on_demand), "planned_on_demand": _money(planned, on_demand),
                     "autoscaled_spot": _money(hours, spot), "planned_spot": _money(planned, spot)},
    }


def markdown(record: dict[str, Any], source: str | None = None) -> str:
    """rehearsal.md: the report's rehearsal section (bench.analysis.answer words it), on its own."""
    return "\n".join(rehearsal_words.rehearsal_markdown(S.rehearsal(record, source))[1:]) + "\n"


def html_section(record: dict[str, Any], source: str | None = None) -> str:
    """rehearsal.html: the report page's rehearsal section (bench.analysis.markup), on its own."""
    return markup.rehearsal_html(S.rehearsal(record, source), tagged=False)


def samples_from(reads: Iterable[tuple[float, list[dict[str, Any]]]]) -> list[tuple[float, dict[str, float]]]:
    """Trigger values per read: running and waiting summed over the servers, KV-cache usage averaged
    (what the ScaledObject's queries compute); a read where no server answered is left out."""
    out = []
    for t, values in reads:
        answered = [v for v in values if v]
        if not answered:
            continue
        kv = [v["kv_cache_usage"] for v in answered if v.get("kv_cache_usage") is not None]
        out.append((t, {"running": float(sum(v.get("requests_running") or 0 for v in answered)),
                        "waiting": float(sum(v.get("requests_waiting") or 0 for v in answered)),
                        "kv-cache": sum(kv) / len(kv) if kv else 0.0}))
    return out
