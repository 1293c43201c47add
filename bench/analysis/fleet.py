"""The fleet a plan implies: per serving pool, the replica bounds and the autoscaler's targets.

`bench plan` sizes a fleet for a load; this module turns the same measurements into what an
autoscaler needs, per serving pool (a traffic class of the stack: interactive, batch):

- replicas: the plan's count for the pool's configuration is an interval (the capacity under the
  SLO is known between two tested loads). maxReplicas is its high end (the count that carries the
  planned load whatever the true capacity, headroom and spares included); minReplicas its low end
  for a pool that must answer at once, and 0 for a pool that tolerates a cold start (batch).
- running requests per replica: the concurrency of the capacity's source run (the highest
  closed-loop load that met the SLO, in the scenario that saturates first), times (1 - headroom):
  for a load of C concurrent requests the autoscaler then asks for ceil(C / target) replicas, the
  plan's own count for that load (spares aside). The HPA acts only beyond target x 1.1 (its
  tolerance): a headroom of at least 10 % keeps that band inside the measured capacity, and the
  plan notes a smaller one.
- requests waiting per replica: the queue one replica can hold and still start its next request
  within the TTFT SLO after one start-up's worth of growth (a replica asked for now serves only
  after the measured start-up time S): max(1, floor(mu x (TTFT SLO - x x S))), where mu is the
  replica's request rate at the SLO capacity and x the overload it must absorb (the headroom, at
  least the HPA's tolerance). With start-ups of minutes this is 1: any sustained queue scales.
- KV-cache usage: a second trigger for what the running count misses (long prompts filling the
  cache at fewer requests): the highest usage the source run saw, kept between 0.5 (below it, the
  signal only follows the running count) and 0.9 (vLLM preempts near a full cache).
- never GPU utilisation: it reads 100 % with one request running and says nothing about the SLO.
- scale-down: one replica per start-up time at most, after a stabilisation window of two start-up
  times (removing what takes S to bring back must not be quicker than bringing it back).

`simulate` applies KEDA's and the HPA's rule to metric samples: desired = ceil(current x value /
target) per trigger (AverageValue triggers: value = the query's total / current), the largest over
triggers, no change within the 10 % tolerance, scale-up at once and scale-down only to the highest
recommendation of the stabilisation window, bounded by min and max; new replicas serve after S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from bench.analysis.capacity import interval as CAP
from bench.analysis.side import load_side, read_manifest
from bench.startup import model as startup_model
from bench.startup import report as startup_report

POOLS = ("interactive", "batch")
COLD_START_TOLERANT = {"batch"}
HPA_TOLERANCE = 0.1
KV_FLOOR, KV_CEILING = 0.5, 0.9
MIN_SCALE_DOWN_WINDOW_S = 300
POLLING_INTERVAL_S = 15


class FleetError(ValueError):
    """A fleet option the plan cannot use (exit 2)."""


# ---------------------------------------------------------------------------------------------
# Inputs: a configuration's pool and start-up time


def pool_of(manifest: dict[str, Any] | None) -> str:
    """The serving pool a sweep's server belongs to: batch servers run priority scheduling (the
    stack's batch traffic class), every other server serves interactive traffic."""
    flags = (manifest or {}).get("served_flags") or []
    words = flags.split() if isinstance(flags, str) else [str(f) for f in flags]
    for i, word in enumerate(words):
        if word == "--scheduling-policy" and i + 1 < len(words) and words[i + 1] == "priority":
            return "batch"
        if word == "--scheduling-policy=priority":
            return "batch"
    return "interactive"


def server_of(label: str) -> str:
    """A sweep's label is `<stack>/<server>` in the cluster; the server name is what a stack uses."""
    return label.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Startup:
    seconds: float | None
    basis: str


