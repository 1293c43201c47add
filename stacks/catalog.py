"""Facts about the EC2 instance types and EKS versions the stack accepts.

The GPU instance types (vCPU, memory, GPUs, GPU memory, local NVMe, network, prices) are the
bench's table, bench/common/instances.py, which the bench's Jobs read too; this module adds the
system node types and the EKS versions, and the lookups the settings use. `python -m stacks
preflight` shows the live Spot and on-demand prices. Preflight asks AWS for the live offerings,
quotas and Spot prices; these tables only let bad config fail before anything is declared.
"""

from __future__ import annotations

import difflib

from bench.common.instances import GPU_INSTANCE_TYPES, InstanceType

__all__ = ["EKS_EXTENDED_SUPPORT", "EKS_VERSIONS", "GPU_INSTANCE_TYPES", "InstanceType", "SYSTEM_INSTANCE_FAMILIES",
           "SYSTEM_INSTANCE_SIZES", "SYSTEM_MEMORY_GIB_PER_VCPU", "SYSTEM_SIZE_VCPUS", "gpu_instance",
           "is_system_instance_type", "system_memory_gib", "system_vcpus"]

# General-purpose types for the system node group (Karpenter controller, CoreDNS, add-ons).
SYSTEM_INSTANCE_FAMILIES = ("m5", "m6i", "m6a", "m7i", "m7a", "c6i", "c7i", "t3")
SYSTEM_INSTANCE_SIZES = ("medium", "large", "xlarge", "2xlarge", "4xlarge")
# vCPUs by size, the same in every system family (what the standard on-demand vCPU quota counts).
SYSTEM_SIZE_VCPUS = {"medium": 2, "large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16}
# Memory (GiB) per vCPU by family class: general purpose (m) 4, compute (c) 2, t3 4 (t3.medium: 4 GiB).
SYSTEM_MEMORY_GIB_PER_VCPU = {"m": 4, "c": 2, "t": 4}

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


def system_memory_gib(name: str) -> int:
    """Memory of a system node type (m7i.xlarge: 16 GiB; a medium has 4, c-family 2)."""
    family, _, size = name.partition(".")
    per_vcpu = SYSTEM_MEMORY_GIB_PER_VCPU[family[0]]
    return per_vcpu * (1 if size == "medium" else SYSTEM_SIZE_VCPUS[size])
