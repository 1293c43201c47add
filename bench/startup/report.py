"""The report's startup section: stored startup records (and sleep/wake timings) as tables.

Layout follows the PoC's start-up breakdown (total from pod creation to /health OK, then the phases),
with each phase's share of the total, the weight-load rate against the instance's network
(bench/startup/netlimits.py), the image pull against the image's size, what the compile cache's pull step
restored, and warnings for boots whose KV cache came out smaller than an earlier boot of the same
configuration or whose memory profile counted negative non-torch memory (bench/startup/memory.py). Then
the start-up model of each pool (bench/startup/model.py): every phase measured where a record measured it,
the PoC's figure or an estimate where not, and the 150 s target.

Records live in a results folder under `startup/`: `<pod>.json` (bench/startup/timeline.py) and
`sleep-<pod>.json` (bench/startup/sleepwake.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.startup import model as startup_model
from bench.startup import timeline

STARTUP_DIR = "startup"


def _s(value: float | None, share: float | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.1f} s"
    return f"{text} ({share:.0f}%)" if share is not None else text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def load_records(folder: Path) -> tuple[list[dict], list[dict]]:
    """(startup records, sleep/wake records) under folder/startup, oldest boot first."""
    boots, sleeps = [], []
    base = folder / STARTUP_DIR
    if not base.is_dir():
        return boots, []
    for path in sorted(base.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if timeline.is_record(data):
            boots.append(data)
        elif isinstance(data, dict) and data.get("kind") == SLEEP_KIND:
            sleeps.append(data)
    boots.sort(key=lambda r: (r.get("marks") or {}).get("pod_created") or "")
    return boots, sleeps


SLEEP_KIND = "vllm-poc/sleep-wake"


def record_files(folder: Path) -> set[Path]:
    """The files under folder/startup that load_records reads (start-up and sleep/wake records): the
    report uses them, so it does not list them among the files it left out."""
    used: set[Path] = set()
    base = folder / STARTUP_DIR
    for path in sorted(base.glob("*.json")) if base.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if timeline.is_record(data) or (isinstance(data, dict) and data.get("kind") == SLEEP_KIND):
            used.add(path)
    return used


def restore_text(record: dict) -> str:
    """What the compile cache's pull step did, for people ('' when the pod has no such step)."""
    restore = record.get("compile_cache_restore")
    if restore is None:
        return ""
    outcome = restore.get("outcome")
    if outcome == "restored":
        size = f"{restore['bytes'] / 2**20:,.1f} MiB" if restore.get("bytes") is not None else "its files"
        took = f" in {restore['seconds']:.1f} s" if restore.get("seconds") is not None else ""
        return f"compile cache restored from S3 ({size}{took})"
    return {
        "absent": "no compile cache in S3 yet",
        "rejected": "compile cache in S3 failed verification, not restored",
        "error": "compile cache not restored (S3 error or too slow)",
        "kept": "compile cache already on the volume",
        "interrupted": "compile cache pull stopped",
    }.get(outcome, "compile cache pull not recorded")


def _boot_label(record: dict) -> str:
    node = ("new node" if record.get("new_node") else "warm node" if record.get("new_node") is False
            else "node not recorded")
    image = record.get("image") or {}
    cached = image.get("image_cached")
    pulled = "image cached" if cached else "image pulled" if cached is False else ""
    cache = record.get("compile_cache")
    parts = [node, pulled, restore_text(record), f"compile cache {cache}" if cache else ""]
    return (f"{record.get('server') or 'server not recorded'} / {record.get('pod') or 'pod not recorded'} "
            f"({', '.join(p for p in parts if p)})")


def summary_line(record: dict) -> str:
    """One line for the timeline command's output: total, node, weights, compile cache."""
    total = f"{record['total_s']:,.1f} s to /health" if record.get("total_s") is not None else "not healthy yet"
    node = {True: "new node", False: "warm node"}.get(record.get("new_node"), "node not recorded")
    rate = (record.get("weights") or {}).get("weight_load_gbps")
    parts = [total, node, f"weights at {rate:.1f} Gbps" if rate is not None else "weight load not in the log",
             restore_text(record), f"compile cache {record['compile_cache']}" if record.get("compile_cache") else ""]
    return ", ".join(p for p in parts if p)


