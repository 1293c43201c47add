"""The sweeps `bench publish` reads: each one's manifest in S3, where it stands, and the wait for all of them.

A sweep is finished when its manifest.json says it ended (`finished_at`) with no combination pending or
running; one stopped by a Spot interruption says so in its last session and is waited for until its Job's
next pod resumes it. Earlier rounds (the same configuration swept again from a fresh server) are read where
present and never waited for: a finished one is pooled into its side, any other is left out and named.
status.json under the report's folder says where each sweep stands, for `bench open` and the stack's output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.common import locations, s3
from bench.common.progress import human_seconds

MANIFEST = "manifest.json"
STATUS = "status.json"
FAILURES = "failures/"


@dataclass
class Sweep:
    role: str  # candidate, baseline, variant; an earlier round: candidate-repeat, baseline-repeat
    loc: s3.S3Location
    manifest: bytes | None = None
    refused: str | None = None  # an earlier round bench report (or compare) would not pool: why
    of: int | None = None  # an earlier round: the index, among the sweeps, of the sweep it repeats

    @property
    def side(self) -> str:
        return self.role.removesuffix("-repeat")

    @property
    def data(self) -> dict[str, Any] | None:
        if self.manifest is None:
            return None
        try:
            value = json.loads(self.manifest)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def label(self) -> str:
        """The manifest's label; before there is one, `<stack>/<server>` from a bench Job's results
        prefix (runs/<stack>/<server>/<hash>/), as the Job labels its sweep."""
        parts = self.loc.prefix.rstrip("/").split("/")
        fallback = "/".join(parts[1:3]) if len(parts) == 4 and parts[0] == "runs" else locations.folder_name(self.loc)
        return str((self.data or {}).get("label") or fallback)

    @property
    def digest(self) -> str | None:
        return hashlib.sha256(self.manifest).hexdigest() if self.manifest is not None else None

    def state(self) -> tuple[str, int, int]:
        """(state, combinations done, combinations planned); state is one of "not started",
        "running", "interrupted", "finished"."""
        data = self.data
        if data is None:
            return ("not started" if self.manifest is None else "running"), 0, 0
        runs = [r for r in data.get("runs") or [] if isinstance(r, dict)]
        done = sum(1 for r in runs if r.get("status") in ("valid", "invalid", "suspect"))
        open_runs = any(r.get("status") in ("pending", "running") for r in runs)
        sessions = [s for s in data.get("sessions") or [] if isinstance(s, dict)]
        if sessions and sessions[-1].get("interrupted"):
            return "interrupted", done, len(runs)
        if open_runs or not data.get("finished_at"):
            return "running", done, len(runs)
        return "finished", done, len(runs)

    def describe(self) -> str:
        state, done, total = self.state()
        if state == "not started":
            return f"{self.label}: no results yet"
        counts = f" ({done} of {total} combinations)" if total else ""
        if state == "interrupted":
            return f"{self.label}: interrupted{counts}, waiting for its Job to resume it"
        return f"{self.label}: {state}{counts}"


def read_manifest(client: Any, sweep: Sweep) -> bytes | None:
    try:
        return client.get_object(Bucket=sweep.loc.bucket, Key=sweep.loc.key(MANIFEST))["Body"].read()
    except Exception as exc:  # a missing key is normal before the sweep starts
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            return None
        raise


def now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def status(state: str, sweeps: list[Sweep], deadline: datetime, note: str | None = None,
           earlier: list[Sweep] | None = None) -> dict[str, Any]:
    rows = []
    for sweep in sweeps:
        st, done, total = sweep.state()
        rows.append({"role": sweep.role, "label": sweep.label, "uri": sweep.loc.uri, "state": st,
                     "combinations_done": done, "combinations_planned": total})
    return {"state": state, "updated_at": iso(now()), "waits_until": iso(deadline), "sweeps": rows,
            "note": note, **({"earlier_rounds": round_rows(earlier)} if earlier else {})}


# ---------------------------------------------------------------------------------------------
# Earlier rounds: read where present, never waited for


def read_rounds(client: Any, earlier: list[Sweep]) -> None:
    """Read each earlier round's manifest and say, a line each, which are pooled and which are left out."""
    for sweep in earlier:
        sweep.manifest = read_manifest(client, sweep)
        sweep.refused = None
        print(f"bench publish: {round_note(sweep)}", flush=True)


