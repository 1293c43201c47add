"""Server and GPU telemetry around one measured run.

Right before a measured `vllm bench serve` starts, the sweep reads the server's Prometheus
`/metrics` (and the GPU exporter's, when given); while it runs, a thread samples both about once a
second; right after it exits, both are read again. `Window.summary()` turns that into the figures
stored with the run:

- counters as differences over the window: prefix-cache queries and hits (tokens), preemptions,
  prompt and generation tokens, spec-decode drafts, draft and accepted tokens, accepted tokens per
  draft position;
- gauges as maxima over the samples: KV-cache usage, requests waiting and running;
- GPU (NVIDIA DCGM exporter): utilisation mean, framebuffer memory used max (per GPU, GiB), power
  mean (per GPU, W);
- `server_restarted`: the server's process start time changed, or a counter went backwards;
- `several_servers`: the URL answered for more than one process (start times alternate, as through a
  router): then nothing is judged from differences and the counters are not given.

Metric names move between vLLM releases; `SERVER_COUNTERS` and `SERVER_GAUGES` list, per figure,
the names of vLLM 0.26 (the image) and of the CPU build the tests run (0.32), first match wins.
Counters are summed over label sets (engines, models), as are the request gauges; KV usage is the
highest engine's.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from bench.common.prometheus import Samples, parse

SERVER_COUNTERS: dict[str, tuple[str, ...]] = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "requests_succeeded": ("vllm:request_success_total",),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}
SPEC_PER_POSITION = ("vllm:spec_decode_num_accepted_tokens_per_pos_total",)
SERVER_GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # 0..1
    "requests_waiting": ("vllm:num_requests_waiting",),
    "requests_running": ("vllm:num_requests_running",),
}
PROCESS_START = "process_start_time_seconds"

# NVIDIA DCGM exporter 4.x default counters (one sample per GPU, label `gpu`).
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
GPU_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
GPU_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W

DEFAULT_INTERVAL_S = 1.0


def _first(samples: Samples, names: tuple[str, ...]) -> list[tuple[dict[str, str], float]] | None:
    for name in names:
        if name in samples:
            return samples[name]
    return None


def server_values(samples: Samples) -> dict[str, Any]:
    """The figures of one /metrics read: counters and gauges by figure name, start time, per position."""
    values: dict[str, Any] = {}
    for key, names in SERVER_COUNTERS.items():
        found = _first(samples, names)
        values[key] = sum(v for _, v in found) if found is not None else None
    for key, names in SERVER_GAUGES.items():
        found = _first(samples, names)
        if found is None:
            values[key] = None
        elif key == "kv_cache_usage":
            values[key] = max(v for _, v in found)
        else:
            values[key] = sum(v for _, v in found)
    per_pos: dict[int, float] = {}
    for labels, value in _first(samples, SPEC_PER_POSITION) or []:
        try:
            pos = int(labels.get("position", ""))
        except ValueError:
            continue
        per_pos[pos] = per_pos.get(pos, 0.0) + value
    values["spec_accepted_per_position"] = per_pos
    starts = sorted(v for _, v in samples.get(PROCESS_START, []))
    values["process_start"] = tuple(starts) if starts else None
    return values


def gpu_values(samples: Samples) -> dict[str, Any]:
    """Per-GPU DCGM readings of one scrape: {"util": [...], "fb_used_mib": [...], "power_w": [...]}."""
    def per_gpu(name: str) -> list[float]:
        return [v for _, v in samples.get(name, []) if math.isfinite(v)]
    return {"util": per_gpu(GPU_UTIL), "fb_used_mib": per_gpu(GPU_FB_USED), "power_w": per_gpu(GPU_POWER)}


def fetch(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}")
        return resp.read().decode("utf-8", errors="replace")


def _why(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    return str(getattr(exc, "reason", exc))


@dataclass
class Window:
    """Telemetry of one measured run: `start()` before it, `stop()` after it."""

    metrics_url: str | None
    gpu_metrics_url: str | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    gpu_samples: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    error_count: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _t0: float = 0.0

    def _read_server(self, stage: str) -> dict[str, Any] | None:
        if not self.metrics_url:
            return None
        try:
            return server_values(parse(fetch(self.metrics_url)))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            self.error_count += 1
            self.errors.setdefault(stage, f"{self.metrics_url}: {_why(exc)}")
            return None

    def _read_gpu(self, stage: str) -> dict[str, Any] | None:
        if not self.gpu_metrics_url:
            return None
        try:
            return gpu_values(parse(fetch(self.gpu_metrics_url)))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            self.error_count += 1
            self.errors.setdefault(f"gpu {stage}", f"{self.gpu_metrics_url}: {_why(exc)}")
            return None

    def _sample_once(self) -> None:
        t = round(time.monotonic() - self._t0, 3)
        server = self._read_server("during")
        if server is not None:
            self.samples.append({"t": t, **{k: server[k] for k in (*SERVER_GAUGES, "process_start")}})
        gpu = self._read_gpu("during")
        if gpu is not None:
            self.gpu_samples.append({"t": t, **gpu})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_once()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self.before = self._read_server("before")
        gpu = self._read_gpu("before")
        if gpu is not None:
            self.gpu_samples.append({"t": 0.0, **gpu})
        if self.metrics_url or self.gpu_metrics_url:
            self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self.after = self._read_server("after")
        gpu = self._read_gpu("after")
        if gpu is not None:
            self.gpu_samples.append({"t": round(time.monotonic() - self._t0, 3), **gpu})

    # -- figures --------------------------------------------------------------------------
    def _starts(self) -> list[tuple[float, ...]]:
        return [s["process_start"] for s in [self.before or {}, *self.samples, self.after or {}]
                if s.get("process_start")]

    def several_servers(self) -> bool:
        """The metrics URL answered for more than one server process: a start time seen, then another,
        then the first again (a router or a Service that spreads /metrics over its replicas). Each
        reading then counts one replica, so no difference of two readings means anything."""
        starts = self._starts()
        changes = [v for i, v in enumerate(starts) if i == 0 or v != starts[i - 1]]
        return len(changes) > len(set(changes))

    def restart_evidence(self) -> str | None:
        if self.several_servers():
            return None
        starts = self._starts()
        if len(set(starts)) > 1:
            return f"server process start time changed during the run ({starts[0]} -> {starts[-1]})"
        if self.before and self.after:
            for key in SERVER_COUNTERS:
                a, b = self.before.get(key), self.after.get(key)
                if a is not None and b is not None and b < a:
                    return f"server counter {key} went backwards ({a:g} -> {b:g}): the server restarted"
        return None

    def summary(self) -> dict[str, Any]:
        before, after = self.before or {}, self.after or {}

        def delta(key: str) -> float | None:
            a, b = before.get(key), after.get(key)
            return None if a is None or b is None else b - a

        def gauge_max(key: str) -> float | None:
            seen = [s[key] for s in [before, *self.samples, after] if s.get(key) is not None]
            return max(seen) if seen else None

        restart, several = self.restart_evidence(), self.several_servers()
        counters = {key: None if several else delta(key) for key in SERVER_COUNTERS}
        queries, hits = counters["prefix_cache_queries"], counters["prefix_cache_hits"]
        hit_pct = None
        if not restart and queries is not None and hits is not None:
            # No lookups (prefix caching off) means nothing was served from the cache.
            hit_pct = round(100.0 * hits / queries, 3) if queries > 0 else 0.0
        drafts = counters["spec_drafts"]
        by_pos = None
        if drafts and not restart:
            pa, pb = before.get("spec_accepted_per_position") or {}, after.get("spec_accepted_per_position") or {}
            by_pos = [round(100.0 * (pb[p] - pa.get(p, 0.0)) / drafts, 2) for p in sorted(pb)] or None
        kv = gauge_max("kv_cache_usage")
        util = [v for s in self.gpu_samples for v in s["util"]]
        fb = [v for s in self.gpu_samples for v in s["fb_used_mib"]]
        power = [v for s in self.gpu_samples for v in s["power_w"]]
        gpus = max((len(s["util"]) for s in self.gpu_samples), default=0)
        return {
            "metrics_url": self.metrics_url,
            "gpu_metrics_url": self.gpu_metrics_url,
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "gpu_samples": len(self.gpu_samples),
            "measured": self.before is not None and self.after is not None,
            "errors": dict(self.errors),
            "error_count": self.error_count,
            "server_restarted": bool(restart) if self.before is not None else None,
            "restart_evidence": restart,
            "several_servers": several,
            **{k: (None if restart else v) for k, v in counters.items()},
            "prefix_cache_hit_pct": hit_pct,
            "kv_cache_usage_max_pct": round(100.0 * kv, 2) if kv is not None else None,
            "requests_waiting_max": gauge_max("requests_waiting"),
            "requests_running_max": gauge_max("requests_running"),
            "spec_acceptance_by_position": by_pos,
            "gpus_seen": gpus or None,
            "gpu_util_mean_pct": round(sum(util) / len(util), 2) if util else None,
            "gpu_mem_used_max_gib": round(max(fb) / 1024.0, 3) if fb else None,
            "gpu_power_mean_w": round(sum(power) / len(power), 2) if power else None,
        }

    def record(self) -> dict[str, Any]:
        """Everything read, for the run's telemetry file."""
        def plain(values: dict[str, Any] | None) -> dict[str, Any] | None:
            if values is None:
                return None
            out = dict(values)
            out["spec_accepted_per_position"] = {str(k): v for k, v in
                                                 (values.get("spec_accepted_per_position") or {}).items()}
            return out
        return {"summary": self.summary(), "before": plain(self.before), "after": plain(self.after),
                "samples": self.samples, "gpu_samples": self.gpu_samples}

