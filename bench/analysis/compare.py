"""`python -m bench compare DIR... [--labels a,b,...] [--out DIR]`: N sweeps of server variants side by side.

Each DIR is one sweep (as `sweep --out` or `fetch` leave it, or its s3://bucket/prefix/) of one
server variant. --out gets compare.md (per scenario and concurrency each variant's output tok/s and
the winner where there is a clear one, each variant's capacity under the SLO, spec-decode
acceptance, what differs between the manifests, and why the comparison is incomplete when it is),
compare.json and compare.html. The page draws the first variant blue and the second orange, the
colours `bench report` gives the baseline and the candidate: list the baseline first.

Repeats: folders given one label (`--labels a,a,b`) are one variant swept more than once, each from a
fresh server (gpu-check's `--again`). They must share every setting; a cell shows their mean
(request-weighted), and their runs at one concurrency with one number of requests are comparable
repeats, so the variant's capacity and run-to-run band include the spread between servers.

Rules: the sweeps may differ in ONE server setting, the variant's own (a cross product the manifests
declare aside); a second difference, any difference in the benchmark itself, an invalid, suspect
or missing run, or a missing manifest makes the comparison incomplete and no cell names a winner. A
cell's winner must lead the next variant by more than the run-to-run noise (the widest output tok/s
band among the variants, as `bench report` states each: measured where a point was run more than
once, pooled with the sweep's assumed band, 11 % unless it set another), and a variant is behind the
best only where the best leads it by more than that noise (with three or more variants, compare.md,
the page and the terminal name them: where several lead within the noise, who trails is the answer);
a variant whose speculative decoding accepted under 10 % of drafts on real text never wins. The SLO
is the one the sweeps recorded unless an SLO flag sets another.

Reference: the keys of compare.json, docs/files.md#compare-comparejson; the rules,
docs/benchmark.md#compare.

Exit codes: 0 written (also when incomplete); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from bench.analysis import answer, pages
from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.analysis import spec as SPEC
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP
from bench.analysis.side import SLO_FLAGS, Side, SloConflict, choose_slo, load_side, slo_given
from bench.common import locations
from bench.common import options as O
from bench.common import workloads as W
from bench.common.cli import Help, run_one

# Server flags that shape loading or addressing only, never the numbers.
_IGNORED_FLAGS = {"--host", "--port", "--served-model-name", "--model-loader-extra-config", "--load-format",
                  "--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice"}
# Flag -> setting name as the stack config spells it.
_SETTING_OF_FLAG = {
    "--kv-cache-dtype": "kvCacheDtype",
    "--tensor-parallel-size": "tensorParallelSize",
    "-tp": "tensorParallelSize",
    "--max-num-seqs": "maxNumSeqs",
    "--max-model-len": "maxModelLen",
    "--gpu-memory-utilization": "gpuMemoryUtilization",
    "--speculative-config": "speculative",
    "--enable-sleep-mode": "sleepMode",
    "--enable-prefix-caching": "prefixCaching",
    "--scheduling-policy": "schedulingPolicy",
    "--limit-mm-per-prompt": "limitMmPerPrompt",
}
# Facts that follow from a setting: they may differ whenever that setting differs.
_CONSEQUENCES = {"tensorParallelSize": {"gpus"}}
# Benchmark facts: never a variant's setting.
_BENCH_FACTS = ("scenarios", "model_name", "min_prompts", "prompts_per_concurrency", "window_s", "warmups", "seed",
                "length_scale", "bench_args", "percentile_metrics", "metric_percentiles", "vllm_version", "image")


class UsageError(ValueError):
    pass


def _short_model(uri: str) -> str:
    """s3://<bucket>/models/RedHatAI/x/ -> RedHatAI/x: the bucket differs between stacks, not the model."""
    text = uri.rstrip("/")
    if "/models/" in text:
        return text.split("/models/", 1)[1]
    return text.rsplit("/", 1)[-1] if text.startswith(("s3://", "/")) else text


