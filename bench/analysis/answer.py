"""The answer in words: the verdict's state and sentence, each capacity with the run it came from,
each ratio with the two capacities it divides, and what the answer means for today's fleet.

`bench publish` prints the verdict line when it has written a report, `bench open` when it has
downloaded one, and the stack output `report` carries the state. report.md and report.html word
their capacities, ratios and fleet with the functions below. Everything is read from the report's
own files (summary.json, plan.json): the figures are computed once, by the analysis, and only
worded here, so every page says the same thing.

A capacity is summary.json's INTERVAL (`slo_capacity_interval`, and per comparison
`candidate_slo_capacity` / `baseline_slo_capacity`): output tok/s [lo, hi) between the highest load
meeting the SLO and the lowest load above it missing it. Its figure is the lower end, named with the
run it came from (`source_run` where the analysis records it, else the load `load_pass`), the kind
of load (closed loop: concurrency; open loop: offered req/s), and, where recorded, the repeats and
the run-to-run spread the interval allowed for. bench compare's lead under the SLO is worded here
too; the rehearsal's words are in bench/analysis/rehearsal_words.py.
"""

from __future__ import annotations

from typing import Any

from bench.analysis.decision import STATE_WORDS
from bench.analysis.verdict import FAIL, PASS, interval_text, noise_words, ratio_text

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
    interval = verdict.get("min_ratio_interval")
    smallest = _ratio(verdict.get("min_ratio"))
    if isinstance(interval, list) and len(interval) == 2 and finite(interval[0]):
        smallest = interval_text(interval)
    line = (f"Verdict {state.upper()}" + (f" for {who}" if who else "") + f" on the {basis} basis: smallest "
            f"per-GPU ratio {smallest}"
            + (f" against the threshold {threshold:g}x" if isinstance(threshold, (int, float)) else "") + ".")
    fleet = fleet_words(verdict.get("fleet"))
    if fleet:
        line += " " + fleet[0]
    reasons = [str(r) for r in verdict.get("reasons") or [] if r]
    if reasons:
        line += " " + "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "") + "."
    return line


def verdict_short(summary: dict[str, Any] | None) -> str | None:
    """The verdict in one clause for a command's last line (`bench report`, `bench demo`): state, basis,
    the verdict's own smallest interval with its scenario, the threshold, and the fleet it means, worded
    as the pages word them; None without a verdict."""
    v = (summary or {}).get("verdict")
    state = verdict_state(summary)
    if not isinstance(v, dict) or state is None:
        return None
    text = f"verdict {state.upper()} on the {v.get('basis') or 'peak'} basis"
    interval = v.get("min_ratio_interval")
    if isinstance(interval, list) and len(interval) == 2 and (interval[0] is not None or v.get("min_ratio") is not None):
        where = f" ({v['min_ratio_scenario']})" if v.get("min_ratio_scenario") else ""
        text += f": smallest ratio per GPU {interval_text(interval)}{where}"
    if finite(v.get("threshold")):
        text += f", threshold {v['threshold']:g}x"
    fleet = fleet_words(v.get("fleet"))
    if fleet:
        text += f"; {fleet[0][0].lower()}{fleet[0][1:-1]}"
    return text


def runs_words(counts: dict[str, Any] | None, mark=None) -> str:
    """A side's runs as the report lists them (summary.json `run_counts`): "8 grid runs (6 usable, 1
    invalid, 1 suspect), 2 capacity-search runs, 1 invalid attempt kept for the record", and with repeats
    "...; from 1 repeat: 4 grid runs (4 usable)"; `mark(key, number)` dresses each number (a page tags it
    with its JSON path; a repeats' number comes with the key ("repeats", key))."""
    if not isinstance(counts, dict):
        return "no runs"
    mark = mark or (lambda key, number: str(number))

    def n(key: str, one: str, many: str) -> str | None:
        k = counts.get(key) or 0
        return f"{mark(key, k)} {one if k == 1 else many}" if k else None

    grid = counts.get("grid") or 0
    how = [f"{mark('grid_usable', counts.get('grid_usable') or 0)} usable"] + [
        f"{mark(k, counts[k])} {w}" for k, w in (("grid_invalid", "invalid"), ("grid_suspect", "suspect"))
        if counts.get(k)]
    parts = [f"{mark('grid', grid)} grid run{'' if grid == 1 else 's'} ({', '.join(how)})",
             n("search", "capacity-search run", "capacity-search runs"),
             n("open_loop", "open-loop run", "open-loop runs"),
             n("invalid_attempts", "invalid attempt kept for the record", "invalid attempts kept for the record")]
    words = ", ".join(p for p in parts if p)
    repeats = counts.get("repeats")
    if isinstance(repeats, dict):  # a side pooled from several sweeps: the repeats' share, counted alike
        k = repeats.get("sweeps") or 0
        words += (f"; from {mark(('repeats', 'sweeps'), k)} repeat{'' if k == 1 else 's'}: "
                  + runs_words({key: v for key, v in repeats.items() if key != "sweeps"},
                               lambda key, number: mark(("repeats", key), number)))
    return words


