"""A sweep folder as the analysis reads it (`Side`, `load_side`), and the figures of single runs.

`load_side` reads every combination of a sweep folder, planned ones (manifest.json) and any
result file found, by bench.analysis.results' rules: a run during which the server restarted is
invalid, one served from the prefix cache suspect (its telemetry, judged as the sweep judged it).
The report, the plan, the compare, the charts and the sweep's own capacity record all start from
a `Side`. The run figures below (peak, SLO met, a summary row) are theirs in common.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.analysis import results as R
from bench.common import options as O
from bench.common import scenarios as SC

MANIFEST = "manifest.json"
DEFAULT_ORDER = ("S1_chat", "S2_summary", "S3_moderation", "S4_rag")


@dataclass
class Side:
    label: str
    path: Path
    manifest: dict[str, Any] | None
    runs: list[R.RunResult]
    gpus: int
    price_per_hour: float | None
    lengths: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    capacity_type: str | None = None
    suspects: dict[tuple[str, int], str] = field(default_factory=dict)
    telemetry: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    used: set[Path] = field(default_factory=set)
    # Why manifest.json could not be read (None: read, or not there)
    manifest_error: str | None = None
    # Where the price comes from: "given" (--price-per-hour here or at sweep time) or "looked up"
    # (a price table or catalog by capacity type); None without a price.
    price_source: str | None = None
    # Runs whose answers came in fewer than two chunks (decode latency not measured), with why; and
    # the TTFT limit they are judged against once the SLO is chosen (`judge_with`)
    unmeasured: dict[tuple[str, int], str] = field(default_factory=dict)
    ttft_limit_ms: float | None = None
    # Other sweeps of this side's server setting, each from a fresh server (`bench report --repeat`):
    # pooled into the peak and the capacity under the SLO (bench.analysis.capacity_report.side_capacity)
    repeats: list[Side] = field(default_factory=list)

    def judge_with(self, ttft_ms: float) -> None:
        """A run whose decode latency was not measured is suspect (no evidence either way on the decode
        limit) unless its TTFT p99 already misses `ttft_ms`: then it is a miss on TTFT alone, and counts."""
        self.ttft_limit_ms = ttft_ms
        for repeat in self.repeats:
            repeat.judge_with(ttft_ms)

    @property
    def sweeps(self) -> list[Side]:
        """This sweep and its repeats: the folders its pooled figures read."""
        return [self, *self.repeats]

    def counted_note(self, run: R.RunResult) -> str | None:
        """Why a run whose decode latency was not measured still counts (its TTFT misses alone)."""
        why = self.unmeasured.get((run.scenario, run.concurrency))
        if not why or not run.valid or self.suspect(run):
            return None
        return f"{why}; it counts as missing the SLO on its TTFT p99 alone"

    def cost_price(self) -> float | None:
        """The price a cost ratio may use: one given explicitly, or one looked up for a known
        capacity type (a looked-up price for an unknown capacity type is a guess)."""
        if not self.price_per_hour:
            return None
        if self.price_source == "given" or self.capacity_type:
            return self.price_per_hour
        return None

    def suspect(self, run: R.RunResult) -> str | None:
        if not run.valid:
            return None
        key = (run.scenario, run.concurrency)
        if key in self.suspects:
            return self.suspects[key]
        why = self.unmeasured.get(key)
        misses_ttft = (self.ttft_limit_ms is not None and run.ttft_p99_ms is not None
                       and run.ttft_p99_ms > self.ttft_limit_ms)
        return None if misses_ttft else why

    def usable(self, run: R.RunResult) -> bool:
        """Valid and not suspect: the runs that make figures."""
        return run.valid and not self.suspect(run)

    @property
    def scenarios(self) -> list[str]:
        seen: list[str] = []
        for run in self.runs:
            if run.scenario not in seen:
                seen.append(run.scenario)
        return seen

    def valid(self, scenario: str) -> list[R.RunResult]:
        """The usable runs of a scenario (valid and not suspect)."""
        return [r for r in self.runs if r.scenario == scenario and self.usable(r)]

    def invalid(self) -> list[R.RunResult]:
        return [r for r in self.runs if not r.valid]

    def suspect_runs(self) -> list[R.RunResult]:
        return [r for r in self.runs if self.suspect(r)]


def read_manifest(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None), (None, None) when there is none, or (None, why it cannot be read)."""
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}; truncated?)"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    return data, None


