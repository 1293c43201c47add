"""What a sweep folder already holds, against what a new sweep into it asks.

One folder is one sweep: one grid (each scenario's concurrencies) judged under one SLO. `bench
sweep` refuses (exit 2) to write into a folder holding runs of another grid or SLO, naming each
difference, since the report would otherwise mix the two: runs at concurrencies the new grid no
longer has would stay in the folder and count, and the capacities recorded under one SLO would
sit beside runs judged under another. `--resume` continues a folder's own sweep (the same grid and
SLO): it may run a subset of its scenarios, or add scenarios, whose records are kept side by side;
other changes that reach the run hash (seed, lengths, prompts, server) are handled run by run (the
stale result is moved aside and the run done again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.analysis import side as SIDE

MANIFEST = "manifest.json"


def has_results(out: Path) -> bool:
    if not out.is_dir():
        return False
    return (out / MANIFEST).exists() or any(R.parse_result_filename(p.name) for p in out.iterdir())


def folder_grid(out: Path, manifest: dict[str, Any] | None) -> dict[str, set[int]]:
    """Each scenario's concurrencies in the folder: the manifest's planned runs and any result file."""
    grid: dict[str, set[int]] = {}
    for rec in (manifest or {}).get("runs") or []:
        try:
            grid.setdefault(str(rec["scenario"]), set()).add(int(rec["concurrency"]))
        except (KeyError, TypeError, ValueError):
            continue
    if out.is_dir():
        for path in out.glob("*.json"):
            parsed = R.parse_result_filename(path.name)
            if parsed:
                grid.setdefault(parsed[0], set()).add(parsed[1])
    return grid


def _cs(values: set[int]) -> str:
    return ",".join(str(c) for c in sorted(values))


def differences(out: Path, asked: dict[str, set[int]], slo: dict[str, Any]) -> list[str]:
    """How the folder's sweep differs from the one asked, in words; [] when it may be continued."""
    manifest, _ = SIDE.read_manifest(out / MANIFEST)
    found = folder_grid(out, manifest)
    problems = []
    for name in [n for n in asked if n in found]:
        if found[name] != asked[name]:
            extra = found[name] - asked[name]
            left = f" (runs at {_cs(extra)} would stay and count)" if extra else ""
            problems.append(f"{name} at concurrencies {_cs(found[name])} in the folder, {_cs(asked[name])} "
                            f"asked{left}")
    before = SIDE.recorded_slo(manifest)
    if before and before != slo:
        problems.append(f"SLO {SIDE.slo_text(before)} in the folder, {SIDE.slo_text(slo)} asked")
    return problems


def refusal(out: Path, asked: dict[str, set[int]], slo: dict[str, Any], resume: bool) -> str | None:
    """Why `bench sweep` must not write into `out` (the message of exit 2), or None."""
    if not has_results(out):
        return None
    problems = differences(out, asked, slo)
    if problems:
        return (f"{out} holds a sweep of another grid or SLO ({'; '.join(problems)}): choose another --out for "
                "this one, or continue that sweep with its own settings and --resume")
    if not resume:
        return f"{out} already holds a sweep; pass --resume to continue it or choose another --out"
    return None