def attempts_markdown(summary: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """report.md's invalid attempts (summary.json `invalid_attempts`): each with its side, load, kind,
    what became of the run, and its reason."""
    rows = summary.get("invalid_attempts") or []
    if not rows:
        return []
    lines = ["", "Invalid attempts kept for the record (a run that came back valid counts; one that stayed "
             "invalid is listed above):", "", "| Sweep | Scenario | Load | Attempt | Then | Reason |",
             "|---|---|---|---:|---|---|"]
    for a in rows:
        load = load_words("req/s" if a.get("rate") is not None else "concurrency",
                          a.get("rate") if a.get("rate") is not None else a.get("concurrency")) or "unknown"
        kind = {"search": "capacity search", "open_loop": "open loop"}.get(a.get("kind"), "grid")
        then = "run again: valid" if a.get("then") == "valid" else "stayed invalid"
        lines.append(f"| {labels.get(a.get('side'), a.get('side'))} | {a.get('scenario')} | {load} ({kind}) "
                     f"| {a.get('attempt') or '-'} | {then} | {a.get('reason') or 'no reason recorded'} |")
    return lines


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


# ---------------------------------------------------------------------------------------------
# Capacities, ratios and the fleet, in words (report.md and report.html)


def _tok(value: Any) -> str:
    return f"{value:,.1f}"


def finite(value: Any) -> bool:
    """A number that can be shown: int or float, not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")


def load_words(unit: str | None, value: Any) -> str | None:
    if not finite(value):
        return None
    return f"{value:g} req/s" if unit == "req/s" else f"c={value:g}"


def loop_words(interval: dict[str, Any]) -> str:
    return "open loop" if interval.get("source") == "open_loop" or interval.get("load_unit") == "req/s" \
        else "closed loop"


def source_run(interval: dict[str, Any]) -> tuple[Any, str | None]:
    """(load, file) of the run the capacity's figure came from: `source_run` as the analysis records it
    (a file name, or {"file", "load"}), with `source_load`, else `load_pass`, as its load."""
    run = interval.get("source_run")
    file, load = None, None
    if isinstance(run, dict):
        file = run.get("file") or run.get("path")
        load = next((run[k] for k in ("load", "concurrency", "rate") if finite(run.get(k))), None)
    elif isinstance(run, str) and run:
        file = run
    if load is None:
        load = interval.get("source_load") if finite(interval.get("source_load")) else interval.get("load_pass")
    return load, file


def span_words(pair: Any, unit: str = "tok/s") -> str:
    """[lo, hi] of a capacity: "2,836.4 to 3,010.2 tok/s", "2,836.4 tok/s or more", "unknown"."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not finite(pair[0]):
        return "unknown"
    lo, hi = pair
    unit = f" {unit}" if unit else ""
    if not finite(hi):
        return f"{_tok(lo)}{unit} or more"
    if _tok(lo) == _tok(hi):
        return f"{_tok(lo)}{unit}"
    return f"{_tok(lo)} to {_tok(hi)}{unit}"


def bracket_words(interval: dict[str, Any]) -> str:
    """Where the SLO holds: "meets the SLO at c=28, misses it at c=32", and the open and never cases."""
    unit, state = interval.get("load_unit"), interval.get("state")
    passed, failed = load_words(unit, interval.get("load_pass")), load_words(unit, interval.get("load_fail"))
    if state == "no_data":
        return "no usable run"
    if state == "never_meets_slo":
        lowest = failed or "the lowest load tested"
        return (f"never meets the SLO at the loads tested: misses it from {lowest}"
                + (", one request at a time" if interval.get("load_fail") in (1, 1.0) and unit != "req/s" else ""))
    if state == "broken_measurement":
        return "not decided: repeats of one run disagree (a broken measurement)"
    if passed is None:
        return (f"no load met the SLO with confidence; misses it at {failed}" if failed
                else "no load met the SLO with confidence")
    if failed is None:
        return f"still meets the SLO at {passed}, the highest load tested: no upper bound"
    return f"meets the SLO at {passed}, misses it at {failed}"


def from_words(interval: dict[str, Any], figure: bool = False) -> str:
    """The run a capacity's figure came from: "c=28, closed loop, S1_chat_c28.json and 1 more, mean of 2
    runs; run-to-run band 12 %, measured from repeats"; with `figure`, the figure itself first ("2,836.4 tok/s (c=28, ...)")."""
    if interval.get("state") != "meets_slo":
        return loop_words(interval)
    load, file = source_run(interval)
    parts = [load_words(interval.get("load_unit"), load) or "load unknown", loop_words(interval)]
    files = [str(f) for f in interval.get("source_runs") or [] if f] or ([str(file)] if file else [])
    if files:
        parts.append(files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more")
    repeats = interval.get("repeats")
    if isinstance(repeats, int) and repeats > 1:  # the figure is their mean
        parts.append(f"mean of {repeats} runs")
    text = ", ".join(parts)
    if figure and finite(interval.get("point_tok_s")):
        text = f"{_tok(interval['point_tok_s'])} tok/s ({text})"
    extra = []
    if finite(interval.get("noise_pct")):
        extra.append(noise_words(interval["noise_pct"], interval.get("noise_source"),
                                 interval.get("noise_pct_by_figure")))
    return text + ("; " + ", ".join(extra) if extra else "")


def figure_words(interval: dict[str, Any], per_gpu: Any = None, figure: Any = None) -> str:
    """A capacity's figure and its 95 % interval: "498.7 tok/s, 95 % interval 399.9 to 621.9" (per GPU
    when `per_gpu`, the interval per GPU, is given with `figure`, the figure per GPU); the interval alone
    where there is no figure."""
    unit = "tok/s per GPU" if per_gpu is not None else "tok/s"
    pair = per_gpu if per_gpu is not None else interval.get("output_tok_s")
    return figure_span(figure if per_gpu is not None else interval.get("point_tok_s"), pair, unit)


def figure_span(value: Any, pair: Any, unit: str = "tok/s") -> str:
    """A figure with its 95 % interval ("498.7 tok/s, 95 % interval 399.9 to 621.9"); the interval
    alone without a figure."""
    if not finite(value):
        return span_words(pair, unit)
    return f"{_tok(value)}{' ' + unit if unit else ''}, 95 % interval {span_words(pair, '')}"


def capacity_words(interval: dict[str, Any] | None, per_gpu: Any = None, figure: Any = None) -> str:
    """One capacity in words: the figure (per GPU when `per_gpu` and `figure` are given) with its 95 %
    interval, its run, its bracket."""
    if not interval or interval.get("state") in (None, "no_data"):
        return "unknown (no usable run)"
    if interval.get("state") == "broken_measurement":
        return "not measured: " + str(interval.get("reason") or "repeats of the same run disagree")
    pair = per_gpu if per_gpu is not None else interval.get("output_tok_s")
    if interval.get("state") == "never_meets_slo":
        hi = (pair or [None, None])[1]
        words = "0 tok/s" if hi in (0, 0.0) else (f"below {_tok(hi)} tok/s" if finite(hi) else "0 tok/s")
        return f"{words} ({bracket_words(interval)})"
    return f"{figure_words(interval, per_gpu, figure)} (from {from_words(interval)}; {bracket_words(interval)})"


CREDIT_WHY = ("the two sides' run-to-run bands combined in quadrature rather than added: their runs are "
              "independent")


def credit_words(value: Any) -> str | None:
    """A ratio end's band credit (summary.json `slo_ratio_band_credit`), to three decimals."""
    return f"{value:.3f}" if finite(value) else None


def ratio_rebuilt(comparison: dict[str, Any]) -> str | None:
    """How the SLO ratio's interval divides the capacities per GPU shown beside it: each end is the
    quotient of two of them, times (low end) or over (high end) the credit for the two sides' bands
    combined in quadrature (`slo_ratio_band_credit`)."""
    per = comparison.get("slo_capacity_per_gpu") or {}
    a, b = per.get("candidate"), per.get("baseline")
    if not (isinstance(a, list) and isinstance(b, list)) or not (finite(a[0]) and finite(b[0])):
        return None
    credit = comparison.get("slo_ratio_band_credit") or [None, None]
    k_lo, k_hi = credit_words(credit[0]), credit_words(credit[1])
    hi_b = _tok(b[1]) if finite(b[1]) else "no bound"
    hi_a = _tok(a[1]) if finite(a[1]) else "no bound"
    low = f"low end {_tok(a[0])} / {hi_b}" + (f" × {k_lo}" if k_lo else "")
    high = f"high end {hi_a} / {_tok(b[0])}" + (f" ÷ {k_hi}" if k_hi else "")
    return (f"{low}, {high} (candidate / baseline, tok/s per GPU"
            + (f"; × and ÷ {CREDIT_WHY})" if k_lo or k_hi else ")"))


def fleet_count(fleet: dict[str, Any]) -> str | None:
    """The fleet's count in words ("4 to 10", "4", "at most 10", "at least 4"); None without one."""
    span = fleet.get("replicas_range")
    if not isinstance(span, list) or len(span) != 2 or span == [None, None]:
        return None
    lo, hi = span
    if lo is None:
        return f"at most {hi}"
    if hi is None:
        return f"at least {lo}"
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def fleet_division(fleet: dict[str, Any]) -> str:
    """How the count divides today's replicas by the verdict's ratio intervals: "12 / 3.71x and 12 / 1.21x,
    S1_chat's ratio interval per replica, rounded up" (each end's scenario where they differ, and what an
    open end leaves)."""
    now = fleet["current"]
    gpus = fleet.get("gpus") or {}
    a, b = gpus.get("candidate"), gpus.get("baseline")
    per = f" (per GPU x {a} GPUs / {b} GPU{'s' if b != 1 else ''})" if a and b and a != b else ""
    low, high = (d if isinstance(d, dict) and finite(d.get("ratio_per_replica")) else None
                 for d in (fleet.get("divided_by") or [None, None]))
    if low and high:
        if low["scenario"] == high["scenario"]:
            a, b = low["ratio_per_replica"], high["ratio_per_replica"]
            ends = f"{now} / {a:.2f}x" + ("" if a == b else f" and {now} / {b:.2f}x")
            return f"{ends}, {low['scenario']}'s ratio interval per replica{per}, rounded up"
        return (f"{now} / {low['ratio_per_replica']:.2f}x, the high end of {low['scenario']}'s ratio interval, and "
                f"{now} / {high['ratio_per_replica']:.2f}x, the low end of {high['scenario']}'s, per replica{per}, "
                "rounded up: the fleet carries every scenario")
    if high:
        return (f"{now} / {high['ratio_per_replica']:.2f}x, the low end of {high['scenario']}'s ratio interval per "
                f"replica{per}, rounded up; no interval has an upper end, so no smaller count is ruled out")
    if low:
        return (f"{now} / {low['ratio_per_replica']:.2f}x, the high end of {low['scenario']}'s ratio interval per "
                f"replica{per}, rounded up; an interval has no lower end, so no larger count is ruled out")
    return "the ratio intervals per replica"


def fleet_words(fleet: dict[str, Any] | None) -> list[str]:
    """What the verdict means for today's fleet (summary.json `verdict.fleet`), as sentences: today's
    replicas over the verdict's own ratio interval, then what smaller fleets need and what "today" ran."""
    if not isinstance(fleet, dict) or not fleet.get("current"):
        return []
    now = fleet["current"]
    who = fleet.get("candidate") or "the candidate"
    count = fleet_count(fleet)
    if count is not None:
        first = f"Today {now} replicas: {count} on {who} carry the same load ({fleet_division(fleet)})."
    else:
        first = f"Today {now} replicas: no count on {who} follows from the verdict: {fleet.get('reason') or 'no ratio'}."
    lines = [first]
    needs = [f"{t['replicas']} need {t['needs_ratio_per_gpu']:g}x" for t in fleet.get("targets") or []
             if finite(t.get("needs_ratio_per_gpu"))]
    if needs:
        lines.append("Per GPU, " + ", ".join(needs) + " (today's replicas / the smaller fleet).")
    ran = fleet.get("baseline") or {}
    facts = [f for f in (ran.get("instance_type"), f"{ran['gpus']} GPU per replica" if ran.get("gpus") else None,
                         ran.get("model"), f"vLLM {ran['vllm_version']}" if ran.get("vllm_version") else None,
                         ran.get("image"), f"flags {ran['served_flags']}" if ran.get("served_flags") else None) if f]
    lines.append(f"\"Today\" is {now} replicas running what the baseline {ran.get('label') or ''} ran"
                 + (f" ({'; '.join(map(str, facts))})" if facts else " (not recorded)")
                 + "; it holds only if today's fleet runs the same. No headroom or spares: the replica plan "
                 "(`bench plan --headroom --spares`) adds them.")
    return lines


def decides_words(state: str | None, threshold: Any) -> str:
    """What one scenario's interval says against the threshold."""
    thr = f"{threshold:g}x" if finite(threshold) else "the threshold"
    return {"pass": f"clears {thr} even at its low end", "fail": f"below {thr} even at its high end",
            "inconclusive": f"spans {thr} or is incomplete: undecided"}.get(state or "", "undecided")


def _times(value: Any) -> str:
    return f"{value:.2f}x" if finite(value) else "-"


BASIS_WORDS = {
    "slo": "the SLO basis (output tok/s per GPU under the SLO, each side's capacity an interval between two "
           "tested loads)",
    "peak": "the peak basis (the PoC report's method: peak output tok/s per GPU, the smallest ratio across "
            "scenarios)",
}


def scenario_lines(summary: dict[str, Any]) -> list[str]:
    """Per scenario, the verdict's own interval and the two capacities it divides (per GPU)."""
    v = summary.get("verdict") or {}
    out = []
    for name, c in (summary.get("comparison") or {}).items():
        if v.get("basis") == "slo":
            per, fig = c.get("slo_capacity_per_gpu") or {}, c.get("slo_figure_per_gpu") or {}
            cand, base = c.get("candidate_slo_capacity"), c.get("baseline_slo_capacity")
            out.append(f"{name}: {interval_text(c.get('slo_ratio_interval'))}, "
                       f"{decides_words(c.get('slo_state'), v.get('threshold'))}. Candidate "
                       f"{capacity_words(cand, per.get('candidate'), fig.get('candidate'))}; baseline "
                       f"{capacity_words(base, per.get('baseline'), fig.get('baseline'))}. Rebuilt: "
                       f"{ratio_rebuilt(c) or 'no ratio to rebuild'}.")
        else:
            per = c.get("peak_per_gpu_tok_s") or {}
            cand, base = (_tok(per.get(w)) if finite(per.get(w)) else "-" for w in ("candidate", "baseline"))
            out.append(f"{name}: {_times(c.get('throughput_ratio'))}: candidate peak {cand} tok/s "
                       f"per GPU, baseline {base} tok/s per GPU")
    return out


def verdict_markdown(v: dict[str, Any], label: str, base_label: str, plan_link: str | None = None,
                     issues: list[str] | tuple[str, ...] = (), summary: dict[str, Any] | None = None) -> list[str]:
    """The answer first: state, basis, each scenario's interval with the capacities it divides, what
    it means for today's fleet, and what settles an open question."""
    state = v.get("state") or ("pass" if v.get("pass") else "inconclusive")
    basis = BASIS_WORDS.get(v.get("basis"), f"the {v.get('basis')} basis")
    thr = f"{v['threshold']:g}x"
    lines = ["", "## Verdict", "", f"**{STATE_WORDS[state]}**: {label} against {base_label} on {basis}, "
             f"threshold {thr}."]
    per_scenario = scenario_lines(summary or {"verdict": v})
    if per_scenario:
        lines += ["", "Per scenario, the ratio per GPU (the verdict's interval) and the two capacities it divides:", ""]
        lines += [f"- {line}" for line in per_scenario]
    fleet = fleet_words(v.get("fleet"))
    if fleet:
        lines += ["", "**Fleet**: " + " ".join(fleet)]
    if state == PASS:
        at_lower_end = " even at the lower end of its interval." if v.get("basis") == "slo" else "."
        lines += ["", f"Every scenario clears {thr}{at_lower_end}"]
    elif state == FAIL:
        lines += ["", f"Some scenario falls short of {thr} even in its best case:", ""]
        lines += [f"- {r}" for r in v.get("reasons") or []]
        more = [i for i in issues if i not in (v.get("reasons") or [])]
        if more:
            lines += ["", "The comparison is also incomplete (this did not decide the verdict):", ""]
            lines += [f"- {i}" for i in more]
    else:
        lines += ["", "The data cannot decide yet. What is missing or too uncertain, and what settles it:", ""]
        lines += [f"- {r}" for r in v.get("reasons") or []]
    if plan_link:
        lines += ["", f"Replica plan: [{plan_link}]({plan_link})."]
    return lines


# ---------------------------------------------------------------------------------------------
# bench compare's lead under the SLO (compare.json `slo_capacity_winner`), in words


def lead_interval_words(lead: dict[str, Any]) -> str:
    """The lead's ratio interval in words: the verdict's, except where only the first variant meets the SLO."""
    interval = lead.get("ratio_interval")
    if interval is None:
        return "no interval"
    if interval[0] is None:
        return f"only {lead['first']} meets the SLO at the loads tested"
    return interval_text(interval)


def lead_words(lead: dict[str, Any]) -> str:
    """compare.json's `slo_capacity_winner` entry (bench compare's lead under the SLO) in words: compare.md,
    compare.html, the terminal and the gpu-check experiment page."""
    ratio = lead.get("ratio")
    head = f"{lead['first']} over {lead['second']}, per GPU: " + (
        f"{ratio_text(ratio)} (95 % interval {lead_interval_words(lead)})" if ratio is not None
        else lead_interval_words(lead))
    return f"{head}: {lead_outcome(lead)}"


def lead_outcome(lead: dict[str, Any]) -> str:
    """Whether the lead names a winner, and why not where it does not."""
    interval = lead.get("ratio_interval")
    if lead.get("winner"):
        return f"{lead['winner']} serves more under the SLO, outside the noise"
    if interval is not None and (interval[0] is None or interval[0] > 1.0):  # null: only the first meets the SLO
        return "no winner is named (the comparison is incomplete)"
    return "no clear winner (the interval reaches down to 1x or below)"


def ranks_shown(variants: int) -> bool:
    """Whether bench compare shows who trails the best (compare.md's and the page's column, the terminal's and
    the experiment page's words): with three or more variants; with two, the winner says who trails."""
    return variants > 2


def standing_words(cell: dict[str, Any]) -> str | None:
    """"seqs-64, seqs-32 and seqs-128 lead, within the noise of each other; beyond the noise, seqs-16 serves
    38.4 % less than seqs-64": who leads a bench compare cell (its `leaders`, the best first) and who trails the
    best beyond the noise (its `behind`, in % of the best). None where no variant trails, or where the winner
    says it (`ranks_shown`)."""
    leaders, behind = cell.get("leaders") or [], cell.get("behind") or {}
    if not leaders or not behind or not ranks_shown(len(cell.get("output_tok_s") or {})):
        return None
    lead = (f"{leaders[0]} leads" if len(leaders) == 1
            else f"{', '.join(leaders[:-1])} and {leaders[-1]} lead, within the noise of each other")
    (first, pct), *rest = behind.items()
    trail = f"{first} serves {pct:.1f} % less than {leaders[0]}" + "".join(
        f"{' and' if k == len(rest) - 1 else ','} {label} {p:.1f} % less" for k, (label, p) in enumerate(rest))
    return f"{lead}; beyond the noise, {trail}"
