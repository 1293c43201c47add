"""The answer in one line: the verdict state and sentence of a published report.

`bench publish` prints it when it has written a report, `bench open` when it has downloaded one, and
the stack output `report` carries the state. Read from the report's own files (summary.json,
plan.json, inputs.json), so all three say the same thing.
"""

from __future__ import annotations

from typing import Any

STATES = ("pass", "fail", "inconclusive")


def verdict_state(summary: dict[str, Any] | None) -> str | None:
    """"pass", "fail" or "inconclusive"; None when the report has no verdict (no baseline)."""
    verdict = (summary or {}).get("verdict")
    if not isinstance(verdict, dict):
        return None
    state = verdict.get("state")
    if state in STATES:
        return state
    if verdict.get("pass") is True:
        return "pass"
    ratio, threshold = verdict.get("min_ratio"), verdict.get("threshold")
    # No ratio at all, or a ratio that clears the threshold on an incomplete comparison (the only way
    # such a verdict does not pass): the question is open, not answered no.
    if ratio is None or (isinstance(threshold, (int, float)) and ratio >= threshold):
        return "inconclusive"
    return "fail"


def _ratio(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "no ratio"


def verdict_line(summary: dict[str, Any] | None, labels: dict[str, str] | None = None) -> str:
    """One sentence: state, what was compared, the smallest ratio against the threshold, and why."""
    labels = labels or {}
    state = verdict_state(summary)
    who = f"{labels['candidate']} against {labels['baseline']}" if labels.get("candidate") and labels.get("baseline") else ""
    if state is None:
        subject = labels.get("candidate") or labels.get("baseline") or "this sweep"
        return f"No verdict: {subject} was reported without a baseline to compare with."
    verdict = summary["verdict"]
    basis = verdict.get("basis") or "peak"
    threshold = verdict.get("threshold")
    line = (f"Verdict {state.upper()}" + (f" for {who}" if who else "") + f" on the {basis} basis: smallest "
            f"per-GPU ratio {_ratio(verdict.get('min_ratio'))}"
            + (f" against the threshold {threshold:g}x" if isinstance(threshold, (int, float)) else "") + ".")
    reasons = [str(r) for r in verdict.get("reasons") or [] if r]
    if reasons:
        line += " " + "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "") + "."
    return line


def plan_line(plan: dict[str, Any] | None) -> str | None:
    """Replicas per configuration against the current fleet, e.g. `Plan: g7e/nvfp4-g7e 4 replicas (today 12).`"""
    if not isinstance(plan, dict) or not plan.get("configurations"):
        return None
    parts = []
    for row in plan["configurations"]:
        replicas, span = row.get("replicas"), row.get("replicas_range") or [None, None]
        if replicas is not None:
            parts.append(f"{row.get('label')} {replicas} replicas")
        elif span[0] is not None:  # known only as a range (the grid alone): the range, and how to narrow it
            count = f"{span[0]}-{span[1]}" if span[1] is not None else f"{span[0]} or more"
            parts.append(f"{row.get('label')} {count} replicas" + (f" ({row['reason']})" if row.get("reason") else ""))
        else:
            parts.append(f"{row.get('label')}: {row.get('reason') or 'cannot carry the load at the SLO'}")
    current = plan.get("current") or {}
    today = f" (today {current['replicas']})" if current.get("replicas") else ""
    return f"Plan on the {plan.get('basis', 'slo')} basis: " + ", ".join(parts) + today + "."
