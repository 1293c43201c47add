"""`vllm-poc:bench`: the benchmark Jobs run after `pulumi up` and, under `compare`, the question the
stack's report Job answers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bench.run.grid import DEFAULT_CONCURRENCIES, DEFAULT_SCENARIOS
from bench.common.workloads import WORKLOADS
from stacks.settings.base import SettingsModel


class CompareSettings(SettingsModel):
    """What the stack's report Job answers (components/report_job.py): the verdict, the plan, the compare."""

    candidate: str | None = Field(
        None, description="Bench target whose sweep the verdict is about (e.g. the g7e server); unset with "
        "variants only, then the report covers the baseline alone.")
    baseline: str = Field(
        ..., description="Bench target of the hardware serving today: the report's baseline and the plan's "
        "current fleet.")
    variants: list[str] = Field(
        default_factory=list, description="Bench targets compared side by side (`bench compare`, two or more, "
        "e.g. a server and its variants); each is a plan candidate too.")
    current_replicas: int = Field(12, ge=1, description="Replicas of the baseline serving today (the plan's load).")
    threshold: float = Field(1.5, gt=0, description="Verdict threshold on the per-GPU ratio.")
    verdict_basis: Literal["slo", "peak"] = Field(
        "slo", description="slo: throughput under the SLO; peak: peak throughput. For the verdict and the plan.")
    headroom: float = Field(0.0, ge=0, lt=1, description="Plan: share of capacity kept free.")
    spares: int = Field(0, ge=0, description="Plan: replicas added on top (Spot interruptions, rollouts).")
    mix: dict[str, float] = Field(
        default_factory=dict, description="Plan: shares of requests per scenario ({S1_chat: 0.6, S4_rag: 0.4}); "
        "empty: the fleet is sized for its busiest scenario.")
    mixed_traffic: bool = Field(
        False, description="After the plan, run its mix on the candidate's server, every scenario at once at the "
        "planned per-replica rates (`bench mix-check`, a Job on the candidate's node), and plan again saying "
        "whether the scenarios added up. Needs candidate and mix.")

    @model_validator(mode="after")
    def _names(self) -> CompareSettings:
        if self.candidate is None and len(self.variants) < 2:
            raise ValueError("name a candidate (the sweep the verdict is about), or two or more variants")
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants: each server once; got {self.variants}")
        if self.candidate is not None and self.candidate == self.baseline:
            raise ValueError(f"candidate: {self.candidate} is also the baseline; compare two servers")
        if any(share <= 0 for share in self.mix.values()):
            raise ValueError(f"mix: shares must be positive; got {self.mix}")
        if self.mixed_traffic and (self.candidate is None or not self.mix):
            raise ValueError("mixedTraffic: runs the plan's mix on the candidate's server; set candidate and "
                             "mix ({scenario: share of requests}) too")
        return self

    def servers(self) -> list[str]:
        """Every bench target it reads, each once: candidate, baseline, variants."""
        names = [n for n in (self.candidate, self.baseline, *self.variants) if n]
        return list(dict.fromkeys(names))


