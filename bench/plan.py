"""`python -m bench plan CANDIDATE_DIR... --out OUT`: how many replicas serve the load, at what cost.

The seeds' question is a fleet size: can 12 replicas become 8, or 4, with users still inside the SLO?
The plan answers it from sweep folders (the same files `bench report` reads):

    python -m bench plan results/g7e --baseline results/l40s --current-replicas 12 --out plan/
    python -m bench plan results/g7e --reference S1_chat=420,S2_summary=180 --current-replicas 12 --out plan/
    python -m bench plan results/g7e --load S1_chat=20,S4_rag=2 --headroom 0.2 --spares 1 --out plan/

Load, per scenario:
- `--baseline DIR --current-replicas N`: what N replicas of the baseline serve (its capacity per
  replica times N);
- `--reference S=TOK_S,...` (the production per-GPU output tok/s, the seeds' missing denominator)
  with `--current-replicas N` and `--current-gpus-per-replica G`: N x G x reference;
- `--load S=REQ_S,...`: a stated request rate per scenario (or one total with `--mix`).

Capacity per replica of each candidate (basis `--basis`): `slo` = the rate capacity (open-loop)
when measured, else the closed-loop SLO capacity (the same kind on both sides, never mixed);
`peak` = the peak output tok/s (the seeds' Table 8 method).

Replicas = ceil(needed / (1 - headroom)) + spares, where needed is, without `--mix`, the largest
per-scenario need for a fleet-derived load (the fleet may be busy with any one scenario) and the
sum for stated loads; with `--mix S=share,...` (shares of requests) the scenarios share replicas
in proportion (assumes they add up). Costs: replicas x the hourly price (on-demand and Spot;
`--price-per-hour [LABEL=]ON_DEMAND[/SPOT]`, else the manifest, else the instance catalog), a
month = 730 hours; cost per million output tokens at the planned load, on-demand prices.

Writes plan.md, plan.json, plan.png (replicas and monthly cost per configuration, each bar labelled
with its value) and plan.html (the same as one self-contained page; `--no-html` to skip). Exit 2 on
bad input, 1 when some candidate cannot serve the load at the SLO at all.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import capacity as C
from bench import capacity_report as CR
from bench import report as RP

HOURS_PER_MONTH = 730.0
EPS = 1e-9


class UsageError(ValueError):
    pass


@dataclass
class Capacity:
    """Per-replica capacity of one configuration in one scenario (None: unknown or never meets)."""

    tok_s: float | None
    req_s: float | None
    basis: str  # peak, rate_capacity, slo_capacity, never_meets_slo, unknown, reference
    output_len: int | None = None


@dataclass
class Config:
    label: str
    instance_type: str | None
    gpus: int
    on_demand: float | None
    spot: float | None
    capacities: dict[str, Capacity]


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
            raise UsageError(f"{option} {item!r}: expected SCENARIO=NUMBER (non-negative), e.g. S1_chat=4.2") from None
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
            raise UsageError(f"--price-per-hour {item!r}: expected [LABEL=]ON_DEMAND[/SPOT] in USD, "
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


def capacities(side: RP.Side, basis: str, slo: dict[str, Any]) -> dict[str, Capacity]:
    out: dict[str, Capacity] = {}
    extra = None
    if basis == "slo":
        extra = CR.scenario_capacity(side.path, side.runs, ttft_ms=slo["ttft_p99_ms"],
                                     decode_ms=slo["decode_p99_ms"], decode_metric=slo["decode_metric"])
    for name in side.scenarios:
        out_len = side.lengths.get(name, (None, None))[1]
        if basis == "peak":
            top = RP.peak(side.valid(name))
            out[name] = (Capacity(top.output_tok_s, top.req_s, "peak", out_len) if top
                         else Capacity(None, None, "unknown", out_len))
        else:
            tok, req, how = CR.slo_throughput(extra.get(name, {}))
            out[name] = Capacity(tok, req, how, out_len)
    return out


def load_config(path: Path, basis: str, slo: dict[str, Any], prices) -> Config:
    if not path.is_dir():
        raise UsageError(f"no such sweep folder: {path}")
    side = RP.load_side(path)
    if not side.runs:
        raise UsageError(f"{path}: no results or manifest (a `bench sweep --out` or `bench fetch` folder)")
    od, spot = side_prices(side, prices)
    return Config(side.label, (side.manifest or {}).get("instance_type"), side.gpus, od, spot,
                  capacities(side, basis, slo))


# ---------------------------------------------------------------------------------------------
# Math


def replicas_for(needed: float, headroom: float, spares: int) -> int:
    """Replicas that carry `needed` replica-loads at (1 - headroom) utilisation, plus spares."""
    return max(1, math.ceil(needed / (1.0 - headroom) - EPS)) + spares


def fleet_load(current: int, base: dict[str, Capacity]) -> dict[str, Capacity]:
    """What `current` replicas of a configuration serve per scenario (as a Capacity)."""
    return {s: Capacity(c.tok_s * current if c.tok_s is not None else None,
                        c.req_s * current if c.req_s is not None else None, c.basis, c.output_len)
            for s, c in base.items()}


def reference_load(current: int, gpus: int, reference: dict[str, float], lengths: dict[str, int | None]
                   ) -> dict[str, Capacity]:
    out = {}
    for s, tok in reference.items():
        total = tok * gpus * current
        out_len = lengths.get(s)
        out[s] = Capacity(total, total / out_len if out_len else None, "reference", out_len)
    return out


def needed_replicas(cand: dict[str, Capacity], load: dict[str, Capacity], mix: dict[str, float],
                    stated: bool, notes: list[str], label: str) -> tuple[float | None, float | None]:
    """(replica-loads needed, output tok/s served) or (None, None) with the reason in notes."""
    usable = {}
    for s, demand in load.items():
        if demand.basis == C.NEVER_MEETS_SLO or (demand.tok_s is None and demand.req_s is None):
            notes.append(f"{s}: the current load is unknown on this basis ({demand.basis}); left out")
            continue
        usable[s] = demand
    if not usable:
        notes.append("no scenario has a known load: nothing to plan")
        return None, None
    for s in usable:
        c = cand.get(s)
        if c is None or (c.tok_s is None and c.req_s is None):
            why = c.basis if c else "not measured"
            notes.append(f"{label}: {s} has no capacity on this basis ({why}): no replica count meets the load")
            return None, None

    def per_scenario(s: str) -> float:
        demand, c = usable[s], cand[s]
        if demand.tok_s is not None and c.tok_s:
            return demand.tok_s / c.tok_s
        if demand.req_s is not None and c.req_s:
            return demand.req_s / c.req_s
        raise UsageError(f"{s}: load and capacity have no common unit (output length unknown)")

    if mix:
        shares = {s: mix[s] for s in usable if s in mix}
        total_share = sum(shares.values())
        if total_share <= 0:
            notes.append("--mix names none of the scenarios with a known load")
            return None, None
        # The total request rate the current fleet carries at this mix: each scenario alone would
        # fill it at d.req_s, so sum(share / d.req_s) x rate = one fleet.
        per_req = []
        for s, f in shares.items():
            if not usable[s].req_s:
                raise UsageError(f"--mix: {s} has no request rate (output length unknown)")
            per_req.append(f / total_share / usable[s].req_s)
        total_rate = 1.0 / sum(per_req)
        needed = 0.0
        served = 0.0
        for s, f in shares.items():
            rate = total_rate * f / total_share
            c = cand[s]
            if not c.req_s:
                raise UsageError(f"--mix: {label} has no req/s for {s}")
            needed += rate / c.req_s
            served += rate * (c.output_len or (c.tok_s / c.req_s if c.tok_s else 0))
        return needed, served
    needs = {s: per_scenario(s) for s in usable}
    if stated:
        served = sum((d.tok_s if d.tok_s is not None else d.req_s * (cand[s].output_len or 0))
                     for s, d in usable.items())
        return sum(needs.values()), served
    binding = max(needs, key=needs.get)
    notes.append(f"{label}: binding scenario {binding} ({needs[binding]:.3f} replica-loads)")
    d = usable[binding]
    return needs[binding], d.tok_s if d.tok_s is not None else None


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


def build_plan(candidates: list[Config], *, basis: str, headroom: float, spares: int,
               load: dict[str, Capacity], stated: bool, mix: dict[str, float],
               current: int | None, current_config: Config | None) -> tuple[dict[str, Any], list[str]]:
    notes: list[str] = []
    configs = []
    for cfg in candidates:
        needed, served = needed_replicas(cfg.capacities, load, mix, stated, notes, cfg.label)
        replicas = replicas_for(needed, headroom, spares) if needed is not None else None
        configs.append({"label": cfg.label, "instance_type": cfg.instance_type, "gpus": cfg.gpus,
                        "replicas": replicas, **price_row(replicas, cfg.on_demand, cfg.spot, served)})
    cur = None
    if current is not None:
        usd = None
        if current_config is not None:
            price = current_config.on_demand if current_config.on_demand is not None else current_config.spot
            usd = round(current * price * HOURS_PER_MONTH, 2) if price is not None else None
        cur = {"replicas": current, "usd_month": usd}
    return {"basis": basis, "headroom": headroom, "spares": spares, "configurations": configs,
            "current": cur}, notes


# ---------------------------------------------------------------------------------------------
# Output


def render_markdown(plan: dict[str, Any], notes: list[str], load_desc: str, candidates: list[Config],
                    chart: str | None) -> str:
    basis = {"slo": "throughput under the SLO (open-loop rate capacity where measured, else closed-loop "
                    "SLO capacity; never mixed)", "peak": "peak throughput (the seeds' Table 8 method)"}
    lines = ["# Replica plan", "",
             f"- Basis: {basis[plan['basis']]}",
             f"- Load: {load_desc}",
             f"- Headroom: {plan['headroom']:.0%} (replicas run at most at {1 - plan['headroom']:.0%} of capacity); "
             f"spares: {plan['spares']} (Spot interruptions, rollouts)",
             "- Replicas = ceil(needed replica-loads / (1 - headroom)) + spares; a month is 730 hours; "
             "cost per million output tokens at the planned load, on-demand price (Spot where on-demand is unknown).",
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
        lines.append(f"| {row['label']} | {row['instance_type'] or '-'} | {row['gpus']} "
                     f"| {row['replicas'] if row['replicas'] is not None else 'cannot meet the load'} "
                     f"| {money(row['usd_hour_on_demand'])} | {money(row['usd_hour_spot'])} "
                     f"| {money(row['usd_month_on_demand'], 0)} | {money(row['usd_month_spot'], 0)} "
                     f"| {money(row['usd_per_million_output_tokens'], 3)} |")
    lines += ["", "## Capacity per replica", "", "| Configuration | Scenario | Output tok/s | req/s | Basis |",
              "|---|---|---:|---:|---|"]
    for cfg in candidates:
        for s, c in cfg.capacities.items():
            lines.append(f"| {cfg.label} | {s} | {RP._n(c.tok_s)} | {RP._n(c.req_s, 3)} | {c.basis} |")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if chart:
        lines += ["", f"![replicas and monthly cost]({chart})"]
    return "\n".join(lines) + "\n"


def render_chart(plan: dict[str, Any], out: Path) -> str | None:
    try:
        from bench import charts
    except ImportError:
        return None
    fig = charts.plan_figure(plan)
    fig.savefig(out / "plan.png", dpi=100)
    charts.close(fig)
    return "plan.png"


# ---------------------------------------------------------------------------------------------
# Command


def make_plan(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if args.basis not in ("slo", "peak"):
        raise UsageError(f"--basis must be slo or peak, got {args.basis!r}")
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
    candidates = [load_config(Path(d), args.basis, slo, prices) for d in args.candidates]
    lengths: dict[str, int | None] = {}
    for cfg in candidates:
        for s, c in cfg.capacities.items():
            lengths.setdefault(s, c.output_len)
    current_config = None
    stated = False
    if args.baseline:
        current_config = load_config(Path(args.baseline), args.basis, slo, prices)
        load = fleet_load(args.current_replicas, current_config.capacities)
        desc = (f"what {args.current_replicas} replicas of {current_config.label} serve at the same basis")
    elif args.reference:
        ref = parse_pairs(args.reference, "--reference")
        load = reference_load(args.current_replicas, args.current_gpus_per_replica, ref, lengths)
        desc = (f"{args.current_replicas} replicas x {args.current_gpus_per_replica} GPU(s) x the production "
                f"per-GPU throughput ({', '.join(f'{k} {v:g} tok/s' for k, v in ref.items())})")
        if prices.get("current"):
            od, spot = prices["current"]
            current_config = Config("current", None, args.current_gpus_per_replica, od, spot, {})
    else:
        stated = True
        given = parse_pairs(args.load, "--load", allow_total=True)
        if "*" in given:
            if not mix or len(given) > 1:
                raise UsageError("--load with one total rate needs --mix S=share,... and no per-scenario rates")
            total, shares = given.pop("*"), sum(mix.values())
            given = {s: total * f / shares for s, f in mix.items()} if shares > 0 else {}
        load = {s: Capacity(None, r, "stated", lengths.get(s)) for s, r in given.items()}
        desc = "stated: " + ", ".join(f"{k if k != '*' else 'total'} {v:g} req/s" for k, v in given.items())
    if mix:
        desc += "; mix " + ", ".join(f"{k} {v:g}" for k, v in mix.items())
    plan, notes = build_plan(candidates, basis=args.basis, headroom=args.headroom, spares=args.spares,
                             load=load, stated=stated, mix={} if stated else mix,
                             current=args.current_replicas if not stated or args.current_replicas else None,
                             current_config=current_config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chart = None if args.no_charts else render_chart(plan, out)
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    (out / "plan.md").write_text(render_markdown(plan, notes, desc, candidates, chart), encoding="utf-8")
    if not getattr(args, "no_html", False):
        from bench import pages

        pages.write_plan(out, plan, notes, desc, candidates, charts=not args.no_charts)
    return plan, desc


def run(args: argparse.Namespace) -> int:
    try:
        plan, _ = make_plan(args)
    except UsageError as exc:
        print(f"bench plan: {exc}", file=sys.stderr)
        return 2
    for row in plan["configurations"]:
        rep = row["replicas"] if row["replicas"] is not None else "cannot meet the load"
        print(f"bench plan: {row['label']}: {rep} replicas ({plan['basis']} basis)")
    print(f"bench plan: -> {Path(args.out) / 'plan.md'}, plan.json" + ("" if args.no_html else ", plan.html"))
    return 1 if any(r["replicas"] is None for r in plan["configurations"]) else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="replicas and cost that serve a load at the SLO",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("candidates", nargs="+", metavar="CANDIDATE_DIR", help="sweep folder(s) of the candidate(s)")
    p.add_argument("--out", required=True, help="folder for plan.md, plan.json and plan.png")
    p.add_argument("--baseline", help="sweep folder of the hardware serving today")
    p.add_argument("--current-replicas", type=int, help="replicas serving today (e.g. 12)")
    p.add_argument("--current-gpus-per-replica", type=int, default=1,
                   help="GPUs per current replica, for --reference (default: %(default)s)")
    p.add_argument("--reference", help="production output tok/s per GPU per scenario, e.g. S1_chat=420,S4_rag=80")
    p.add_argument("--load", help="request rate per scenario, e.g. S1_chat=20,S4_rag=2 (or one total with --mix)")
    p.add_argument("--mix", help="shares of requests per scenario, e.g. S1_chat=0.4,S2_summary=0.6")
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
    p.add_argument("--no-charts", action="store_true", help="write no plan.png")
    p.add_argument("--no-html", action="store_true", help="write no plan.html (the self-contained page)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)