def _speculative(value: str) -> str:
    try:
        cfg = json.loads(value)
    except ValueError:
        return value
    if not isinstance(cfg, dict):
        return value
    parts = [str(cfg.get("method") or "draft")]
    if cfg.get("model"):
        parts.append(_short_model(str(cfg["model"])))
    if cfg.get("num_speculative_tokens") is not None:
        parts.append(f"k={cfg['num_speculative_tokens']}")
    return " ".join(parts)


def server_settings(flags: list[str]) -> dict[str, str]:
    """The settings a `vllm serve` argument list expresses, by stack-config name."""
    settings: dict[str, str] = {"speculative": "off"}
    i = 0
    if flags and not flags[0].startswith("-"):
        settings["model"] = _short_model(flags[0])
        i = 1
    while i < len(flags):
        arg = flags[i]
        if not arg.startswith("-"):
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        has_value = bool(eq) or (i + 1 < len(flags) and not flags[i + 1].startswith("--"))
        value = inline if eq else (flags[i + 1] if has_value else "on")
        i += 1 if eq or not has_value else 2
        if name in _IGNORED_FLAGS:
            continue
        if name == "--model":
            settings["model"] = _short_model(value)
            continue
        if name.startswith("--no-") and f"--{name[5:]}" in _SETTING_OF_FLAG:  # a boolean flag turned off
            name, value = f"--{name[5:]}", "off"
        key = _SETTING_OF_FLAG.get(name, name)
        settings[key] = _speculative(value) if key == "speculative" else value
    settings.setdefault("tensorParallelSize", "1")
    return settings


def differing_settings(servers: list[dict[str, str]]) -> list[str]:
    """The settings (`server_settings`' names) whose values are not the same on every server; a server
    without one counts as "-"."""
    keys = sorted({k for server in servers for k in server})
    return [k for k in keys if len({server.get(k, "-") for server in servers}) > 1]


def _parse_flags(served: Any) -> list[str] | None:
    if isinstance(served, list):
        return [str(a) for a in served]
    if not isinstance(served, str) or not served.strip():
        return None
    try:
        parsed = json.loads(served)
        if isinstance(parsed, list):
            return [str(a) for a in parsed]
    except ValueError:
        pass
    return shlex.split(served)


