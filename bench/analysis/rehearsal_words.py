"""The rehearsal (summary.json `rehearsal`) in words: report.md, report.html and `bench rehearse`'s own files.

The figures are the rehearsal's (bench/run/rehearsal.py); this module only words them, as
bench/analysis/answer.py words the verdict and the capacities.
"""

from __future__ import annotations

from typing import Any

from bench.analysis.answer import finite


NO_REHEARSAL = ("No rehearsal was given to this report. To replay the plan's peak through the router before "
                "buying the fleet, run `python -m bench rehearse --plan PLAN --pool interactive --base-url ROUTER "
                "--model NAME --tokenizer T --metrics-url URL --out DIR`, then `bench report ... --rehearsal DIR`.")
REHEARSAL_NOTE = ("Replicas are what KEDA's and the HPA's rule would ask for on the scraped metrics, with the plan's "
                  "targets, bounds and measured start-up; the fleet's own replica count did not change during the run.")
DECISIONS_SHOWN = 20


def _num(value: Any, unit: str = "", digits: int = 1) -> str | None:
    return f"{value:,.{digits}f}{unit}" if finite(value) else None


def _fig(value: Any, path: list[Any], unit: str = "", digits: int = 1, missing: str = "not measured"):
    """A part of a sentence: the figure's words with its path within `rehearsal`, or plain words."""
    text = _num(value, unit, digits)
    return (text, path) if text is not None else missing


def _usd(r: dict[str, Any], kind: str) -> list[Any]:
    cost, price = r["cost_usd"], (r.get("usd_hour") or {}).get(kind)
    if not finite(price):
        return [f"no {'Spot' if kind == 'spot' else 'on-demand'} price in the plan"]
    return [_fig(cost.get(f"autoscaled_{kind}"), ["cost_usd", f"autoscaled_{kind}"], " USD", 4), " autoscaled against ",
            _fig(cost.get(f"planned_{kind}"), ["cost_usd", f"planned_{kind}"], " USD", 4), " for the plan's fleet, at ",
            _fig(price, ["usd_hour", kind], " USD", 2), " per replica-hour"]


def _p99(r: dict[str, Any], key: str, name: str) -> list[Any]:
    limit = r["slo"][f"{key}_p99_ms"]
    ok = r.get(f"{key}_within_slo")
    if ok is None:
        return [f"not measured (no request answered); the SLO's {name} limit is {limit:g} ms"]
    return [_fig(r[f"{key}_p99_ms"], [f"{key}_p99_ms"], " ms"), f" against the SLO's {limit:g} ms: ",
            "within" if ok else "over"]


