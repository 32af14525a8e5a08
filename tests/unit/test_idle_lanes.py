"""`lanes.idle.caught_up`: when a backfill or retry-tier partition counts as read to its end,
so `IdleLanes` may leave it out of the dispatcher's fetches (P2) without leaving a record
behind (D1)."""

from __future__ import annotations

import asyncio
import gc
import logging
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaException

from streams.lanes.idle import RENEW_AFTER_S, IdleLanes, caught_up
from streams.settings import load_settings


def test_d1_a_partition_with_records_left_is_not_caught_up() -> None:
    assert caught_up(5, 0, 7) is None
    assert caught_up(OFFSET_INVALID, 0, 7) is None  # nothing read yet, records there


def test_p2_a_partition_read_to_its_high_watermark_is_caught_up_at_it() -> None:
    assert caught_up(7, 0, 7) == 7
    assert caught_up(OFFSET_INVALID, 4, 4) == 4  # nothing read, nothing to read


def test_d1_unknown_watermarks_never_count_as_caught_up() -> None:
    assert caught_up(OFFSET_INVALID, OFFSET_INVALID, OFFSET_INVALID) is None
    assert caught_up(3, -1, -1) is None


class _Admin:
    """An admin client whose ListOffsets fails (as librdkafka's did with a stale leader epoch
    after a rolling broker restart) or answers ``offset``."""

    def __init__(self, offset: int | None, partition_error: str | None = None) -> None:
        self.offset = offset
        self.partition_error = partition_error

    def poll(self, timeout: float) -> int:
        return 0

    def list_offsets(self, asked: dict[Any, Any], request_timeout: float) -> dict[Any, Any]:
        if self.offset is None:
            raise KafkaException("FENCED_LEADER_EPOCH: Leader epoch is older than broker epoch")
        answers = {}
        for part in asked:
            done: Future[Any] = Future()
            if self.partition_error is not None:  # the request went out; every answer failed
                done.set_exception(KafkaException(self.partition_error))
            else:
                done.set_result(SimpleNamespace(offset=self.offset))
            answers[part] = done
        return answers


def test_p2_a_watch_that_keeps_failing_asks_through_a_new_admin_client() -> None:
    """Every failed watch resumes the paused partitions (D1); after `RENEW_AFTER_S` of failures
    the next watch builds a new admin client, and one that answers clears the failures."""
    now = [0.0]
    made: list[_Admin] = []

    def admin() -> _Admin:
        made.append(_Admin(None if len(made) < 2 else 9))
        return made[-1]

    lanes = IdleLanes(load_settings(), ["backfill"], set(), 12, clock=lambda: now[0], admin=admin)

    def watch_at(moment: float) -> None:
        now[0] = moment
        lanes.paused[("backfill", 3)] = 5
        asyncio.run(lanes.watch_once())

    watch_at(0.0)
    assert len(made) == 1 and ("backfill", 3) in lanes._woken
    watch_at(RENEW_AFTER_S - 0.1)
    assert len(made) == 1  # failing, not for long enough
    watch_at(RENEW_AFTER_S)
    assert len(made) == 1  # this failure drops the client...
    watch_at(RENEW_AFTER_S + 0.1)
    assert len(made) == 2  # ...and the next watch builds a new one (still failing here)
    watch_at(2 * RENEW_AFTER_S + 0.2)
    watch_at(2 * RENEW_AFTER_S + 0.3)
    assert len(made) == 3
    lanes._woken.clear()
    watch_at(2 * RENEW_AFTER_S + 0.4)
    assert lanes._failing_since is None
    assert ("backfill", 3) in lanes._woken  # its watermark moved from 5 to 9
    watch_at(100.0)
    assert len(made) == 3  # an answering client is kept


def test_d1_a_watch_failing_ten_times_a_second_logs_a_line_then_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the broker is away every watch (10 a second) fails: one warning, then one line
    per 10 s with how many there were, never a warning per watch."""
    caplog.set_level(logging.WARNING, logger="streams.lanes.idle")
    now = [0.0]
    lanes = IdleLanes(
        load_settings(), ["backfill"], set(), 12, clock=lambda: now[0], admin=lambda: _Admin(None)
    )
    for tick in range(300):  # 30 s of watches
        now[0] = tick * 0.1
        lanes.paused[("backfill", 3)] = 5
        asyncio.run(lanes.watch_once())
        lanes._no_watermarks.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "idle lanes: watermarks unknown, paused partitions resumed"
    assert 3 <= len(lines) <= 4, lines
    assert all("times in the last 10s" in line for line in lines[1:]), lines


def test_d1_every_partition_failing_resumes_them_all_and_leaves_no_error_unretrieved() -> None:
    """After a leader moves, ListOffsets answers every partition with FENCED_LEADER_EPOCH. The
    watch resumes them all, and each answer's error is collected: asyncio logged one ERROR
    ("Future exception was never retrieved") per partition per watch before."""
    unretrieved: list[dict[str, Any]] = []
    lanes = IdleLanes(
        load_settings(),
        ["backfill"],
        set(),
        12,
        admin=lambda: _Admin(5, partition_error="FENCED_LEADER_EPOCH"),
    )

    async def watch() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx))
        for part in range(12):
            lanes.paused[("backfill", part)] = 5
        await lanes.watch_once()
        gc.collect()  # a dropped future reports its unretrieved error when it is collected
        await asyncio.sleep(0)

    asyncio.run(watch())
    assert lanes._woken == {("backfill", part) for part in range(12)}
    assert unretrieved == []
