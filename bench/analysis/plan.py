"""`python -m bench plan CANDIDATE_DIR... [--out DIR]`: how many replicas serve the load, at what cost.

The question behind the benchmark is a fleet size: can 12 replicas become 8, or 4, with users
still inside the SLO? The plan answers it from sweep folders (the same files `bench report` reads):

    python -m bench plan results/g7e --baseline results/l40s --current-replicas 12
    python -m bench plan results/g7e --reference S1_chat=420,S2_summary=180 --current-replicas 12
    python -m bench plan results/g7e --load S1_chat=20,S4_rag=2 --headroom 0.2 --spares 1

The load, one of: what --current-replicas replicas of the --baseline serve; --current-replicas x
--current-gpus-per-replica x the production output tok/s per GPU in --reference; or a stated
--load per scenario (or one total with --mix). Each configuration's capacity per replica is the
--basis figure (slo: the capacity under the SLO, an interval, as `bench report` computes it; peak:
the peak output tok/s). Replicas = ceil(needed / (1 - headroom)) + spares; an interval of capacity
gives a range of replicas ("4-6 replicas"; the capacity search narrows it). Costs come from
--price-per-hour, else the manifest, else the instance catalog: on-demand and Spot, a month being
730 hours, at the high end of a range.

Writes plan.md, plan.json, plan.png, plan.html and fleet.yaml (the `vllm-poc:fleet` stack-file
fragment: per serving pool the replica bounds and the autoscaler's targets). Reference: the keys of
plan.json, docs/files.md#plan-planjson; the method, docs/benchmark.md#the-replica-plan.

Exit codes: 0 written (counts, ranges or stated reasons); 1 some candidate never meets the SLO in a
scenario the load needs (a measured limit); 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from pathlib import Path
from typing import Any

from bench.analysis import answer, mixed_traffic, pages
from bench.analysis import capacity_report as CR
from bench.analysis import compare as COMPARE
from bench.analysis import fleet as F
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP
from bench.analysis.side import (MANIFEST, SLO_FLAGS, Side, SloConflict, choose_slo, load_side,
                                 read_manifest, slo_given)
from bench.analysis.sizing import (Capacity, Config, UsageError, build_plan, fleet_load, reference_load,
                                   replicas_text)
from bench.common import locations
from bench.common import options as O
from bench.common.cli import Help, run_one
from bench.common.instances import GPU_INSTANCE_TYPES

MIX_TOLERANCE = 0.001


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


def parse_prices(items: list[O.Price | str] | None) -> dict[str | None, tuple[float | None, float | None]]:
    """`--price-per-hour` values (parsed, or as text) -> {label or None: (on-demand, Spot or None)}."""
    out: dict[str | None, tuple[float | None, float | None]] = {}
    for item in items or []:
        if not isinstance(item, O.Price):
            try:
                item = O.price(item)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"--price-per-hour {exc}") from None
        out[item.label] = (float(item), item.spot)
    return out


def catalog_prices(instance_type: str | None) -> tuple[float | None, float | None]:
    """(on-demand, Spot) USD per hour of an instance type from the instance table, None where unset."""
    entry = GPU_INSTANCE_TYPES.get(instance_type) if instance_type else None
    return (entry.on_demand_usd_hour, entry.spot_usd_hour) if entry else (None, None)


def side_prices(side: Side, given: dict[str | None, tuple[float | None, float | None]]
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


def _from_interval(cap: CAP.Capacity, out_len: int | None) -> Capacity:
    if not cap.known:
        return Capacity(None, None, cap.source, out_len, state=CAP.NO_DATA, words=answer.capacity_words(cap.as_dict()))
    req_lo, req_hi = cap.req_lo, cap.req_hi
    if req_lo is None and out_len:
        req_lo = cap.lo / out_len
    if req_hi is None and out_len:
        req_hi = cap.hi / out_len
    interval = cap.as_dict()
    return Capacity(cap.lo, req_lo, cap.source, out_len, cap.hi, req_hi, cap.state, answer.capacity_words(interval),
                    f"{answer.from_words(interval)}; {answer.bracket_words(interval)}", band_lo=cap.band_lo,
                    band_hi=cap.band_hi, more=V.higher_load_advice(cap),
                    point=CAP.figure(cap) if cap.state == CAP.MEETS else None, adjacent=V.adjacent(cap))


def capacities(side: Side, basis: str, slo: dict[str, Any]) -> tuple[dict[str, Capacity], dict[str, Any]]:
    """(peak capacities on the peak basis, else {}; the SLO intervals per scenario on the slo basis)."""
    out: dict[str, Capacity] = {}
    intervals: dict[str, Any] = {}
    if basis == "slo":
        intervals = CR.side_capacity(side, ttft_ms=slo["ttft_p99_ms"], decode_ms=slo["decode_p99_ms"],
                                     decode_metric=slo["decode_metric"])
        for name in side.scenarios:
            intervals.setdefault(name, {"closed": CAP.Capacity(CAP.GRID, CAP.NO_DATA), "open": None})
        return out, intervals
    for name in side.scenarios:
        out_len = side.lengths.get(name, (None, None))[1]
        # the peak `bench report` gives (bench.analysis.summary.closed_peak): every closed-loop run of the
        # side's sweeps, the grid's and the capacity search's, the runs of one concurrency averaged
        top = CR.sides_peak(side.sweeps, name)
        out[name] = (Capacity(top["output_tok_s"], top["req_s"], "peak", out_len,
                              run=f"c={top['concurrency']}, closed loop, {', '.join(top['source_runs'])}") if top
                     else Capacity(None, None, "peak", out_len, state=CAP.NO_DATA, words="no usable run"))
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
        kind = "open" if all(e and CAP.bounded(e.get("open")) for e in entries) else "closed"
        for cfg in configs:
            entry = cfg.intervals.get(name)
            if entry is not None:
                cfg.capacities[name] = _from_interval(entry[kind], cfg.lengths.get(name))


def load_config(path: Path, basis: str, slo: dict[str, Any], prices, repeats: list[Side] | None = None,
                side: Side | None = None) -> Config:
    """A configuration's capacities from its sweep folder, pooled with `repeats` (other sweeps of its server
    setting, each from a fresh server, loaded as `pair_repeats` gave them); `side` is the folder itself where
    `pair_repeats` loaded it already (to read its settings)."""
    if side is None:
        if not path.is_dir():
            raise UsageError(f"no such sweep folder: {path}")
        side = load_side(path)
    side.repeats = list(repeats or [])
    side.judge_with(slo["ttft_p99_ms"])
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
    lines += ["", "## Capacity per replica", "",
              "The capacity under the SLO `bench report` shows (the same figure with its 95 % interval, from the same "
              "runs), per replica.", "",
              "| Configuration | Scenario | Output tok/s | req/s | Basis | From the run |",
              "|---|---|---|---|---|---|"]
    for cfg in candidates:
        for s, c in cfg.capacities.items():
            tok = _span(c.tok_s, c.tok_hi, c)
            tok = answer.figure_span(c.point, [c.tok_s, c.tok_hi], "") if c.point is not None else tok
            lines.append(f"| {cfg.label} | {s} | {tok} | {_span(c.req_s, c.req_hi, c, 3)} "
                         f"| {CAP.SOURCE_WORDS.get(c.basis, c.basis)} | {c.run or '-'} |")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if plan.get("mixed_traffic"):
        lines += mixed_traffic.plan_section(plan["mixed_traffic"], plan["configurations"])
    if chart:
        lines += ["", f"![replicas and monthly cost]({chart})"]
    return "\n".join(lines) + "\n"


def _span(lo: float | None, hi: float | None, cap: Capacity, digits: int = 1) -> str:
    if cap.state == CAP.NO_DATA or lo is None:
        return "unknown (no usable run)" if cap.state == CAP.NO_DATA else "unknown"
    if cap.state == CAP.NEVER and not hi:
        return "0 (never meets the SLO)"
    if hi is None or hi == lo:
        return f"{lo:,.{digits}f}"
    if math.isinf(hi):
        return f"{lo:,.{digits}f} or more"
    return f"{lo:,.{digits}f} to {hi:,.{digits}f}"


def render_chart(plan: dict[str, Any], out: Path) -> str | None:
    try:  # matplotlib is imported only when charts are drawn (bench/analysis/charts.py)
        from bench.analysis import charts  # local import: charts loads matplotlib
    except ImportError:
        return None
    fig = charts.plan_figure(plan)
    fig.savefig(out / "plan.png", dpi=100)
    charts.close(fig)
    locations.written(out / "plan.png")
    return "plan.png"


# ---------------------------------------------------------------------------------------------
# Command


def pair_repeats(folders: list[str], repeats: list[str], flag: str) -> tuple[dict[int, Side], dict[int, list[Side]]]:
    """Each repeat (another sweep of a configuration's server setting, from a fresh server) given to the one
    folder among `folders` whose sweep shares its every server and benchmark setting: ({folder's index: that
    folder, loaded to read its settings}, {folder's index: its repeats, loaded}). UsageError naming `flag` and
    the fix for a repeat that is not a folder or matches none or several of them."""
    if not repeats or not all(Path(d).is_dir() for d in folders):
        return {}, {}  # a missing configuration folder is reported where it is loaded
    loaded = {i: load_side(Path(d)) for i, d in enumerate(folders)}
    facts = [COMPARE.facts_of(loaded[i]) for i in range(len(folders))]
    paired: dict[int, list[Side]] = {}
    for repeat in repeats:
        if not Path(repeat).is_dir():
            raise UsageError(f"{flag}: no such sweep folder: {repeat}")
        sweep = load_side(Path(repeat))
        mine = COMPARE.facts_of(sweep)
        matches = [i for i, f in enumerate(facts) if not COMPARE.setting_differences(f, mine)]
        if len(matches) != 1:
            which = "none of" if not matches else f"{len(matches)} of"
            raise UsageError(f"{flag} {repeat}: its server and benchmark settings match {which} the sweeps it could "
                             f"repeat ({', '.join(folders)}); a repeat is another sweep of one configuration from a "
                             "fresh server, every setting the same: give a sweep of exactly one of them")
        paired.setdefault(matches[0], []).append(sweep)
    return loaded, paired


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
    if args.current_replicas is not None and args.current_replicas < 1:
        raise UsageError(f"--current-replicas must be 1 or more (the replicas serving today), got "
                         f"{args.current_replicas}")
    if (args.baseline or args.reference) and args.current_replicas is None:
        args.current_replicas = O.CURRENT_REPLICAS  # the fleet the question starts from, as in report
    folders = [Path(d) for d in [*args.candidates, *([args.baseline] if args.baseline else [])]]
    recorded = [((m or {}).get("label") or d.resolve().name, m)
                for d in folders for m in [read_manifest(d / MANIFEST)[0]]]
    try:
        choice = choose_slo(recorded, slo_given(args), SLO_FLAGS)
    except SloConflict as exc:
        raise UsageError(str(exc)) from None
    slo = choice.as_dict()
    prices = parse_prices(args.price_per_hour)
    mix = parse_pairs(args.mix, "--mix")
    ref = parse_pairs(args.reference, "--reference") if args.reference else {}
    given = parse_pairs(args.load, "--load", allow_total=True) if args.load else {}
    check_mix(mix)
    loaded, paired = pair_repeats(args.candidates, getattr(args, "repeat", None) or [], "--repeat")
    candidates = [load_config(Path(d), args.basis, slo, prices, paired.get(i), loaded.get(i))
                  for i, d in enumerate(args.candidates)]
    if getattr(args, "baseline_repeat", None) and not args.baseline:
        raise UsageError("--baseline-repeat needs --baseline (the sweep it repeats): give --baseline DIR too, or "
                         "leave --baseline-repeat out")
    current_config = None
    if args.baseline:
        loaded, paired = pair_repeats([args.baseline], getattr(args, "baseline_repeat", None) or [],
                                      "--baseline-repeat")
        current_config = load_config(Path(args.baseline), args.basis, slo, prices, paired.get(0), loaded.get(0))
    labels = [cfg.label for cfg in candidates + ([current_config] if current_config else [])]
    unknown = [label for label in prices if label not in (None, "current", *labels)]
    if unknown:
        raise UsageError(f"--price-per-hour: no configuration is labelled {', '.join(unknown)} (the labels are "
                         f"{', '.join(labels)}; current prices the fleet of --reference)")
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
    plan["slo"] = {**slo, "source": choice.source, "notes": list(choice.notes)}
    notes = [f"SLO: {n}" for n in choice.notes] + list(notes)
    if getattr(args, "mixed_traffic", None):
        try:
            plan["mixed_traffic"] = mixed_traffic.load_check(Path(args.mixed_traffic))
        except mixed_traffic.CheckError as exc:
            raise UsageError(str(exc)) from None
    try:
        chosen = F.parse_pools(getattr(args, "fleet_pool", None), [cfg.label for cfg in candidates])
        plan["fleet"] = F.build(candidates, [Path(d) for d in args.candidates], plan, slo=slo, chosen=chosen,
                                startup_s=getattr(args, "startup_s", None),
                                scenarios=[s for s in (mix or load) if s in known])
    except F.FleetError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.yaml").write_text(F.fragment(plan["fleet"], "this plan"), encoding="utf-8")
    locations.written(out / "fleet.yaml")
    chart = None if args.no_charts else render_chart(plan, out)
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    locations.written(out / "plan.json")
    (out / "plan.md").write_text(render_markdown(plan, notes, desc, candidates, chart, never)
                                 + "\n".join(F.markdown(plan["fleet"]) + [""]), encoding="utf-8")
    locations.written(out / "plan.md")
    if not getattr(args, "no_html", False):
        pages.write_plan(out, plan, notes, desc, candidates, charts=not args.no_charts)
        locations.written(out / "plan.html")
    return plan, desc, never


def run(args: argparse.Namespace) -> int:
    try:
        plan, _, never = make_plan(args)
    except UsageError as exc:
        print(f"bench plan: {exc}", file=sys.stderr)
        return 2
    for note in plan["slo"]["notes"]:
        print(f"bench plan: SLO: {note}", file=sys.stderr)
    for row in plan["configurations"]:
        count = replicas_text(row, never)
        line = f"bench plan: {row['label']}: {count}"
        line += " replicas" if row["replicas_range"] else ""
        line += f" ({plan['basis']} basis)"
        if row["reason"]:
            line += f"; {row['reason']}"
        print(line)
    print(f"bench plan: -> {locations.display(Path(args.out) / 'plan.md')}, plan.json, fleet.yaml"
          + ("" if args.no_html else ", plan.html"))
    return 1 if never else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="replicas and cost that serve a load at the SLO",
                              description=__doc__, formatter_class=Help)
    p.add_argument("candidates", nargs="+", metavar="CANDIDATE_DIR",
                   help="sweep folder(s) of the candidate(s), or their s3://bucket/prefix/")
    O.add_out(p, "plan", "plan.md, plan.json, plan.png, plan.html and fleet.yaml")
    O.add_baseline(p)
    p.add_argument("--repeat", action="append", metavar="DIR",
                   help="another sweep of a candidate's server setting from a fresh server (or its s3:// prefix), "
                        "given to the candidate whose settings it shares and pooled into its capacities, as "
                        "`bench report --repeat` pools it (repeatable)")
    p.add_argument("--baseline-repeat", action="append", metavar="DIR",
                   help="the same for the baseline (needs --baseline; repeatable)")
    O.add_current_replicas(p, "replicas serving today, with --baseline or --reference")
    p.add_argument("--current-gpus-per-replica", type=O.above_zero(int), default=1, metavar="N",
                   help="GPUs per current replica, for --reference (default: %(default)s)")
    p.add_argument("--reference", metavar="S=TOK_S,...",
                   help="production output tok/s per GPU per scenario, e.g. S1_chat=420,S4_rag=80")
    p.add_argument("--load", metavar="S=REQ_S,...",
                   help="request rate per scenario, e.g. S1_chat=20,S4_rag=2 (or one total with --mix)")
    p.add_argument("--mix", metavar="S=SHARE,...",
                   help="shares of requests per scenario, adding up to 1, e.g. S1_chat=0.4,S2_summary=0.6")
    O.add_basis(p, "the plan")
    p.add_argument("--headroom", type=O.share, default=0.0,
                   help="share of capacity kept free, e.g. 0.2 (default: %(default)s)")
    p.add_argument("--spares", type=O.at_least_zero(int), default=0,
                   help="replicas added on top (default: %(default)s)")
    O.add_price(p, repeatable=True, prices="a configuration's replica, LABEL= naming it (current: the fleet of "
                                          "--reference); default: the manifest, else the instance catalog")
    O.add_slo(p, recorded_by="the sweeps recorded")
    p.add_argument("--mixed-traffic", metavar="FILE_OR_DIR",
                   help="mixed_traffic.json of `bench mix-check` (or its folder, or s3:// prefix): the plan says "
                        "whether its scenarios added up at the planned load")
    p.add_argument("--fleet-pool", action="append", metavar="POOL=LABEL",
                   help="the candidate that serves a serving pool in fleet.yaml (interactive or batch; repeatable); "
                        "default: each candidate's own pool (batch where it runs priority scheduling)")
    p.add_argument("--startup-s", type=O.above_zero(float), metavar="SECONDS",
                   help="start-up time of a replica the autoscaler adds (pod created to /health); default: the "
                        "candidate folder's start-up records, else the start-up model's estimate")
    p.add_argument("--no-charts", action="store_true", help="draw no plan.png")
    p.add_argument("--no-html", action="store_true", help="write no plan.html")
    O.add_no_progress(p)
    p.set_defaults(func=locations.remote_io(run, command="plan", inputs=("candidates", "baseline", "mixed_traffic",
                                                                     "repeat", "baseline_repeat")))
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "plan", argv)
