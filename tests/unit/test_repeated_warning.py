"""Repeated warnings: one summary line per interval, every occurrence counted (O4, Q2)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams.logging import RepeatedWarning


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _field(record: logging.LogRecord, name: str) -> Any:
    """An ``extra`` field of a record (set as an attribute by logging)."""
    return record.__dict__[name]


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("invalid event")]


def test_O4_eleven_thousand_warnings_in_25s_are_at_most_four_lines_and_all_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Q2, O4: 11,000 invalid events over 25 s: one line at once, then one per 10 s, counted."""
    caplog.set_level(logging.WARNING)
    clock = Clock()
    warn = RepeatedWarning(
        logging.getLogger("test.router"), "invalid event dead-lettered", count_by="reason",
        clock=clock,
    )  # fmt: skip
    for n in range(11_000):
        clock.now = n * 25.0 / 11_000
        warn(reason="invalid_event" if n % 2 else "bad_avro", error=f"event {n}")
        warn.flush()
    clock.now = 40.0
    warn.flush()
    lines = _lines(caplog)
    assert 2 <= len(lines) <= 4
    counted = 1 + sum(getattr(r, "repeated", 0) for r in lines[1:])
    assert counted == 11_000 == warn.total
    by_reason: dict[str, int] = {}
    for line in lines[1:]:
        for reason, count in _field(line, "reason_counts").items():
            by_reason[reason] = by_reason.get(reason, 0) + count
    assert by_reason == {"invalid_event": 5_500, "bad_avro": 5_499}
    assert "times in the last 10s" in lines[-1].getMessage()


def test_O4_a_single_warning_is_logged_at_once_with_its_details(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    clock = Clock()
    warn = RepeatedWarning(logging.getLogger("test.router"), "invalid event", clock=clock)
    warn(reason="bad_avro", error="boom")
    [line] = _lines(caplog)
    assert line.getMessage() == "invalid event" and _field(line, "reason") == "bad_avro"
    clock.now = 100.0
    warn.flush()
    assert len(_lines(caplog)) == 1  # nothing was held back
    warn(reason="bad_json", error="again")  # after a quiet interval: at once again
    assert len(_lines(caplog)) == 2


def test_O4_force_flush_writes_what_is_pending(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    clock = Clock()
    warn = RepeatedWarning(logging.getLogger("test.router"), "invalid event", clock=clock)
    for _ in range(5):
        warn(reason="x")
    warn.flush()
    assert len(_lines(caplog)) == 1
    warn.flush(force=True)
    lines = _lines(caplog)
    assert len(lines) == 2 and _field(lines[1], "repeated") == 4
