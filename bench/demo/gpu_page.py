"""The page section of a `gpu-check` record: gpu-check.md (markdown, for docs and pull requests) and
gpu-check.html (the same, standalone). Renders the record only: every figure is computed once, by
bench/demo/gpu_check.py."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from bench.analysis import answer
from bench.analysis import compare as CMP
from bench.demo import gpu_full, gpu_mixed

TITLES = {
    "model": "Model built",
    "cold_start": "Cold start (empty compile cache)",
    "timeline": "Start-up timeline from the server's log",
    "sleep_wake": "Sleep and wake",
    "compile_cache": "Start from a compile cache pushed and pulled through S3",
    "sweep": "Sweep, cross-checked against vllm bench serve",
    "speculative": "Speculative decoding with a draft model",
}
MILESTONE_WORDS = {
    "api_banner": "API server banner (imports done)",
    "engine_started": "engine process started",
    "weights_loaded": "weights loaded",
    "compile_started": "torch.compile started (or cache load)",
    "compile_done": "torch.compile done",
    "kv_cache_sized": "KV cache sized",
    "graphs_captured": "CUDA graphs captured",
    "engine_ready": "engine init done",
    "api_ready": "API ready",
    "health_ok": "/health answered 200",
}


def _s(value: Any, unit: str = " s", digits: int = 1) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}{unit}"
    return str(value)


def _start_line(figures: dict[str, Any]) -> str:
    kv = figures.get("kv_cache_tokens")
    engine = (f"; KV cache {kv:,} tokens" if kv else "") + (
        f", attention {figures['attention_backend']}" if figures.get("attention_backend") else "")
    return (f"/health after {_s(figures.get('healthy_s'))}; engine init {_s(figures.get('engine_init_s'))}, "
            f"torch.compile {_s(figures.get('compile_total_s'))}, CUDA graphs {_s(figures.get('cuda_graph_s'))}, "
            f"weights {_s(figures.get('weight_load_s'), digits=2)}; compile cache: "
            f"{figures.get('compile_cache') or 'no cache line'}{engine}"
            + (f". {warning}" if (warning := gpu_full.memory_warning(figures)) else ""))


def model_line(record: dict[str, Any]) -> str | None:
    """The model and the transformers trap's finding, in words (None for a record without them)."""
    model, trap = record.get("model") or {}, record.get("transformers_trap") or {}
    parts = []
    if model.get("shape") and model["shape"] != "tiny":
        parts.append(f"Model: {model['shape']} with random weights, {model.get('parameters', 0) / 1e9:.1f} B parameters, "
                     f"{model.get('quantization')}, KV cache {model.get('kv_cache_dtype')}, tensor parallel "
                     f"{model.get('tensor_parallel_size')}, GPU memory utilization {model.get('gpu_memory_utilization')}.")
    elif model.get("shape"):
        parts.append("Model: the tiny random Llama.")
    if trap.get("status"):
        parts.append(f"Transformers trap: {trap['status']} ({trap.get('summary')})"
                     + (f"; fix: {trap['fix']}" if trap.get("fix") else "") + ".")
    return " ".join(parts) or None


def changes_line(variants: dict[str, Any]) -> str | None:
    """What each variant changes in `vllm serve`, in the settings `bench compare` tells apart (its
    server_settings: the stack's config names, `--no-X` as X off), from the flags each variant recorded; None
    where fewer than two did. The model line gives the settings before that change."""
    servers = {label: CMP.server_settings(v["flags"]) for label, v in variants.items() if v.get("flags")}
    if len(servers) < 2:
        return None
    keys = CMP.differing_settings(list(servers.values()))
    said = [f"{label}: " + (", ".join(f"{k} {server.get(k, 'not set')}" for k in keys) or "nothing")
            for label, server in servers.items()]
    return "What each variant changes in `vllm serve`, the rest as above: " + "; ".join(said) + "."