def facts_of(side: Side) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(server settings, benchmark facts, problems) of one sweep, every value as text."""
    m = side.manifest or {}
    problems = []
    if not m:
        problems.append(f"{side.label}: no manifest.json: its server and benchmark settings are unknown")
    flags = _parse_flags(m.get("served_flags"))
    server: dict[str, str] = server_settings(flags) if flags is not None else {}
    if m and flags is None:
        problems.append(f"{side.label}: the manifest records no server flags (sweep --server-args)")
    if m.get("instance_type"):
        server["instanceType"] = str(m["instance_type"])
    server["gpus"] = str(side.gpus)
    config = m.get("config") or {}
    bench: dict[str, str] = {}
    for key in _BENCH_FACTS:
        if key == "vllm_version":
            value = (m.get("server") or {}).get("vllm_version")
        elif key == "image":
            value = m.get("image")
        elif key == "model_name":
            value = None  # the served name follows the model setting
        else:
            value = config.get(key)
        if value is not None:
            bench[key] = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return server, bench, problems


def declared_cross(side: Side) -> bool:
    variant = (side.manifest or {}).get("variant") or {}
    return bool(isinstance(variant, dict) and variant.get("cross"))


# ---------------------------------------------------------------------------------------------


def build(sides: list[Side], *, ttft_ms: float, itl_ms: float,
          decode_metric: str = "itl") -> tuple[dict[str, Any], dict[str, Any]]:
    """(compare.json, extra facts for the markdown); `itl_ms` limits the p99 of `decode_metric`. Sweeps with
    one label are one variant measured more than once, each from a fresh server: its cells are their mean, and
    its capacity and band pool their runs."""
    incomplete: list[str] = []
    for s in sides:
        s.judge_with(ttft_ms)
    groups: dict[str, list[Side]] = {}
    for s in sides:
        groups.setdefault(s.label, []).append(s)
    named = {id(s): s.label if len(groups[s.label]) == 1 else f"{s.label} ({locations.display(s.path)})"
             for s in sides}
    facts_by_side = {id(s): facts_of(s) for s in sides}
    for _, _, problems in facts_by_side.values():
        incomplete += problems
    for label, group in groups.items():
        incomplete += repeat_problems(label, group, [facts_by_side[id(s)] for s in group])
    facts = [facts_by_side[id(group[0])] for group in groups.values()]

    # What differs: server settings (the variant's) and benchmark facts (never allowed).
    differing = differing_settings([server for server, _, _ in facts])
    owned = set()
    for k in differing:
        owned |= _CONSEQUENCES.get(k, set())
    settings = [k for k in differing if k not in owned]
    if len(settings) > 1 and not all(declared_cross(s) for s in sides):
        incomplete.append(
            f"the sweeps differ in {len(settings)} settings ({', '.join(settings)}); a comparison "
            "changes one at a time (declare a cross product explicitly to compare several)")
    bench_keys = sorted({k for _, bench, _ in facts for k in bench})
    for k in bench_keys:
        values = [bench.get(k, "-") for _, bench, _ in facts]
        if len(set(values)) > 1:
            listed = ", ".join(f"{label}: {v}" for label, v in zip(groups, values))
            incomplete.append(f"benchmark setting {k} differs ({listed})")

    variants = [
        {"label": label, "dir": locations.display(group[0].path),
         "sweeps": [locations.display(s.path) for s in group],
         "differs": {k: server.get(k, "-") for k in differing}}
        for (label, group), (server, _, _) in zip(groups.items(), facts)
    ]

    # Runs: every invalid or missing one, and the cells.
    for s in sides:
        bad = s.invalid()
        if bad:
            incomplete.append(f"{named[id(s)]}: {len(bad)} invalid or missing runs: "
                              + ", ".join(f"{r.scenario} c={r.concurrency} ({r.reason})" for r in bad))
        # a collapsed draft is the gate's (a configuration problem, never a winner), not a gap in the data
        suspect = [r for r in s.suspect_runs() if not (s.suspect(r) or "").startswith(R.SPEC_COLLAPSE)]
        if suspect:
            incomplete.append(f"{named[id(s)]}: {len(suspect)} suspect runs: "
                              + ", ".join(f"{r.scenario} c={r.concurrency} ({s.suspect(r)})" for r in suspect))
    order = list(W.WORKLOADS)
    cells_keys: list[tuple[str, int]] = []
    for s in sides:
        for r in s.runs:
            if (r.scenario, r.concurrency) not in cells_keys:
                cells_keys.append((r.scenario, r.concurrency))
    cells_keys.sort(key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[0], k[1]))
    for scenario in dict.fromkeys(k[0] for k in cells_keys):
        have = [sorted(r.concurrency for r in s.runs if r.scenario == scenario) for s in sides]
        if any(h != have[0] for h in have):
            incomplete.append(f"scenario {scenario}: concurrencies differ ("
                              + "; ".join(f"{named[id(s)]}: {h or 'none'}" for s, h in zip(sides, have)) + ")")

    gated: dict[str, list[str]] = {}
    for label, group in groups.items():
        problems = SPEC.gate_problems([r for s in group for r in s.runs])
        if problems:
            gated[label] = problems

    cell_values = []
    for scenario, conc in cells_keys:
        values: dict[str, float | None] = {}
        each: dict[str, list[float | None]] = {}
        for label, group in groups.items():
            runs = [next((r for r in s.runs if r.scenario == scenario and r.concurrency == conc), None) for s in group]
            usable = [r if r is not None and s.usable(r) else None for r, s in zip(runs, group)]
            each[label] = [None if r is None else r.output_tok_s for r in usable]
            # a variant measured more than once: every sweep must have the point, and the cell is their mean
            values[label] = (None if any(r is None for r in usable) else usable[0].output_tok_s if len(usable) == 1
                             else CAP.weighted(usable, "output_tok_s"))
        cell_values.append((scenario, conc, values, each))

    slo_capacity: dict[str, dict[str, float | None]] = {}
    slo_intervals: dict[str, dict[str, dict[str, Any]]] = {}
    intervals: dict[str, dict[str, CAP.Capacity]] = {}
    for label, group in groups.items():
        caps = CR.sides_capacity(group, ttft_ms=ttft_ms, decode_ms=itl_ms, decode_metric=decode_metric)
        for scenario in dict.fromkeys(k[0] for k in cells_keys):
            cap = (caps.get(scenario) or {}).get("closed") or CAP.Capacity(CAP.GRID, CAP.NO_DATA)
            intervals.setdefault(scenario, {})[label] = cap
            # the figure and its interval as `bench report` writes them (summary.json `slo` and
            # `slo_capacity_interval`): one capacity function, read the same way
            slo_intervals.setdefault(scenario, {})[label] = cap.as_dict()
            slo_capacity.setdefault(scenario, {})[label] = (
                round(CAP.figure(cap), 3) if cap.state == CAP.MEETS and CAP.figure(cap) is not None else None)

    cells = []
    for scenario, conc, values, each in cell_values:
        noise, source = cell_noise(list(intervals.get(scenario, {}).values()))
        winner, margin = _winner(values, set(gated), noise)
        leaders, behind = standings(values, set(gated), noise) if not incomplete else ([], {})
        cells.append({"scenario": scenario, "concurrency": conc,
                      "output_tok_s": values,
                      "output_tok_s_sweeps": each,
                      "winner": None if incomplete else winner, "winner_margin_pct": margin,
                      "noise_pct": noise, "noise_source": source, "leaders": leaders, "behind": behind})

    gpus = {label: max(1, group[0].gpus) for label, group in groups.items()}
    slo_winner = {scenario: lead for scenario, per in intervals.items()
                  if (lead := capacity_lead(per, gpus, set(gated), bool(incomplete))) is not None}
    data = {"variants": variants, "cells": cells, "slo_capacity": slo_capacity,
            "slo_capacity_interval": slo_intervals, "slo_capacity_winner": slo_winner, "incomplete": incomplete}
    extra = {"gated": gated, "settings": settings, "facts": facts, "intervals": intervals}
    return data, extra


def repeat_problems(label: str, group: list[Side], facts: list[tuple[dict[str, str], dict[str, str], list[str]]]
                    ) -> list[str]:
    """Why the sweeps given one label are not repeats of one variant: every server and benchmark setting of
    each must be the first's (each from a fresh server, nothing else changed)."""
    problems = []
    for side, other in zip(group[1:], facts[1:]):
        for kind, k, theirs, mine in setting_differences(facts[0], other):
            problems.append(f"{label}: its sweeps differ in the {kind} setting {k} "
                            f"({locations.display(group[0].path)}: {theirs}, "
                            f"{locations.display(side.path)}: {mine}); sweeps given one label "
                            "are repeats of one variant and must share every setting")
    return problems


