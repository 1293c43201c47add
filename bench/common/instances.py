"""The GPU instance types the project runs on: one table that the Pulumi program and the bench read.

The program (stacks/catalog.py) checks a pool's instance type against it and takes its GPUs, GPU
memory, local NVMe and prices from it; the bench holds weight-load rates against its network
columns (bench/startup/netlimits.py) and falls back on its prices in the plan
(bench/analysis/plan.py). It is plain Python, so the bench's Jobs carry it with their code.

Figures come from Karpenter v1.14's generated instance-type table (vCPU, memory, GPUs, GPU memory,
local NVMe, baseline network Gbps); burst network Gbps from AWS's EC2 specifications (see
`NETWORK_SOURCE`); prices are the PoC's Seoul figures where it gives them (its verdict priced L40S
at $2.76/hr, g7e at $4.13/hr on demand and $1.50/hr on Spot) and otherwise left unset.
"""

from __future__ import annotations

from dataclasses import dataclass

NETWORK_SOURCE = (
    "baseline: Karpenter v1.14 generated instance-types table (karpenter.k8s.aws/instance-network-bandwidth, "
    "from EC2 DescribeInstanceTypes); burst: AWS EC2 accelerated-computing specifications, which list the "
    "smaller g6e sizes as 'up to 20 Gbps' (other sizes have no burst above their baseline)"
)


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
