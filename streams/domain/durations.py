"""Human durations such as ``500ms``, ``30s``, ``5m``, ``2h`` and ``7d``."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def parse_duration(text: str) -> float:
    """Return the duration in seconds. Raises ValueError naming the bad text."""
    match = _PATTERN.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 500ms, 30s, 5m, 2h or 7d")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value <= 0:
        raise ValueError(f"{text!r} must be positive")
    return value


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` (``60`` -> ``1m``), used in topic names."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    millis = seconds * 1000
    if float(millis).is_integer():
        return f"{int(millis)}ms"
    raise ValueError(f"{seconds} s cannot be spelled in whole milliseconds")
