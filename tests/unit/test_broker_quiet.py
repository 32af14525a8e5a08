"""A broker away is said once, reminded rarely, and the libraries' lines are throttled (O4, X4)."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest

from streams.adapters.broker_watch import BrokerWatch
from streams.logging import LibraryThrottle, configure_logging
from streams.settings import load_settings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watch(clock: Clock) -> BrokerWatch:
    return BrokerWatch(load_settings(), remind_s=30.0, probe=lambda: True, clock=clock)


def test_O4_the_loss_is_logged_once_then_a_reminder_every_30s_then_the_return(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streams.adapters.broker_watch")
    clock = Clock()
    watch = _watch(clock)
    watch.observe(True)
    assert watch.up and caplog.records == []
    for second in range(0, 95, 2):  # a probe every 2 s for 95 s, all failing
        clock.now = 100.0 + second
        watch.observe(False)
    assert not watch.up
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("kafka broker unreachable")
    assert messages[1:] == ["kafka broker still unreachable"] * 3  # at 30, 60 and 90 s
    clock.now = 200.0
    watch.observe(True)
    assert watch.up
    back = caplog.records[-1]
    assert back.getMessage() == "kafka broker reachable again" and back.__dict__["down_s"] == 100


def _record(name: str, msg: str, *args: Any) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_O4_library_warnings_pass_once_per_interval_per_library_with_a_count() -> None:
    clock = Clock()
    throttle = LibraryThrottle(every_s=10.0, clock=clock)
    passed = []
    for n in range(2000):  # aiokafka's reconnect loop, in two wordings: 2000 lines in 20 s
        clock.now = n / 100
        msg = "Unable connect to node with id %s: %s" if n % 2 else "Unable to update metadata"
        record = _record("aiokafka.conn", msg, 1, "refused")
        if throttle.filter(record):
            passed.append(record)
    assert len(passed) == 2
    assert passed[1].__dict__["suppressed"] == 999
    # another library has its own interval; INFO lines and hookstream's own lines pass
    assert throttle.filter(_record("librdkafka", "%s [%s] %s", "FAIL", "c", "refused"))
    info = _record("aiokafka.consumer.group_coordinator", "Joined group %s", "g")
    info.levelno = logging.INFO
    assert throttle.filter(info)
    assert all(throttle.filter(_record("streams.lanes.router", "routed %s", n)) for n in range(50))


def test_O4_librdkafka_lines_go_through_the_json_handler_throttled() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO", stream=out)
        log = logging.getLogger("librdkafka")
        for _ in range(200):
            log.error("%s [%s] %s", "FAIL", "consumer-1", "Connect to ipv4#127.0.0.1:1 failed")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and '"logger":"librdkafka"' in lines[0]
