"""Charts for the reports (matplotlib, Agg backend; imported only when charts are drawn).

Every chart is a matplotlib figure built from the plain dictionaries the reports write (summary.json
run rows, plan.json, compare.json, startup records); `render` saves the concurrency curves as PNG
beside report.md, and `svg_data_uri` turns any figure into an SVG data URI for the HTML pages
(fonts drawn as paths, no external reference, byte-stable for the same data).

- Concurrency curves, one figure per scenario: output tok/s, TTFT p99, ITL p99 and TPOT p99 against
  concurrency (log2 axis), the baseline dashed, the SLO limits as horizontal lines (the decode limit
  on the panel of the metric it applies to), the peak marked, and the capacity under the SLO: a star
  at the run its figure came from and its bracket [pass, fail) shaded, both from the one interval
  (summary.json `slo_capacity_interval`). Only usable runs are drawn (valid and not suspect).
- Ratio per scenario with its interval, against the verdict's threshold.
- Startup phases per boot (stacked), replicas and monthly cost per configuration (labelled bars),
  output tok/s per variant and concurrency.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.analysis.answer import source_run  # noqa: E402  (words and charts read an interval alike)
from bench.analysis.side import Side, run_row  # noqa: E402
from bench.common import locations  # noqa: E402

# Deterministic SVG ids, so a page is byte-stable for the same data.
matplotlib.rcParams["svg.hashsalt"] = "vllm-poc"
matplotlib.rcParams["svg.fonttype"] = "path"

PANELS = (
    ("output_tok_s", "Output tok/s", None),
    ("ttft_p99_ms", "TTFT p99 (ms)", "ttft"),
    ("itl_p99_ms", "ITL p99 (ms, per chunk)", "itl"),
    ("tpot_p99_ms", "TPOT p99 (ms, per token)", "tpot"),
)
PASS, FAIL, NEUTRAL, UNDECIDED = "#2e7d32", "#c62828", "#6d6d6d", "#b26a00"
# One colour per side on every chart: the baseline (today's fleet; listed first in `bench compare`)
# blue, the candidate orange; further compare variants take the next colours of the cycle.
BASELINE, CANDIDATE = "tab:blue", "tab:orange"
VARIANT_COLORS = (BASELINE, CANDIDATE, "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")


def usable(row: dict[str, Any]) -> bool:
    return bool(row.get("valid")) and not row.get("suspect")


def _series(rows: Sequence[dict[str, Any]], scenario: str, attr: str) -> tuple[list[int], list[float]]:
    points = sorted((r["concurrency"], r[attr]) for r in rows
                    if r["scenario"] == scenario and usable(r) and r.get(attr) is not None)
    return [c for c, _ in points], [v for _, v in points]


def curves_figure(rows: Sequence[dict[str, Any]], base_rows: Sequence[dict[str, Any]] | None, slo: dict[str, Any],
                  scenario: str, *, label: str, base_label: str | None = None,
                  lengths: tuple[int | None, int | None] | None = None,
                  entry: dict[str, Any] | None = None, grid: bool = False,
                  extra: Sequence[dict[str, Any]] | None = None, repeats: Sequence[dict[str, Any]] | None = None):
    """One scenario's curves from summary.json run rows (the grid's, as a line), `extra` (summary.json
    `extra_runs`: each side's capacity-search runs, as crosses at their concurrencies) and `repeats`
    (summary.json `repeat_runs`: the grid runs of each side's repeats, as hollow diamonds); `entry` is
    summary["scenarios"][scenario] (its peak and its capacity under the SLO are marked: the star at the
    figure, the mean of the runs at its load, and the bracket from the same interval). The panels side
    by side, or two by two with `grid` (a page's width). SVG ids: `candidate-<metric>` (the curve),
    `candidate-search-<metric>` and `baseline-search-<metric>` (the search's runs), `candidate-repeats-<metric>`
    and `baseline-repeats-<metric>` (the repeats' grid runs), `capacity-star`."""
    if grid:
        fig, axes = plt.subplots(2, 2, figsize=(12, 9.6))
        axes = axes.flatten()
    else:
        fig, axes = plt.subplots(1, len(PANELS), figsize=(20, 5.2))
    excluded = [r["concurrency"] for r in rows if r["scenario"] == scenario and not usable(r)]
    entry = entry or {}
    for ax, (attr, title, slo_key) in zip(axes, PANELS):
        xs, ys = _series(rows, scenario, attr)
        if xs:
            ax.plot(xs, ys, marker="o", color=CANDIDATE, label=label, gid=f"candidate-{attr}")
        searched = []
        for who, color, name in (("candidate", CANDIDATE, label), ("baseline", BASELINE, base_label)):
            searched += _marks(ax, [r for r in extra or () if r.get("kind") == "search"
                                    and r.get("side", "candidate") == who and r["scenario"] == scenario], attr,
                               color=color, marker="x", label=f"{name}: capacity-search runs",
                               gid=f"{who}-search-{attr}")
            searched += _marks(ax, [r for r in repeats or () if r.get("side") == who and r["scenario"] == scenario
                                    and usable(r)], attr, color=color, marker="D", markerfacecolor="none",
                               label=f"{name}: repeats' grid runs", gid=f"{who}-repeats-{attr}")
        if base_rows:
            bx, by = _series(base_rows, scenario, attr)
            if bx:
                ax.plot(bx, by, marker="s", linestyle="--", color=BASELINE, label=f"{base_label} (baseline)")
        limit = slo["ttft_p99_ms"] if slo_key == "ttft" else (
            slo["itl_p99_ms"] if slo_key == slo.get("decode_metric", "itl") else None)
        if limit is not None:
            ax.axhline(limit, color="red", linewidth=1, linestyle=":", label="SLO limit")
        if attr == "output_tok_s":
            _mark_points(ax, entry)
        ax.set_xscale("log", base=2)
        ticks = sorted({r["concurrency"] for r in rows if r["scenario"] == scenario}
                       | {r["concurrency"] for r in base_rows or () if r["scenario"] == scenario}
                       | {c for c, _ in searched})
        if ticks:
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(t) for t in ticks])
            ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            # below the panel: a curve, the SLO line, the bracket and the marks may fill any corner inside
            # (a steep curve crosses the upper left, a flat p99 far under its limit the lower right); a
            # place given also spares matplotlib's search for the "best" one, slow under load
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        else:
            ax.text(0.5, 0.5, "not in these results", ha="center", va="center", transform=ax.transAxes)
    suptitle = scenario + (f" ({lengths[0]}/{lengths[1]} tokens)" if lengths and None not in lengths else "")
    if excluded:
        suptitle += f"  (invalid or suspect, not drawn: c={', '.join(map(str, excluded))})"
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def capacity_mark(entry: dict[str, Any]) -> dict[str, Any] | None:
    """What the curves mark for the capacity under the SLO, from one figure (the scenario's
    `slo_capacity_interval`): the star at the figure itself (`point_tok_s`, the mean of the runs at its
    load, the tok/s every table shows) at the load of the run it came from, the band [pass, fail) of the
    same interval. None when the interval has no figure."""
    interval = entry.get("slo_capacity_interval") or {}
    if interval.get("state") != "meets_slo" or interval.get("point_tok_s") is None:
        return None
    load, _ = source_run(interval)
    return {"load": load, "tok_s": interval["point_tok_s"], "pass": interval.get("load_pass"),
            "fail": interval.get("load_fail"), "repeats": interval.get("repeats") or 1}


def _marks(ax, runs: Sequence[dict[str, Any]], attr: str, **style) -> list[tuple[Any, Any]]:
    """The runs' `attr` against concurrency as unjoined markers (runs without the figure left out); the
    points drawn, for the axis ticks."""
    points = sorted((r["concurrency"], r[attr]) for r in runs if r.get(attr) is not None)
    if points:
        ax.plot([c for c, _ in points], [v for _, v in points], linestyle="none", markersize=7, **style)
    return points


def _mark_points(ax, entry: dict[str, Any]) -> None:
    top, mark = entry.get("peak"), capacity_mark(entry)
    if mark and mark["pass"]:
        lo, hi = mark["pass"], mark["fail"]
        if hi:
            ax.axvspan(lo, hi, color="tab:green", alpha=0.15, label=f"SLO capacity bracket [c={lo:g}, c={hi:g})")
        else:
            ax.axvline(lo, color="tab:green", linewidth=2, alpha=0.5,
                       label=f"SLO capacity: at least c={lo:g} (nothing higher tested)")
    if top:
        ax.scatter([top["concurrency"]], [top["output_tok_s"]], s=160, facecolors="none", edgecolors="black",
                   linewidths=1.5, zorder=5, label=f"peak {top['output_tok_s']:,.0f} (c={top['concurrency']})")
    if mark and mark["load"] is not None:
        runs = f", mean of {mark['repeats']} runs" if mark["repeats"] > 1 else ""
        ax.scatter([mark["load"]], [mark["tok_s"]], s=90, marker="*", color=PASS, zorder=6, gid="capacity-star",
                   label=f"capacity under the SLO {mark['tok_s']:,.1f} (c={mark['load']:g}{runs})")


def render(side: Side, base: Side | None, slo: dict[str, Any], out: Path,
           scenarios: dict[str, Any] | None = None, extra: Sequence[dict[str, Any]] | None = None,
           repeats: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """chart_<scenario>.png for each scenario of the candidate (report.md links them); `extra` is
    summary.json `extra_runs`, `repeats` its `repeat_runs`."""
    rows = [run_row(r, side) for r in side.runs]
    base_rows = [run_row(r, base) for r in base.runs] if base else None
    written = []
    for scenario in side.scenarios:
        fig = curves_figure(rows, base_rows, slo, scenario, label=side.label, base_label=base.label if base else None,
                            lengths=side.lengths.get(scenario), entry=(scenarios or {}).get(scenario), extra=extra,
                            repeats=repeats)
        name = f"chart_{scenario}.png"
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        locations.written(out / name)
        written.append(name)
    return written


def interval_bounds(interval: Any) -> tuple[float | None, float | None]:
    """(low, high) of an interval [lo, hi]; an open or infinite bound is None."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None, None

    def finite(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and abs(v) < 1e9 else None

    return finite(interval[0]), finite(interval[1])


def ratio_figure(rows: Sequence[dict[str, Any]], threshold: float | None, basis_label: str):
    """Per scenario: the ratio's interval as a bar with both ends labelled (an open end runs to the
    edge with an arrow; a single value is a dot), the threshold as a vertical line; green when the
    scenario clears the threshold, red when it falls short, amber when undecided. Rows carry
    `interval` and `state` as summary.json has them: the chart draws what the verdict decided on."""
    fig, ax = plt.subplots(figsize=(9, 0.6 * max(2, len(rows)) + 1.2))
    known = [v for r in rows for v in interval_bounds(r.get("interval")) if v is not None]
    right = max(known + [threshold or 1.0]) * 1.25 if known else (threshold or 1.0) * 2
    colors = {"pass": PASS, "fail": FAIL, "inconclusive": UNDECIDED}
    for y, r in enumerate(rows):
        lo, hi = interval_bounds(r.get("interval"))
        color = colors.get(r.get("state"), NEUTRAL)
        if lo is None and hi is None:
            ax.text(0.02 * right, y, r.get("missing") or "no ratio", va="center", fontsize=9, color=NEUTRAL)
            continue
        start = lo if lo is not None else 0.0
        end = hi if hi is not None else right
        if lo is not None and hi is not None and f"{lo:.2f}" == f"{hi:.2f}":
            ax.plot([lo], [y], "o", color=color, markersize=9)
            ax.annotate(f"{lo:.2f}x", (lo, y), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=9)
            continue
        ax.plot([start, end], [y, y], color=color, linewidth=6, alpha=0.7, solid_capstyle="butt")
        if hi is None:
            ax.annotate("", xy=(right, y), xytext=(right * 0.97, y), arrowprops={"arrowstyle": "->", "color": color})
        for value, align in ((lo, "right"), (hi, "left")):
            if value is not None:
                ax.annotate(f"{value:.2f}x", (value, y), textcoords="offset points",
                            xytext=(-4 if align == "right" else 4, 8), ha=align, fontsize=9)
    if threshold is not None:
        ax.axvline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}x")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["scenario"] for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(0, right)
    ax.set_xlabel(f"{basis_label} (candidate / baseline, per GPU)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def startup_figure(records: Sequence[dict[str, Any]], phases: Sequence[tuple[str, str]]):
    """One horizontal bar per boot, its phases stacked in order, the total at the end."""
    fig, ax = plt.subplots(figsize=(11, 0.7 * max(2, len(records)) + 1.4))
    cmap = plt.get_cmap("tab10")
    for y, record in enumerate(records):
        left = 0.0
        values = record.get("phases") or {}
        for i, (key, label) in enumerate(phases):
            v = values.get(key)
            if v:
                ax.barh(y, v, left=left, color=cmap(i), label=label if y == 0 else None)
                left += v
        total = record.get("total_s")
        if total is not None:
            ax.annotate(f"{total:,.1f} s", (left, y), textcoords="offset points", xytext=(4, 0), va="center",
                        fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    if seen:
        ax.legend(seen.values(), seen.keys(), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3)
    ax.set_yticks(range(len(records)))
    ax.set_yticklabels([str(r.get("server") or r.get("pod") or "boot") for r in records])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from start to /health OK")
    ax.grid(True, axis="x", alpha=0.3)
    ax.margins(x=0.12)
    fig.tight_layout()
    return fig


def plan_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """What the plan chart draws per configuration: replicas low/high (None: unknown, no bar), costs."""
    rows = []
    if plan.get("current"):
        rows.append({"name": "current", "low": plan["current"]["replicas"], "high": plan["current"]["replicas"],
                     "on_demand": plan["current"].get("usd_month"), "spot": None})
    for r in plan["configurations"]:
        span = r.get("replicas_range") or [None, None]
        low = r["replicas"] if r["replicas"] is not None else span[0]
        high = r["replicas"] if r["replicas"] is not None else span[1]
        rows.append({"name": r["label"], "low": low, "high": high,
                     "on_demand": r["usd_month_on_demand"], "spot": r["usd_month_spot"]})
    return rows


def plan_figure(plan: dict[str, Any]):
    """Replicas and USD per month (on-demand and Spot) per configuration, every bar labelled with its
    value: a known count is a bar, a range a solid bar to its low end hatched on to its high end (an
    arrow where it has no high end), and an unknown count or cost gets no bar, only the word."""
    rows = plan_rows(plan)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = list(range(len(rows)))
    top = max([r["high"] or r["low"] or 0 for r in rows] + [1])
    for x, r in zip(xs, rows):
        if r["low"] is None:
            ax1.text(x, top * 0.02, "unknown", ha="center", va="bottom", fontsize=8)
            continue
        ax1.bar(x, r["low"], color="tab:blue")
        if r["high"] is None:
            ax1.annotate("", xy=(x, top * 1.1), xytext=(x, r["low"]), arrowprops={"arrowstyle": "->"})
            ax1.text(x, r["low"], f"{r['low']} or more", ha="center", va="bottom", fontsize=8)
        elif r["high"] != r["low"]:
            ax1.bar(x, r["high"] - r["low"], bottom=r["low"], color="tab:blue", alpha=0.3, hatch="//")
            ax1.text(x, r["high"], f"{r['low']}-{r['high']}", ha="center", va="bottom", fontsize=8)
        else:
            ax1.text(x, r["low"], str(r["low"]), ha="center", va="bottom", fontsize=9)
    ax1.set_title("Replicas")
    cost_top = max([v for r in rows for v in (r["on_demand"], r["spot"]) if v is not None] + [1])
    for x, r in zip(xs, rows):
        for dx, key, color, label in ((-0.2, "on_demand", "tab:orange", "on-demand"),
                                      (0.2, "spot", "tab:green", "Spot")):
            if r[key] is None:
                if key == "on_demand" or r["name"] != "current":
                    ax2.text(x + dx, cost_top * 0.02, "unknown", ha="center", va="bottom", fontsize=7)
                continue
            bars = ax2.bar(x + dx, r[key], width=0.4, color=color, label=label)
            ax2.bar_label(bars, labels=[f"${r[key]:,.0f}"], padding=2, fontsize=7)
    handles, labels = ax2.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        # beside the panel: a bar's height, and the value written on it, may reach any corner inside
        ax2.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in (ax1, ax2):
        ax.set_xticks(xs)
        ax.set_xticklabels([r["name"] for r in rows])
        ax.set_xlim(-0.7, len(rows) - 0.3)  # room for a word ("unknown") beside the outer bars
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.15)
    ax2.set_title("USD per month (high end of a range)")
    fig.suptitle(f"Replica plan ({plan['basis']} basis, headroom {plan['headroom']:.0%}, spares {plan['spares']})")
    fig.tight_layout()
    return fig


def compare_figure(cells: Sequence[dict[str, Any]], labels: Sequence[str]):
    """Output tok/s per variant against concurrency, one panel per scenario (usable runs only)."""
    scenarios = list(dict.fromkeys(c["scenario"] for c in cells))
    fig, axes = plt.subplots(1, max(1, len(scenarios)), figsize=(5 * max(1, len(scenarios)), 3.8), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        mine = [c for c in cells if c["scenario"] == scenario]
        for i, label in enumerate(labels):
            points = sorted((c["concurrency"], c["output_tok_s"].get(label)) for c in mine
                            if c["output_tok_s"].get(label) is not None)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label,
                        color=VARIANT_COLORS[i % len(VARIANT_COLORS)])
        wins = [(c["concurrency"], c["output_tok_s"][c["winner"]]) for c in mine if c.get("winner")]
        if wins:
            ax.scatter([w[0] for w in wins], [w[1] for w in wins], s=150, facecolors="none", edgecolors="black",
                       zorder=5, label="winner")
        ax.set_xscale("log", base=2)
        ticks = sorted({c["concurrency"] for c in mine})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(scenario)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("output tok/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")  # output tok/s grows with concurrency: the upper left stays clear
    fig.tight_layout()
    return fig


def svg_data_uri(fig) -> str:
    """The figure as an SVG data URI (closed afterwards): no fonts, scripts or links to fetch."""
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def close(fig) -> None:
    plt.close(fig)