def _side(run: dict[str, Any]) -> str:
    """One side of the cross-check: output tok/s (window, prompts[, prefix-cache hits])."""
    hits = run.get("prefix_cache_hit_pct")
    return (f"{_s(run.get('output_tok_s'), '', 0)} ({_s(run.get('duration_s'))}, {run.get('prompts') or '-'}"
            + (f", {hits:.1f} % cached" if hits is not None else "") + ")")


def _details(name: str, c: dict[str, Any]) -> list[str]:
    if c.get("status") in ("skipped", "not available") and name not in ("compile_cache",):
        return []
    if name == "model" and c.get("parameters"):
        size = (f"{c['parameters'] / 1e9:.1f} B" if c["parameters"] >= 1e9 else f"{c['parameters'] / 1e6:.1f} M")
        return [f"- {size} parameters, vocabulary {c.get('vocab_size'):,}, hidden "
                f"{c.get('hidden_size')}, {c.get('num_hidden_layers')} layers, {c.get('dtype')}"]
    if name == "cold_start" and c.get("healthy_s") is not None:
        return [f"- {_start_line(c)}"]
    if name == "timeline" and c.get("milestones"):
        return [f"- {m['at_s']:.1f} s: {MILESTONE_WORDS.get(m['event'], m['event'])}" for m in c["milestones"]]
    if name == "sleep_wake" and c.get("sleep_s") is not None:
        mem = c.get("memory_used_mib") or {}
        return [f"- sleep {_s(c['sleep_s'], digits=2)}, wake {_s(c['wake_s'], digits=2)}; GPU memory in use: awake "
                f"{_s(mem.get('awake'), ' MiB', 0)}, asleep {_s(mem.get('asleep'), ' MiB', 0)}, woken "
                f"{_s(mem.get('woken'), ' MiB', 0)}; same greedy answer after wake-up: "
                f"{_s(c.get('same_greedy_answer'))}"
                + (f"; timed on the {c['server']} pod's server, started for it" if c.get("server") not in (None, "cold")
                   else "")]
    if name == "sweep" and c.get("points"):
        rows = ["| c | bench out tok/s (window, prompts) | vllm bench serve out tok/s (window, prompts) | "
                "bench - vllm bench serve |", "|---|---|---|---|"]
        for p in c["points"]:
            b, v = p["bench"], p["vllm_bench_serve"]
            gap = p.get("bench_minus_cli_pct")
            gap_text = f"{gap:+.1f} %" if gap is not None else _s(p.get("apart_pct"), " % apart")
            rows.append(f"| {p['concurrency']} | {_side(b)} | {_side(v)} | {gap_text} |")
        spread = c.get("spread") or {}
        if spread.get("gap_range_pct"):
            low, high = spread["gap_range_pct"]
            short = spread.get("short_windows") or []
            windows = spread.get("shortest_window_s") or {}
            rows += ["", f"- gaps from {low:+.1f} to {high:+.1f} %"
                     + (", all of one sign" if spread.get("gaps_one_sign") else ", of both signs"
                        if spread.get("gaps_one_sign") is False else "")
                     + f"; shortest windows: bench {_s(windows.get('bench'))}, vllm bench serve "
                     f"{_s(windows.get('vllm_bench_serve'))} (target {_s(c.get('window_s'))}"
                     + (f"; short: {', '.join(short)})" if short else ")")]
            if spread.get("note"):
                rows.append(f"- {spread['note']}")
        return rows
    if name == "compile_cache" and c.get("push"):
        lines = [f"- through {c.get('where')}: pushed {c['push'].get('files') or 0} files "
                 f"({(c['push'].get('bytes') or 0) / 2**20:.1f} MiB) in {_s(c['push'].get('seconds'), digits=2)}"]
        if c.get("pull"):
            lines.append(f"- pulled {c['pull'].get('files') or 0} files in {_s(c['pull'].get('seconds'), digits=2)}")
        if c.get("restored_start"):
            lines.append(f"- new pod on the restored cache: {_start_line(c['restored_start'])}")
            lines.append(f"- compilation skipped: {_s(c.get('compilation_skipped'))}; files the start added to the "
                         f"restored cache: {c.get('files_added_count')}, rewrote: {c.get('files_rewritten_count')}")
        return lines
    if name == "speculative" and c.get("acceptance"):
        a = c["acceptance"]
        per = ", ".join(f"{x:.2f}" for x in a.get("per_position") or [])
        return [f"- {c.get('draft')}, {c['config'].get('num_speculative_tokens')} draft tokens, eager mode: "
                f"acceptance {_s(a.get('acceptance_pct'), ' %')}, mean acceptance length "
                f"{_s(a.get('acceptance_length'), '', 2)}, per position {per or 'none'} ({a.get('drafts'):,.0f} drafts)"]
    return []


