"""`vllm-poc:storage` (the weights and results buckets) and `vllm-poc:weights` (how model weights reach
the weights bucket)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from stacks.settings.base import SettingsModel


class StorageSettings(SettingsModel):
    teardown: Literal["destroy", "retain-weights"] = Field(
        "destroy",
        description="destroy: `pulumi destroy` empties and deletes both buckets (PoC default); "
        "retain-weights: `pulumi destroy` leaves the weights bucket and its contents in place.",
    )
    kms_key_arn: str | None = Field(
        None, description="Encrypt both buckets with this KMS key instead of SSE-S3."
    )

    @field_validator("kms_key_arn")
    @classmethod
    def _kms(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/.+", v):
            raise ValueError(f"{v!r} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>)")
        return v


class WeightSettings(SettingsModel):
    source: Literal["hub", "stage-weights"] = Field(
        "hub",
        description="hub: a Job per model copies the pinned revision from the Hugging Face Hub to S3 on the "
        "system nodes before its servers start; stage-weights: you upload from a laptop with "
        "`python -m stacks stage-weights`, and a Job only checks the model is there (for accounts without "
        "Hub access).",
    )
    revisions: dict[str, str] = Field(
        default_factory=dict,
        description="Hub revision of each model the servers load ({hf id: commit SHA}); required with "
        "source hub. A branch name is accepted but resolved at each sync; pin the commit.",
    )
    scratch_gib: int = Field(
        20, ge=5, le=400,
        description="Scratch disk of a sync Job on a system node: it holds one file at a time, so it must "
        "exceed the largest shard; below systemNodes.diskSizeGib minus 20.",
    )
    sync_timeout_minutes: int = Field(
        60, ge=10, le=1440,
        description="Deadline of one sync Job; `pulumi up` waits for it (10 min longer), on the longest chain of a "
        "first `up`, which the deploy role's 3 h session must cover (stacks/ops/time_budget.py). 60 min moves a "
        "58 GB BF16 checkpoint at 20 MB/s; raise it only with the session and the workflow's timeout.",
    )

    @field_validator("revisions")
    @classmethod
    def _revisions(cls, v: dict[str, str]) -> dict[str, str]:
        for model, rev in v.items():
            if not re.fullmatch(r"[\w.-]+/[\w.-]+", model) or not re.fullmatch(r"[\w./-]{1,100}", rev):
                raise ValueError(f"{model!r}: {rev!r} is not a Hugging Face repo id and revision")
        return v


def is_commit(revision: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}", revision) is not None
