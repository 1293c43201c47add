"""Fleet sizing: the replicas that carry a load at the SLO, and what they cost.

Plain arithmetic over per-replica capacities (`Capacity`, an interval [lo, hi] where the capacity
under the SLO is known only between two tested loads) and a load per scenario (a fleet's, a
reference's, or stated request rates, alone or as a mix). `bench plan` (bench/analysis/plan.py)
reads the sweeps, builds these inputs and writes what `build_plan` returns.

Replicas = ceil(needed / (1 - headroom)) + spares. Where a capacity is an interval, so is the
count: its low end puts the smallest possible load on the highest possible capacity, its high end
the largest load on the lowest capacity. Costs are for the count that carries the load whatever
the true capacity (the high end); a month is 730 hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP

HOURS_PER_MONTH = 730.0
EPS = 1e-9
INF = math.inf


class UsageError(ValueError):
    """Input the plan cannot use (a load without a common unit with the capacity, a bad option)."""


@dataclass
class Capacity:
    """Per-replica capacity (or load) of one configuration in one scenario, as [lo, hi] ends.

    `tok_s` / `req_s` are the point values (the low ends); `tok_hi` / `req_hi` the high ends (INF:
    no upper bound). `state` is meets_slo, never_meets_slo or no_data."""

    tok_s: float | None
    req_s: float | None
    basis: str  # peak, grid, search, open_loop, reference, stated
    output_len: int | None = None
    tok_hi: float | None = None
    req_hi: float | None = None
    state: str = CAP.MEETS
    words: str = ""
    run: str = ""  # the run the figure came from, in words (load, closed or open loop, file)
    # the run-to-run bands (fractions) that widened the low and the high end (bench.analysis.capacity.interval.Capacity)
    band_lo: float = 0.0
    band_hi: float = 0.0
    more: str = ""  # what measures beyond an open upper end (bench.analysis.verdict.higher_load_advice)
    point: float | None = None  # the capacity figure inside [tok_s, tok_hi] (bench.analysis.capacity.interval.figure)
    adjacent: bool = False  # its bracket is two neighbouring concurrencies (bench.analysis.verdict.adjacent)

    def __post_init__(self) -> None:
        if self.tok_hi is None:
            self.tok_hi = self.tok_s
        if self.req_hi is None:
            self.req_hi = self.req_s

    @property
    def known(self) -> bool:
        return self.state == CAP.MEETS or (self.state == CAP.NEVER and self.tok_s is not None)

    def tok(self, end: str) -> float | None:
        return self.tok_s if end == "lo" else self.tok_hi

    def req(self, end: str) -> float | None:
        return self.req_s if end == "lo" else self.req_hi


@dataclass
class Config:
    label: str
    instance_type: str | None
    gpus: int
    on_demand: float | None
    spot: float | None
    capacities: dict[str, Capacity]
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)
    lengths: dict[str, int | None] = field(default_factory=dict)


def replicas_for(needed: float, headroom: float, spares: int) -> int | None:
    """Replicas that carry `needed` replica-loads at (1 - headroom) utilisation, plus spares;
    None for an unbounded need."""
    if math.isinf(needed):
        return None
    return max(1, math.ceil(needed / (1.0 - headroom) - EPS)) + spares


def _times(v: float | None, n: float) -> float | None:
    return None if v is None else v * n


def fleet_load(current: int, base: dict[str, Capacity]) -> dict[str, Capacity]:
    """What `current` replicas of a configuration serve per scenario (as a Capacity)."""
    return {s: Capacity(_times(c.tok_s, current), _times(c.req_s, current), c.basis, c.output_len,
                        _times(c.tok_hi, current), _times(c.req_hi, current), c.state, c.words,
                        band_lo=c.band_lo, band_hi=c.band_hi, more=c.more, adjacent=c.adjacent)
            for s, c in base.items()}


def reference_load(current: int, gpus: int, reference: dict[str, float], lengths: dict[str, int | None]
                   ) -> dict[str, Capacity]:
    out = {}
    for s, tok in reference.items():
        total = tok * gpus * current
        out_len = lengths.get(s)
        out[s] = Capacity(total, total / out_len if out_len else None, "reference", out_len)
    return out


# The two ends of a need: the smallest load on the largest capacity, the largest load on the smallest.
ENDS = {"low": ("lo", "hi"), "high": ("hi", "lo")}


def band_credit(x: float, y: float) -> float:
    """How far two independent capacities' run-to-run bands, combined in quadrature, lie inside the
    same bands at their worst on both sides at once: (1 + x)(1 + y) / (1 + hypot(x, y)); 1 without bands.
    The verdict's ratio interval takes its ends this way (bench.analysis.verdict.ratio_interval)."""
    return (1 + x) * (1 + y) / (1 + math.hypot(x, y))


def _ratio(demand: float, capacity: float) -> float:
    if math.isinf(demand):
        return INF
    if math.isinf(capacity):
        return 0.0
    return demand / capacity if capacity > 0 else INF


