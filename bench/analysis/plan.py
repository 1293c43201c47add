"""`python -m bench plan CANDIDATE_DIR... --out OUT`: how many replicas serve the load, at what cost.

The question behind the benchmark is a fleet size: can 12 replicas become 8, or 4, with users
still inside the SLO? The plan answers it from sweep folders (the same files `bench report` reads):

    python -m bench plan results/g7e --baseline results/l40s --current-replicas 12 --out plan/
    python -m bench plan results/g7e --reference S1_chat=420,S2_summary=180 --current-replicas 12 --out plan/
    python -m bench plan results/g7e --load S1_chat=20,S4_rag=2 --headroom 0.2 --spares 1 --out plan/

Load, per scenario:
- `--baseline DIR --current-replicas N`: what N replicas of the baseline serve (its capacity per
  replica times N);
- `--reference S=TOK_S,...` (the output tok/s per GPU that production serves today, which a
  benchmark cannot measure) with `--current-replicas N` and `--current-gpus-per-replica G`:
  N x G x reference;
- `--load S=REQ_S,...`: a stated request rate per scenario (or one total with `--mix`).
Scenario names are checked against the sweeps (a misspelt name exits 2 with the closest match).

Capacity per replica of each configuration (basis `--basis`): `slo` = the capacity under the SLO
as `bench report` computes it: an interval between the highest load meeting the SLO and the lowest
load above it missing it (grid, or the capacity search's tighter bracket; the open loop's offered
rates where every configuration ran it and bracketed its rate capacity: the same kind for all,
never mixed); `peak` = the peak
output tok/s (the PoC report's method).

Replicas = ceil(needed / (1 - headroom)) + spares, where needed is, without `--mix`, the largest
per-scenario need for a fleet-derived load (the fleet may be busy with any one scenario) and the
sum for stated loads; with `--mix S=share,...` (shares of requests, adding up to 1) the scenarios
share replicas in proportion (assuming they add up). With a mix (or stated loads) each
configuration lists `per_replica_req_s`, the load one working replica carries at the planned count;
`bench mix-check` runs that load on a server, all scenarios at once, and `--mixed-traffic` puts
its finding in the plan (did the scenarios add up?). Where a capacity is an interval, so is the
replica count: the low end divides the smallest possible load by the highest possible capacity,
the high end the largest load by the lowest capacity ("4-6 replicas"; the capacity search narrows
it); an open end of the baseline's capacity leaves the count without an upper bound. Costs:
replicas x the hourly price (on-demand and Spot; `--price-per-hour [LABEL=]ON_DEMAND[/SPOT]`, else
the manifest, else the instance catalog), a month = 730 hours, at the high end of a range (the
count that carries the load whatever the true capacity); cost per million output tokens at the
planned load, on-demand.

plan.json: {"basis", "headroom", "spares", "configurations": [{"label", "instance_type", "gpus",
"replicas" (int, or null unless known exactly), "replicas_range" ([lo, hi], hi null = no upper
bound; null when it cannot be computed), "reason" (null when replicas is known; else why, and what
narrows or settles it), "usd_hour_on_demand", "usd_hour_spot", "usd_month_on_demand",
"usd_month_spot", "usd_per_million_output_tokens", "per_replica_req_s" (with a mix or stated
loads)}], "current": {"replicas", "usd_month"} | null, "mixed_traffic" (with --mixed-traffic)}.

Writes plan.md, plan.json, plan.png (replicas and monthly cost per configuration, each bar labelled
with its value; an unknown count gets no bar, a range a solid bar to its low end, hatched on to its
high end) and plan.html (the same as one self-contained page; `--no-html` to skip). Folders may be
s3://bucket/prefix/ (inputs downloaded first, --out uploaded file by file). Exit 0 when written
(counts, ranges or stated reasons), 1 when some candidate never meets the SLO in a scenario the
load needs (a measured limit), 2 on bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.analysis import capacity_report as CR
from bench.common import locations
from bench.analysis import report as RP
from bench.analysis import verdict as V

HOURS_PER_MONTH = 730.0
EPS = 1e-9
INF = math.inf
MIX_TOLERANCE = 0.001


class UsageError(ValueError):
    pass


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
    state: str = V.MEETS
    words: str = ""

    def __post_init__(self) -> None:
        if self.tok_hi is None:
            self.tok_hi = self.tok_s
        if self.req_hi is None:
            self.req_hi = self.req_s

    @property
    def known(self) -> bool:
        return self.state == V.MEETS or (self.state == V.NEVER and self.tok_s is not None)

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


# ---------------------------------------------------------------------------------------------
# Inputs


def parse_pairs(text: str | None, option: str, *, allow_total: bool = False) -> dict[str, float]:
    if not text:
        return {}
    out: dict[str, float] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep and allow_total:
            name, value = "*", name
        try:
            number = float(value)
            if not name or not math.isfinite(number) or number < 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"{option} {item}: expected SCENARIO=NUMBER (non-negative), e.g. S1_chat=4.2") from None
        out[name.strip()] = number
    return out


def parse_prices(items: list[str] | None) -> dict[str | None, tuple[float | None, float | None]]:
    out: dict[str | None, tuple[float | None, float | None]] = {}
    for item in items or []:
        label, sep, value = item.rpartition("=")
        od, _, spot = value.partition("/")
        try:
            pair = (float(od) if od else None, float(spot) if spot else None)
            if any(p is not None and p < 0 for p in pair) or pair == (None, None):
                raise ValueError
        except ValueError:
            raise UsageError(f"--price-per-hour {item}: expected [LABEL=]ON_DEMAND[/SPOT] in USD, "
                             "e.g. g7e=4.13/1.50") from None
        out[label if sep else None] = pair
    return out


def catalog_prices(instance_type: str | None) -> tuple[float | None, float | None]:
    if not instance_type:
        return None, None
    try:  # the stacks package is present on a laptop, not in the benchmark Job
        from stacks import catalog
    except ImportError:
        return None, None
    entry = catalog.GPU_INSTANCE_TYPES.get(instance_type)
    return (entry.on_demand_usd_hour, entry.spot_usd_hour) if entry else (None, None)


def side_prices(side: RP.Side, given: dict[str | None, tuple[float | None, float | None]]
                ) -> tuple[float | None, float | None]:
    if side.label in given:
        return given[side.label]
    m = side.manifest or {}
    cat_od, cat_spot = catalog_prices(m.get("instance_type"))
    hardware = m.get("hardware") if isinstance(m.get("hardware"), dict) else {}
    prices = hardware.get("prices") if isinstance(hardware.get("prices"), dict) else {}
    od = prices.get("on-demand", prices.get("on_demand"))
    spot = prices.get("spot")
    if od is None and spot is None and m.get("price_per_hour") is not None:
        if m.get("capacity_type") == "spot":
            spot = m.get("price_per_hour")
        else:
            od = m.get("price_per_hour")
    if None in given and (od is None and spot is None):
        od, spot = given[None]
    return (od if od is not None else cat_od), (spot if spot is not None else cat_spot)


def _from_interval(cap: V.Capacity, out_len: int | None) -> Capacity:
    if not cap.known:
        return Capacity(None, None, cap.source, out_len, state=V.NO_DATA, words=V.capacity_text(cap))
    req_lo, req_hi = cap.req_lo, cap.req_hi
    if req_lo is None and out_len:
        req_lo = cap.lo / out_len
    if req_hi is None and out_len:
        req_hi = cap.hi / out_len
    return Capacity(cap.lo, req_lo, cap.source, out_len, cap.hi, req_hi, cap.state, V.capacity_text(cap))


def capacities(side: RP.Side, basis: str, slo: dict[str, Any]) -> tuple[dict[str, Capacity], dict[str, Any]]:
    """(peak capacities on the peak basis, else {}; the SLO intervals per scenario on the slo basis)."""
    out: dict[str, Capacity] = {}
    intervals: dict[str, Any] = {}
    if basis == "slo":
        usable = [r for r in side.runs if side.usable(r)]
        intervals = CR.scenario_capacity(side.path, usable, ttft_ms=slo["ttft_p99_ms"],
                                         decode_ms=slo["decode_p99_ms"], decode_metric=slo["decode_metric"])
        for name in side.scenarios:
            intervals.setdefault(name, {"closed": V.Capacity(V.GRID, V.NO_DATA), "open": None})
        return out, intervals
    for name in side.scenarios:
        out_len = side.lengths.get(name, (None, None))[1]
        top = RP.peak(side.valid(name))
        out[name] = (Capacity(top.output_tok_s, top.req_s, "peak", out_len) if top
                     else Capacity(None, None, "peak", out_len, state=V.NO_DATA, words="no usable run"))
    return out, intervals


def settle_slo_kind(configs: list[Config]) -> None:
    """SLO capacities of the same kind in every configuration: open loop per scenario where all of
    them ran it and bracketed their rate capacity (as `bench report` pairs them), else closed loop
    (never one kind against the other)."""
    names: list[str] = []
    for cfg in configs:
        names += [n for n in cfg.intervals if n not in names]
    for name in names:
        entries = [cfg.intervals.get(name) for cfg in configs]
        kind = "open" if all(e and V.bounded(e.get("open")) for e in entries) else "closed"
        for cfg in configs:
            entry = cfg.intervals.get(name)
            if entry is not None:
                cfg.capacities[name] = _from_interval(entry[kind], cfg.lengths.get(name))


def load_config(path: Path, basis: str, slo: dict[str, Any], prices) -> Config:
    if not path.is_dir():
        raise UsageError(f"no such sweep folder: {path}")
    side = RP.load_side(path)
    if not side.runs:
        raise UsageError(f"{path}: no results or manifest (a `bench sweep --out` or `bench fetch` folder)")
    od, spot = side_prices(side, prices)
    caps, intervals = capacities(side, basis, slo)
    lengths = {name: side.lengths.get(name, (None, None))[1] for name in side.scenarios}
    return Config(side.label, (side.manifest or {}).get("instance_type"), side.gpus, od, spot, caps, intervals,
                  lengths)


def check_names(given: dict[str, Any], known: list[str], option: str) -> None:
    """Exit 2 on a scenario name the sweeps do not have, with the closest match."""
    for name in given:
        if name == "*" or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"{option}: no scenario named {name} in the sweeps{hint}; they have "
                         f"{', '.join(known) or 'no scenario'}")


def check_mix(mix: dict[str, float]) -> None:
    total = sum(mix.values())
    if mix and abs(total - 1.0) > MIX_TOLERANCE:
        raise UsageError(f"--mix: the shares add up to {total:g}, not 1; give each scenario's share of the "
                         "requests, e.g. S1_chat=0.4,S2_summary=0.6")


# ---------------------------------------------------------------------------------------------
# Math


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
                        _times(c.tok_hi, current), _times(c.req_hi, current), c.state, c.words)
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
    open_baseline: list[str] = field(default_factory=list)
    # The fleet's request rate per scenario at the high end of the load, where the load is a mix or
    # stated per scenario: what the mixed-traffic check offers one replica (divided by the count).
    rates: dict[str, float] = field(default_factory=dict)


def needed_replicas(cand: dict[str, Capacity], load: dict[str, Capacity], mix: dict[str, float],
                    stated: bool, notes: list[str], label: str) -> Need:
    """The replica-loads `label` needs for the load (an interval), or the reason there is none."""
    usable = {}
    for s, demand in load.items():
        if demand.state == V.NEVER:
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
        if c is None or c.state == V.NO_DATA:
            return Need(reason=f"{s} has no usable run in {label}, so its capacity is unknown: run the scenario "
                               f"(`bench sweep --scenarios {s} --resume` against {label})")
        if c.state == V.NEVER and not c.tok_hi:
            return Need(reason=f"{label} never meets the SLO in {s} at the loads tested ({c.words})", never=True)
    need = Need()
    need.sources = {cand[s].basis for s in usable} | {d.basis for d in usable.values()}
    need.open_baseline = [s for s, d in usable.items() if d.tok_hi is not None and math.isinf(d.tok_hi)]

    def per_scenario(s: str, end: str) -> float:
        d_end, c_end = ENDS[end]
        demand, c = usable[s], cand[s]
        if demand.tok(d_end) is not None and c.tok(c_end) is not None:
            return _ratio(demand.tok(d_end), c.tok(c_end))
        if demand.req(d_end) is not None and c.req(c_end) is not None:
            return _ratio(demand.req(d_end), c.req(c_end))
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
        tips.append(f"the baseline still meets the SLO at its highest load tested in {', '.join(need.open_baseline)}, "
                    "so the load its replicas carry has no upper bound: add higher concurrencies to its sweep "
                    "(`bench sweep --concurrencies ...,128 --resume`)")
    if V.GRID in need.sources:
        tips.append("run the capacity search to narrow it (`bench sweep --capacity-search --resume` on "
                    f"{label} and the baseline: the grid is kept, only the search runs are added)")
    elif V.SEARCH in need.sources:
        tips.append("narrow the capacity search (a smaller --search-bracket, or a larger --extra-budget where "
                    "the budget stopped it)")
    elif V.OPEN_LOOP in need.sources:
        tips.append("add offered rates near the rate capacity (`--open-loop-rates`)")
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


# ---------------------------------------------------------------------------------------------
# Output


BASIS_WORDS = {
    "slo": "capacity under the SLO, an interval per configuration between two tested loads (grid or capacity "
           "search; open-loop rate capacity where every configuration ran it and bracketed it; never mixed)",
    "peak": "peak output tok/s (the PoC report's method)",
}


def render_markdown(plan: dict[str, Any], notes: list[str], load_desc: str, candidates: list[Config],
                    chart: str | None, never: list[str] | tuple[str, ...] = ()) -> str:
    lines = ["# Replica plan", "",
             f"- Basis: {BASIS_WORDS[plan['basis']]}",
             f"- Load: {load_desc}",
             f"- Headroom: {plan['headroom']:.0%} (replicas run at most at {1 - plan['headroom']:.0%} of capacity); "
             f"spares: {plan['spares']} (Spot interruptions, rollouts)",
             "- Replicas = ceil(needed replica-loads / (1 - headroom)) + spares. Where a capacity is an interval, "
             "the count is a range: its low end puts the smallest possible load on the highest possible capacity, "
             "its high end the largest load on the lowest capacity. Costs are for the high end of a range (the "
             "count that carries the load whatever the true capacity); a month is 730 hours; cost per million "
             "output tokens at the planned load, on-demand price (Spot where on-demand is unknown).",
             ""]
    if plan["current"]:
        c = plan["current"]
        usd = f"${c['usd_month']:,.0f}/month" if c["usd_month"] is not None else "cost unknown"
        lines += [f"Current fleet: {c['replicas']} replicas ({usd}).", ""]
    lines += ["| Configuration | Instance type | GPUs | Replicas | On-demand $/h | Spot $/h | On-demand $/month "
              "| Spot $/month | $ per million output tokens |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def money(v, digits=2):
        return "-" if v is None else f"{v:,.{digits}f}"

    for row in plan["configurations"]:
        lines.append(f"| {row['label']} | {row['instance_type'] or 'unknown'} | {row['gpus']} "
                     f"| {replicas_text(row, never)} "
                     f"| {money(row['usd_hour_on_demand'])} | {money(row['usd_hour_spot'])} "
                     f"| {money(row['usd_month_on_demand'], 0)} | {money(row['usd_month_spot'], 0)} "
                     f"| {money(row['usd_per_million_output_tokens'], 3)} |")
    reasons = [row for row in plan["configurations"] if row["reason"]]
    if reasons:
        lines += ["", "Where the count is not a single number:", ""]
        lines += [f"- {row['label']} ({replicas_text(row, never)}): {row['reason']}" for row in reasons]
    lines += ["", "## Capacity per replica", "", "| Configuration | Scenario | Output tok/s | req/s | Basis |",
              "|---|---|---|---|---|"]
    for cfg in candidates:
        for s, c in cfg.capacities.items():
            lines.append(f"| {cfg.label} | {s} | {_span(c.tok_s, c.tok_hi, c)} | {_span(c.req_s, c.req_hi, c, 3)} "
                         f"| {V.SOURCE_WORDS.get(c.basis, c.basis)} |")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if plan.get("mixed_traffic"):
        from bench.run import mixcheck

        lines += mixcheck.plan_section(plan["mixed_traffic"], plan["configurations"])
    if chart:
        lines += ["", f"![replicas and monthly cost]({chart})"]
    return "\n".join(lines) + "\n"


def _span(lo: float | None, hi: float | None, cap: Capacity, digits: int = 1) -> str:
    if cap.state == V.NO_DATA or lo is None:
        return "unknown (no usable run)" if cap.state == V.NO_DATA else "unknown"
    if cap.state == V.NEVER and not hi:
        return "0 (never meets the SLO)"
    if hi is None or hi == lo:
        return f"{lo:,.{digits}f}"
    if math.isinf(hi):
        return f"{lo:,.{digits}f} or more"
    return f"{lo:,.{digits}f} to {hi:,.{digits}f}"


def render_chart(plan: dict[str, Any], out: Path) -> str | None:
    try:
        from bench.analysis import charts
    except ImportError:
        return None
    fig = charts.plan_figure(plan)
    fig.savefig(out / "plan.png", dpi=100)
    charts.close(fig)
    locations.written(out / "plan.png")
    return "plan.png"


# ---------------------------------------------------------------------------------------------
# Command


def make_plan(args: argparse.Namespace) -> tuple[dict[str, Any], str, list[str]]:
    if args.basis not in ("slo", "peak"):
        raise UsageError(f"--basis must be slo or peak, got {args.basis}")
    if not 0 <= args.headroom < 1:
        raise UsageError(f"--headroom must be in [0, 1), got {args.headroom}")
    if args.spares < 0:
        raise UsageError(f"--spares must be >= 0, got {args.spares}")
    sources = [bool(args.baseline), bool(args.reference), bool(args.load)]
    if sum(sources) != 1:
        raise UsageError("give exactly one load: --baseline DIR --current-replicas N, --reference "
                         "S=TOK_S,... --current-replicas N, or --load S=REQ_S,...")
    if (args.baseline or args.reference) and not args.current_replicas:
        raise UsageError("--baseline and --reference need --current-replicas (the fleet they serve today)")
    if args.current_replicas is not None and args.current_replicas < 1:
        raise UsageError(f"--current-replicas must be >= 1, got {args.current_replicas}")
    slo = {"ttft_p99_ms": args.slo_ttft_p99_ms, "decode_p99_ms": args.slo_decode_p99_ms,
           "decode_metric": args.slo_decode_metric}
    prices = parse_prices(args.price_per_hour)
    mix = parse_pairs(args.mix, "--mix")
    ref = parse_pairs(args.reference, "--reference") if args.reference else {}
    given = parse_pairs(args.load, "--load", allow_total=True) if args.load else {}
    check_mix(mix)
    candidates = [load_config(Path(d), args.basis, slo, prices) for d in args.candidates]
    current_config = load_config(Path(args.baseline), args.basis, slo, prices) if args.baseline else None
    known: list[str] = []
    for cfg in candidates + ([current_config] if current_config else []):
        known += [n for n in cfg.lengths if n not in known]
    check_names(ref, known, "--reference")
    check_names(given, known, "--load")
    check_names(mix, known, "--mix")
    if args.basis == "slo":
        settle_slo_kind(candidates + ([current_config] if current_config else []))
    lengths: dict[str, int | None] = {}
    for cfg in candidates:
        for s, n in cfg.lengths.items():
            lengths.setdefault(s, n)
    stated = False
    if args.baseline:
        load = fleet_load(args.current_replicas, current_config.capacities)
        desc = (f"what {args.current_replicas} replicas of {current_config.label} serve at the same basis")
    elif args.reference:
        load = reference_load(args.current_replicas, args.current_gpus_per_replica, ref, lengths)
        desc = (f"{args.current_replicas} replicas x {args.current_gpus_per_replica} GPU(s) x the production "
                f"per-GPU throughput ({', '.join(f'{k} {v:g} tok/s' for k, v in ref.items())})")
        if prices.get("current"):
            od, spot = prices["current"]
            current_config = Config("current", None, args.current_gpus_per_replica, od, spot, {})
    else:
        stated = True
        if "*" in given:
            if not mix or len(given) > 1:
                raise UsageError("--load with one total rate needs --mix S=share,... and no per-scenario rates")
            total = given.pop("*")
            given = {s: total * f for s, f in mix.items()}
        load = {s: Capacity(None, r, "stated", lengths.get(s)) for s, r in given.items()}
        desc = "stated: " + ", ".join(f"{k} {v:g} req/s" for k, v in given.items())
    if mix:
        desc += "; mix " + ", ".join(f"{k} {v:g}" for k, v in mix.items())
    plan, notes, never = build_plan(candidates, basis=args.basis, headroom=args.headroom, spares=args.spares,
                                    load=load, stated=stated, mix={} if stated else mix,
                                    current=args.current_replicas if not stated or args.current_replicas else None,
                                    current_config=current_config)
    if getattr(args, "mixed_traffic", None):
        from bench.run import mixcheck

        plan["mixed_traffic"] = mixcheck.load_check(Path(args.mixed_traffic))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chart = None if args.no_charts else render_chart(plan, out)
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    locations.written(out / "plan.json")
    (out / "plan.md").write_text(render_markdown(plan, notes, desc, candidates, chart, never), encoding="utf-8")
    locations.written(out / "plan.md")
    if not getattr(args, "no_html", False):
        from bench.analysis import pages

        pages.write_plan(out, plan, notes, desc, candidates, charts=not args.no_charts)
        locations.written(out / "plan.html")
    return plan, desc, never


def run(args: argparse.Namespace) -> int:
    try:
        plan, _, never = make_plan(args)
    except UsageError as exc:
        print(f"bench plan: {exc}", file=sys.stderr)
        return 2
    for row in plan["configurations"]:
        count = replicas_text(row, never)
        line = f"bench plan: {row['label']}: {count}"
        line += " replicas" if row["replicas_range"] else ""
        line += f" ({plan['basis']} basis)"
        if row["reason"]:
            line += f"; {row['reason']}"
        print(line)
    print(f"bench plan: -> {locations.display(Path(args.out) / 'plan.md')}, plan.json"
          + ("" if args.no_html else ", plan.html"))
    return 1 if never else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="replicas and cost that serve a load at the SLO",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("candidates", nargs="+", metavar="CANDIDATE_DIR",
                   help="sweep folder(s) of the candidate(s), or their s3://bucket/prefix/")
    p.add_argument("--out", required=True,
                   help="folder for plan.md, plan.json and plan.png, or s3://bucket/prefix/ (uploaded as written)")
    p.add_argument("--baseline", help="sweep folder (or s3://bucket/prefix/) of the hardware serving today")
    p.add_argument("--current-replicas", type=int, help="replicas serving today (e.g. 12)")
    p.add_argument("--current-gpus-per-replica", type=int, default=1,
                   help="GPUs per current replica, for --reference (default: %(default)s)")
    p.add_argument("--reference", help="production output tok/s per GPU per scenario, e.g. S1_chat=420,S4_rag=80")
    p.add_argument("--load", help="request rate per scenario, e.g. S1_chat=20,S4_rag=2 (or one total with --mix)")
    p.add_argument("--mix", help="shares of requests per scenario, adding up to 1, e.g. S1_chat=0.4,S2_summary=0.6")
    p.add_argument("--basis", default="slo", help="slo (default) or peak")
    p.add_argument("--headroom", type=float, default=0.0,
                   help="share of capacity kept free, e.g. 0.2 (default: %(default)s)")
    p.add_argument("--spares", type=int, default=0, help="replicas added on top (default: %(default)s)")
    p.add_argument("--price-per-hour", action="append", metavar="[LABEL=]OD[/SPOT]",
                   help="hourly price per replica (repeatable; LABEL 'current' prices the current fleet for "
                        "--reference); default: the manifest, else the instance catalog")
    p.add_argument("--slo-ttft-p99-ms", type=float, default=500.0, help="default: %(default)s")
    p.add_argument("--slo-decode-p99-ms", "--slo-itl-p99-ms", type=float, default=50.0, help="default: %(default)s")
    p.add_argument("--slo-decode-metric", default="itl", choices=("itl", "tpot"), help="default: %(default)s")
    p.add_argument("--mixed-traffic", metavar="FILE_OR_DIR",
                   help="mixed_traffic.json of `bench mix-check` (or its folder, or s3:// prefix): the plan says "
                        "whether its scenarios added up at the planned load")
    p.add_argument("--no-charts", action="store_true", help="write no plan.png")
    p.add_argument("--no-progress", action="store_true", help="no download progress for s3:// folders")
    p.add_argument("--no-html", action="store_true", help="write no plan.html (the self-contained page)")
    p.set_defaults(func=locations.remote_io(run, command="plan", inputs=("candidates", "baseline", "mixed_traffic")))
    return p


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)