def markdown(record: dict[str, Any]) -> str:
    dev, ver = record.get("device") or {}, record.get("versions") or {}
    names = (("vllm", "vLLM"), ("torch", "torch"), ("transformers", "transformers"), ("triton", "Triton"),
             ("python", "Python"))
    known = ", ".join(f"{label} {ver[key]}" for key, label in names if ver.get(key))
    lines = [f"## GPU check, {record.get('date')}: {dev.get('name')}", "",
             f"{known or 'Versions not recorded'}; driver {dev.get('driver') or 'none'}. "
             + ("Broken: " + ", ".join(record["broken"]) + "." if record.get("broken")
                else "No check is broken."), "",
             *([line, ""] if (line := model_line(record)) else []),
             "| Check | Result |", "|---|---|"]
    checks = record.get("checks") or {}
    for name, title in TITLES.items():
        c = checks.get(name)
        if c is None:
            continue
        status = c.get("status")
        reason = (c.get("reason") or "").splitlines()[0][:300] if c.get("reason") else ""
        lines.append(f"| {title} | {status}{': ' + reason.replace('|', '/') if reason else ''} |")
    for name, title in TITLES.items():
        c = checks.get(name)
        extra = _details(name, c) if c else []
        if extra:
            lines += ["", f"**{title}**", "", *extra]
    return "\n".join(lines).rstrip() + "\n"