class BenchSettings(SettingsModel):
    targets: list[str] = Field(
        default_factory=list,
        description="Servers (servers[].name) to benchmark after `pulumi up`; one Job each.",
    )
    scenarios: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SCENARIOS),
        description="Scenarios to sweep: " + ", ".join(f"{k} {i}/{o}" for k, (i, o) in DEFAULT_SCENARIOS.items())
        + " (input/output tokens, the PoC's four scenarios); also S5_shared_prefix (2048/256, 90% shared "
        "prefix) and K_korean (the Korean marketplace prompt set, outputs <= 256, c=1 and 8).",
    )
    scenario_concurrencies: dict[str, list[int]] = Field(
        default_factory=dict,
        description="A scenario's own concurrencies ({scenario: [c, ...]}), e.g. K_korean: [1, 8, 64]; "
        "default: the scenario's own (K_korean 1 and 8), else concurrencies.",
    )
    concurrencies: list[int] = Field(
        default_factory=lambda: list(DEFAULT_CONCURRENCIES),
        description="Client concurrencies per scenario.",
    )
    window_s: float = Field(
        15.0, ge=5, le=600, description="Seconds every measured run holds its load; each run is sized from a "
        "burst at its load (`bench sweep --window-s`; under 5 s a run measures start-up, not throughput).",
    )
    min_prompts: int = Field(
        100, ge=100, le=20000, description="Fewest requests in a measured run, so that its p99 is not its "
        "slowest request (`bench sweep --min-prompts`).",
    )
    budget_minutes: float = Field(
        60.0, gt=0, le=600, description="GPU minutes each target's sweep may spend, grid and capacity search "
        "together (`bench sweep --budget-minutes`); a full PoC side fits in about an hour.",
    )
    seed: int = Field(0, description="Random dataset seed; the same seed replays the same prompts.")
    capacity_search: bool = Field(
        False, description="After the grid: the SLO capacity search per scenario, to +-10 % where the budget "
        "allows, the open loop where neighbouring concurrencies are too far apart "
        "(`bench sweep --capacity-search`).",
    )
    price_per_hour: dict[str, dict[Literal["on-demand", "spot"], float] | float] = Field(
        default_factory=dict,
        description="USD per hour of each target's instance per capacity type ({server: {spot: X, "
        "on-demand: Y}}); the Job records the price of the capacity type its node has. A plain number "
        "is allowed for a pool with one capacity type. Default: the catalog's prices where known.",
    )
    release_gpus: bool = Field(
        True, description="Give each benchmarked server's GPUs back once the answer is in: a Job scales the "
        "server to 0 when its start-up record, its sweep and the report (and mixed-traffic check) that read it "
        "have ended, and Karpenter removes the empty node; a new sweep scales it up again "
        "(components/release_job.py). false: the servers keep running until teardown.",
    )
    round: int = Field(
        1, description="The measurement round. Raise it by one and `pulumi up` to sweep every target again from a "
        "fresh server (a new pod, likely a new node) under a new results prefix; earlier rounds stay as they are. "
        "The report pools every round of the same configuration (`bench report --repeat`). Each round costs "
        "another sweep's GPU time.",
    )
    compare: CompareSettings | None = Field(
        None, description="The stack's question: a report Job, created by the same `pulumi up`, waits for these "
        "targets' sweeps in S3, then writes the report, the replica plan and (with variants) the compare under "
        "runs/<stack>/report/<hash>/ (stack output `report`). Off when unset.",
    )

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, v: list[str]) -> list[str]:
        unknown = [name for name in v if name not in WORKLOADS]
        if unknown or not v or len(set(v)) != len(v):
            raise ValueError(
                f"scenarios must be distinct names from {', '.join(WORKLOADS)}; got {v}"
            )
        return v

    @field_validator("round", mode="before")
    @classmethod
    def _round(cls, v: object) -> object:
        # bool is an int to Python, and pydantic would take 2.0 or "2"; a round is a whole count from 1.
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"the measurement round is a whole number from 1 (the first sweep); got {v}. Raise it "
                             "by one for another sweep from a fresh server: pulumi config set --path "
                             "'vllm-poc:bench.round' 2")
        return v

    @model_validator(mode="after")
    def _scenario_concurrencies(self) -> BenchSettings:
        for name, values in self.scenario_concurrencies.items():
            if name not in self.scenarios:
                raise ValueError(f"scenarioConcurrencies.{name}: not among bench.scenarios ({', '.join(self.scenarios)})")
            if not values or any(c < 1 for c in values) or len(set(values)) != len(values):
                raise ValueError(f"scenarioConcurrencies.{name}: need distinct positive integers; got {values}")
        return self

    def concurrencies_of(self, scenario: str) -> list[int]:
        own = WORKLOADS[scenario].concurrencies
        return sorted(self.scenario_concurrencies.get(scenario) or (own and list(own)) or self.concurrencies)

    @field_validator("concurrencies")
    @classmethod
    def _concurrencies(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v) or len(set(v)) != len(v):
            raise ValueError(f"concurrencies must be distinct positive integers; got {v}")
        return sorted(v)

    @property
    def max_concurrency(self) -> int:
        return max(c for name in self.scenarios for c in self.concurrencies_of(name))

    @property
    def max_request_tokens(self) -> int:
        return max(WORKLOADS[name].max_request_tokens() for name in self.scenarios)


def compare_problems(bench: BenchSettings) -> list[str]:
    """bench.compare names bench targets (their sweeps are what it reads) and their scenarios."""
    compare = bench.compare
    if compare is None:
        return []
    problems = []
    targets = ", ".join(bench.targets) or "(none: set bench.targets)"
    named = [("candidate", compare.candidate), ("baseline", compare.baseline)]
    named += [(f"variants[{i}]", v) for i, v in enumerate(compare.variants)]
    for key, name in named:
        if name is not None and name not in bench.targets:
            problems.append(f"bench.compare.{key}: {name!r} is not a bench target, so it has no sweep to report on; "
                            f"use one of {targets}")
    for scenario in compare.mix:
        if scenario not in bench.scenarios:
            problems.append(f"bench.compare.mix.{scenario}: not among bench.scenarios ({', '.join(bench.scenarios)})")
    return problems
