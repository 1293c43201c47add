"""`vllm-poc:fleet.alerts` and `vllm-poc:alertWebhookUrl`: who the fleet's SLO alerts reach.

The stack file names the receiver (`fleet.alerts`: its name, a generic webhook or a Slack incoming
webhook, how often a firing alert repeats); the URL, which carries its own token, is a Pulumi secret
(`pulumi config set --secret vllm-poc:alertWebhookUrl https://...`), refused in plain text. The
shipped fleet stack carries a placeholder URL on the reserved `.invalid` domain: it renders offline,
and preflight and a real `pulumi up` refuse it, as they refuse the placeholder API address.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from stacks.settings.base import DNS_LABEL, SettingsModel

URL_KEY = "alertWebhookUrl"
# RFC 2606 reserves .invalid: no such host can exist, so nothing could ever be sent there.
PLACEHOLDER_URL = "https://alerts.invalid/vllm-poc-fleet"
# What an encrypted value reads as offline (stacks/settings/reading.py): set, but not readable here.
OFFLINE_SECRET = "[secret]"
SET_COMMAND = f"pulumi config set --secret vllm-poc:{URL_KEY} <the receiver's URL> -s <stack>"
_DURATION = re.compile(r"^([0-9]+(s|m|h|d))+$")


class FleetAlerts(SettingsModel):
    receiver: str = Field(description="Name of the receiver the SLO alerts go to (Alertmanager's receiver), e.g. "
                          "ml-oncall; its URL is vllm-poc:alertWebhookUrl, a secret.")
    kind: Literal["webhook", "slack"] = Field(
        "webhook", description="webhook: Alertmanager's JSON POST to the URL (an on-call tool's or a relay's "
        "webhook); slack: a Slack incoming webhook URL.")
    channel: str | None = Field(None, description="slack only: the channel to post in (#name); default: the "
                                "incoming webhook's own channel.")
    repeat_interval: str = Field("4h", description="How often a firing alert is sent again (Alertmanager "
                                 "repeat_interval: 30m, 4h, 1d).")
    send_resolved: bool = Field(True, description="Also say when an alert stops firing.")

    @field_validator("receiver")
    @classmethod
    def _receiver(cls, v: str) -> str:
        if v == "null" or not DNS_LABEL.match(v) or len(v) > 63:
            raise ValueError(f"{v!r}: name the receiver with a lowercase DNS label (a-z, 0-9, '-'), e.g. ml-oncall "
                             "('null' is the receiver that drops alerts)")
        return v

    @field_validator("repeat_interval")
    @classmethod
    def _repeat(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise ValueError(f"{v!r} is not a duration like 30m, 4h or 1d")
        return v

    @model_validator(mode="after")
    def _channel(self) -> FleetAlerts:
        if self.channel is not None and self.kind != "slack":
            raise ValueError("channel applies to kind slack only; remove it, or set kind: slack")
        if self.channel is not None and not re.fullmatch(r"[#@][\w.-]{1,80}", self.channel):
            raise ValueError(f"channel {self.channel!r}: a Slack channel (#name) or user (@name)")
        return self


def url_problem(url: str) -> str | None:
    """What is wrong with a receiver URL (None: an http(s) URL with a host, or the offline secret)."""
    if url == OFFLINE_SECRET:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{URL_KEY}: not an http(s) URL with a host; {SET_COMMAND}"
    return None


def alert_problems(alerts: FleetAlerts | None, fleet_set: bool, url: str | None) -> list[str]:
    """The receiver named and its URL set, or neither (one line per problem, naming the key)."""
    if fleet_set and alerts is None:
        return ["fleet.alerts: the fleet's SLO alerts need a receiver, or they reach no one; name it, e.g. "
                f"alerts: {{receiver: ml-oncall, kind: webhook}}, and set its URL: {SET_COMMAND}"]
    if alerts is not None and url is None:
        return [f"{URL_KEY}: fleet.alerts sends to {alerts.receiver}, which needs its URL: {SET_COMMAND}"]
    if alerts is None and url is not None:
        return [f"{URL_KEY}: set, but no fleet.alerts sends to it; add vllm-poc:fleet.alerts or remove the key"]
    problem = url_problem(url) if url is not None else None
    return [problem] if problem else []


def placeholder_problem(url: str | None, stack: str) -> str | None:
    """The shipped placeholder URL left in place: fine offline, no alert would reach anyone for real."""
    if url != PLACEHOLDER_URL:
        return None
    return (f"vllm-poc:{URL_KEY}: {PLACEHOLDER_URL} is the shipped placeholder, and no SLO alert would reach anyone; "
            f"set the receiver's URL: {SET_COMMAND.replace('<stack>', stack)}")
