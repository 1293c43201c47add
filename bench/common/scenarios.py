"""The benchmark scenarios as data: one entry per scenario, read by the sweep, the report and the stack.

A scenario names its token lengths, the `vllm bench serve` dataset it draws prompts from, and
whether its prompts share a prefix on purpose. The prefix-cache check (`bench.run.telemetry`) flags a
run of a random-dataset scenario whose prompts were served from the prefix cache, because random
prompts share nothing unless a run replayed earlier prompts; a scenario built to share prefixes
is exempt by its own definition, not by its name.

Adding a scenario is adding an entry to `SCENARIOS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bench.common import workloads as W


@dataclass(frozen=True)
class ScenarioDef:
    input_len: int
    output_len: int
    dataset: str = "random"  # the `vllm bench serve --dataset-name`
    shared_prefix: bool = False  # prompts share a prefix by design: prefix-cache hits are expected
    source: str = ""  # where the lengths come from

    @property
    def prefix_cache_check(self) -> bool:
        """Whether a prefix-cache hit rate above the limit makes a run suspect."""
        return self.dataset == "random" and not self.shared_prefix

    def describe(self) -> dict:
        return {**asdict(self), "prefix_cache_check": self.prefix_cache_check}


# Every scenario is defined once, with its dataset flags, in bench/common/workloads.py: the PoC's four
# and, run when named, S5_shared_prefix (shared by design) and K_korean (real text).
SCENARIOS: dict[str, ScenarioDef] = {
    name: ScenarioDef(w.input_len, w.output_len, dataset=w.dataset, shared_prefix=w.prefix_hits_expected,
                      source=w.summary)
    for name, w in W.WORKLOADS.items()
}
DEFAULT_SCENARIO_NAMES: tuple[str, ...] = tuple(W.DEFAULT_WORKLOADS)


def lengths(names: tuple[str, ...] = DEFAULT_SCENARIO_NAMES) -> dict[str, tuple[int, int]]:
    """{name: (input tokens, output tokens)} of the default scenarios (or the ones named)."""
    return {name: (SCENARIOS[name].input_len, SCENARIOS[name].output_len) for name in names}


def definition(name: str) -> ScenarioDef | None:
    return SCENARIOS.get(name)


def prefix_cache_checked(name: str, recorded: dict | None = None) -> bool:
    """Whether a scenario's runs are held to the prefix-cache limit.

    `recorded` is the scenario entry of a sweep manifest (what the sweep ran, which wins over
    today's table); a scenario unknown to both is checked (random prompts are the default).
    """
    if recorded and "prefix_cache_check" in recorded:
        return bool(recorded["prefix_cache_check"])
    known = SCENARIOS.get(name)
    return known.prefix_cache_check if known else True
