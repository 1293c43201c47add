"""The mixed-traffic check's finding (mixed_traffic.json of `bench mix-check`), as the plan and
`bench publish` read it: did the plan's scenarios add up on one replica?

`bench mix-check` (bench/run/mixcheck.py) runs every scenario of a plan at once on a server and
writes the file; `bench plan --mixed-traffic` puts its finding in the plan, and says when the
check ran at another load than the plan's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.analysis.capacity.stats import MIN_P99_REQUESTS
from bench.common import locations

CHECK_FILE = "mixed_traffic.json"


class CheckError(ValueError):
    """A file that is not a mix-check result (or not readable JSON)."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file, or CheckError saying why not."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CheckError(f"{path}: expected a JSON object")
    return value


def load_check(path: Path) -> dict[str, Any]:
    """mixed_traffic.json (a file, or the folder holding it), for `bench plan --mixed-traffic`."""
    file = path / CHECK_FILE if path.is_dir() else path
    try:
        check = read_json(file)
    except CheckError as exc:
        raise CheckError(f"--mixed-traffic: {exc}") from None
    if not isinstance(check.get("scenarios"), dict) or "held" not in check:
        raise CheckError(f"--mixed-traffic: {locations.display(file)} is not a `bench mix-check` result")
    return check


def finding(check: dict[str, Any]) -> str:
    rows = check.get("scenarios") or {}
    load = " + ".join(f"{s} {r['offered_req_s']:g} req/s" for s, r in sorted(rows.items()))
    slo = check.get("slo") or {}
    metric = str(slo.get("decode_metric", "itl")).upper()
    if check.get("held") is None:
        bad = "; ".join(f"{s}: {r['reason']}" if not r.get("valid") else f"{s}: {unsure(r, metric)}"
                        for s, r in sorted(rows.items()) if not r.get("valid") or r.get("meets_slo") is None)
        return f"could not tell whether the scenarios add up at {load}: {bad or 'no valid run'}"
    if check["held"]:
        sure = all(r.get("slo_state") for r in rows.values())  # checks before 2026-12-07 judged point estimates
        return f"the scenarios add up: at {load} at once, every scenario met the SLO{' with confidence' * sure}"
    missed = []
    for s, r in sorted(rows.items()):
        if r.get("meets_slo") is False:
            missed.append(f"{s} TTFT p99 {r['ttft_p99_ms']:,.0f} ms, {metric} p99 {r['decode_p99_ms']:,.1f} ms")
    return (f"the scenarios do not add up: at {load} at once, {'; '.join(missed)} (limits "
            f"{slo.get('ttft_p99_ms', 500):g} ms and {slo.get('decode_p99_ms', 50):g} ms)")


UNSURE = {
    "straddle": "a p99's interval (within the run, widened by the run-to-run band) reaches across its limit",
    "too_few_requests": f"no sure miss, on fewer than {MIN_P99_REQUESTS} requests, whose p99 is about the "
                        "slowest request (raise --min-requests)",
    "unmeasured": "its decode p99 times tokens arriving bunched in one chunk, not decoding",
}


def unsure(row: dict[str, Any], metric: str) -> str:
    """Why a valid scenario neither met the SLO with confidence nor surely missed it."""
    figures = (f"TTFT p99 {row['ttft_p99_ms']:,.0f} ms, {metric} p99 {row['decode_p99_ms']:,.1f} ms"
               if isinstance(row.get("ttft_p99_ms"), (int, float)) and isinstance(row.get("decode_p99_ms"), (int, float))
               else "p99s not read")
    why = UNSURE.get(row.get("slo_state"), "not judged with confidence (a check from before intervals were kept)")
    return f"{figures}: {why}"


def plan_section(check: dict[str, Any], configurations: list[dict[str, Any]]) -> list[str]:
    """The plan's words on the check: held or not, and whether it tested this plan's load."""
    lines = ["", "## Mixed traffic", ""]
    state = {True: "held", False: "did not hold", None: "could not be checked"}[check.get("held")]
    lines.append(f"The plan assumes the scenarios add up on one replica. Checked on {check.get('configuration')} "
                 f"with every scenario at once (open loop, Poisson arrivals): the assumption {state}; "
                 f"{finding(check)}.")
    row = next((r for r in configurations if r.get("label") == check.get("configuration")), None)
    planned = (row or {}).get("per_replica_req_s") or {}
    tested = check.get("per_replica_req_s") or {}
    if planned and (set(planned) != set(tested)
                    or any(abs(planned[s] - tested[s]) > 0.01 * max(planned[s], 1e-9) for s in planned)):
        lines += ["", "That check ran at another load than this plan puts on a replica ("
                  + ", ".join(f"{s} {v:g} req/s" for s, v in sorted(planned.items()))
                  + "): run `bench mix-check` on this plan again."]
    if check.get("held") is False:
        lines += ["", "Size the fleet with more headroom (`--headroom`) or plan the scenarios on separate "
                  "replicas, and check again."]
    return lines
