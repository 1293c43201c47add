"""Speculative decoding in results: acceptance, acceptance per draft position, the acceptance gate,
and the columns the PoC compared draft methods on (acceptance, c1 tok/s, c1 E2E p50, c8 tok/s) for one
sweep.

Acceptance comes from `vllm bench serve`'s result file, which reads the server's spec-decode
counters (`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
`..._num_accepted_tokens_per_pos`) before and after the run: `spec_decode_acceptance_rate` (percent)
and `spec_decode_per_position_acceptance_rates` (fractions, one per draft position).
`acceptance_from_metrics` computes the same from two /metrics texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.analysis import results as R
from bench.common import prometheus
from bench.common import workloads as W


def per_position(run: R.RunResult) -> list[float] | None:
    """Acceptance per draft position (fractions 0-1), or None without speculative decoding."""
    rates = run.raw.get("spec_decode_per_position_acceptance_rates") if run.raw else None
    if not isinstance(rates, list) or not rates:
        return None
    try:
        return [float(r) for r in rates]
    except (TypeError, ValueError):
        return None


def gate_problem(run: R.RunResult) -> str | None:
    """A configuration problem when speculative decoding accepts < 10 % of drafts on real text."""
    try:
        real = W.workload(run.scenario).real_text
    except KeyError:
        return None
    rate = run.spec_acceptance_rate_pct
    if not run.valid or not real or rate is None or rate >= W.ACCEPTANCE_GATE_PCT:
        return None
    return (f"{run.scenario} c={run.concurrency}: speculative decoding accepted {rate:.1f} % of draft "
            f"tokens on real text (gate {W.ACCEPTANCE_GATE_PCT:g} %): a configuration problem (e.g. an "
            "FP8 target with fp8 KV whose draft lacks KV scales), not a slow setting")


def gate_problems(runs: list[R.RunResult]) -> list[str]:
    return [p for p in (gate_problem(r) for r in runs) if p]


@dataclass(frozen=True)
class Table7Row:
    """One configuration's line of the Korean comparison (acceptance, c1 tok/s, c1 E2E p50, c8 tok/s),
    from a sweep's K_korean runs."""

    acceptance_pct: tuple[float, ...]  # one per concurrency that reported it
    per_position: list[float] | None  # at the lowest concurrency that reported it
    c1_tok_s: float | None
    c1_e2el_p50_s: float | None
    c8_tok_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"acceptance_pct": list(self.acceptance_pct), "per_position": self.per_position,
                "c1_tok_s": self.c1_tok_s, "c1_e2el_p50_s": self.c1_e2el_p50_s, "c8_tok_s": self.c8_tok_s}

    @property
    def acceptance_text(self) -> str:
        if not self.acceptance_pct:
            return "-"
        lo, hi = min(self.acceptance_pct), max(self.acceptance_pct)
        return f"{lo:.1f}%" if abs(hi - lo) < 0.05 else f"{lo:.1f}-{hi:.1f}%"

    @property
    def per_position_text(self) -> str:
        return " / ".join(f"{r:.2f}" for r in self.per_position) if self.per_position else "-"


def table7_row(runs: list[R.RunResult], scenario: str = "K_korean") -> Table7Row | None:
    mine = sorted((r for r in runs if r.scenario == scenario and r.valid), key=lambda r: r.concurrency)
    if not mine:
        return None
    by_c = {r.concurrency: r for r in mine}
    with_rate = [r for r in mine if r.spec_acceptance_rate_pct is not None]
    c1 = by_c.get(1)
    c8 = by_c.get(8)
    return Table7Row(
        acceptance_pct=tuple(r.spec_acceptance_rate_pct for r in with_rate),
        per_position=next((per_position(r) for r in with_rate if per_position(r)), None),
        c1_tok_s=c1.output_tok_s if c1 else None,
        c1_e2el_p50_s=c1.e2el_p50_ms / 1000 if c1 and c1.e2el_p50_ms is not None else None,
        c8_tok_s=c8.output_tok_s if c8 else None,
    )


