"""What preflight finds, as plain data (pools, quotas, findings) and as the table a person reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from stacks import catalog
from stacks.ops.credentials import HOW_TO_PROVIDE, INCOMPLETE, NotRun


@dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    capacity_types: tuple[str, ...]
    gpu_limit: int
    server_gpus: int = 0  # GPUs the stack's servers on this pool run: TP x replicas, summed


@dataclass(frozen=True)
class SystemNodes:
    instance_types: tuple[str, ...]
    desired_size: int
    max_size: int

    @property
    def vcpus_per_node(self) -> int:
        # The node group may launch any listed type: count the largest.
        return max(catalog.system_vcpus(t) for t in self.instance_types)

    @property
    def describe(self) -> str:
        return f"the system node group ({self.desired_size} x {'/'.join(self.instance_types)})"


@dataclass
class Finding:
    level: str  # "blocker" | "warning" | "note"
    subject: str
    message: str
    fix: str | None = None


@dataclass
class PoolReport:
    name: str
    instance_type: str
    capacity_types: list[str]
    gpu_limit: int
    gpus_per_instance: int
    vcpus_per_instance: int
    max_instances: int
    max_vcpus: int
    offered_azs: list[str]
    subnet_azs: list[str] | None  # None: the stack's subnets are not known yet (new VPC)
    usable_azs: list[str]
    on_demand_usd_hour: float | None
    on_demand_source: str  # "price-list-api" | "catalog" | "unavailable"
    spot_usd_hour: dict[str, float] = field(default_factory=dict)  # latest per AZ
    server_gpus: int = 0
    server_instances: int = 0
    server_vcpus: int = 0

    @property
    def quota_capacity(self) -> str:
        """The quota the pool's servers count against: on-demand where allowed, else Spot."""
        return "on-demand" if "on-demand" in self.capacity_types else "spot"

    @property
    def spot_min(self) -> float | None:
        return min(self.spot_usd_hour.values()) if self.spot_usd_hour else None

    @property
    def cost_at_limit_usd_hour(self) -> float | None:
        """The pool at its GPU limit, on-demand where allowed (the dearer case), else Spot."""
        price = self.on_demand_usd_hour if "on-demand" in self.capacity_types else self.spot_min
        return None if price is None else round(price * self.max_instances, 4)


@dataclass
class QuotaReport:
    capacity_type: str
    code: str
    name: str
    required_vcpus: int  # what the servers run
    applied_vcpus: float | None
    in_use_vcpus: int | None
    pools: list[str]  # pools with servers counting against this quota
    error: str | None = None
    headroom_vcpus: int = 0  # every pool that can use this capacity type, at its GPU limit
    headroom_pools: list[str] = field(default_factory=list)
    required_for: str = ""  # who needs required_vcpus, in words
    headroom_for: str = ""  # who could take headroom_vcpus, in words

    @property
    def status(self) -> str:
        if self.applied_vcpus is None:
            return "unknown"
        if self.applied_vcpus < self.required_vcpus:
            return "TOO LOW"
        return "OK" if self.applied_vcpus >= self.headroom_vcpus else "OK (no headroom)"


@dataclass
class PreflightReport:
    region: str
    cluster: str
    pools: list[PoolReport]
    quotas: list[QuotaReport]
    findings: list[Finding]
    # The AWS checks that could not run, and why (no credentials): the report is incomplete.
    not_run: list[NotRun] = field(default_factory=list)
    credentials: str | None = None

    @property
    def blockers(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "blocker"]

    @property
    def exit_code(self) -> int:
        """1: a blocker; else 3 (credentials.INCOMPLETE): checks that need AWS did not run; else 0."""
        return 1 if self.blockers else INCOMPLETE if self.not_run else 0

    @property
    def result(self) -> str:
        return "blocked" if self.blockers else "incomplete" if self.not_run else "ok"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ok"] = not self.blockers and not self.not_run
        data["complete"] = not self.not_run
        data["result"] = self.result
        data["exit_code"] = self.exit_code
        if self.not_run:
            data["how_to_provide_credentials"] = HOW_TO_PROVIDE
        for pool, raw in zip(self.pools, data["pools"]):
            raw["spot_min_usd_hour"] = pool.spot_min
            raw["cost_at_limit_usd_hour"] = pool.cost_at_limit_usd_hour
        return data


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _usd(v: float | None, suffix: str = "") -> str:
    return "-" if v is None else f"${v:,.4f}{suffix}" if v < 1 else f"${v:,.2f}{suffix}"


