"""What every settings model shares: the project's names, the error a bad config raises, the model base.

Every model reads its fields in camelCase (as a user writes them in `Pulumi.<stack>.yaml`), refuses
unknown keys and is frozen once validated.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

PROJECT = "vllm-poc"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_REGION = "ap-northeast-2"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ConfigError(ValueError):
    """Bad stack config. `problems` holds one line per problem, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack config:\n" + "\n".join(f"  - {p}" for p in problems))


class SettingsModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )
