"""PNG charts for `bench report` (matplotlib, Agg backend; imported only when charts are drawn).

One figure per scenario: output tok/s, TTFT p99, ITL p99 and TPOT p99 against concurrency (log2
axis), the baseline dashed, the SLO limits as horizontal lines (the decode limit on the panel of
the metric it applies to). Only usable runs are drawn (valid and not suspect).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench import locations  # noqa: E402

if TYPE_CHECKING:
    from bench.report import Side

PANELS = (
    ("output_tok_s", "Output tok/s", None),
    ("ttft_p99_ms", "TTFT p99 (ms)", "ttft"),
    ("itl_p99_ms", "ITL p99 (ms, per chunk)", "itl"),
    ("tpot_p99_ms", "TPOT p99 (ms, per token)", "tpot"),
)


def _series(side: "Side", scenario: str, attr: str) -> tuple[list[int], list[float]]:
    points = [(r.concurrency, getattr(r, attr)) for r in side.valid(scenario) if getattr(r, attr) is not None]
    points.sort()
    return [c for c, _ in points], [v for _, v in points]


def render(side: "Side", base: "Side | None", slo: dict[str, Any], out: Path) -> list[str]:
    written = []
    for scenario in side.scenarios:
        fig, axes = plt.subplots(1, len(PANELS), figsize=(20, 4.2))
        excluded = [r.concurrency for r in side.runs if r.scenario == scenario and not side.usable(r)]
        for ax, (attr, title, slo_key) in zip(axes, PANELS):
            xs, ys = _series(side, scenario, attr)
            if xs:
                ax.plot(xs, ys, marker="o", label=side.label)
            if base:
                bx, by = _series(base, scenario, attr)
                if bx:
                    ax.plot(bx, by, marker="s", linestyle="--", label=f"{base.label} (baseline)")
            limit = slo["ttft_p99_ms"] if slo_key == "ttft" else (
                slo["itl_p99_ms"] if slo_key == slo.get("decode_metric", "itl") else None)
            if limit is not None:
                ax.axhline(limit, color="red", linewidth=1, linestyle=":", label="SLO limit")
            ax.set_xscale("log", base=2)
            ticks = sorted({r.concurrency for r in side.runs if r.scenario == scenario}
                           | ({r.concurrency for r in base.runs if r.scenario == scenario} if base else set()))
            if ticks:
                ax.set_xticks(ticks)
                ax.set_xticklabels([str(t) for t in ticks])
            ax.set_ylim(bottom=0)
            ax.set_xlabel("concurrency")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "not in these results", ha="center", va="center", transform=ax.transAxes)
        lengths = side.lengths.get(scenario)
        suptitle = scenario + (f" ({lengths[0]}/{lengths[1]} tokens)" if lengths and None not in lengths else "")
        if excluded:
            suptitle += f"  (invalid or suspect, not drawn: c={', '.join(map(str, excluded))})"
        fig.suptitle(suptitle)
        fig.tight_layout()
        name = f"chart_{scenario}.png"
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        locations.written(out / name)
        written.append(name)
    return written
