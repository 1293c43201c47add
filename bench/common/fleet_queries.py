"""The fleet's Prometheus side, from the SLO: recording rules, alerts, the dashboard and the queries
the autoscaler's triggers run. Plain data (dicts), shared by the stack (which renders them into the
cluster) and the tests (which load them into a real Prometheus).

Series are vLLM's own (names of vLLM 0.26, the serving image: `vllm/v1/metrics/loggers.py`) and the
DCGM exporter's, as the project's scrape jobs label them: job `vllm` with `namespace`, `server` (the
Deployment) and `traffic_class` per target, job `dcgm` per GPU node. Counters carry `_total` and
histograms `_bucket`, as Prometheus stores them.

- Recording rules: p99 TTFT and ITL per server over 5 minutes from vLLM's histograms, the running
  and waiting requests, the KV-cache usage, and the token rates.
- Alerts: TTFT p99 and ITL p99 above the SLO for 5 minutes (the SLO a fleet was sized for), and
  requests left waiting for 10 minutes (the fleet is at its ceiling or cannot start replicas).
- Triggers: running and waiting requests summed over a server's replicas (KEDA's AverageValue: the
  HPA divides by the replica count) and the KV-cache usage averaged over them (Value). Averaged
  over one minute, so that one scrape's spike moves nothing. GPU utilisation is on the dashboard,
  never in a trigger: it reads 100 % with a single request running.
"""

from __future__ import annotations

import re
from typing import Any

VLLM_JOB, DCGM_JOB = "vllm", "dcgm"
BY = "namespace, server"
WINDOW = "5m"
TRIGGER_WINDOW = "1m"

# Series the rules and the panels read (families as vLLM 0.26 names them; suffixes as stored).
TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
ITL_BUCKET = "vllm:inter_token_latency_seconds_bucket"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREEMPTIONS = "vllm:num_preemptions_total"
SUCCESS = "vllm:request_success_total"
QUEUE_BUCKET = "vllm:request_queue_time_seconds_bucket"
GPU_UTIL, GPU_FB_USED, GPU_POWER = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"

TTFT_P99 = "server:vllm_time_to_first_token_seconds:p99_5m"
ITL_P99 = "server:vllm_inter_token_latency_seconds:p99_5m"
RUNNING_SUM = "server:vllm_num_requests_running:sum"
WAITING_SUM = "server:vllm_num_requests_waiting:sum"
KV_AVG = "server:vllm_kv_cache_usage_perc:avg"
GENERATION_RATE = "server:vllm_generation_tokens:rate5m"
PROMPT_RATE = "server:vllm_prompt_tokens:rate5m"

SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
_NAME = re.compile(r"\b(vllm:[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)")


def _p99(bucket: str) -> str:
    return f"histogram_quantile(0.99, sum by ({BY}, le) (rate({bucket}{{job=\"{VLLM_JOB}\"}}[{WINDOW}])))"


def recording_rules() -> list[dict[str, str]]:
    sel = f'{{job="{VLLM_JOB}"}}'
    return [
        {"record": TTFT_P99, "expr": _p99(TTFT_BUCKET)},
        {"record": ITL_P99, "expr": _p99(ITL_BUCKET)},
        {"record": RUNNING_SUM, "expr": f"sum by ({BY}) ({RUNNING}{sel})"},
        {"record": WAITING_SUM, "expr": f"sum by ({BY}) ({WAITING}{sel})"},
        {"record": KV_AVG, "expr": f"avg by ({BY}) ({KV_USAGE}{sel})"},
        {"record": GENERATION_RATE, "expr": f"sum by ({BY}) (rate({GENERATION}{sel}[{WINDOW}]))"},
        {"record": PROMPT_RATE, "expr": f"sum by ({BY}) (rate({PROMPT}{sel}[{WINDOW}]))"},
    ]


def alerts(ttft_p99_ms: float, itl_p99_ms: float) -> list[dict[str, Any]]:
    def slo(name: str, record: str, limit_ms: float, what: str) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": f"{record} > {limit_ms / 1000:g}",
            "for": "5m",
            "labels": {"severity": "page", "slo": what},
            "annotations": {
                "summary": f"{what} p99 of {{{{ $labels.server }}}} is above the SLO ({limit_ms:g} ms)",
                "description": (f"{what} p99 over 5 minutes on {{{{ $labels.namespace }}}}/{{{{ $labels.server }}}} "
                                f"has been above the {limit_ms:g} ms the fleet was sized for: check the autoscaler "
                                "(at maxReplicas? replicas starting?) and the traffic mix against the plan."),
            },
        }

    return [
        slo("VllmTtftP99AboveSlo", TTFT_P99, ttft_p99_ms, "TTFT"),
        slo("VllmItlP99AboveSlo", ITL_P99, itl_p99_ms, "ITL"),
        {
            "alert": "VllmRequestsWaiting",
            "expr": f"{WAITING_SUM} > 0",
            "for": "10m",
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": "requests have waited for a free slot on {{ $labels.server }} for 10 minutes",
                "description": ("A standing queue means the fleet carries more than its capacity: it is at "
                                "maxReplicas, or new replicas do not start (GPU pool limit, Spot capacity)."),
            },
        },
    ]