def _order_key(order: list[str]):
    def key(run: R.RunResult):
        idx = order.index(run.scenario) if run.scenario in order else len(order)
        return (idx, run.scenario, run.concurrency)
    return key


def load_side(path: Path, *, label: str | None = None, gpus: int | None = None,
              price_per_hour: float | None = None, capacity_type: str | None = None,
              min_spec_acceptance_pct: float | None = None) -> Side:
    """Every combination of a sweep folder: planned ones (manifest) and any result file found. A valid
    run is suspect when its prompts came from the prefix cache, when speculative decoding accepted
    fewer draft tokens on real text than the floor (`min_spec_acceptance_pct`, else the one the sweep recorded,
    else 10 %), or when its answers streamed in fewer than two chunks (decode latency not measured)."""
    manifest, manifest_error = read_manifest(path / MANIFEST)
    used: set[Path] = {path / MANIFEST} if manifest is not None else set()
    runs: dict[tuple[str, int], R.RunResult] = {}
    suspects: dict[tuple[str, int], str] = {}
    telemetry: dict[tuple[str, int], dict[str, Any]] = {}
    config = (manifest or {}).get("config") or {}
    limit = (config.get("telemetry") or {}).get("suspect_prefix_cache_pct", R.SUSPECT_PREFIX_CACHE_PCT)
    planned = (manifest or {}).get("runs") or []
    for rec in planned:
        try:
            scenario, conc = str(rec["scenario"]), int(rec["concurrency"])
        except (KeyError, TypeError, ValueError):
            continue
        expect = R.Expectation(
            scenario=scenario,
            concurrency=conc,
            num_prompts=rec.get("num_prompts"),
            output_len=rec.get("output_len"),
            run_hash=rec.get("run_hash"),
        )
        result = R.load_result(path / R.result_filename(scenario, conc), expect)
        if result.path:
            used.add(Path(result.path))
        tele = rec.get("telemetry")
        if isinstance(tele, dict):
            telemetry[(scenario, conc)] = tele
            restart = R.restart_problem(tele)
            if restart and result.valid:
                result = result.with_problems(restart)
            checked = SC.prefix_cache_checked(scenario, (config.get("scenarios") or {}).get(scenario))
            why = R.suspect_reason(tele, checked, limit)
            if why:
                suspects[(scenario, conc)] = why
        if rec.get("status") == "suspect" and rec.get("suspect"):
            suspects.setdefault((scenario, conc), str(rec["suspect"]))
        if not result.valid and result.path is None:
            status = rec.get("status")
            why = {"invalid": whole_reason(path, rec.get("reason"), _last_log(rec)),
                   "valid": "result file missing (manifest says valid)",
                   "pending": unfinished(manifest, rec)}.get(status, f"not run (status {status})")
            result = R.missing_result(scenario, conc, why or "no result file")
            last = _last_invalid_file(path, scenario, conc)
            if last is not None:
                used.add(last)
                numbers = R.load_result(last, expect)
                result = R.RunResult(scenario, conc, str(last), result.problems,
                                     num_prompts=numbers.num_prompts, completed=numbers.completed,
                                     failed=numbers.failed)
        runs[(scenario, conc)] = result
    for file in sorted(path.glob("*.json")):
        parsed = R.parse_result_filename(file.name)
        if parsed and parsed not in runs:
            runs[parsed] = R.load_result(file)
            used.add(file)
    floor = min_spec_acceptance_pct
    if floor is None:
        floor = (config.get("telemetry") or {}).get("min_spec_acceptance_pct", R.MIN_SPEC_ACCEPTANCE_PCT)
    unmeasured: dict[tuple[str, int], str] = {}
    for key, run in runs.items():
        why = R.spec_collapse_reason(run, telemetry.get(key), floor)
        if why:
            suspects.setdefault(key, why)
        why = R.unmeasured_decode_reason(run)
        if why:
            unmeasured[key] = why

    order = list(((manifest or {}).get("config") or {}).get("scenarios") or {})
    order += [s for s in DEFAULT_ORDER if s not in order]
    ordered = sorted(runs.values(), key=_order_key(order))

    lengths: dict[str, tuple[int | None, int | None]] = {}
    for name, spec in (((manifest or {}).get("config") or {}).get("scenarios") or {}).items():
        lengths[name] = (spec.get("input_len"), spec.get("output_len"))
    for run in ordered:
        if run.scenario not in lengths and (run.input_len or run.output_len):
            lengths[run.scenario] = (run.input_len, run.output_len)

    m_gpus = (manifest or {}).get("gpus")
    m_price = (manifest or {}).get("price_per_hour")
    m_capacity = (manifest or {}).get("capacity_type")
    name = label or (manifest or {}).get("label") or path.resolve().name
    hw = (manifest or {}).get("hardware")
    m_source = hw.get("price_source") if isinstance(hw, dict) else None
    price = price_per_hour if price_per_hour is not None else m_price
    if price is None:
        price_source = None
    elif price_per_hour is not None or m_source == "--price-per-hour":
        price_source = "given"
    else:
        price_source = "looked up"
    return Side(
        label=str(name),
        path=path,
        manifest=manifest,
        runs=ordered,
        gpus=int(gpus or m_gpus or 1),
        price_per_hour=price,
        lengths=lengths,
        capacity_type=capacity_type or m_capacity,
        suspects=suspects,
        unmeasured=unmeasured,
        telemetry=telemetry,
        used=used,
        manifest_error=manifest_error,
        price_source=price_source,
    )


