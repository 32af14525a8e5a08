"""D1: the lanes commit in the background, and a late commit never moves an offset back.

The router and the dispatcher commit every 200 ms beside their intake (`CommitInBackground`)
instead of in line with it. What must hold: one commit at a time; a failed commit is logged and
its positions go with the next; and a background commit that waited while a rebalance revoked
a partition, or while the partition's position moved on, does not commit its older position
over the newer one (the revoke's own commit, or the next commit).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from streams.adapters.kafka_clients import CommitInBackground
from streams.adapters.registry import SubscriptionRegistry
from streams.agents.router import Router
from streams.settings import load_settings


class RecordingConsumer:
    """Stands in for the consumer's commit call only: what a lane asked Kafka to commit."""

    def __init__(self) -> None:
        self.commits: list[dict[tuple[str, int], int]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous is False
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})


async def test_d1_one_commit_runs_at_a_time_beside_the_lane() -> None:
    commits = CommitInBackground("test")
    release = asyncio.Event()
    done: list[str] = []

    async def slow_commit() -> None:
        await release.wait()
        done.append("committed")

    commits.start(slow_commit())
    await asyncio.sleep(0)
    assert commits.running  # the lane goes on meanwhile
    second = slow_commit()
    with pytest.raises(RuntimeError, match="already in flight"):
        commits.start(second)  # refused, and the coroutine is closed, not left unawaited
    assert inspect.getcoroutinestate(second) == inspect.CORO_CLOSED
    release.set()
    await commits.wait()
    assert not commits.running and done == ["committed"]


async def test_d1_a_failed_commit_is_logged_and_the_next_one_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    commits = CommitInBackground("router")

    async def failing() -> None:
        raise RuntimeError("coordinator not available")

    async def fine() -> None:
        return None

    commits.start(failing())
    await commits.wait()
    assert "router commit failed" in caplog.text and "coordinator not available" in caplog.text
    assert not commits.running
    commits.start(fine())
    await commits.wait()
    assert not commits.running


def _router(tmp_path: Path) -> Router:
    settings = load_settings(data_dir=tmp_path, kafka_bootstrap="127.0.0.1:1")
    producer = Producer({"bootstrap.servers": "127.0.0.1:1"})  # nothing is produced here
    return Router(settings, SubscriptionRegistry(settings), producer)


def test_d1_a_commit_that_waited_behind_a_revoke_does_not_rewind_it(tmp_path: Path) -> None:
    router = _router(tmp_path)
    consumer: Any = RecordingConsumer()
    router._to_commit.update({("events", 0): 5, ("events", 1): 7})
    stale = router._committable()  # a background commit took these, then waited
    router._to_commit[("events", 1)] = 9  # routing moved partition 1 on
    router._on_revoke(consumer, [TopicPartition("events", 0), TopicPartition("events", 1)])
    assert consumer.commits == [{("events", 0): 5, ("events", 1): 9}]
    router._commit_now(consumer, stale)
    assert consumer.commits == [{("events", 0): 5, ("events", 1): 9}]  # nothing older after


def test_d1_only_positions_not_moved_on_are_committed_and_then_forgotten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    router = _router(tmp_path)
    consumer: Any = RecordingConsumer()
    router._to_commit.update({("events", 0): 5, ("events", 1): 7})
    taken = router._committable()
    router._to_commit[("events", 1)] = 9
    router._commit_now(consumer, taken)
    assert consumer.commits == [{("events", 0): 5}]
    assert router._committable() == {("events", 1): 9}  # the newer one goes next