def rule_groups(ttft_p99_ms: float, itl_p99_ms: float, interval: str = "30s") -> dict[str, Any]:
    """A Prometheus rule file: {"groups": [...]} (what `promtool check rules` reads)."""
    return {"groups": [
        {"name": "vllm-slo-records", "interval": interval, "rules": recording_rules()},
        {"name": "vllm-slo-alerts", "interval": interval, "rules": alerts(ttft_p99_ms, itl_p99_ms)},
    ]}


# ---------------------------------------------------------------------------------------------
# Triggers


def server_selector(namespace: str, server: str) -> str:
    return f'job="{VLLM_JOB}",namespace="{namespace}",server="{server}"'


def trigger_queries(namespace: str, server: str) -> dict[str, str]:
    """{trigger name: PromQL} for one server's ScaledObject (each returns one element)."""
    sel = server_selector(namespace, server)
    return {
        "running": f"sum(avg_over_time({RUNNING}{{{sel}}}[{TRIGGER_WINDOW}]))",
        "waiting": f"sum(avg_over_time({WAITING}{{{sel}}}[{TRIGGER_WINDOW}]))",
        "kv-cache": f"avg(avg_over_time({KV_USAGE}{{{sel}}}[{TRIGGER_WINDOW}]))",
    }


# ---------------------------------------------------------------------------------------------
# Dashboard


PANELS: tuple[tuple[str, str, str, str], ...] = (
    # (title, unit, PromQL, what the bench reads it as)
    ("TTFT p99 (5 min) against the SLO", "s", TTFT_P99, "TTFT p99"),
    ("ITL p99 (5 min) against the SLO", "s", ITL_P99, "ITL p99"),
    ("Running requests per replica", "short",
     f'{RUNNING_SUM} / on({BY}) count by ({BY}) (up{{job="{VLLM_JOB}"}} == 1)', "requests_running"),
    ("Waiting requests", "short", WAITING_SUM, "requests_waiting"),
    ("KV-cache usage", "percentunit", KV_AVG, "kv_cache_usage"),
    ("Output tokens/s", "short", GENERATION_RATE, "generation_tokens"),
    ("Prompt tokens/s", "short", PROMPT_RATE, "prompt_tokens"),
    ("Prefix-cache hit rate", "percentunit",
     f'sum by ({BY}) (rate({PREFIX_HITS}{{job="{VLLM_JOB}"}}[{WINDOW}])) / '
     f'sum by ({BY}) (rate({PREFIX_QUERIES}{{job="{VLLM_JOB}"}}[{WINDOW}]))', "prefix_cache_hit_pct"),
    ("Preemptions/s", "short", f'sum by ({BY}) (rate({PREEMPTIONS}{{job="{VLLM_JOB}"}}[{WINDOW}]))',
     "preemptions"),
    ("Requests finished/s", "reqps", f'sum by ({BY}) (rate({SUCCESS}{{job="{VLLM_JOB}"}}[{WINDOW}]))',
     "requests_succeeded"),
    ("Queue time p99 (5 min)", "s", _p99(QUEUE_BUCKET), "queue time"),
    ("Replicas scraped", "short", f'count by ({BY}) (up{{job="{VLLM_JOB}"}} == 1)', "replicas"),
    ("GPU utilisation (never a scaling signal)", "percent", f'{GPU_UTIL}{{job="{DCGM_JOB}"}}', "gpu util"),
    ("GPU memory used", "decmbytes", f'{GPU_FB_USED}{{job="{DCGM_JOB}"}}', "gpu fb_used_mib"),
    ("GPU power", "watt", f'{GPU_POWER}{{job="{DCGM_JOB}"}}', "gpu power_w"),
)


def dashboard(ttft_p99_ms: float, itl_p99_ms: float) -> dict[str, Any]:
    """Grafana dashboard JSON of the metrics the bench reads, with the SLO drawn on the latency panels."""
    thresholds = {TTFT_P99: ttft_p99_ms / 1000, ITL_P99: itl_p99_ms / 1000}
    panels = []
    for index, (title, unit, expr, _) in enumerate(PANELS):
        defaults: dict[str, Any] = {"unit": unit}
        if expr in thresholds:
            defaults["thresholds"] = {"mode": "absolute", "steps": [
                {"color": "green", "value": None}, {"color": "red", "value": thresholds[expr]}]}
            defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
        panels.append({
            "id": index + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": "{{server}}"}],
        })
    return {
        "uid": "vllm-poc-fleet", "title": "vllm-poc fleet: SLO and capacity", "schemaVersion": 39,
        "tags": ["vllm-poc", "vllm"], "timezone": "utc", "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


def metric_names(expr: str) -> set[str]:
    """The metric families a query reads (vLLM's without their stored suffixes, and DCGM's)."""
    out = set()
    for name in _NAME.findall(expr):
        for suffix in SUFFIXES:
            if name.startswith("vllm:") and name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        out.add(name)
    return out