def unfinished(manifest: dict[str, Any] | None, rec: dict[str, Any]) -> str:
    """Why a planned run has no result: the sweep stopped before it, or during it (with the stop the
    sweep recorded, such as a server that stopped answering); `bench sweep --resume` runs it."""
    started = any(isinstance(a, dict) for a in rec.get("attempts") or [])
    stops = [s.get("interrupted") for s in (manifest or {}).get("sessions") or []
             if isinstance(s, dict) and isinstance(s.get("interrupted"), str)]
    if not started:
        return "not run: the sweep stopped before it; bench sweep --resume runs it"
    head = f" ({stops[-1].split(': ', 1)[0]})" if stops else ""  # "the server stopped answering during S2_summary c=16"
    return f"not finished: the sweep stopped during this run{head}; bench sweep --resume runs it"


def _last_log(rec: dict[str, Any]) -> str | None:
    attempts = [a for a in rec.get("attempts") or [] if isinstance(a, dict)]
    log = attempts[-1].get("log") if attempts else None
    return log if isinstance(log, str) else None


def whole_reason(folder: Path, reason: Any, log: str | None) -> str | None:
    """A recorded reason, its request errors made whole from the run's log where the sweep cut a
    traceback to its first line (bench.analysis.results.whole_reason)."""
    if not isinstance(reason, str) or R.TRACEBACK_HEAD not in reason:
        return reason if isinstance(reason, str) else None
    text = None
    if log:
        try:
            text = (folder / log).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = None
    return R.whole_reason(reason, text, log)


def _last_invalid_file(path: Path, scenario: str, conc: int) -> Path | None:
    best: tuple[int, Path] | None = None
    prefix = f"{scenario}_c{conc}.attempt"
    for file in path.glob(f"{scenario}_c{conc}.attempt*.invalid.json"):
        try:
            n = int(file.name[len(prefix):].split(".", 1)[0])
        except ValueError:
            continue
        if best is None or n > best[0]:
            best = (n, file)
    return best[1] if best else None


# ---------------------------------------------------------------------------------------------
# Run figures


DECODE_METRICS = O.DECODE_METRICS


def decode_p99(run: R.RunResult, metric: str) -> float | None:
    return run.tpot_p99_ms if metric == "tpot" else run.itl_p99_ms