def setting_differences(first: tuple[dict[str, str], dict[str, str], list[str]],
                        other: tuple[dict[str, str], dict[str, str], list[str]]) -> list[tuple[str, str, str, str]]:
    """(kind "server" or "benchmark", setting, the first sweep's value, the other's) for every setting in which
    two sweeps' facts (`facts_of`) differ; "-" where a sweep has none. A repeat of a sweep has none."""
    out = []
    for kind, theirs, mine in (("server", first[0], other[0]), ("benchmark", first[1], other[1])):
        for k in sorted(set(mine) | set(theirs)):
            if mine.get(k, "-") != theirs.get(k, "-"):
                out.append((kind, k, theirs.get(k, "-"), mine.get(k, "-")))
    return out


def capacity_lead(per: dict[str, CAP.Capacity], gpus: dict[str, int], excluded: set[str],
                  incomplete: bool) -> dict[str, Any] | None:
    """The variant that serves the most under the SLO per GPU and how far it leads the next one: {"first",
    "second", "ratio" (their capacities per GPU), "ratio_interval" (its 95 % interval, each side's run-to-run
    band in quadrature: the verdict's `ratio_interval`; null for an end without a bound), "winner" (the first,
    only where that interval lies wholly above 1x and the comparison is complete), "per": "gpu"}. None where
    fewer than two variants have a capacity figure. A gated variant (a collapsed draft) is never ranked."""
    ranked = sorted(((fig / gpus[label], label) for label, cap in per.items()
                     if label not in excluded and (fig := CAP.figure(cap)) is not None), key=lambda x: -x[0])
    if len(ranked) < 2 or ranked[0][0] <= 0:  # fewer than two figures, or none meets the SLO at all
        return None
    (a_fig, first), (b_fig, second) = ranked[0], ranked[1]
    interval = V.ratio_interval(per[first], per[second], gpus[first], gpus[second])
    clear = interval is not None and interval[0] > 1.0
    return {"first": first, "second": second, "ratio": V.point_ratio(a_fig, b_fig),
            "ratio_interval": None if interval is None else [CAP.json_end(interval[0]), CAP.json_end(interval[1])],
            "winner": first if clear and not incomplete else None, "per": "gpu"}


