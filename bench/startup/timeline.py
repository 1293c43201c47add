"""A server pod's cold start as a timeline: Kubernetes API objects plus the server's own log.

Pure functions over the API's JSON as `GET` returns it (core/v1 Pod, Node and Event lists,
karpenter.sh/v1 NodeClaim) and over the parsed vLLM log (`bench.startup.phases.parse_log`). Nothing here
talks to a cluster; `bench.startup.collect` fetches the inputs.

Marks (UTC, ISO 8601):
  pod_created        pod metadata.creationTimestamp
  nodeclaim_created  the NodeClaim Karpenter made for the pod (new node only)
  nodeclaim_launched NodeClaim condition Launched (EC2 instance running)
  node_ready         Node condition Ready (NodeClaim Initialized when present)
  pod_scheduled      pod condition PodScheduled
  image_pulled       kubelet event Pulled for the server's image (the first container that needs
                     it pulls it; the others find it "already present")
  cache_restored     the compile-cache-pull init container finished (servers with a compile cache)
  container_started  containerStatuses[].state.running.startedAt (else the Started event)
  health_ok          pod condition Ready (the readiness probe is GET /health)

Phases, in the order of the PoC's start-up breakdown (each with its share of the total, pod created to
/health OK): node provisioning (pod created -> scheduled; a warm node makes it ~0), image pull (the
kubelet's own measurement), compile cache restore (the pull step's container, start to finish),
container start (scheduled -> started, less the pull and the restore), then from the server log:
weight load, torch.compile, CUDA graph capture, and the rest of engine start-up.

The compile cache's pull and push steps end their logs with `compile-cache-result {json}`
(weights/compile_cache.py): whether the cache was restored (bytes, seconds) or why not, and what the
pod pushed once healthy. The record keeps both (`compile_cache_restore`, `compile_cache_push`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Iterable

from bench.startup import memory, netlimits

RECORD_KIND = "vllm-poc/startup-record"
RECORD_VERSION = 1
# The server pod's compile-cache steps (components/compile_cache.py) and the line their logs end
# with (weights/compile_cache.py); a test keeps the three modules in agreement.
CACHE_PULL_CONTAINER = "compile-cache-pull"
CACHE_PUSH_CONTAINER = "compile-cache-push"
CACHE_RESULT_MARK = "compile-cache-result "

# kubelet: `Successfully pulled image "%s" in %s (%s including waiting). Image size: %d bytes.`
_PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9hms.µ]+)'
                     r'(?: \((?P<waiting>[0-9hms.µ]+) including waiting\))?(?:\. Image size: (?P<size>\d+) bytes)?')
_PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')
_GO_DURATION = re.compile(r"([0-9.]+)(h|ms|µs|us|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6}

PHASES: tuple[tuple[str, str], ...] = (
    ("node_provisioning_s", "Node provisioning (pod created -> scheduled)"),
    ("image_pull_s", "Image pull"),
    ("cache_restore_s", "Compile cache restore"),
    ("container_start_s", "Container start (excl. pull, restore)"),
    ("weight_load_s", "Weight load"),
    ("compile_s", "torch.compile"),
    ("cuda_graph_s", "CUDA graph capture"),
    ("engine_other_s", "Other engine start-up (to /health OK)"),
)


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 as the API writes it (`2026-08-05T10:00:00Z`, optionally with micro-seconds)."""
    if not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def iso(stamp: datetime | None) -> str | None:
    if stamp is None:
        return None
    text = stamp.astimezone(timezone.utc).isoformat(timespec="microseconds" if stamp.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def go_duration(text: str | None) -> float | None:
    """`1m22.5s`, `845ms`, `3.2s` -> seconds."""
    if not text:
        return None
    parts = _GO_DURATION.findall(text)
    if not parts:
        return None
    return round(sum(float(num) * _GO_UNITS[unit] for num, unit in parts), 3)


def _condition(obj: dict | None, kind: str) -> dict | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def condition_time(obj: dict | None, kind: str) -> datetime | None:
    """lastTransitionTime of a condition that is True, else None."""
    cond = _condition(obj, kind)
    if cond and cond.get("status") == "True":
        return parse_time(cond.get("lastTransitionTime"))
    return None


def created(obj: dict | None) -> datetime | None:
    return parse_time(((obj or {}).get("metadata") or {}).get("creationTimestamp"))


def event_time(event: dict) -> datetime | None:
    """Events from the events.k8s.io recorder carry eventTime; kubelet's carry first/lastTimestamp."""
    series = event.get("series") or {}
    return (parse_time(event.get("eventTime")) or parse_time(event.get("firstTimestamp"))
            or parse_time(series.get("lastObservedTime")) or parse_time(event.get("lastTimestamp"))
            or created(event))


def events_for(events: Iterable[dict] | dict, kind: str, name: str) -> list[dict]:
    """Events about one object, oldest first (accepts an EventList or a list of Events)."""
    items = events.get("items", []) if isinstance(events, dict) else list(events)
    mine = [e for e in items if (e.get("involvedObject") or e.get("regarding") or {}).get("kind") == kind
            and (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name]
    far = datetime.max.replace(tzinfo=timezone.utc)
    return sorted(mine, key=lambda e: event_time(e) or far)


def server_container(pod: dict, name: str | None = None) -> dict:
    """The container status of the server (named `name`, else the first one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if name is None or status.get("name") == name:
            return status
    return {}


def _container_spec(pod: dict, name: str | None) -> dict:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if name is None or container.get("name") == name:
            return container
    return {}


def image_pull(pod_events: list[dict], image: str | None, node: dict | None) -> dict[str, Any]:
    """The kubelet's pull of the server image: seconds, bytes, whether it was already on the node."""
    out: dict[str, Any] = {"image": image, "image_pull_s": None, "image_pull_waiting_s": None,
                           "image_bytes": None, "image_cached": None, "image_pulled": None}
    for event in pod_events:
        message = event.get("message") or ""
        if event.get("reason") != "Pulled":
            continue
        if (m := _PULLED.search(message)) and (image is None or m["image"] == image):
            out.update(image=m["image"], image_pull_s=go_duration(m["took"]),
                       image_pull_waiting_s=go_duration(m["waiting"]), image_cached=False,
                       image_bytes=int(m["size"]) if m["size"] else None, image_pulled=iso(event_time(event)))
        elif (m := _PRESENT.search(message)) and (image is None or m["image"] == image) \
                and out["image_cached"] is not False:
            # Containers after the one that pulled the image (the server after its init steps) find
            # it present; that says nothing about the node having had it.
            out.update(image=m["image"], image_pull_s=0.0, image_cached=True, image_pulled=iso(event_time(event)))
    if out["image_bytes"] is None and node and out["image"]:
        for entry in (node.get("status") or {}).get("images") or []:
            if out["image"] in (entry.get("names") or []):
                out["image_bytes"] = entry.get("sizeBytes")
    if out["image_pull_s"] and out["image_bytes"]:
        out["image_pull_mbps"] = round(out["image_bytes"] / 1e6 / out["image_pull_s"], 1)  # MB/s
    else:
        out["image_pull_mbps"] = None
    return out


def init_container(pod: dict, name: str) -> dict:
    """The status of one init container (empty when the pod has none of that name)."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == name:
            return status
    return {}


def has_init_container(pod: dict, name: str) -> bool:
    return any(c.get("name") == name for c in (pod.get("spec") or {}).get("initContainers") or [])


def cache_result(log: str | Iterable[str] | None) -> dict | None:
    """The last `compile-cache-result {json}` of a compile-cache step's log (None when there is none)."""
    if not log:
        return None
    lines = log.splitlines() if isinstance(log, str) else list(log)
    for line in reversed(lines):
        at = line.find(CACHE_RESULT_MARK)
        if at < 0:
            continue
        try:
            data = json.loads(line[at + len(CACHE_RESULT_MARK):])
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _restore(pod: dict, result: dict | None) -> tuple[dict | None, float | None, str | None]:
    """(the restore's record, the pull step's own run time, when it finished) for a pod with a pull step."""
    if not has_init_container(pod, CACHE_PULL_CONTAINER):
        return None, None, None
    done = (init_container(pod, CACHE_PULL_CONTAINER).get("state") or {}).get("terminated") or {}
    started, finished = parse_time(done.get("startedAt")), parse_time(done.get("finishedAt"))
    step_s = _seconds(started, finished)
    result = result or {}
    record = {key: result.get(key) for key in ("outcome", "files", "bytes", "seconds", "reason", "uri")}
    record["step_s"] = step_s
    return record, step_s, iso(finished)


def find_nodeclaim(nodeclaims: Iterable[dict] | dict, node_name: str | None) -> dict | None:
    items = nodeclaims.get("items", []) if isinstance(nodeclaims, dict) else list(nodeclaims)
    for claim in items:
        if node_name and (claim.get("status") or {}).get("nodeName") == node_name:
            return claim
    return None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def _compile_s(log: dict) -> float | None:
    return log.get("compile_total_s") if log.get("compile_total_s") is not None else log.get("compile_cache_load_s")


def build(pod: dict, *, node: dict | None = None, nodeclaim: dict | None = None,
          events: Iterable[dict] | dict = (), log: dict | None = None, container: str | None = None,
          server: str | None = None, config_hash: str | None = None, cache_pull: dict | None = None,
          cache_push: dict | None = None) -> dict[str, Any]:
    """One startup record from the API objects, the parsed server log and the compile-cache steps'
    results (`cache_result` of their logs)."""
    log = dict(log or {})
    meta = pod.get("metadata") or {}
    pod_name = meta.get("name")
    events_list = events.get("items", []) if isinstance(events, dict) else list(events)
    pod_events = events_for(events_list, "Pod", pod_name)
    status = server_container(pod, container)
    image = status.get("image") or _container_spec(pod, container).get("image")
    node_name = (pod.get("spec") or {}).get("nodeName")
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    instance_type = labels.get("node.kubernetes.io/instance-type")

    pod_created = created(pod)
    scheduled = condition_time(pod, "PodScheduled")
    if scheduled is None:
        sched = [e for e in pod_events if e.get("reason") == "Scheduled"]
        scheduled = event_time(sched[-1]) if sched else None
    node_created = created(node)
    new_node = (node_created > pod_created) if node_created and pod_created else None
    claim_created = created(nodeclaim) if nodeclaim else None
    launched = condition_time(nodeclaim, "Launched") if nodeclaim else None
    node_ready = (condition_time(nodeclaim, "Initialized") if nodeclaim else None) or condition_time(node, "Ready")
    started = parse_time(((status.get("state") or {}).get("running") or {}).get("startedAt"))
    if started is None:
        ev = [e for e in pod_events if e.get("reason") == "Started"]
        started = event_time(ev[-1]) if ev else None
    health_ok = condition_time(pod, "Ready")
    pull = image_pull(pod_events, image, node)
    restore, restore_s, restored_at = _restore(pod, cache_pull)

    marks = {
        "pod_created": iso(pod_created),
        "nodeclaim_created": iso(claim_created) if new_node else None,
        "nodeclaim_launched": iso(launched) if new_node else None,
        "node_created": iso(node_created),
        "node_ready": iso(node_ready),
        "pod_scheduled": iso(scheduled),
        "image_pulled": pull["image_pulled"],
        "cache_restored": restored_at,
        "container_started": iso(started),
        "health_ok": iso(health_ok),
    }
    total = _seconds(pod_created, health_ok)
    start_gap = _seconds(scheduled, started)
    container_start = (max(0.0, round(start_gap - (pull["image_pull_s"] or 0.0) - (restore_s or 0.0), 3))
                       if start_gap is not None else None)
    boot = _seconds(started, health_ok)
    weight = log.get("weight_load_s")
    compile_s = _compile_s(log)
    graphs = log.get("cuda_graph_s")
    other = None
    if boot is not None:
        other = round(max(0.0, boot - sum(v for v in (weight, compile_s, graphs) if v)), 3)
    phases = {
        "node_provisioning_s": _seconds(pod_created, scheduled),
        "image_pull_s": pull["image_pull_s"],
        "cache_restore_s": restore_s,
        "container_start_s": container_start,
        "weight_load_s": weight,
        "compile_s": compile_s,
        "cuda_graph_s": graphs,
        "engine_other_s": other,
    }
    shares = {key: (round(100.0 * value / total, 1) if value is not None and total else None)
              for key, value in phases.items()}
    weight_bytes = netlimits.parse_size(log.get("runai_stream_size"))
    record: dict[str, Any] = {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "server": server or (meta.get("labels") or {}).get("app.kubernetes.io/instance")
        or (meta.get("labels") or {}).get("app.kubernetes.io/name"),
        "config_hash": config_hash,
        "namespace": meta.get("namespace"),
        "pod": pod_name,
        "pod_uid": meta.get("uid"),
        "pod_ip": (pod.get("status") or {}).get("podIP"),
        "node": node_name,
        "nodeclaim": ((nodeclaim or {}).get("metadata") or {}).get("name"),
        "nodepool": labels.get("karpenter.sh/nodepool"),
        "capacity_type": labels.get("karpenter.sh/capacity-type"),
        "instance_type": instance_type,
        "new_node": new_node,
        "restarts": status.get("restartCount"),
        "marks": marks,
        "image": {k: pull[k] for k in ("image", "image_bytes", "image_cached", "image_pull_s",
                                       "image_pull_waiting_s", "image_pull_mbps")},
        "node_launch_s": _seconds(claim_created, launched) if new_node else None,
        "node_boot_s": _seconds(launched, node_ready) if new_node else None,
        "total_s": total,
        "phases": phases,
        "shares_pct": shares,
        "weights": {"bytes": weight_bytes, "seconds": log.get("runai_stream_s"),
                    "rate": log.get("runai_stream_rate"), "loader": log.get("weight_loader"),
                    **netlimits.weight_load(weight_bytes, weight, instance_type)},
        "compile_cache": log.get("compile_cache"),
        "compile_cache_restore": restore,
        "compile_cache_push": ({key: cache_push.get(key) for key in ("outcome", "files", "bytes", "seconds", "reason")}
                               if cache_push else None),
        "kv_cache_tokens": log.get("kv_cache_tokens"),
        "log": log,
    }
    return record


def is_record(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == RECORD_KIND


def memory_warning(record: dict) -> str | None:
    """One boot's warning where its memory profile counted negative non-torch memory (bench/startup/memory.py)."""
    return memory.warning(memory.from_phases(record.get("log") or {}))


def memory_warnings(records: Iterable[dict]) -> list[str]:
    """memory_warning of each boot that has one, naming its server and pod."""
    return [f"{r.get('server') or 'server not recorded'} pod {r.get('pod') or 'not recorded'}: {warned}"
            for r in records if (warned := memory_warning(r))]


def boot_warnings(records: Iterable[dict]) -> list[str]:
    """Every warning of the start-up section: smaller KV caches than an earlier boot, then memory profiles."""
    records = list(records)
    return kv_regressions(records) + memory_warnings(records)


def kv_regressions(records: Iterable[dict]) -> list[str]:
    """Warnings for boots whose KV cache is smaller than an earlier boot of the same configuration.

    vLLM booted with an empty compile cache can end up with fewer KV tokens than after a restart
    with the cache warm; a benchmark on the smaller boot under-states the configuration.
    """
    best: dict[tuple, tuple[int, dict]] = {}
    warnings = []
    ordered = sorted(records, key=lambda r: (r.get("marks") or {}).get("pod_created") or "")
    for record in ordered:
        tokens = record.get("kv_cache_tokens")
        if not tokens:
            continue
        key = (record.get("server"), record.get("config_hash"), record.get("instance_type"))
        if key in best and tokens < best[key][0]:
            earlier = best[key][1]
            warnings.append(
                f"{record.get('server')} pod {record.get('pod')}: KV cache {tokens:,} tokens, below "
                f"{best[key][0]:,} of earlier pod {earlier.get('pod')} with the same configuration "
                f"(compile cache {record.get('compile_cache') or 'unknown'} vs "
                f"{earlier.get('compile_cache') or 'unknown'}); results of this boot under-state it"
            )
        if key not in best or tokens > best[key][0]:
            best[key] = (tokens, record)
    return warnings