def rounds_of(earlier: list[Sweep]) -> list[Sweep]:
    """The earlier rounds the report pools: those whose sweep has finished."""
    return [s for s in earlier if s.state()[0] == "finished" and s.refused is None]


def round_note(sweep: Sweep) -> str:
    where = f"earlier round of the {sweep.side} ({sweep.loc.uri})"
    state = sweep.state()[0]
    if sweep.refused:
        return f"{where}: left out, bench report would not pool it: {sweep.refused}"
    if state == "finished":
        return f"{where}: pooled into the {sweep.side}'s figures"
    if state == "not started":
        return (f"{where}: left out, no sweep there (that round never ran, or the configuration changed since "
                "it did)")
    return f"{where}: left out, its sweep has not finished ({state})"


def round_rows(earlier: list[Sweep]) -> list[dict[str, Any]]:
    pooled = rounds_of(earlier)
    return [{"role": s.role, "uri": s.loc.uri, "state": s.state()[0], "manifest_sha256": s.digest,
             "pooled": s in pooled, "note": round_note(s)} for s in earlier]


def rounds_left_out(earlier: list[Sweep]) -> str | None:
    """One sentence for status.json's note: the earlier rounds the report does not pool, or None."""
    pooled = rounds_of(earlier)
    left = [s.loc.uri for s in earlier if s not in pooled]
    if not left:
        return None
    return (f"{len(left)} of {len(earlier)} earlier rounds left out of the pooled figures: {', '.join(left)} "
            "(why, for each: earlier_rounds)")


def wait_for_sweeps(client: Any, out: s3.S3Location, sweeps: list[Sweep], args: argparse.Namespace) -> bool:
    """Poll the manifests until every sweep has finished (True) or the wait ends (False)."""
    started = time.monotonic()
    deadline = now() + timedelta(hours=args.wait_hours)
    interval = args.poll_s
    last_line = None
    last_seen: list[tuple[str, int]] | None = None
    while True:
        for sweep in sweeps:
            sweep.manifest = read_manifest(client, sweep)
        seen = [(sweep.state()[0], sweep.state()[1]) for sweep in sweeps]
        finished = all(state == "finished" for state, _ in seen)
        waited = time.monotonic() - started
        changed = seen != last_seen
        if changed:
            s3.put_json(client, out, STATUS, status("writing" if finished else "waiting", sweeps, deadline))
            interval = args.poll_s
        else:
            interval = min(args.max_poll_s, interval * 2)
        if finished:
            print(f"bench publish: every sweep has finished after {human_seconds(waited)}: "
                  + "; ".join(s.describe() for s in sweeps), flush=True)
            return True
        if waited >= args.wait_hours * 3600:
            print(f"bench publish: gave up waiting after {human_seconds(waited)}; writing the report from what is "
                  "there: " + "; ".join(s.describe() for s in sweeps), flush=True)
            return False
        if changed or last_line is None or time.monotonic() - last_line >= args.log_every_s:
            print(f"bench publish: waiting ({human_seconds(waited)} so far): "
                  + "; ".join(s.describe() for s in sweeps)
                  + f"; next look in {human_seconds(interval)}", flush=True)
            last_line = time.monotonic()
        last_seen = seen
        time.sleep(min(interval, max(1.0, args.wait_hours * 3600 - waited)))


def record_failure(client: Any, out: s3.S3Location, record: dict[str, Any]) -> None:
    """status.json says `failed` and why (the stack output `report` shows it), and one more file under
    failures/: their count is the attempt the next `pulumi up` recreates the Job for."""
    s3.put_json(client, out, STATUS, record)
    s3.put_json(client, out, f"{FAILURES}{record['updated_at'].replace(':', '')}.json", record)