def cell_noise(caps: list[CAP.Capacity]) -> tuple[float, str]:
    """(noise_pct, noise_source) of a scenario's cells: the widest output tok/s run-to-run band among the
    variants, each as `bench report` states it for that variant's sweep (its capacity's `noise_by_figure`:
    comparable repeats, one load and one size, pooled with the band the sweep assumed as one degree of
    freedom; the assumed band alone where nothing was repeated). "repeats" where the widest was measured,
    "default" where it was assumed; the project's default band where no variant has a usable run."""
    bands = [((cap.noise_by_figure or {}).get(C.OUTPUT_TOK_S, cap.noise_pct), cap.noise_source) for cap in caps
             if cap.noise_pct is not None]
    if not bands:
        return C.DEFAULT_NOISE_PCT, "default"
    band, source = max(bands, key=lambda b: b[0])
    return round(band, 2), "repeats" if source == "measured" else "default"


def _ranked(values: dict[str, float | None], excluded: set[str]) -> list[tuple[float, str]]:
    """A cell's (output tok/s, variant), highest first: the variants with a usable run, a gated one never."""
    return sorted(((v, label) for label, v in values.items() if v is not None and label not in excluded),
                  reverse=True)


def _winner(values: dict[str, float | None], excluded: set[str], noise_pct: float
            ) -> tuple[str | None, float | None]:
    """(winner or None within the noise, margin of the first over the second in %)."""
    ranked = _ranked(values, excluded)
    if not ranked:
        return None, None
    if len(ranked) == 1:
        return ranked[0][1], None
    (first, label), (second, _) = ranked[0], ranked[1]
    margin = round(100.0 * (first - second) / second, 2) if second > 0 else None
    if margin is None or margin > noise_pct:
        return label, margin
    return None, margin


def standings(values: dict[str, float | None], excluded: set[str], noise_pct: float
              ) -> tuple[list[str], dict[str, float]]:
    """(leaders, behind) of one cell: `leaders` the variants the best does not lead by more than the noise, the
    best first, then by output tok/s (they are then within the noise of each other too); `behind` each other
    variant and how much less it serves than the best, in % of the best. The test is the winner's: the best's
    margin over a variant, in % of that variant, beyond the noise. Only variants with a usable run are ranked,
    a gated one never; with fewer than two ranked, neither list is made."""
    ranked = _ranked(values, excluded)
    if len(ranked) < 2 or ranked[0][0] <= 0:
        return [], {}
    best = ranked[0][0]
    leaders = [label for v, label in ranked if v > 0 and 100.0 * (best - v) / v <= noise_pct]
    behind = {label: round(100.0 * (best - v) / best, 2) for v, label in ranked if label not in leaders}
    return leaders, behind


# -- command ----------------------------------------------------------------------------------


