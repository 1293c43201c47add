"""The start-up phase model: pod creation to /health on a pool, phase by phase, measured where a
stored start-up record measured the phase and estimated, labelled so, where none did.

Phases: node (pod created -> scheduled: a new node's launch and boot), image (pulled, or present
from the pool's EBS snapshot), compile cache restore (the pull step), weights (the Run:ai stream),
compile (torch.compile, with the cache or without), init (everything else to /health: engine
init, KV cache, CUDA graphs, the API server, the process start).

Where the estimates come from: the PoC's two fully broken-down starts of the recommended
configuration (FP8-dynamic, 31.6 GiB, on g6e.2xlarge, vLLM 0.26), pod creation to /health:

    cold start 537 s  = node 48 + image pull 82 + weights 149 (Mountpoint) + engine init 93 + 165 s that no
                        phase names; the engine init holds the compile, 73 s
    best warm  155 s  = weights 29 (Run:ai) + engine init 25 + 101 s that no phase names (a warm node: no
                        node, image present); the engine init holds the compile from the cache, 8.5 s

The engine init holds the compile: vLLM 0.26 logs them on one line, "init engine (profile, create kv
cache, warmup model) took 180.75 s (compilation: 126.41 s)" in the full-size H200 cold start below,
whose timeline puts the compile (92.7 to 189.3 s) inside the engine init (62.1 to 242.9 s). Read that
way, the PoC's engine init besides the compile is 20 s after a full compile and 16.5 s after a cache
hit, and the H200's at full size 15.7 s after a hit (the median of six boots): the two agree. The
model's phases stay additive: compile is its own phase and init everything else, 185 s after a compile
without cache and 117.5 s after one from the cache. Weights: the Run:ai loads the
PoC measured (29 s on g6e.2xlarge, 19 s on g6e.12xlarge, 18 s on g7e.2xlarge, for about 31 GiB),
scaled by the bytes; on another instance type, the bytes over the rate the PoC reached relative to
the network: 47% of the burst bandwidth (g6e.2xlarge: 9.4 of 20 Gbps) but at most 14.5 Gbps (the
g6e.12xlarge and g7e.2xlarge loads, which did not fill their 100 and 50 Gbps NICs). Node, image,
compile and init were measured on g6e.2xlarge (L40S) only: on other instance types they are
estimates. The compile cache restore was never measured by the PoC: 5 s is an estimate for a few
hundred MB of small objects from S3 in the same region.

What one GPU measured at full size (`python -m bench gpu-check --model-shape gemma-4-31b` on an NVIDIA
H200 with the image's vLLM 0.26.0, the Gemma-4-31B architecture with random FP8 weights, 2026-12-04
to 06; docs/records/*gemma4-31b*, docs/records/experiment-kv-sizing-2026-12-04-h200): the part of a
start that is neither the weights nor the engine init, launch to /health less both (process start,
imports, the API server's set-up, the engine process's own start, engine ready to /health). Twenty-one
boots: 52.7 to 78.8 s after an empty compile cache (six, each its machine's first start of vLLM),
29.2 to 59.8 s after a cache hit (fifteen); the median, 48.4 s, is the start-up floor inside init. (The
tiny model on the same box, 2026-12-03, gave 68.1 s: its packages had no bytecode.) The model splits
init into that floor, the PoC's engine init besides the compile, and the rest of the PoC's unnamed
start-up (52.6 s after a cache hit, 116.6 s after a full compile), which nothing has attributed yet:
the real checkpoint's vision tower and its profiling, the container's start and what Mountpoint or the
streamer set up are candidates the H200 runs do not have. The total is unchanged; what moved is which part is measured.

The target: the recommended g6e.2xlarge configuration on a new Spot node, with the image from the
snapshot and the compile cache restored, at most 150 s from pod creation to /health.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from bench.startup import netlimits

GIB = 2**30
POC_WEIGHT_BYTES = int(31.6 * GIB)
POC_INSTANCE = "g6e.2xlarge"
TARGET_S = 150.0
TARGET_INSTANCE = "g6e.2xlarge"
# Run:ai loads the PoC measured, per instance type: (seconds, bytes).
POC_WEIGHTS: dict[str, tuple[float, int]] = {
    "g6e.2xlarge": (29.0, POC_WEIGHT_BYTES),
    "g6e.12xlarge": (19.0, POC_WEIGHT_BYTES),
    "g7e.2xlarge": (18.0, int(31.0 * GIB)),
}
SHARE_OF_BURST = 0.47
MAX_EFFECTIVE_GBPS = 14.5
# The PoC's phases as the model adds them: compile on its own, init everything else (engine init less
# the compile, plus what no phase names): 537 - 48 - 82 - 149 - 73 = 185 s; 155 - 29 - 8.5 = 117.5 s.
POC = {"node_s": 48.0, "image_pull_s": 82.0, "compile_miss_s": 73.0, "compile_hit_s": 8.5,
       "init_miss_s": 537.0 - 48.0 - 82.0 - 149.0 - 73.0, "init_hit_s": 155.0 - 29.0 - 8.5}
RESTORE_ESTIMATE_S = 5.0
# vLLM's engine init as the PoC read it (it holds the compile: see the module's docstring).
POC_ENGINE_INIT = {"hit": 25.0, "miss": 93.0}
POC_ENGINE_BESIDES_COMPILE = {"hit": POC_ENGINE_INIT["hit"] - POC["compile_hit_s"],
                              "miss": POC_ENGINE_INIT["miss"] - POC["compile_miss_s"]}
# The model-independent floor inside init, from the full-size boots on an H200 (see the module's docstring):
# launch -> /health less vLLM's engine init and its model load, one figure per boot (five after an empty
# compile cache, twelve after a hit); tests/test_gpu_check.py recomputes them from docs/records.
GPU_CHECK_WHERE = "full-size boots on an NVIDIA H200, vLLM 0.26.0, 2026-12-04 and 05, docs/records/"
FULL_SIZE_FLOORS_S = (58.6, 53.4, 58.3, 40.1, 50.7, 44.0, 56.9, 29.2, 37.0, 38.0, 41.6, 78.8, 59.8, 56.9,
                      63.1, 48.4, 40.4, 52.7, 44.9, 36.4, 42.6)
START_FLOOR_S = round(statistics.median(FULL_SIZE_FLOORS_S), 1)


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    new_node: bool
    image_cached: bool  # present on the node (snapshot or warm node) instead of pulled
    cache_restored: bool  # the compile cache came from S3 (a compile cache hit)


COLD = Scenario("cold", "new node, image pulled, no compile cache", True, False, False)
TARGET = Scenario("snapshot+cache", "new node, image from the snapshot, compile cache restored", True, True, True)
SCENARIOS = (COLD, TARGET)


@dataclass(frozen=True)
class Figure:
    seconds: float | None
    basis: str  # measured | PoC | estimate | none
    note: str = ""
    boots: int = 0

    def cell(self) -> str:
        if self.basis == "none":
            return self.note or "none"
        value = f"{self.seconds:,.1f} s"
        if self.basis == "measured":
            label = f"measured, {self.boots} boot{'s' if self.boots != 1 else ''}"
        else:
            label = self.basis
        return f"{value} ({label}{'; ' + self.note if self.note else ''})"


PHASES: tuple[tuple[str, str], ...] = (
    ("node", "Node"),
    ("image", "Image"),
    ("restore", "Compile cache restore"),
    ("weights", "Weights"),
    ("compile", "Compile"),
    ("init", "Init (engine, CUDA graphs, API server)"),
)
NAMES = {"node": "the node", "image": "the image", "restore": "the compile cache restore", "weights": "the weights",
         "compile": "the compile", "init": "init"}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def _measured(records: list[dict], value: Callable[[dict], float | None]) -> Figure | None:
    values = [v for v in (value(r) for r in records) if v is not None]
    return Figure(_median(values), "measured", boots=len(values)) if values else None


def _phase(record: dict, key: str) -> float | None:
    return (record.get("phases") or {}).get(key)


def _hit(record: dict) -> bool | None:
    state = record.get("compile_cache")
    return True if state == "hit" else False if state == "miss" else None


def _restored(record: dict) -> bool:
    return ((record.get("compile_cache_restore") or {}).get("outcome")) == "restored"


def _init(record: dict) -> float | None:
    """Everything from pod creation to /health that is not node, image, restore, weights or compile."""
    total, phases = record.get("total_s"), record.get("phases") or {}
    named = [phases.get(k) for k in ("node_provisioning_s", "image_pull_s", "cache_restore_s", "weight_load_s",
                                     "compile_s")]
    if total is None or phases.get("weight_load_s") is None or phases.get("compile_s") is None:
        return None
    return max(0.0, round(total - sum(v for v in named if v), 3))


def weight_bytes(records: Iterable[dict]) -> int:
    sizes = [(r.get("weights") or {}).get("bytes") for r in records]
    sizes = [s for s in sizes if s]
    return int(statistics.median(sizes)) if sizes else POC_WEIGHT_BYTES


def estimated_weights(instance_type: str, num_bytes: int) -> Figure:
    if instance_type in POC_WEIGHTS:
        seconds, poc_bytes = POC_WEIGHTS[instance_type]
        if abs(num_bytes - poc_bytes) < GIB:
            return Figure(seconds, "PoC")
        return Figure(round(seconds * num_bytes / poc_bytes, 1), "estimate",
                      f"the PoC's {seconds:g} s for {poc_bytes / GIB:.1f} GiB, scaled to {num_bytes / GIB:.1f} GiB")
    limit = netlimits.limit(instance_type)
    if limit is None:
        return Figure(None, "none", "no estimate: the instance type's network limit is unknown")
    gbps = min(limit.burst_gbps * SHARE_OF_BURST, MAX_EFFECTIVE_GBPS)
    return Figure(round(num_bytes * 8 / 1e9 / gbps, 1), "estimate",
                  f"{num_bytes / GIB:.1f} GiB at {gbps:.1f} Gbps, from its {limit.burst_gbps:g} Gbps network")


def _poc_or_estimate(instance_type: str, seconds: float, what: str) -> Figure:
    if instance_type == POC_INSTANCE:
        return Figure(seconds, "PoC")
    return Figure(seconds, "estimate", f"the PoC's {POC_INSTANCE} {what}")


def model(instance_type: str, records: list[dict], scenario: Scenario) -> dict[str, Figure]:
    """Each phase of `scenario` on `instance_type`: measured by `records` (of that instance type) where
    a record ran under the scenario's conditions, else the PoC's figure or an estimate."""
    new_node = [r for r in records if r.get("new_node")]
    images = [r for r in records if (r.get("image") or {}).get("image_cached") is scenario.image_cached]
    # Compile and init depend on the hit or miss, not on where the cache came from.
    compiled = [r for r in records if _hit(r) is scenario.cache_restored]
    figures: dict[str, Figure] = {}
    figures["node"] = (_measured(new_node, lambda r: _phase(r, "node_provisioning_s"))
                       if scenario.new_node else Figure(0.0, "estimate", "a node already up"))
    if scenario.new_node and figures["node"] is None:
        figures["node"] = _poc_or_estimate(instance_type, POC["node_s"], "node")
    if scenario.image_cached:
        figures["image"] = (_measured(images, lambda r: _phase(r, "image_pull_s"))
                            or Figure(0.0, "estimate", "present from the snapshot"))
    else:
        figures["image"] = (_measured(images, lambda r: _phase(r, "image_pull_s"))
                            or _poc_or_estimate(instance_type, POC["image_pull_s"], "pull of the 25 GB image"))
    if scenario.cache_restored:
        restored = [r for r in records if _restored(r)]
        figures["restore"] = (_measured(restored, lambda r: _phase(r, "cache_restore_s"))
                              or Figure(RESTORE_ESTIMATE_S, "estimate", "not measured yet"))
    else:
        figures["restore"] = Figure(None, "none", "no cache to restore")
    figures["weights"] = (_measured(records, lambda r: _phase(r, "weight_load_s"))
                          or estimated_weights(instance_type, weight_bytes(records)))
    hit = scenario.cache_restored
    figures["compile"] = (_measured(compiled, lambda r: _phase(r, "compile_s"))
                          or _poc_or_estimate(instance_type, POC["compile_hit_s" if hit else "compile_miss_s"],
                                              "compile " + ("from the cache" if hit else "without cache")))
    figures["init"] = _measured(compiled, _init) or _init_estimate(instance_type, hit)
    return figures


def _init_estimate(instance_type: str, hit: bool) -> Figure:
    """Init from its parts: the floor measured at full size, the PoC's engine init besides the compile,
    the PoC's unattributed rest."""
    total = POC["init_hit_s" if hit else "init_miss_s"]
    engine = POC_ENGINE_BESIDES_COMPILE["hit" if hit else "miss"]
    rest = unattributed_s(hit)
    note = (f"{START_FLOOR_S:g} s measured start-up floor (process, imports, API server; {GPU_CHECK_WHERE}) + the "
            f"PoC's {engine:g} s of engine init besides the compile {'from the cache' if hit else 'without cache'} + "
            f"{rest:g} s of the PoC's start-up that no phase names yet")
    if instance_type != POC_INSTANCE:
        note += f"; the PoC's parts are {POC_INSTANCE}'s"
    return Figure(total, "PoC" if instance_type == POC_INSTANCE else "estimate", note)


