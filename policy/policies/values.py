"""Unknown values and plain data: what every rule reads resource properties through.

During `pulumi preview` a value computed from another resource's output is unknown; the engine's
property proxy raises on reading one. `plain()` turns engine props into dicts, lists and the `UNKNOWN`
marker, and `get`/`as_list` walk them without tripping over either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)


class _Unknown:
    """A value the engine does not know yet (preview); never equal to anything but itself."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        return False


UNKNOWN: Any = _Unknown()

_UNKNOWN_SENTINELS = frozenset({
    UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
})


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN


def plain(value: Any) -> Any:
    """Engine props (proxies that raise on unknown values) -> dicts, lists and UNKNOWN markers."""
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in list(value):
            try:
                out[key] = plain(value[key])
            except UnknownValueError:
                out[key] = UNKNOWN
        return out
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items: list[Any] = []
        for index in range(len(value)):
            try:
                items.append(plain(value[index]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return value


def get(data: Any, *path: str) -> Any:
    """Walk nested dicts; None where a key is missing, UNKNOWN where a step is unknown."""
    for key in path:
        if is_unknown(data):
            return UNKNOWN
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def as_list(value: Any) -> list[Any] | Any:
    """A list field: [] when absent, UNKNOWN when unknown, a one-item list for a scalar."""
    if value is None:
        return []
    if is_unknown(value):
        return UNKNOWN
    if isinstance(value, list):
        return value
    return [value]