def section(boots: list[dict], sleeps: list[dict], instance_types: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Markdown lines of the startup section (empty when there is nothing recorded and no pool known)."""
    if not boots and not sleeps and not instance_types:
        return []
    lines = ["", "## Startup", ""]
    if boots:
        labels = [label for _, label in timeline.PHASES]
        lines += ["From pod creation to `/health` OK (the readiness probe), each phase with its share of "
                  "the total. Node provisioning is ~0 on a warm node; the log phases come from the "
                  "server's own log.", "",
                  "| Boot | Total | " + " | ".join(labels) + " |",
                  "|---|---:|" + "---:|" * len(labels)]
        for r in boots:
            phases, shares = r.get("phases") or {}, r.get("shares_pct") or {}
            cells = [_s(phases.get(key), shares.get(key)) for key, _ in timeline.PHASES]
            lines.append(f"| {_boot_label(r)} | {_s(r.get('total_s'))} | " + " | ".join(cells) + " |")
        lines += ["", "Limits: weight-load rate against the instance's network (Gbps = 10^9 bit/s; "
                  "bytes and seconds are the Run:ai streamer's own totals) and image pull against image size.", "",
                  "| Boot | Instance | Weights | Load | Rate | % of baseline | % of burst | Image | Pull | Pull rate "
                  "| KV cache tokens |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in boots:
            w, img = r.get("weights") or {}, r.get("image") or {}
            size = f"{w['bytes'] / 2**30:.1f} GiB" if w.get("bytes") else "-"
            image_size = f"{img['image_bytes'] / 1e9:.1f} GB" if img.get("image_bytes") else "-"
            base = (f"{_pct(w.get('weight_load_share_of_baseline_pct'))} of {w['network_baseline_gbps']:g}"
                    if w.get("network_baseline_gbps") else "-")
            burst = (f"{_pct(w.get('weight_load_share_of_burst_pct'))} of {w['network_burst_gbps']:g}"
                     if w.get("network_burst_gbps") else "-")
            rate = f"{w['weight_load_gbps']:.1f} Gbps" if w.get("weight_load_gbps") is not None else "-"
            pull_rate = f"{img['image_pull_mbps']:.0f} MB/s" if img.get("image_pull_mbps") else "-"
            kv = f"{r['kv_cache_tokens']:,}" if r.get("kv_cache_tokens") else "-"
            lines.append(f"| {r.get('pod') or '?'} | {r.get('instance_type') or '-'} | {size} "
                         f"| {_s(w.get('seconds'))} | {rate} | {base} | {burst} | {image_size} "
                         f"| {_s(img.get('image_pull_s'))} | {pull_rate} | {kv} |")
        warnings = timeline.boot_warnings(boots)
        if warnings:
            lines += ["", "Warnings:", ""] + [f"- {w}" for w in warnings]
    if sleeps:
        lines += ["", "Sleep mode (`POST /sleep`, `POST /wake_up`, timed on the server; the PoC measured "
                  "26.8 s / 3.6 s at level 1):", "",
                  "| Server / pod | Level | Sleep | Wake up | First request after wake |", "|---|---:|---:|---:|---:|"]
        for s in sleeps:
            lines.append(f"| {s.get('server') or '?'} / {s.get('pod') or '?'} | {s.get('level')} "
                         f"| {_s(s.get('sleep_s'))} | {_s(s.get('wake_s'))} | {_s(s.get('first_request_s'))} |")
        lines += [f"- {s.get('pod') or '?'}: sleep/wake not measured: {s['error']}" for s in sleeps if s.get("error")]
    return lines + startup_model.section(boots, instance_types)


def run_instance_type(folder: Path) -> str | None:
    """The instance type the sweep in `folder` ran on (its manifest), if recorded."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = manifest.get("instance_type") if isinstance(manifest, dict) else None
    return value if isinstance(value, str) and value else None


def markdown(folder: Path) -> str:
    """The section for a results folder, as text to append to report.md ('' when nothing is stored)."""
    boots, sleeps = load_records(folder)
    lines = section(boots, sleeps, [t for t in [run_instance_type(folder)] if t])
    return "\n".join(lines) + "\n" if lines else ""


def timeline_table(record: dict[str, Any]) -> str:
    """A plain-text timeline of one record (for `bench startup <record>`)."""
    rows = [(key.replace("_", " "), value or "-") for key, value in (record.get("marks") or {}).items()]
    phases, shares = record.get("phases") or {}, record.get("shares_pct") or {}
    rows.append(("total (pod created -> /health OK)", _s(record.get("total_s"))))
    rows += [(label, _s(phases.get(key), shares.get(key))) for key, label in timeline.PHASES]
    img = record.get("image") or {}
    rows.append(("image bytes", f"{img['image_bytes']:,}" if img.get("image_bytes") else "-"))
    rows.append(("new node", {True: "yes", False: "no (warm node)"}.get(record.get("new_node"), "-")))
    if record.get("compile_cache_restore") is not None:
        rows.append(("compile cache pull", restore_text(record)))
    push = record.get("compile_cache_push")
    if push:
        rows.append(("compile cache push", {"pushed": f"pushed {push.get('files') or 0} file(s)",
                                            "same": "S3 already held this cache",
                                            "kept": "kept the cache S3 already held",
                                            "empty": "nothing compiled to push",
                                            "error": "push failed: " + str(push.get("reason") or "")}.get(
                                                push.get("outcome"), "not finished when recorded")))
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{'Timeline'.ljust(width)}  Value", f"{'-' * width}  -----"]
                     + [f"{k.ljust(width)}  {v}" for k, v in rows])