def unattributed_s(hit: bool) -> float:
    """The PoC's start-up inside init that neither the measured floor nor its engine init explains."""
    key = "hit" if hit else "miss"
    return round(POC[f"init_{key}_s"] - POC_ENGINE_BESIDES_COMPILE[key] - START_FLOOR_S, 1)


def floor_total(figures: dict[str, Figure], hit: bool) -> float | None:
    """The model's total less the start-up no phase names yet: what a start needs at least, by the model."""
    estimate = total(figures)
    if estimate is None or figures["init"].basis == "measured":
        return None
    return round(estimate - unattributed_s(hit), 1)


def total(figures: dict[str, Figure]) -> float | None:
    if any(f.seconds is None and f.basis != "none" for f in figures.values()):
        return None
    return round(sum(f.seconds for f in figures.values() if f.seconds is not None), 1)


def measured_total(records: list[dict], scenario: Scenario) -> Figure | None:
    """Whole boots that ran under the scenario's conditions, pod created to /health."""
    matching = [r for r in records if r.get("new_node") is scenario.new_node
                and (r.get("image") or {}).get("image_cached") is scenario.image_cached
                and _hit(r) is scenario.cache_restored and (_restored(r) or not scenario.cache_restored)]
    return _measured(matching, lambda r: r.get("total_s"))


