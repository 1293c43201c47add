"""Checks behind the report's trust in its numbers: like-for-like sides, every file accounted for.

- `like_for_like(side, base, vary)`: what must be equal between the two sweeps of a comparison for
  a ratio to mean the hardware (or the setting under test): dataset, seed, prompts per run,
  warm-ups, extra bench arguments, max model length, prefix caching, speculative decoding. Each
  difference is an issue that blocks a passing verdict, unless named in `vary` (the setting under
  test); a different vLLM version is a warning.
- `unused_files(folder, used)`: every file of a sweep folder the report did not read, with why.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from bench.analysis import results as R

# Settings a comparison may vary on purpose (`bench report --vary NAME`).
VARIABLE = ("dataset", "seed", "prompts", "warmups", "bench_args", "max_model_len", "prefix_caching",
            "speculative")


def _flag_value(flags: list[str], name: str) -> str | None:
    for i, item in enumerate(flags):
        if item == name and i + 1 < len(flags):
            return flags[i + 1]
        if item.startswith(name + "="):
            return item.split("=", 1)[1]
    return None


def served_flags(manifest: dict[str, Any] | None) -> list[str] | None:
    text = (manifest or {}).get("served_flags")
    if not text:
        return None
    try:
        value = json.loads(text)
        if isinstance(value, list):
            return [str(v) for v in value]
    except ValueError:
        pass
    try:
        return shlex.split(str(text))
    except ValueError:
        return str(text).split()


def prefix_caching(flags: list[str] | None) -> bool | None:
    """On unless disabled: vLLM's V1 engine caches prefixes by default."""
    if flags is None:
        return None
    if "--no-enable-prefix-caching" in flags:
        return False
    return True


def speculative(flags: list[str] | None) -> str | None:
    if flags is None:
        return None
    return _flag_value(flags, "--speculative-config") or "off"