def meets_slo(run: R.RunResult, ttft_ms: float, decode_ms: float, metric: str = "itl") -> bool:
    """TTFT p99 and the decode metric's p99 (ITL per chunk, or TPOT per token) within the limits."""
    decode = decode_p99(run, metric)
    return (run.valid and run.ttft_p99_ms is not None and decode is not None
            and run.ttft_p99_ms <= ttft_ms and decode <= decode_ms)


def peak(runs: list[R.RunResult]) -> R.RunResult | None:
    valid = [r for r in runs if r.valid and r.output_tok_s is not None]
    # Ties go to the lower concurrency: the same throughput with less queueing.
    return max(valid, key=lambda r: (r.output_tok_s, -r.concurrency), default=None)


def slo_best(runs: list[R.RunResult], ttft_ms: float, decode_ms: float, metric: str = "itl") -> R.RunResult | None:
    return peak([r for r in runs if meets_slo(r, ttft_ms, decode_ms, metric)])


TELEMETRY_KEYS = ("prefix_cache_hit_pct", "preemptions", "kv_cache_usage_max_pct", "requests_waiting_max",
                  "gpu_util_mean_pct", "gpu_mem_used_max_gib", "gpu_power_mean_w", "spec_acceptance_by_position")


def run_row(run: R.RunResult, side: Side | None = None) -> dict[str, Any]:
    ok = run.valid
    tele = (side.telemetry.get((run.scenario, run.concurrency)) if side else None) or {}
    return {
        "scenario": run.scenario,
        "concurrency": run.concurrency,
        "valid": ok,
        "reason": run.reason or (side.suspect(run) or side.counted_note(run) if side else None),
        "completed": run.completed,
        "failed": run.failed,
        "output_tok_s": run.output_tok_s if ok else None,
        "req_s": run.req_s if ok else None,
        "ttft_p50_ms": run.ttft_p50_ms if ok else None,
        "ttft_p99_ms": run.ttft_p99_ms if ok else None,
        "itl_p50_ms": run.itl_p50_ms if ok else None,
        "itl_p99_ms": run.itl_p99_ms if ok else None,
        "spec_acceptance": run.spec_acceptance_rate_pct if ok else None,
        "suspect": bool(side and side.suspect(run)),
        "tpot_p50_ms": run.tpot_p50_ms if ok else None,
        "tpot_p99_ms": run.tpot_p99_ms if ok else None,
        **{key: tele.get(key) for key in TELEMETRY_KEYS},
    }


def give_prices(side: Side, base: Side | None, given: list[O.Price], base_price: O.Price | None) -> None:
    """Set the prices `--price-per-hour` (and `--baseline-price-per-hour`) give: one without a label prices
    `side`, one with a label the side of that label; a side on Spot takes the Spot price where given.
    ValueError names a label no side has."""
    sides = {s.label: s for s in (side, base) if s is not None}
    for price in given:
        target = sides.get(price.label) if price.label else side
        if target is None:
            raise ValueError(f"--price-per-hour {price}: no sweep here is labelled {price.label} (the labels are "
                             f"{' and '.join(sides)}; give the price without LABEL= for {side.label})")
        target.price_per_hour, target.price_source = price.for_capacity(target.capacity_type), "given"
    if base is not None and base_price is not None:
        base.price_per_hour, base.price_source = base_price.for_capacity(base.capacity_type), "given"


# ---------------------------------------------------------------------------------------------
# The SLO a sweep was run under, and the one an analysis judges with


DEFAULT_SLO = O.SLO_DEFAULTS
SLO_KEYS = tuple(DEFAULT_SLO)