def _pool(record: dict) -> str | None:
    return record.get("instance_type")


def modelled(instance_type: str) -> bool:
    """A pool the model can estimate: an instance type with a PoC measurement or a known network."""
    return instance_type in POC_WEIGHTS or netlimits.limit(instance_type) is not None


def section(records: list[dict], instance_types: Iterable[str] = ()) -> list[str]:
    """Markdown lines: per instance type, the phase model of both scenarios and the target's check."""
    pools = sorted({t for t in [*(_pool(r) for r in records), *instance_types] if t})
    if not pools:
        return []
    lines = ["", "### Start-up model per pool", "",
             "Each phase as measured by this folder's start-up records where a boot ran under the scenario's "
             "conditions (the median, with the number of boots), else the PoC's own measurement on that "
             "instance type, else an estimate; docs/startup.md (Phase model) says how each estimate is made.", ""]
    for pool in pools:
        mine = [r for r in records if _pool(r) == pool]
        if not modelled(pool):
            boots = f"{len(mine)} recorded boot{'s' if len(mine) != 1 else ''}"
            lines += [f"**{pool}** ({boots}): not modelled. The model covers the cloud pools, instance types whose "
                      "network and PoC figures it knows; this is not one (a local start-up has no node, image or "
                      "GPU phases), so no cloud figure stands in for it. Its measured boots are in the Startup "
                      "table above.", ""]
            continue
        models = {s.key: model(pool, mine, s) for s in SCENARIOS}
        lines += [f"**{pool}**" + (f" ({len(mine)} recorded boot{'s' if len(mine) != 1 else ''})" if mine
                                     else " (no recorded boot: every figure is the PoC's or an estimate)"), "",
                  "| Phase | " + " | ".join(s.title.capitalize() for s in SCENARIOS) + " |",
                  "|---|" + "---|" * len(SCENARIOS)]
        for key, label in PHASES:
            lines.append(f"| {label} | " + " | ".join(models[s.key][key].cell() for s in SCENARIOS) + " |")
        totals = [total(models[s.key]) for s in SCENARIOS]
        lines.append("| **Total, pod created to /health** | " + " | ".join(
            f"**{t:,.1f} s** (model)" if t is not None else "no estimate" for t in totals) + " |")
        measured = [measured_total(mine, s) for s in SCENARIOS]
        if any(measured):
            lines.append("| Measured total | " + " | ".join(m.cell() if m else "not measured" for m in measured) + " |")
        lines.append("")
        if pool == TARGET_INSTANCE:
            lines += [target_line(models[TARGET.key], measured[SCENARIOS.index(TARGET)]), ""]
    return lines


