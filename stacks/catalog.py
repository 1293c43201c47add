"""Facts about the EC2 instance types and EKS versions the stack accepts.

Figures come from Karpenter v1.14's generated instance-type table (vCPU, memory, GPUs, GPU memory,
local NVMe, baseline network Gbps); burst network Gbps from AWS's EC2 specifications (bench/netlimits.py
holds the same two network columns, with their source, for the bench, which cannot import this
package's Pulumi-side modules); prices are the PoC's Seoul figures where it gives them (its verdict
priced L40S at $2.76/hr, g7e at $4.13/hr on demand and $1.50/hr on Spot) and
otherwise left unset. `python -m stacks preflight` shows the live Spot and on-demand prices. Preflight asks AWS for the live
offerings, quotas and Spot prices; this table only lets bad config fail before anything is declared.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_name: str  # karpenter.k8s.aws/instance-gpu-name
    gpu_memory_gib: int  # per GPU
    nvme_gb: int  # total local instance store, decimal GB; 0 = none
    network_gbps: float  # baseline
    network_burst_gbps: float  # "up to" figure; equals the baseline where AWS states no burst
    on_demand_usd_hour: float | None = None  # ap-northeast-2, where the PoC measured it
    spot_usd_hour: float | None = None  # the price the PoC's Spot verdict used

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def has_instance_store(self) -> bool:
        return self.nvme_gb > 0


_L40S = ("l40s", 44)  # 45,776 MiB reported per GPU
_RTX6000 = ("rtx-pro-server-6000", 96)  # 98,304 MiB

GPU_INSTANCE_TYPES: dict[str, InstanceType] = {
    it.name: it
    for it in [
        InstanceType("g6e.xlarge", 4, 32, 1, *_L40S, nvme_gb=250, network_gbps=2.5, network_burst_gbps=20),
        InstanceType("g6e.2xlarge", 8, 64, 1, *_L40S, nvme_gb=450, network_gbps=5, network_burst_gbps=20,
                     on_demand_usd_hour=2.76),
        InstanceType("g6e.4xlarge", 16, 128, 1, *_L40S, nvme_gb=600, network_gbps=20, network_burst_gbps=20),
        InstanceType("g6e.8xlarge", 32, 256, 1, *_L40S, nvme_gb=900, network_gbps=25, network_burst_gbps=25),
        InstanceType("g6e.16xlarge", 64, 512, 1, *_L40S, nvme_gb=1900, network_gbps=35, network_burst_gbps=35),
        InstanceType("g6e.12xlarge", 48, 384, 4, *_L40S, nvme_gb=3800, network_gbps=100, network_burst_gbps=100),
        InstanceType("g6e.24xlarge", 96, 768, 4, *_L40S, nvme_gb=3800, network_gbps=200, network_burst_gbps=200),
        InstanceType("g6e.48xlarge", 192, 1536, 8, *_L40S, nvme_gb=7600, network_gbps=400, network_burst_gbps=400),
        InstanceType("g7e.2xlarge", 8, 64, 1, *_RTX6000, nvme_gb=1900, network_gbps=50, network_burst_gbps=50,
                     on_demand_usd_hour=4.13, spot_usd_hour=1.50),
        InstanceType("g7e.4xlarge", 16, 128, 1, *_RTX6000, nvme_gb=1900, network_gbps=50, network_burst_gbps=50),
        InstanceType("g7e.8xlarge", 32, 256, 1, *_RTX6000, nvme_gb=1900, network_gbps=100, network_burst_gbps=100),
        InstanceType("g7e.12xlarge", 48, 512, 2, *_RTX6000, nvme_gb=3800, network_gbps=400, network_burst_gbps=400),
        InstanceType("g7e.24xlarge", 96, 1024, 4, *_RTX6000, nvme_gb=7600, network_gbps=800, network_burst_gbps=800),
        InstanceType("g7e.48xlarge", 192, 2048, 8, *_RTX6000, nvme_gb=15200, network_gbps=1600,
                     network_burst_gbps=1600),
    ]
}

# General-purpose types for the system node group (Karpenter controller, CoreDNS, add-ons).
SYSTEM_INSTANCE_FAMILIES = ("m5", "m6i", "m6a", "m7i", "m7a", "c6i", "c7i", "t3")
SYSTEM_INSTANCE_SIZES = ("medium", "large", "xlarge", "2xlarge", "4xlarge")
# vCPUs by size, the same in every system family (what the standard on-demand vCPU quota counts).
SYSTEM_SIZE_VCPUS = {"medium": 2, "large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16}

# Kubernetes minor versions a new EKS cluster can be created with, late 2026: 1.35 and 1.36 in
# standard support, 1.32-1.34 in extended support (billed extra). 1.31 left extended support on
# 2026-11-26. Karpenter 1.14's compatibility matrix ends at 1.36.
EKS_VERSIONS = ("1.32", "1.33", "1.34", "1.35", "1.36")
EKS_EXTENDED_SUPPORT = ("1.32", "1.33", "1.34")


def gpu_instance(name: str) -> InstanceType:
    """Return the catalog entry, or raise KeyError with a did-you-mean hint."""
    try:
        return GPU_INSTANCE_TYPES[name]
    except KeyError:
        close = difflib.get_close_matches(name, GPU_INSTANCE_TYPES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(
            f"unknown GPU instance type {name!r}.{hint} Known: {', '.join(sorted(GPU_INSTANCE_TYPES))}"
        ) from None


def is_system_instance_type(name: str) -> bool:
    family, _, size = name.partition(".")
    return family in SYSTEM_INSTANCE_FAMILIES and size in SYSTEM_INSTANCE_SIZES


def system_vcpus(name: str) -> int:
    """vCPUs of a system node type (m7i.xlarge: 4)."""
    return SYSTEM_SIZE_VCPUS[name.partition(".")[2]]