def recorded_slo(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The SLO a sweep recorded: its `config.slo` (written when it starts), else the one its capacity
    record or its capacity search used (sweeps written before the config held it); None if none."""
    m = manifest or {}
    for where in ((m.get("config") or {}).get("slo"), (m.get("capacity") or {}).get("slo"),
                  ((m.get("extra") or {}).get("settings") or {}).get("slo")):
        if isinstance(where, dict) and all(where.get(k) is not None for k in SLO_KEYS):
            try:
                return {"ttft_p99_ms": float(where["ttft_p99_ms"]), "decode_p99_ms": float(where["decode_p99_ms"]),
                        "decode_metric": str(where["decode_metric"])}
            except (TypeError, ValueError):
                continue
    return None


def slo_text(slo: dict[str, Any]) -> str:
    return (f"TTFT p99 <= {slo['ttft_p99_ms']:g} ms, {str(slo['decode_metric']).upper()} p99 <= "
            f"{slo['decode_p99_ms']:g} ms")


# The flags that set the SLO in every command (bench/common/options.py adds them)
SLO_FLAGS = O.SLO_FLAGS


def slo_given(args) -> dict[str, Any]:
    return {"ttft_p99_ms": getattr(args, "slo_ttft_p99_ms", None), "decode_p99_ms": getattr(args, "slo_itl_p99_ms", None),
            "decode_metric": getattr(args, "slo_decode_metric", None)}


class SloConflict(ValueError):
    """The sweeps were run under different SLOs and no flag sets one for all of them."""


@dataclass
class SloChoice:
    """The SLO an analysis judges with, where it comes from, and what differs from the records."""

    ttft_p99_ms: float
    decode_p99_ms: float
    decode_metric: str
    source: str  # "recorded" (the manifests), "flags" (a flag that differs from them) or "default"
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ttft_p99_ms": self.ttft_p99_ms, "decode_p99_ms": self.decode_p99_ms,
                "decode_metric": self.decode_metric}


def _value_text(key: str, value: Any) -> str:
    return str(value) if key == "decode_metric" else f"{value:g} ms"


def choose_slo(sides: list[tuple[str, dict[str, Any] | None]], given: dict[str, Any],
               flags: dict[str, str], noun: str = "the sweep") -> SloChoice:
    """The SLO to judge `sides` ((label, manifest) pairs) with. A value given (not None in `given`)
    is used; where a sweep recorded another, a note names both. A value not given is the one the
    sweeps recorded; sweeps that recorded different ones raise SloConflict (naming the flag that
    sets one for all); with none recorded, the default. `flags` names each key's flag."""
    recorded = [(label, recorded_slo(m)) for label, m in sides]
    chosen: dict[str, Any] = {}
    notes: list[str] = []
    conflicts: list[str] = []
    sources: set[str] = set()
    for key in SLO_KEYS:
        seen = [(label, slo[key]) for label, slo in recorded if slo]
        if given.get(key) is not None:
            chosen[key] = given[key]
            differ = [(label, v) for label, v in seen if v != given[key]]
            for label, v in differ:
                notes.append(f"{flags[key]} {_value_text(key, given[key]).replace(' ms', '')} given: used instead "
                             f"of the {_value_text(key, v)} {noun + ' ' if noun else ''}{label} recorded")
            sources.add("flags" if differ or not seen else "recorded")
            continue
        values = {v for _, v in seen}
        if len(values) > 1:
            conflicts.append(f"{flags[key]}: " + ", ".join(f"{_value_text(key, v)} ({label})" for label, v in seen))
        elif values:
            chosen[key] = values.pop()
            sources.add("recorded")
        else:
            chosen[key] = DEFAULT_SLO[key]
    source = next((s for s in ("flags", "recorded") if s in sources), "default")
    if conflicts:
        raise SloConflict("the sweeps were run under different SLOs (" + "; ".join(conflicts) + "), so their "
                          "capacities are not comparable: give " + " and ".join(c.split(":")[0] for c in conflicts)
                          + " to judge every sweep under one SLO")
    missing = [label for label, slo in recorded if slo is None]
    if missing and len(missing) < len(recorded):
        notes.append(f"{', '.join(missing)} recorded no SLO (a sweep of an earlier version, or no manifest): "
                     "judged under the one the other sweeps recorded")
    return SloChoice(float(chosen["ttft_p99_ms"]), float(chosen["decode_p99_ms"]), str(chosen["decode_metric"]),
                     source, notes)