@dataclass
class Need:
    """Replica-loads a configuration needs, as an interval, or why it cannot be computed."""

    low: float | None = None
    high: float | None = None
    served_tok_s: float | None = None
    reason: str | None = None
    never: bool = False  # the configuration never meets the SLO in a scenario the load needs
    binding: str | None = None
    sources: set[str] = field(default_factory=set)
    open_baseline: dict[str, str] = field(default_factory=dict)  # scenario: what measures beyond it
    adjacent: bool = False  # every capacity it divides is bracketed by neighbouring concurrencies
    # The fleet's request rate per scenario at the high end of the load, where the load is a mix or
    # stated per scenario: what the mixed-traffic check offers one replica (divided by the count).
    rates: dict[str, float] = field(default_factory=dict)


def needed_replicas(cand: dict[str, Capacity], load: dict[str, Capacity], mix: dict[str, float],
                    stated: bool, notes: list[str], label: str) -> Need:
    """The replica-loads `label` needs for the load (an interval), or the reason there is none."""
    usable = {}
    for s, demand in load.items():
        if demand.state == CAP.NEVER:
            notes.append(f"{s}: the baseline never meets the SLO at the loads tested, so the load its replicas "
                         "carry within the SLO is unknown; left out")
            continue
        if demand.tok_s is None and demand.req_s is None:
            notes.append(f"{s}: the current load is unknown ({demand.words or 'no usable run'}); left out")
            continue
        usable[s] = demand
    if not usable:
        return Need(reason="no scenario has a known current load: give --reference or --load, or measure the "
                           "baseline's scenarios")
    for s in usable:
        c = cand.get(s)
        if c is None or c.state == CAP.NO_DATA:
            return Need(reason=f"{s} has no usable run in {label}, so its capacity is unknown: run the scenario "
                               f"(`bench sweep --scenarios {s} --resume` against {label})")
        if c.state == CAP.NEVER and not c.tok_hi:
            return Need(reason=f"{label} never meets the SLO in {s} at the loads tested: {c.words}", never=True)
    need = Need()
    need.sources = {cand[s].basis for s in usable} | {d.basis for d in usable.values()}
    need.open_baseline = {s: d.more for s, d in usable.items() if d.tok_hi is not None and math.isinf(d.tok_hi)}
    need.adjacent = all(cand[s].adjacent and d.adjacent for s, d in usable.items())

    def per_scenario(s: str, end: str) -> float:
        d_end, c_end = ENDS[end]
        demand, c = usable[s], cand[s]
        # A load that is another side's measured capacity (a fleet of the baseline) divides as the
        # verdict's ratio does: the two sides' bands combined in quadrature, not at their worst at once.
        d_band, c_band = (demand.band_lo, c.band_hi) if end == "low" else (demand.band_hi, c.band_lo)
        credit = band_credit(d_band, c_band)
        credit = credit if end == "low" else 1 / credit
        if demand.tok(d_end) is not None and c.tok(c_end) is not None:
            return _ratio(demand.tok(d_end), c.tok(c_end)) * credit
        if demand.req(d_end) is not None and c.req(c_end) is not None:
            return _ratio(demand.req(d_end), c.req(c_end)) * credit
        raise UsageError(f"{s}: load and capacity have no common unit (output length unknown)")

    for end in ("low", "high"):
        d_end, c_end = ENDS[end]
        if mix:
            shares = {s: mix[s] for s in usable if s in mix}
            total_share = sum(shares.values())
            if total_share <= 0:
                return Need(reason="--mix names none of the scenarios with a known load")
            # The total request rate the current fleet carries at this mix: each scenario alone would
            # fill it at d.req_s, so sum(share / d.req_s) x rate = one fleet.
            per_req = []
            for s, f in shares.items():
                if not usable[s].req(d_end):
                    raise UsageError(f"--mix: {s} has no request rate (output length unknown)")
                per_req.append(0.0 if math.isinf(usable[s].req(d_end)) else f / total_share / usable[s].req(d_end))
            total_rate = INF if sum(per_req) == 0 else 1.0 / sum(per_req)
            needed, served = 0.0, 0.0
            for s, f in shares.items():
                rate = total_rate * f / total_share
                c = cand[s]
                if c.req(c_end) is None:
                    raise UsageError(f"--mix: {label} has no req/s for {s}")
                needed += _ratio(rate, c.req(c_end))
                if end == "high" and not math.isinf(rate):
                    need.rates[s] = rate
                out_len = c.output_len or (c.tok_s / c.req_s if c.tok_s and c.req_s else 0)
                served += rate * out_len
            value = needed
        elif stated:
            needs = {s: per_scenario(s, end) for s in usable}
            value = sum(needs.values())
            served = sum((d.tok_s if d.tok_s is not None else d.req_s * (cand[s].output_len or 0))
                         for s, d in usable.items())
            if end == "high":  # stated loads add up too: every scenario at its own rate
                need.rates.update({s: d.req_s for s, d in usable.items() if d.req_s is not None})
        else:
            needs = {s: per_scenario(s, end) for s in usable}
            binding = max(needs, key=needs.get)
            value = needs[binding]
            d = usable[binding]
            served = d.tok(d_end)
            if end == "high":
                need.binding = binding
                if not math.isinf(value):
                    notes.append(f"{label}: binding scenario {binding} ({value:.3f} replica-loads at the high end)")
        if end == "low":
            need.low = value
        else:
            need.high = value
            need.served_tok_s = None if served is None or math.isinf(served) else served
    return need


