"""Records as JSON-able values, for every JSON answer hookstream gives (API and CLI)."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

import msgspec


def plain(value: Any) -> Any:
    """Dataclasses and Structs to objects, enums to their values, bytes to text, tuples to
    lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