def startup_time(folder: Path, instance_type: str | None, given: float | None) -> Startup:
    """Pod created to /health for a replica the autoscaler adds: given, else the folder's start-up
    records (new node, image from the snapshot, compile cache restored, else every boot), else the
    start-up model's estimate for the instance type."""
    if given is not None:
        return Startup(given, "given (--startup-s)")
    boots, _ = startup_report.load_records(folder)
    target = startup_model.measured_total(boots, startup_model.TARGET) if boots else None
    if target is not None:
        return Startup(target.seconds, f"measured on a new node with the snapshot and cache, {target.boots} boot(s)")
    totals = sorted(b["total_s"] for b in boots if isinstance(b.get("total_s"), (int, float)))
    if totals:
        return Startup(totals[len(totals) // 2], f"measured, median of {len(totals)} boot(s)")
    if instance_type:
        estimate = startup_model.total(startup_model.model(instance_type, [], startup_model.TARGET))
        if estimate is not None:
            return Startup(estimate, f"start-up model estimate for {instance_type} (no recorded boot)")
    return Startup(None, "unknown: no start-up record and no estimate for the instance type; give --startup-s")


# ---------------------------------------------------------------------------------------------
# Targets


@dataclass
class PoolFleet:
    pool: str
    configuration: str
    server: str
    min_replicas: int | None = None
    max_replicas: int | None = None
    running_per_replica: float | None = None
    waiting_per_replica: int | None = None
    kv_cache_usage: float | None = None
    startup_s: float | None = None
    startup_basis: str = ""
    scale_down_window_s: int | None = None
    scale_down_period_s: int | None = None
    capacity: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @property
    def scale_to_zero(self) -> bool:
        return self.min_replicas == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.configuration, "server": self.server,
            "min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
            "scale_to_zero": self.scale_to_zero,
            "running_per_replica": self.running_per_replica, "waiting_per_replica": self.waiting_per_replica,
            "kv_cache_usage": self.kv_cache_usage,
            "startup_s": self.startup_s, "startup_basis": self.startup_basis,
            "scale_down_window_s": self.scale_down_window_s, "scale_down_period_s": self.scale_down_period_s,
            "capacity": self.capacity, "reason": self.reason,
        }


def running_target(concurrency: float, headroom: float) -> float:
    return round(concurrency * (1.0 - headroom), 2)


def waiting_target(req_s: float, ttft_slo_s: float, startup_s: float, headroom: float) -> int:
    overload = max(headroom, HPA_TOLERANCE)
    return max(1, math.floor(req_s * (ttft_slo_s - overload * startup_s) + 1e-9))


def kv_target(kv_at_capacity: float | None) -> float:
    if kv_at_capacity is None:
        return KV_CEILING
    return round(min(KV_CEILING, max(KV_FLOOR, kv_at_capacity)), 2)


def scale_down(startup_s: float) -> tuple[int, int]:
    """(stabilisation window, seconds per replica removed)."""
    window = max(MIN_SCALE_DOWN_WINDOW_S, 30 * math.ceil(2 * startup_s / 30))
    return window, max(60, int(math.ceil(startup_s)))


def _binding(intervals: dict[str, Any], scenarios: Iterable[str]) -> tuple[str, CAP.Capacity] | None:
    """The scenario whose closed-loop capacity is met at the lowest concurrency (it saturates first)."""
    known = []
    for name in scenarios:
        cap = (intervals.get(name) or {}).get("closed")
        if cap is not None and cap.state == CAP.MEETS and cap.load_pass:
            known.append((cap.load_pass, name, cap))
    if not known:
        return None
    _, name, cap = min(known)
    return name, cap


def pool_fleet(pool: str, cfg, row: dict[str, Any], folder: Path, *, headroom: float, slo: dict[str, Any],
               scenarios: list[str], startup: Startup) -> PoolFleet:
    """One pool's fleet from its configuration's plan row and capacity intervals."""
    fleet = PoolFleet(pool, cfg.label, server_of(cfg.label), startup_s=startup.seconds, startup_basis=startup.basis)
    span = row.get("replicas_range")
    if not span:
        fleet.reason = f"the plan has no replica count for {cfg.label}: {row.get('reason') or 'unknown'}"
        return fleet
    lo, hi = span
    if hi is None:
        fleet.reason = (f"the plan's count for {cfg.label} has no upper bound ({lo} or more), so maxReplicas "
                        f"is unknown: {row.get('reason') or 'measure higher loads'}")
        return fleet
    binding = _binding(cfg.intervals, scenarios)
    if binding is None:
        fleet.reason = (f"{cfg.label} has no closed-loop load that meets the SLO in {', '.join(scenarios)}, so "
                        "the running requests per replica at the SLO capacity are unknown (the slo basis measures them)")
        return fleet
    scenario, cap = binding
    fleet.max_replicas = hi
    fleet.min_replicas = 0 if pool in COLD_START_TOLERANT else lo
    fleet.running_per_replica = running_target(cap.load_pass, headroom)
    out_len = cfg.lengths.get(scenario)
    req_s = cap.req_lo if cap.req_lo is not None else (cap.lo / out_len if cap.lo is not None and out_len else None)
    side = load_side(folder)
    telemetry = side.telemetry.get((scenario, int(cap.load_pass))) or {}
    kv_pct = telemetry.get("kv_cache_usage_max_pct")
    fleet.kv_cache_usage = kv_target(kv_pct / 100.0 if isinstance(kv_pct, (int, float)) else None)
    fleet.capacity = {"scenario": scenario, "concurrency": cap.load_pass, "source": cap.source,
                      "req_s": None if req_s is None else round(req_s, 4),
                      "output_tok_s": cap.as_dict()["output_tok_s"],
                      "kv_cache_usage_max": None if kv_pct is None else round(kv_pct / 100.0, 4)}
    if startup.seconds is None:
        fleet.reason = f"the start-up time of {cfg.label} is {startup.basis}"
        return fleet
    fleet.scale_down_window_s, fleet.scale_down_period_s = scale_down(startup.seconds)
    if req_s is None:
        fleet.reason = f"{cfg.label}'s request rate at the SLO capacity in {scenario} is unknown (output length?)"
        return fleet
    fleet.waiting_per_replica = waiting_target(req_s, slo["ttft_p99_ms"] / 1000.0, startup.seconds, headroom)
    return fleet


def parse_pools(items: list[str] | None, labels: list[str]) -> dict[str, str]:
    """--fleet-pool POOL=LABEL (repeatable) -> {pool: label}, checked against the candidates."""
    out: dict[str, str] = {}
    for item in items or []:
        pool, sep, label = item.partition("=")
        if not sep or pool not in POOLS:
            raise FleetError(f"--fleet-pool {item}: expected POOL=LABEL with POOL one of {', '.join(POOLS)}, "
                             "e.g. interactive=g7e/nvfp4-g7e")
        if label not in labels:
            raise FleetError(f"--fleet-pool {item}: no candidate labelled {label!r}; the candidates are "
                             f"{', '.join(labels)}")
        out[pool] = label
    return out


def build(candidates: list, folders: list[Path], plan: dict[str, Any], *, slo: dict[str, Any],
          chosen: dict[str, str], startup_s: float | None, scenarios: list[str]) -> dict[str, Any]:
    """plan.json's `fleet`: {"slo", "headroom", "spares", "hpa_tolerance", "pools": {pool: {...}},
    "notes"}. A pool is served by the candidate --fleet-pool names, else by the first candidate whose
    server belongs to it."""
    rows = {row["label"]: row for row in plan["configurations"]}
    notes: list[str] = []
    picked: dict[str, tuple[Any, Path]] = {}
    for cfg, folder in zip(candidates, folders):
        manifest, _ = read_manifest(folder / "manifest.json")
        pool = next((p for p, label in chosen.items() if label == cfg.label), None) or pool_of(manifest)
        if pool in picked and chosen.get(pool) != cfg.label:
            notes.append(f"{cfg.label} also serves {pool}; the fleet uses {picked[pool][0].label} "
                         f"(--fleet-pool {pool}=LABEL picks another)")
            continue
        picked[pool] = (cfg, folder)
    if plan["headroom"] < HPA_TOLERANCE:
        notes.append(f"headroom {plan['headroom']:.0%} is below the HPA's 10 % tolerance: a replica may run up to "
                     "10 % above its target before the autoscaler acts, beyond the measured capacity; plan with "
                     "--headroom 0.1 or more")
    pools = {}
    for pool in POOLS:
        if pool not in picked:
            continue
        cfg, folder = picked[pool]
        manifest, _ = read_manifest(folder / "manifest.json")
        startup = startup_time(folder, (manifest or {}).get("instance_type"), startup_s)
        pools[pool] = pool_fleet(pool, cfg, rows[cfg.label], folder, headroom=plan["headroom"], slo=slo,
                                 scenarios=scenarios, startup=startup).as_dict()
    return {"slo": dict(slo), "headroom": plan["headroom"], "spares": plan["spares"], "hpa_tolerance": HPA_TOLERANCE,
            "polling_interval_s": POLLING_INTERVAL_S, "pools": pools, "notes": notes}


# ---------------------------------------------------------------------------------------------
# The fragment a fleet stack consumes (vllm-poc:fleet)


def _camel(pool: dict[str, Any]) -> dict[str, Any]:
    return {"minReplicas": pool["min_replicas"], "maxReplicas": pool["max_replicas"],
            "runningPerReplica": pool["running_per_replica"], "waitingPerReplica": pool["waiting_per_replica"],
            "kvCacheUsage": pool["kv_cache_usage"], "startupSeconds": pool["startup_s"],
            "scaleDownWindowSeconds": pool["scale_down_window_s"],
            "scaleDownPeriodSeconds": pool["scale_down_period_s"]}


def stack_config(fleet: dict[str, Any]) -> dict[str, Any]:
    """The `vllm-poc:fleet` value: the SLO and the pools whose every figure is known."""
    slo = fleet["slo"]
    pools = {name: _camel(p) for name, p in fleet["pools"].items() if p["reason"] is None}
    return {"slo": {"ttftP99Ms": slo["ttft_p99_ms"], "itlP99Ms": slo["decode_p99_ms"]},
            "pollingIntervalSeconds": fleet["polling_interval_s"], "pools": pools}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return f"{value:.1f}"
    return str(value)


def fragment(fleet: dict[str, Any], source: str) -> str:
    """fleet.yaml: the stack-file fragment, each figure with the measurement it comes from."""
    config = stack_config(fleet)
    lines = [f"# The fleet {source} implies: paste under `config:` of a fleet stack (Pulumi.<stack>.yaml).",
             "# Each pool scales its servers (their trafficClass) with KEDA on vLLM's own metrics.",
             "  vllm-poc:fleet:",
             "    slo:",
             f"      ttftP99Ms: {_scalar(config['slo']['ttftP99Ms'])}",
             f"      itlP99Ms: {_scalar(config['slo']['itlP99Ms'])}",
             f"    pollingIntervalSeconds: {config['pollingIntervalSeconds']}",
             "    pools:" + ("" if config["pools"] else " {}")]
    for name, values in config["pools"].items():
        pool = fleet["pools"][name]
        cap = pool["capacity"]
        lines += [f"      # {name}: {pool['configuration']}; capacity under the SLO in {cap['scenario']} at "
                  f"concurrency {cap['concurrency']:g} ({CAP.SOURCE_WORDS.get(cap['source'], cap['source'])}); "
                  f"start-up {pool['startup_s']:g} s ({pool['startup_basis']})",
                  f"      {name}:"]
        lines += [f"        {key}: {_scalar(value)}" for key, value in values.items()]
    for name, pool in fleet["pools"].items():
        if pool["reason"] is not None:
            lines.append(f"    # {name} ({pool['configuration']}) is left out: {pool['reason']}")
    return "\n".join(lines) + "\n"


def markdown(fleet: dict[str, Any]) -> list[str]:
    """The plan's fleet section."""
    if not fleet["pools"]:
        return []
    lines = ["", "## Fleet", "",
             "Autoscaling per serving pool (fleet.yaml is the stack-file fragment): KEDA scales each server on "
             "vLLM's running and waiting requests and its KV-cache usage, never on GPU utilisation.", "",
             "| Pool | Configuration | Replicas | Running per replica | Waiting per replica | KV-cache usage "
             "| Start-up | Scale-down |", "|---|---|---|---:|---:|---:|---|---|"]
    for name, p in fleet["pools"].items():
        if p["reason"] is not None:
            lines.append(f"| {name} | {p['configuration']} | unknown | - | - | - | - | - |")
            continue
        lines.append(f"| {name} | {p['configuration']} | {p['min_replicas']}-{p['max_replicas']} "
                     f"| {p['running_per_replica']} | {p['waiting_per_replica']} | {p['kv_cache_usage']:.2f} "
                     f"| {p['startup_s']:g} s ({p['startup_basis']}) | one replica per {p['scale_down_period_s']} s "
                     f"after {p['scale_down_window_s']} s |")
    lines += [f"- {name}: {p['reason']}" for name, p in fleet["pools"].items() if p["reason"]]
    lines += [f"- {n}" for n in fleet["notes"]]
    return lines


# ---------------------------------------------------------------------------------------------
# KEDA's and the HPA's rule


@dataclass(frozen=True)
class Trigger:
    name: str
    target: float
    average: bool  # AverageValue (the query's total over the replicas) or Value (already per replica)


def desired_for(current: int, value: float, trigger: Trigger) -> int:
    """One trigger's recommendation: ceil(current x ratio), unchanged within the HPA's tolerance."""
    if current == 0:
        return 1 if value > 0 else 0
    per_replica = value / current if trigger.average else value
    ratio = per_replica / trigger.target
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return current
    return math.ceil(ratio * current - 1e-9)


def recommend(current: int, values: dict[str, float], triggers: list[Trigger], lo: int, hi: int) -> int:
    """The largest recommendation over the triggers, within [lo, hi] (at least 1 while a trigger is
    active or the floor is above 0)."""
    wanted = max((desired_for(current, values[t.name], t) for t in triggers if t.name in values), default=current)
    return max(lo, min(hi, wanted))


@dataclass
class Step:
    t: float
    values: dict[str, float]
    recommended: int
    replicas: int  # what the Deployment asks for
    ready: int  # replicas serving (started at least start-up seconds ago)


def simulate(samples: list[tuple[float, dict[str, float]]], triggers: list[Trigger], *, lo: int, hi: int,
             start: int, startup_s: float, down_window_s: float, down_period_s: float) -> list[Step]:
    """Replay metric samples (time in s, {trigger: query value}) through the autoscaler: scale-up at
    once, scale-down to the highest recommendation of the window, one replica per period; replicas
    added at t serve from t + startup_s."""
    replicas = start
    started: list[float] = [-math.inf] * start
    history: list[tuple[float, int]] = []
    last_down = -math.inf
    steps: list[Step] = []
    for t, values in samples:
        rec = recommend(replicas, values, triggers, lo, hi)
        history = [(ht, r) for ht, r in history if t - ht < down_window_s] + [(t, rec)]
        if rec > replicas:
            started += [t] * (rec - replicas)
            replicas = rec
        else:
            floor = max(r for _, r in history)
            if floor < replicas and t - last_down >= down_period_s:
                replicas -= 1
                started.pop()
                last_down = t
        ready = sum(1 for s in started if t - s >= startup_s)
        steps.append(Step(t, dict(values), rec, replicas, ready))
    return steps