def price_row(replicas: int | None, od: float | None, spot: float | None, served_tok_s: float | None
              ) -> dict[str, Any]:
    def hour(p):
        return round(replicas * p, 4) if replicas is not None and p is not None else None

    h_od, h_spot = hour(od), hour(spot)
    per_m = None
    price = h_od if h_od is not None else h_spot
    if price is not None and served_tok_s:
        per_m = round(price / (served_tok_s * 3600 / 1e6), 4)
    return {
        "usd_hour_on_demand": h_od,
        "usd_hour_spot": h_spot,
        "usd_month_on_demand": round(h_od * HOURS_PER_MONTH, 2) if h_od is not None else None,
        "usd_month_spot": round(h_spot * HOURS_PER_MONTH, 2) if h_spot is not None else None,
        "usd_per_million_output_tokens": per_m,
    }


def range_reason(need: Need, label: str) -> str:
    """Why a replica count is a range, and what narrows it."""
    tips = []
    if need.open_baseline:
        more = "; ".join(dict.fromkeys(f"{s}: {a}" for s, a in need.open_baseline.items() if a))
        tips.append(f"the baseline still meets the SLO at its highest load tested in {', '.join(need.open_baseline)}, "
                    "so the load its replicas carry has no upper bound" + (f" ({more})" if more else ""))
    if CAP.GRID in need.sources:
        tips.append("run the capacity search to narrow it (`bench sweep --capacity-search --resume` on "
                    f"{label} and the baseline: the grid is kept, only the search runs are added)")
    elif CAP.SEARCH in need.sources:
        tips.append(V.search_tip(need.adjacent))
    elif CAP.OPEN_LOOP in need.sources:
        tips.append("the open-loop rate search narrows it with more budget (`bench sweep --capacity-search "
                    "--open-loop always --resume --budget-minutes MINUTES`)")
    return "the capacity under the SLO is known only as an interval; " + "; ".join(tips or ["measure more loads"])


def build_plan(candidates: list[Config], *, basis: str, headroom: float, spares: int,
               load: dict[str, Capacity], stated: bool, mix: dict[str, float],
               current: int | None, current_config: Config | None) -> tuple[dict[str, Any], list[str], list[str]]:
    """(plan.json, notes, labels of the configurations that never meet the SLO where the load needs it)."""
    notes: list[str] = []
    configs = []
    never: list[str] = []
    for cfg in candidates:
        need = needed_replicas(cfg.capacities, load, mix, stated, notes, cfg.label)
        replicas, span, reason = None, None, need.reason
        if need.reason is None:
            lo = replicas_for(need.low, headroom, spares)
            hi = replicas_for(need.high, headroom, spares)
            span = [lo, hi]
            if lo is not None and lo == hi:
                replicas = lo
            else:
                reason = range_reason(need, cfg.label)
        priced = replicas if replicas is not None else (span[1] if span else None)
        configs.append({"label": cfg.label, "instance_type": cfg.instance_type, "gpus": cfg.gpus,
                        "replicas": replicas, "replicas_range": span, "reason": reason,
                        **price_row(priced, cfg.on_demand, cfg.spot, need.served_tok_s)})
        if need.rates and priced is not None:
            # What one working replica carries at the mix (spares idle): the mixed-traffic check's load.
            working = max(1, priced - spares)
            configs[-1]["per_replica_req_s"] = {k: round(v / working, 4) for k, v in sorted(need.rates.items())}
        if need.never:
            never.append(cfg.label)
    cur = None
    if current is not None:
        usd = None
        if current_config is not None:
            price = current_config.on_demand if current_config.on_demand is not None else current_config.spot
            usd = round(current * price * HOURS_PER_MONTH, 2) if price is not None else None
        cur = {"replicas": current, "usd_month": usd}
    return {"basis": basis, "headroom": headroom, "spares": spares, "configurations": configs,
            "current": cur}, notes, never


def replicas_text(row: dict[str, Any], never: list[str] | tuple[str, ...] = ()) -> str:
    """'4', '4-6', '4 or more', or 'unknown' / 'cannot meet the load' (the reason says why)."""
    if row["replicas"] is not None:
        return str(row["replicas"])
    span = row.get("replicas_range")
    if span:
        lo, hi = span
        return f"{lo} or more" if hi is None else f"{lo}-{hi}"
    return "cannot meet the load" if row["label"] in never else "unknown"

