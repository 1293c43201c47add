"""`vllm-poc:security`: who may reach the servers, and their API key."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from stacks.settings.base import DNS_LABEL, SettingsModel


class SecuritySettings(SettingsModel):
    client_namespaces: list[str] = Field(
        default_factory=lambda: ["vllm"],
        description="Namespaces whose pods may reach the vLLM servers' API port (default: the "
        "servers' own namespace). A server's bench Job always may.",
    )
    dev_endpoint_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose pods may reach a sleep-mode server. Its development endpoints "
        "(/sleep, /wake_up, /reset_prefix_cache, /collective_rpc) share the API port, so a sleep-mode "
        "server is reachable only from these (and its bench Job), not from clientNamespaces.",
    )
    api_key_secret: str | None = Field(
        None,
        description="Name of a Secret in the servers' namespace whose `api-key` entry the servers "
        "require as a bearer token on /v1 (VLLM_API_KEY); the bench Jobs send it (OPENAI_API_KEY). "
        "Create it before `pulumi up`; unset: no key.",
    )

    @field_validator("client_namespaces", "dev_endpoint_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for name in v:
            if not DNS_LABEL.match(name) or len(name) > 63:
                raise ValueError(f"{name!r} is not a namespace name (a lowercase DNS label)")
        return v

    @field_validator("api_key_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (not re.fullmatch(r"[a-z0-9]([-.a-z0-9]*[a-z0-9])?", v) or len(v) > 253):
            raise ValueError(f"{v!r} is not a Secret name (lowercase letters, digits, '-' and '.')")
        return v