def _runs_table(runs: list[dict[str, Any]], gpus: int) -> list[str]:
    """A sweep's runs: the grid's, then the capacity search's and the open loop's (records before they were
    listed hold the grid's alone)."""
    rows = ["| run | load | output tok/s | per GPU | TTFT p99 ms | ITL p99 ms | valid |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        tok = r.get("output_tok_s")
        load = f"{r['rate']:g} req/s" if r.get("rate") is not None else f"c={r['concurrency']}"
        rows.append(f"| {r.get('kind') or 'grid'} | {load} | {_s(tok, '', 1)} | {_s(tok / gpus if tok else None, '', 1)} | "
                    f"{_s(r.get('ttft_p99_ms'), '', 0)} | {_s(r.get('itl_p99_ms'), '', 1)} | "
                    f"{'yes' if r.get('valid') else 'no: ' + str(r.get('reason') or 'invalid').replace('|', '/')} |")
    return rows


LOOPS = (("closed", "closed loop"), ("open", "open loop"))


def capacity_lines(sweep: dict[str, Any]) -> list[str]:
    """The sweep's capacity under the SLO in bench compare's words, per loop that ran (none recorded: nothing)."""
    capacity = sweep.get("capacity") or {}
    return [""] + [f"Capacity under the SLO ({name}): {answer.capacity_words(capacity[loop])}"
                   for loop, name in LOOPS if capacity.get(loop)] if capacity else []


def repeat_lines(scenario: str, sweep: dict[str, Any], earlier: list[dict[str, Any]]) -> list[str]:
    """A scenario measured again (--again): each sweep's capacity point, confirmed or not, and how far apart the
    points are (issue 34 asks for two within 5 %). Nothing without an earlier sweep."""
    if not earlier:
        return []
    sweeps = [("this sweep", sweep)] + [(Path(str(e.get("dir") or "earlier")).name, e) for e in reversed(earlier)]
    lines = ["", f"Repeats of {scenario}, each from a fresh server:", ""]
    for loop, name in LOOPS:
        points = []
        for label, one in sweeps:
            interval = (one.get("capacity") or {}).get(loop)
            if not interval:
                continue
            point = interval.get("point_tok_s")
            points.append(point)
            lines.append(f"- {label} ({name}): " + (f"{point:,.1f} tok/s, "
                                                     f"{'confirmed' if interval.get('confirmed') else 'not confirmed'}"
                                                     if point is not None else answer.capacity_words(interval)))
        figures = [x for x in points if x is not None]
        if len(figures) >= 2:
            lines.append(f"- {name}: the points lie within {(max(figures) / min(figures) - 1) * 100:.1f} % of each "
                         f"other ({len(figures)} sweeps)" + ("" if len(figures) == len(points) else
                                                            "; a sweep without a point is left out"))
        pooled = sweep.get("pooled") or {}
        if interval := (pooled.get("capacity") or {}).get(loop):
            lines.append(f"- {name}, the {len(pooled.get('sweeps') or [])} sweeps pooled (their runs at one load and "
                         f"size are repeats, the band between servers measured): {answer.capacity_words(interval)}")
    return lines


def _non_torch(start: dict[str, Any]) -> str:
    """The non-torch memory of a start's memory profile (bench/startup/memory.py), in words."""
    if "memory_gib" not in start:
        return "not recorded"  # a start recorded before gpu-check kept the profile
    value = (start["memory_gib"] or {}).get("non_torch")
    return "not logged" if value is None else f"{value:g} GiB"


def _starts_lines(variants: dict[str, Any]) -> list[str]:
    """Every start of every variant, where a variant started more than once (a repeat, or a command continued):
    a cold start and a warm one size the KV cache differently, which the table of last starts hides."""
    if not any(len(v.get("starts") or []) > 1 for v in variants.values()):
        return []
    lines = ["", "Every start, in order:", "",
             "| Variant | start | /health | compile cache | KV cache tokens | KV cache | non-torch memory |",
             "|---|---|---|---|---|---|---|"]
    for label, v in variants.items():
        for n, start in enumerate(v.get("starts") or [], 1):
            kv, gib = start.get("kv_cache_tokens"), start.get("kv_cache_gib")
            lines.append(f"| {label} | {n} | {_s(start.get('healthy_s'))} | {start.get('compile_cache') or 'not measured'} "
                         f"| {f'{kv:,}' if kv else 'not measured'} | {_s(gib, ' GiB', 2)} | {_non_torch(start)} |")
    return lines


def _cell_words(cell: dict[str, Any]) -> str:
    """A comparison cell: its winner, or no clear one, or the variants with no valid run at that load."""
    noise = f"(noise {_s(cell.get('noise_pct'), ' %')})"
    ranks = f"; {words}" if (words := answer.standing_words(cell)) else ""
    if cell.get("winner"):
        return f"{cell['winner']} by {_s(cell.get('winner_margin_pct'), ' %')} {noise}{ranks}"
    unmeasured = [label for label, tok in (cell.get("output_tok_s") or {}).items() if tok is None]
    if unmeasured:
        return f"nothing to compare: {', '.join(unmeasured)} {'has' if len(unmeasured) == 1 else 'have'} no valid run here"
    return f"no clear winner {noise}{ranks}"


def experiment_markdown(record: dict[str, Any]) -> str:
    """experiment.md: the question, the seeds' figures, each variant's start and runs, each comparison."""
    dev = record.get("device") or {}
    lines = [f"## Experiment {record.get('experiment')}: {dev.get('name')}", "", f"{record.get('question')}.", "",
             f"Set beside: {record.get('seeds')}.", ""]
    if line := model_line(record):
        lines += [line, ""]
    if line := changes_line(record.get("variants") or {}):
        lines += [line, ""]
    lines += ["| Variant | Status | /health | compile cache | KV cache tokens | non-torch memory | attention |",
              "|---|---|---|---|---|---|---|"]
    variants = record.get("variants") or {}
    for label, v in variants.items():
        start = (v.get("starts") or [{}])[-1]
        reason = f": {v['reason']}" if v.get("reason") else ""
        kv = start.get("kv_cache_tokens")
        lines.append(f"| {label} | {v.get('status')}{reason.replace('|', '/')} | {_s(start.get('healthy_s'))} | "
                     f"{start.get('compile_cache') or 'not measured'} | {f'{kv:,}' if kv else 'not measured'} | "
                     f"{_non_torch(start)} | "
                     f"{start.get('attention_backend') or 'not measured'} |")
    lines += _starts_lines(variants)
    warned = [(label, w) for label, v in variants.items() if (w := gpu_full.memory_warning((v.get("starts") or [{}])[-1]))]
    lines += ([""] + [f"- {label}: {warning}." for label, warning in warned]) if warned else []
    for label, v in variants.items():
        for scenario, sweep in (v.get("sweeps") or {}).items():
            how = (f"cut off after {_s(sweep.get('seconds'))}: the runs it finished and what they give so far; the "
                   "same command continues it" if sweep.get("cut_off") else
                   f"bench sweep exit {sweep.get('rc')}, {_s(sweep.get('seconds'))}")
            lines += ["", f"**{label}: {scenario}** ({how})", "",
                      *_runs_table(sweep.get("runs") or [], sweep.get("gpus") or 1), *capacity_lines(sweep)]
            lines += repeat_lines(scenario, sweep, [e for e in v.get("earlier") or [] if e.get("scenario") == scenario])
    for scenario, c in (record.get("compare") or {}).items():
        lines += ["", f"**Comparison: {scenario}**", ""]
        if c.get("status") == "waiting":
            lines.append(f"- {c.get('reason')}")
            continue
        said = c.get("said") or ""
        lines.append(f"- bench compare: {said.removeprefix('bench compare:').strip() or 'no summary line'}")
        if pooled := [f"{label} ({n} sweeps)" for label, n in (c.get("sweeps") or {}).items() if n > 1]:
            lines.append("- each from fresh servers, pooled as one variant's repeats (a cell is their mean): "
                         + ", ".join(pooled))
        for cell in c.get("cells") or []:
            lines.append(f"- c={cell.get('concurrency')}: {_cell_words(cell)}")
        intervals = c.get("slo_capacity_interval") or {}
        capacity = c.get("slo_capacity") or {}
        if intervals:  # in bench compare's words, from its interval: the figure compare.md shows
            lines += ["- capacity under the SLO:"] + [f"  - {label}: {answer.capacity_words(interval)}"
                                                      for label, interval in intervals.items()]
        elif capacity:  # a record from before the intervals were kept: the figure, or none met the SLO
            lines.append("- capacity under the SLO (output tok/s): " + ", ".join(
                f"{label} {_s(value, '', 1) if value is not None else 'no figure (see compare.md)'}"
                for label, value in capacity.items()))
        if lead := c.get("slo_capacity_winner"):
            lines.append(f"- under the SLO: {answer.lead_words(lead)}")
        for why in c.get("incomplete") or []:
            lines.append(f"- incomplete: {why}")
    lines += gpu_mixed.markdown(record)
    return "\n".join(lines).rstrip() + "\n"


def to_html(md: str) -> str:
    """A standalone page of the markdown section (headings, tables, lists, paragraphs)."""
    body, table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-"):
                continue
            if not table:
                body.append("<table>")
                table = True
                body.append("<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>")
                continue
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if table:
            body.append("</table>")
            table = False
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("- "):
            body.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.startswith("**") and line.endswith("**"):
            body.append(f"<h3>{html.escape(line.strip('*'))}</h3>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    if table:
        body.append("</table>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>GPU check</title><style>"
            "body{font-family:sans-serif;max-width:60rem;margin:2rem auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write(record: dict[str, Any], out: Path) -> tuple[Path, Path]:
    md = markdown(record)
    md_path, html_path = out / "gpu-check.md", out / "gpu-check.html"
    md_path.write_text(md)
    html_path.write_text(to_html(md))
    return md_path, html_path
