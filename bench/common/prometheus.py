"""The Prometheus text format (a vLLM server's /metrics, the GPU exporter's), read with
prometheus_client's parser, which the vLLM image ships.

The sweep's telemetry samples /metrics around each run (bench/run/telemetry.py), and
bench/analysis/spec.py reads the spec-decode counters of two /metrics texts.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def parse(text: str) -> Samples:
    """Prometheus text exposition -> {sample name: [(labels, value), ...]} (counters keep `_total`,
    histograms their `_bucket`/`_sum`/`_count`), read by prometheus_client's parser, which the vLLM
    image ships. A line it cannot read (a truncated scrape) costs that line, not the whole read."""
    try:
        return _samples(text)
    except ValueError:
        out: Samples = {}
        for line in text.splitlines():
            try:
                found = _samples(line + "\n")
            except ValueError:
                continue
            for name, points in found.items():
                out.setdefault(name, []).extend(points)
        return out