def target_line(figures: dict[str, Figure], measured: Figure | None) -> str:
    goal = (f"Target: at most {TARGET_S:.0f} s from pod creation to /health for the recommended "
            f"{TARGET_INSTANCE} configuration on a new Spot node with the image snapshot and the compile cache. ")
    if measured is not None:
        verdict = "met" if measured.seconds <= TARGET_S else f"missed by {measured.seconds - TARGET_S:,.1f} s"
        return goal + f"Measured: {measured.cell()}: {verdict}."
    estimate = total(figures)
    if estimate is None:
        return goal + "No estimate: a phase has none. This is the model's estimate until a cluster measures it."
    largest_key = max((k for k, f in figures.items() if f.seconds), key=lambda k: figures[k].seconds)
    largest = figures[largest_key]
    if estimate <= TARGET_S:
        return goal + (f"The model estimates {estimate:,.1f} s, within the target; this is the model's estimate "
                       "until a cluster measures it.")
    floor = floor_total(figures, hit=True)
    floor_text = ""
    if floor is not None:
        floor_text = (f" Without the {unattributed_s(True):g} s of the PoC's start-up that no phase names, the model "
                      f"still needs {floor:,.1f} s" + (f", {floor - TARGET_S:,.1f} s over: the target needs a faster "
                                                       "node or a shorter start-up floor, not only that remainder"
                                                       if floor > TARGET_S else ", within the target") + ".")
    why = ""
    if largest_key == "init" and largest.basis != "measured":
        why = (f" ({START_FLOOR_S:g} s of it the start-up floor measured at full size on one GPU, the rest the PoC's "
               "engine init besides the compile and start-up its breakdown leaves unnamed; a recorded boot splits it "
               "into container start, CUDA graph capture and the rest)")
    return goal + (f"The model estimates {estimate:,.1f} s, {estimate - TARGET_S:,.1f} s over the target; this "
                   f"is the model's estimate until a cluster measures it. The largest phase is "
                   f"{NAMES[largest_key]}, {largest.seconds:,.1f} s{why}.{floor_text}")


def estimate_summary(instance_type: str) -> dict[str, Any]:
    """The model of both scenarios for one instance type without records (plain data, for tests and tools)."""
    return {s.key: {k: f.seconds for k, f in model(instance_type, [], s).items()} | {"total": total(model(instance_type, [], s))}
            for s in SCENARIOS}
