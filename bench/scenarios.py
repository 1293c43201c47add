"""The benchmark scenarios as data: one entry per scenario, read by the sweep, the report and the stack.

A scenario names its token lengths, the `vllm bench serve` dataset it draws prompts from, and
whether its prompts share a prefix on purpose. The prefix-cache check (`bench.telemetry`) flags a
run of a random-dataset scenario whose prompts were served from the prefix cache, because random
prompts share nothing unless a run replayed earlier prompts; a scenario built to share prefixes
is exempt by its own definition, not by its name.

Adding a scenario is adding an entry to `SCENARIOS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


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


# Seeds: PoC report Table 2 (input / output tokens per scenario).
SCENARIOS: dict[str, ScenarioDef] = {
    "S1_chat": ScenarioDef(256, 128, source="PoC report table 2"),
    "S2_summary": ScenarioDef(1024, 256, source="PoC report table 2"),
    "S3_moderation": ScenarioDef(512, 16, source="PoC report table 2"),
    "S4_rag": ScenarioDef(4096, 256, source="PoC report table 2"),
}
DEFAULT_SCENARIO_NAMES: tuple[str, ...] = tuple(SCENARIOS)


def lengths() -> dict[str, tuple[int, int]]:
    """{name: (input tokens, output tokens)} of every defined scenario."""
    return {name: (s.input_len, s.output_len) for name, s in SCENARIOS.items()}


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
