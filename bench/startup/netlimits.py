"""Network limits of the GPU instance types, and weight-load throughput held against them.

The limits are the network columns of the instance table (bench/common/instances.py, which the
Pulumi program reads too): a baseline, and the burst AWS states above it for the smaller sizes.

Units: Gbps is 10^9 bits per second, as AWS states NIC bandwidth. Byte counts come from the Run:ai
streamer's own totals (binary units, e.g. `31.6 GiB`), converted to bytes before anything is divided.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.common.instances import GPU_INSTANCE_TYPES


@dataclass(frozen=True)
class NetworkLimit:
    baseline_gbps: float
    burst_gbps: float


NETWORK: dict[str, NetworkLimit] = {
    name: NetworkLimit(it.network_gbps, it.network_burst_gbps) for name, it in GPU_INSTANCE_TYPES.items()
}

_UNITS = {"b": 1, "bytes": 1, "byte": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*$")


def parse_size(text: str | None) -> int | None:
    """`31.6 GiB` -> bytes (humanize's binary and decimal suffixes); None when unreadable."""
    if not text:
        return None
    match = _SIZE.match(text)
    if not match or match[2].lower() not in _UNITS:
        return None
    return int(round(float(match[1].replace(",", "")) * _UNITS[match[2].lower()]))


def gbps(num_bytes: float | None, seconds: float | None) -> float | None:
    if not num_bytes or not seconds or seconds <= 0:
        return None
    return num_bytes * 8 / 1e9 / seconds


def share_pct(rate_gbps: float | None, limit_gbps: float | None) -> float | None:
    if rate_gbps is None or not limit_gbps:
        return None
    return round(100.0 * rate_gbps / limit_gbps, 1)


def limit(instance_type: str | None) -> NetworkLimit | None:
    return NETWORK.get(instance_type) if instance_type else None


def weight_load(num_bytes: int | None, seconds: float | None, instance_type: str | None) -> dict:
    """The contract's three keys (plus the limits used), null where bytes or instance type are unknown."""
    rate = gbps(num_bytes, seconds)
    lim = limit(instance_type)
    return {
        "weight_load_gbps": round(rate, 2) if rate is not None else None,
        "weight_load_share_of_baseline_pct": share_pct(rate, lim.baseline_gbps if lim else None),
        "weight_load_share_of_burst_pct": share_pct(rate, lim.burst_gbps if lim else None),
        "network_baseline_gbps": lim.baseline_gbps if lim else None,
        "network_burst_gbps": lim.burst_gbps if lim else None,
    }