def _short_azs(azs: list[str] | None, region: str) -> str:
    if azs is None:
        return "(unknown)"
    return ",".join(az[len(region):] if az.startswith(region) else az for az in azs) or "none"


def format_report(r: PreflightReport) -> str:
    out = [f"preflight {r.cluster} in {r.region}", ""]
    if r.pools:
        out += _pools_table(r)
    elif r.not_run:
        out.append("pools, quotas and prices: not read (no AWS credentials)")
    for level, title in (("blocker", "BLOCKERS"), ("warning", "warnings"), ("note", "notes")):
        items = [f for f in r.findings if f.level == level]
        if items:
            out += ["", f"{title}:"]
            for f in items:
                out.append(f"  [{f.subject}] {f.message}")
                if f.fix:
                    out.append(f"      fix: {f.fix}")
    if r.not_run:
        out += ["", f"NOT RUN, {r.credentials}:"]
        for check in r.not_run:
            out.append(f"  [{check.check}] {check.answers}")
            out.append(f"      reads: {check.reads}")
        out.append(f"  to run them: {HOW_TO_PROVIDE}")
    warnings = sum(f.level == "warning" for f in r.findings)
    counts = f"{len(r.blockers)} blocker(s), {warnings} warning(s)"
    if r.not_run:
        out += ["", f"RESULT: INCOMPLETE - {counts} from the checks that need no AWS account; {len(r.not_run)} "
                f"AWS check(s) not run (exit {r.exit_code})"]
    else:
        out += ["", f"RESULT: {counts}" + ("" if r.blockers else " - no blockers found")]
    return "\n".join(out)


def _pools_table(r: PreflightReport) -> list[str]:
    out, rows = [], []
    for p in r.pools:
        od = _usd(p.on_demand_usd_hour) + ("*" if p.on_demand_source == "catalog" else "")
        spot = _usd(p.spot_min)
        save = (f"{(1 - p.spot_min / p.on_demand_usd_hour) * 100:.0f}%"
                if p.spot_min is not None and p.on_demand_usd_hour else "-")
        rows.append([
            p.name, p.instance_type, "+".join(p.capacity_types), str(p.gpu_limit),
            f"{p.max_instances} x {p.vcpus_per_instance}", _short_azs(p.offered_azs, r.region),
            _short_azs(p.subnet_azs, r.region), _short_azs(p.usable_azs, r.region), od, spot, save,
            _usd(p.cost_at_limit_usd_hour, "/h"),
        ])
    out.append(_table(
        ["pool", "instance", "capacity", "gpus", "nodes x vCPU", "offered AZs", "subnet AZs", "usable",
         "on-demand/h", "spot/h (min)", "spot saves", "at limit"],
        rows,
    ))
    if any(p.on_demand_source == "catalog" for p in r.pools):
        out.append("* catalog price (PoC figure), the Price List API was not reachable")
    if r.quotas:
        out.append("")
        out.append(_table(
            ["quota", "name", "applied vCPU", "in use", "required", "at limits", "for", "status"],
            [[q.code, q.name, "?" if q.applied_vcpus is None else f"{q.applied_vcpus:g}",
              "-" if q.in_use_vcpus is None else str(q.in_use_vcpus), str(q.required_vcpus), str(q.headroom_vcpus),
              ",".join(q.headroom_pools), q.status]
             for q in r.quotas],
        ))
    return out