def rehearsal_rows(r: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """The rehearsal's table, row by row: (label, parts)."""
    req, auto, hours = r["requests"], r["autoscaler"], r["replica_hours"]
    rate = ["set with --request-rate; the plan's peak is "] if r.get("rate_from") == "--request-rate" else \
        ["the plan's peak: "]
    peak = _fig(r.get("planned_peak_req_s"), ["planned_peak_req_s"], " req/s", 2, "unknown")
    through = f", through {r['base_url']}" if r.get("base_url") else ""
    trace = [f"{r['scenario']} at ", _fig(r["request_rate"], ["request_rate"], " req/s", 2), " (", *rate, peak, ")"]
    if finite(r.get("burstiness")):
        trace += [", burstiness ", _fig(r["burstiness"], ["burstiness"], "", 2)]
    trace += [", ", _fig(r["duration_s"], ["duration_s"], " s", 0), through]
    if req["sent"]:
        share = [_fig(r["attainment_pct"], ["attainment_pct"], "%"), f" ({req['met']} of {req['sent']} requests; "
                 f"{req['answered']} answered) within TTFT {r['slo']['ttft_p99_ms']:g} ms and ITL "
                 f"{r['slo']['itl_p99_ms']:g} ms, each request on its own"]
    else:
        share = ["no request was sent"]
    over = [name for name, key in (("TTFT", "ttft"), ("ITL", "itl")) if r.get(f"{key}_within_slo") is False]
    held = {True: "yes: both p99s within the SLO",
            False: f"no: {' and '.join(over)} p99 over the SLO" if over else "no: no request was answered",
            None: "could not tell (no request was sent)"}[r.get("held")]
    short = (["; ", _fig(auto["short_s"], ["autoscaler", "short_s"], " s", 1),
              " with fewer replicas serving than the rule wanted (new ones still starting)"]
             if finite(auto.get("short_s")) else [])
    rows = [
        ("Source", [r.get("source") or "not recorded"]),
        ("Pool", [f"{r['pool']} on {r.get('configuration') or 'an unnamed configuration'}"]),
        ("Trace", trace),
        ("SLO attainment", share),
        ("TTFT p99", _p99(r, "ttft", "TTFT")),
        ("ITL p99", _p99(r, "itl", "ITL")),
        ("Held the SLO", [held]),
        ("Autoscaler (simulated)", [_fig(auto["min_replicas"], ["autoscaler", "min_replicas"], "", 0), " to ",
                                    _fig(auto["max_replicas"], ["autoscaler", "max_replicas"], "", 0),
                                    " replicas; at most ",
                                    _fig(auto.get("peak_replicas"), ["autoscaler", "peak_replicas"], "", 0, "none"),
                                    " asked for; start-up ",
                                    _fig(auto["startup_s"], ["autoscaler", "startup_s"], " s", 0), *short]),
        ("Replica-hours", [_fig(hours["autoscaled"], ["replica_hours", "autoscaled"], "", 4), " autoscaled against ",
                           _fig(hours["planned"], ["replica_hours", "planned"], "", 4),
                           " for the plan's fixed fleet of its maximum replicas over the same time",
                           *([" (", _fig(hours["share_of_plan_pct"], ["replica_hours", "share_of_plan_pct"], "%"),
                              " of it)"] if finite(hours.get("share_of_plan_pct")) else [])]),
        ("Cost, on-demand", _usd(r, "on_demand")),
        ("Cost, Spot", _usd(r, "spot")),
    ]
    return rows


def decision_rows(r: dict[str, Any]) -> list[list[Any]]:
    """The autoscaler's decisions (at most DECISIONS_SHOWN), as cells: time, the trigger values,
    what the rule recommended, the replicas asked for and those serving."""
    out = []
    for i, d in enumerate(r["autoscaler"]["decisions"][:DECISIONS_SHOWN]):
        at, values = ["autoscaler", "decisions", i], d.get("values") or {}
        out.append([_fig(d["t"], [*at, "t"], " s", 1),
                    *(_fig(values.get(k), [*at, "values", k], "", digits, "not read")
                      for k, digits in (("running", 1), ("waiting", 1), ("kv-cache", 3))),
                    _fig(d["recommended"], [*at, "recommended"], "", 0),
                    _fig(d["replicas"], [*at, "replicas"], "", 0), _fig(d["ready"], [*at, "ready"], "", 0)])
    return out


DECISION_HEAD = ["Time into the trace", "Running", "Waiting", "KV-cache usage", "Rule recommends", "Asked for",
                 "Serving"]


def decisions_more(r: dict[str, Any]) -> str | None:
    left = len(r["autoscaler"]["decisions"]) - DECISIONS_SHOWN
    return f"{left} later decisions are in summary.json (`rehearsal.autoscaler.decisions`)." if left > 0 else None


def _plain(parts: list[Any]) -> str:
    return "".join(p if isinstance(p, str) else p[0] for p in parts)


def rehearsal_markdown(r: dict[str, Any] | None, heading: str = "##") -> list[str]:
    if r is None:
        return ["", f"{heading} Rehearsal", "", NO_REHEARSAL]
    lines = ["", f"{heading} Rehearsal: the {r['pool']} pool ({r.get('configuration') or 'unnamed'})", "",
             "| | |", "|---|---|"]
    lines += [f"| {label} | {_plain(parts)} |" for label, parts in rehearsal_rows(r)]
    lines += ["", REHEARSAL_NOTE, "", "The autoscaler's decisions (each read where the rule's recommendation, the "
              "replicas asked for or those serving changed):", ""]
    rows = decision_rows(r)
    if rows:
        lines += ["| " + " | ".join(DECISION_HEAD) + " |", "|" + "---:|" * len(DECISION_HEAD)]
        lines += ["| " + " | ".join(_plain([c]) for c in row) + " |" for row in rows]
    else:
        lines.append("None: no metrics were read during the trace.")
    more = decisions_more(r)
    return lines + (["", more] if more else [])