def load_sides(dirs: list[str], labels: list[str] | None) -> list[Side]:
    if len(dirs) < 2:
        raise UsageError("give at least two sweep folders to compare")
    if labels is not None and len(labels) != len(dirs):
        raise UsageError(f"--labels: {len(labels)} labels for {len(dirs)} folders; give one per folder")
    sides = []
    for i, d in enumerate(dirs):
        path = Path(d)
        if not path.is_dir():
            raise UsageError(f"no such folder: {path}")
        side = load_side(path, label=labels[i] if labels else None)
        if not side.runs:
            raise UsageError(f"no results or manifest in {path}")
        sides.append(side)
    names = [s.label for s in sides]
    if labels is None and len(set(names)) != len(names):
        raise UsageError(f"variant labels are not unique ({', '.join(names)}); name them with --labels (one "
                         "label given to several folders makes them repeats of one variant)")
    if len(set(names)) < 2:
        raise UsageError(f"--labels: every folder is {names[0]}; a comparison needs two variants (one label given "
                         "to several folders makes them repeats of one variant)")
    return sides


def run(args: argparse.Namespace) -> int:
    try:
        labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
        if labels is not None and not all(labels):
            raise UsageError("--labels: empty label")
        sides = load_sides(args.dirs, labels)
        slo = choose_slo([(s.label, s.manifest) for s in sides], slo_given(args), SLO_FLAGS)
    except (UsageError, SloConflict) as exc:
        print(f"bench compare: {exc}", file=sys.stderr)
        return 2
    for note in slo.notes:
        print(f"bench compare: SLO: {note}", file=sys.stderr)
    args.slo_ttft_p99_ms, args.slo_itl_p99_ms = slo.ttft_p99_ms, slo.decode_p99_ms
    data, extra = build(sides, ttft_ms=args.slo_ttft_p99_ms, itl_ms=args.slo_itl_p99_ms,
                        decode_metric=slo.decode_metric)
    data["slo"] = {**slo.as_dict(), "source": slo.source, "notes": list(slo.notes)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    locations.written(out / "compare.json")
    (out / "compare.md").write_text(pages.compare_markdown(sides, data, extra, args.slo_ttft_p99_ms, args.slo_itl_p99_ms),
                                    encoding="utf-8")
    locations.written(out / "compare.md")
    if not args.no_html:
        pages.write_compare(out, data, extra, ttft_ms=args.slo_ttft_p99_ms, itl_ms=args.slo_itl_p99_ms)
        locations.written(out / "compare.html")
    winners = sum(1 for c in data["cells"] if c["winner"])
    close = sum(1 for c in data["cells"] if not c["winner"] and c["winner_margin_pct"] is not None)
    state = (f"INCOMPLETE ({len(data['incomplete'])} reasons)" if data["incomplete"]
             else f"{winners} {'winner' if winners == 1 else 'winners'}, {close} {'cell' if close == 1 else 'cells'} "
                  "without a clear winner (within the noise)")
    for c in data["cells"]:  # who trails the best beyond the noise, where the winner does not say it
        if words := answer.standing_words(c):
            print(f"bench compare: {c['scenario']} c={c['concurrency']}: {words}")
    for scenario, lead in data["slo_capacity_winner"].items():  # before the summary, which stays the last line
        print(f"bench compare: under the SLO, {scenario}: {answer.lead_words(lead)}")
    n, m = len(data["cells"]), len(data["variants"])
    repeats = "" if m == len(sides) else f" from {len(sides)} sweeps"
    print(f"bench compare: {m} variants{repeats}, {n} {'cell' if n == 1 else 'cells'}, {state} -> "
          f"{locations.display(out / 'compare.md')}, compare.json" + ("" if args.no_html else ", compare.html"))
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="N sweeps of server variants side by side",
                              description=__doc__, formatter_class=Help)
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="sweep folders (or s3://bucket/prefix/), one per variant, or several per variant where "
                        "--labels gives them one label")
    O.add_out(p, "compare", "compare.md, compare.json and compare.html")
    p.add_argument("--labels", help="comma-separated names, one per folder (default: manifest label or folder name); "
                                    "folders given one label are repeats of one variant, each from a fresh server")
    O.add_slo(p, recorded_by="the sweeps recorded")
    p.add_argument("--no-html", action="store_true", help="write no compare.html")
    O.add_no_progress(p)
    p.set_defaults(func=locations.remote_io(run, command="compare", inputs=("dirs",)))
    return p


def main(argv: list[str]) -> int:
    return run_one(add_parser, "compare", argv)