def table7_markdown(rows: list[tuple[str, Table7Row | None]]) -> list[str]:
    def n(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{v:,.1f}{unit}"

    lines = ["| Configuration | Acceptance | Acceptance per position | c1 tok/s | c1 E2E p50 | c8 tok/s |",
             "|---|---|---|---|---|---|"]
    for label, row in rows:
        if row is None:
            lines.append(f"| {label} | no valid K_korean run | - | - | - | - |")
            continue
        e2e = "-" if row.c1_e2el_p50_s is None else f"{row.c1_e2el_p50_s:.2f} s"
        lines.append(f"| {label} | {row.acceptance_text} | {row.per_position_text} | {n(row.c1_tok_s)} | "
                     f"{e2e} | {n(row.c8_tok_s)} |")
    return lines


# -- /metrics text ------------------------------------------------------------------------------


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample, parsed as the sweep's telemetry parses /metrics."""
    return [(name, labels, value) for name, points in prometheus.parse(text).items() for labels, value in points]


def spec_counters(text: str) -> dict[str, Any] | None:
    """Spec-decode counters summed over engines, or None when the server exposes none."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    found = False
    for name, labels, value in _samples(text):
        if not name.startswith("vllm:spec_decode_"):
            continue
        found = True
        base = name.removesuffix("_total")
        if base == "vllm:spec_decode_num_drafts":
            drafts += value
        elif base == "vllm:spec_decode_num_draft_tokens":
            draft_tokens += value
        elif base == "vllm:spec_decode_num_accepted_tokens":
            accepted += value
        elif base == "vllm:spec_decode_num_accepted_tokens_per_pos" and "position" in labels:
            pos = int(labels["position"])
            per_pos[pos] = per_pos.get(pos, 0.0) + value
    if not found:
        return None
    return {"num_drafts": drafts, "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted,
            "accepted_per_pos": per_pos}


def acceptance_from_metrics(before: str, after: str) -> dict[str, Any] | None:
    """Acceptance over a window between two /metrics scrapes: rate (%), length, per position."""
    a, b = spec_counters(before), spec_counters(after)
    if a is None or b is None:
        return None
    drafts = b["num_drafts"] - a["num_drafts"]
    draft_tokens = b["num_draft_tokens"] - a["num_draft_tokens"]
    accepted = b["num_accepted_tokens"] - a["num_accepted_tokens"]
    if drafts <= 0 or draft_tokens <= 0:
        return {"acceptance_pct": None, "acceptance_length": None, "per_position": [], "drafts": drafts}
    positions = sorted(set(a["accepted_per_pos"]) | set(b["accepted_per_pos"]))
    per_position = [(b["accepted_per_pos"].get(p, 0.0) - a["accepted_per_pos"].get(p, 0.0)) / drafts
                    for p in positions]
    return {"acceptance_pct": 100.0 * accepted / draft_tokens, "acceptance_length": 1 + accepted / drafts,
            "per_position": per_position, "drafts": drafts}


def report_sections(label: str, runs: list[R.RunResult]) -> list[str]:
    """The report's spec-decode sections: configuration problems (the gate) and the Korean comparison."""
    lines: list[str] = []
    problems = gate_problems(runs)
    if problems:
        lines += ["", "## Configuration problems", "",
                  "Speculative decoding that accepts almost nothing on real text is misconfigured, not slow; "
                  "these runs must not be read as a result:", ""]
        lines += [f"- **{p}**" for p in problems]
    korean = [r for r in runs if r.scenario == "K_korean" and r.valid]
    if korean:
        lines += ["", "## Korean prompt set (acceptance, c1 tok/s, c1 E2E p50, c8 tok/s)", "",
                  f"{len(W.load_prompt_set())} Korean marketplace prompts (bench/data), chat template applied, "
                  f"outputs capped at {W.WORKLOADS['K_korean'].output_len} tokens and ending naturally.", ""]
        lines += table7_markdown([(label, table7_row(runs))])
        per_c = [r for r in korean if r.spec_acceptance_rate_pct is not None]
        if per_c:
            lines += ["", "| Concurrency | Acceptance | Per draft position | Mean acceptance length |",
                      "|---:|---:|---|---:|"]
            for r in per_c:
                pos = per_position(r)
                length = "-" if r.spec_acceptance_length is None else f"{r.spec_acceptance_length:.2f}"
                lines.append(f"| {r.concurrency} | {r.spec_acceptance_rate_pct:.1f}% | "
                             f"{' / '.join(f'{p:.2f}' for p in pos) if pos else '-'} | {length} |")
    return lines