def facts(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The like-for-like facts of one side; None where the manifest does not say."""
    m = manifest or {}
    config = m.get("config") or {}
    server = m.get("server") or {}
    flags = served_flags(m)
    datasets = sorted({str(s.get("dataset", "random")) for s in (config.get("scenarios") or {}).values()})
    return {
        "dataset": ",".join(datasets) if datasets else None,
        "seed": (config.get("seed"), config.get("seed_scheme")) if "seed" in config else None,
        # a sweep sized by time records its window; an older one its prompts per concurrency
        "prompts": (config.get("min_prompts"), config.get("window_s", config.get("prompts_per_concurrency")),
                    "window_s" in config)
        if "min_prompts" in config else None,
        "warmups": (config.get("warmups"), config.get("warmup_mode")) if "warmups" in config else None,
        "bench_args": config.get("bench_args") if "bench_args" in config else None,
        "max_model_len": server.get("max_model_len"),
        "prefix_caching": prefix_caching(flags),
        "speculative": speculative(flags),
        "vllm_version": server.get("vllm_version"),
    }


def describe_fact(key: str, value: Any) -> str:
    """One like-for-like fact in words (never a Python repr)."""
    if value is None:
        return "not recorded"
    if key == "seed":
        seed, scheme = value
        return f"{seed}" + (f" (seed scheme {scheme})" if scheme else "")
    if key == "prompts":
        least, per, timed = value if len(value) == 3 else (*value, False)
        if timed:
            return f"at least {least} requests, each run holding its load for {per:g} s"
        return f"at least {least} prompts, {per} per unit of concurrency"
    if key == "warmups":
        count, mode = value
        return f"{count}" + (f" ({mode})" if mode else "")
    if key == "prefix_caching":
        return "on" if value else "off"
    if key == "bench_args":
        return f"`{value}`" if value else "none"
    return str(value)


def like_for_like(side_manifest: dict[str, Any] | None, base_manifest: dict[str, Any] | None,
                  vary: tuple[str, ...] | list[str] = ()) -> tuple[list[str], list[str]]:
    """(issues, warnings) between the candidate's and the baseline's sweep."""
    issues: list[str] = []
    warnings: list[str] = []
    a, b = facts(side_manifest), facts(base_manifest)
    for key in VARIABLE:
        if key in vary:
            continue
        if a[key] is None or b[key] is None:
            if a[key] is not None or b[key] is not None:
                warnings.append(f"{key}: recorded on one side only ({describe_fact(key, a[key])} vs baseline "
                                f"{describe_fact(key, b[key])}); not checked")
            continue
        if a[key] != b[key]:
            issues.append(f"{key} differs: {describe_fact(key, a[key])} vs baseline {describe_fact(key, b[key])} "
                          f"(not like for like; pass --vary {key} if that is what the comparison tests)")
    if a["vllm_version"] and b["vllm_version"] and a["vllm_version"] != b["vllm_version"]:
        warnings.append(f"vLLM versions differ: {a['vllm_version']} vs baseline {b['vllm_version']}")
    if side_manifest is None or base_manifest is None:
        warnings.append("a side has no manifest.json: its sweep settings cannot be checked")
    return issues, warnings


# ---------------------------------------------------------------------------------------------
# Files


_ATTEMPT = re.compile(r"^(?P<stem>.+_c[0-9]+)\.attempt(?P<n>[0-9]+)\.(?P<kind>invalid|suspect)\.json$")
_STALE = re.compile(r"^(?P<stem>.+_c[0-9]+)\.stale[0-9]+\.json$")
# search/<scenario>_c<c>.run<k>.attempt<n>.invalid.json, open_loop/<scenario>_rate<r>.run<k>.attempt<n>.invalid.json
_EXTRA_ATTEMPT = re.compile(r"^(?P<stem>.+)\.attempt(?P<n>[0-9]+)\.invalid\.json$")
_EXTRA_STALE = re.compile(r"^.+\.stale[0-9]+\.json$")
_RESULT_KEYS = ("completed", "failed", "duration", "output_throughput")


def _looks_like_result(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if isinstance(data, dict) and all(k in data for k in _RESULT_KEYS):
        return data
    return None


def _request_rate(data: dict[str, Any]) -> float | None:
    """The offered rate of an open-loop run; None for a closed-loop run (rate inf)."""
    value = data.get("request_rate")
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return rate if rate > 0 and rate != float("inf") else None


def _capacity_file(rel: str, name: str) -> str | None:
    """Why a file of the capacity search or the open loop was not used (never rename advice)."""
    what = {"search/": "capacity search", "open_loop/": "open loop"}[rel.split("/", 1)[0] + "/"]
    match = _EXTRA_ATTEMPT.match(name)
    if match:
        return f"invalid attempt {match['n']} of a {what} run ({match['stem']}), kept for the record (not a figure)"
    if _EXTRA_STALE.match(name):
        return f"{what} run of an earlier plan (other parameters), moved aside by `bench sweep --resume`"
    if name.endswith(".json"):
        return (f"a {what} file the capacity section could not use (not a valid run, or not named "
                f"<scenario>_c<N>.run<K>.json / <scenario>_rate<R>.run<K>.json as the sweep writes them)")
    return f"not a file the report reads (in the {what} folder)"


def why_unused(rel: str, path: Path, manifest_error: str | None = None) -> str:
    name = path.name
    if rel == "manifest.json" and manifest_error:
        return f"the sweep's manifest, {manifest_error}: plan, hardware and like-for-like facts unknown"
    if rel.startswith(("search/", "open_loop/")):
        return _capacity_file(rel, name)
    if rel.startswith("logs/") and name.endswith(".telemetry.json"):
        return "telemetry samples of one attempt (its summary is in manifest.json)"
    if rel.startswith("logs/") and name.endswith(".log"):
        return "process log of one attempt (vllm bench serve output)"
    match = _ATTEMPT.match(name)
    if match:
        what = {"invalid": "invalid attempt", "suspect": "suspect attempt that was retried"}[match["kind"]]
        return f"{what} {match['n']} of {match['stem']}, kept for the record (not a figure)"
    if _STALE.match(name):
        return "result of an earlier plan (other parameters), moved aside by `bench sweep --resume`"
    if name.endswith(".tmp") or "/.partial/" in f"/{rel}":
        return "unfinished write of an interrupted sweep"
    data = _looks_like_result(path) if name.endswith(".json") else None
    if data is not None:
        what = "a vllm bench serve result whose name does not follow <scenario>_c<N>.json, so it was not used"
        return what + _rename_hint(path, data)
    return "not a file the report reads"


def _rename_hint(path: Path, data: dict[str, Any]) -> str:
    """Rename advice only where following it cannot overwrite a result or mix closed and open loop."""
    kind = data.get("bench_kind")
    rate = _request_rate(data)
    if kind in ("search", "open_loop") or rate is not None:
        where = f"offered {rate:g} req/s" if rate is not None else f"a {str(kind).replace('_', ' ')} run"
        return (f"; it is not a closed-loop grid run ({where}), so it must not stand in for one: keep it out "
                "of the sweep's top folder")
    scenario, conc = data.get(R.META_SCENARIO), data.get("max_concurrency") or data.get(R.META_CONCURRENCY)
    try:
        conc = int(conc)
    except (TypeError, ValueError):
        conc = None
    if not scenario or not conc:
        return "; it carries no scenario metadata"
    target = R.result_filename(str(scenario), conc)
    if (path.parent / target).exists():
        return (f"; its metadata says {scenario} c={conc}, whose result {target} is already there (this file is "
                "a second copy, not used)")
    return f"; its metadata says {scenario} c={conc}: rename it to {target} to use it"


def unused_files(folder: Path, used: set[Path], manifest_error: str | None = None) -> list[dict[str, str]]:
    resolved = {p.resolve() for p in used}
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.resolve() in resolved:
            continue
        rel = path.relative_to(folder).as_posix()
        out.append({"file": rel, "reason": why_unused(rel, path, manifest_error)})
    return out


ROUTINE = ("telemetry samples of one attempt", "process log of one attempt")


def is_routine(entry: dict[str, str]) -> bool:
    return entry["reason"].startswith(ROUTINE)
