"""`IdleLanes` on the real broker (P2, D1): a quiet, caught-up partition leaves the fetches and
comes back when a record lands on it; the record is read, nothing is lost.

The consumer reads a topic of two partitions, as the dispatcher reads a retry tier; the test's
loop makes the dispatcher's calls (a read, then `IdleLanes.step`) while `IdleLanes.watch` runs
on the event loop, and checks the pauses against what the consumer actually returns.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streams.adapters.kafka_clients import make_consumer, partition_of
from streams.lanes.idle import CHECK_S, IdleLanes
from streams.settings import Settings

pytestmark = pytest.mark.integration

TP = tuple[str, int]
DEADLINE_S = 60.0


class Lane:
    """A consumer and `IdleLanes` driven as the dispatcher drives them."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.assigned: set[TP] = set()
        self.consumer: Consumer = make_consumer(settings, "idle")
        self.idle = IdleLanes(settings, [topic], self.assigned, 2)
        self.read: list[tuple[TP, bytes]] = []

        def on_assign(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            self.assigned.update((p.topic, p.partition) for p in parts)

        self.consumer.subscribe([topic], on_assign=on_assign)

    async def turn(self, held: set[TP] | None = None, step: bool = True) -> None:
        for msg in await asyncio.to_thread(self.consumer.consume, 100, 0.05):
            if msg.error() is None:
                self.read.append(((str(msg.topic()), int(msg.partition() or 0)), value(msg)))
        if step:
            self.idle.step(self.consumer, lambda: held or set())

    async def until(self, done: Callable[[], bool], what: str, **kw: object) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, f"not within {DEADLINE_S:.0f}s: {what}"
            await self.turn(**kw)  # type: ignore[arg-type]


def value(msg: Message) -> bytes:
    return msg.value() or b""


@pytest.fixture
def topic(make_topic: Callable[[str, int], str]) -> str:
    return make_topic(f"idle-{uuid.uuid4().hex[:8]}", 2)


async def test_p2_d1_a_quiet_partition_is_paused_and_a_new_record_on_it_is_still_read(
    make_settings: Callable[..., Settings], topic: str
) -> None:
    settings = make_settings()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    producer.produce(topic, b"before", partition=0)
    producer.flush(10)
    lane = Lane(settings, topic)
    stop = asyncio.Event()
    watch = asyncio.create_task(lane.idle.watch(stop))
    try:
        both = {(topic, 0), (topic, 1)}
        await lane.until(lambda: set(lane.idle.paused) == both, "both partitions paused")
        assert lane.read == [((topic, 0), b"before")]
        assert lane.idle.paused == {(topic, 0): 1, (topic, 1): 0}, "paused at its watermark"
        # while paused (no step: nothing may resume it) the partition is out of the fetches
        producer.produce(topic, b"after", partition=1)
        producer.flush(10)
        began = time.monotonic()
        while time.monotonic() - began < 2 * CHECK_S:
            await lane.turn(step=False)
        assert lane.read == [((topic, 0), b"before")], "a paused partition was fetched"
        # the watch saw the watermark move: the next step resumes it and the record is read
        await lane.until(lambda: len(lane.read) == 2, "the record on the woken partition")
        assert lane.read[1] == ((topic, 1), b"after")
        assert (topic, 1) not in lane.idle.paused
    finally:
        stop.set()
        watch.cancel()
        await asyncio.to_thread(lane.consumer.close)


async def test_p2_f3_a_partition_another_pauser_holds_is_left_to_it(
    make_settings: Callable[..., Settings], topic: str
) -> None:
    settings = make_settings()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    lane = Lane(settings, topic)
    stop = asyncio.Event()
    watch = asyncio.create_task(lane.idle.watch(stop))
    held = {(topic, 0)}  # the intake's share or a tier's read-ahead pause, say
    try:
        await lane.until(lambda: bool(lane.idle.paused), "a partition paused", held=held)
        await lane.until(lambda: (topic, 1) in lane.idle.paused, "p1 paused", held=held)
        assert (topic, 0) not in lane.idle.paused, "a held partition was taken over"
        producer.produce(topic, b"x", partition=1)
        producer.flush(10)
        await lane.until(lambda: len(lane.read) == 1, "the record on p1", held=held)
        assert lane.read == [((topic, 1), b"x")]
    finally:
        stop.set()
        watch.cancel()
        await asyncio.to_thread(lane.consumer.close)


async def test_f4_d6_a_retry_this_worker_writes_wakes_its_partition_without_the_watch(
    make_settings: Callable[..., Settings], topic: str
) -> None:
    """A retry or deferral the outbox writes (`IdleLanes.wrote`) resumes its paused partition
    at the next step: no watch runs here, so only that can wake it."""
    settings = make_settings()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    lane = Lane(settings, topic)
    both = {(topic, 0), (topic, 1)}
    try:
        await lane.until(lambda: set(lane.idle.paused) == both, "both partitions paused")
        key = next(k for k in (f"sub-{n}" for n in range(100)) if partition_of(k, 2) == 1)
        producer.produce(topic, b"retry", key=key.encode(), partition=1)
        producer.flush(10)
        lane.idle.wrote(topic, key)
        await lane.until(lambda: len(lane.read) == 1, "the retry on the woken partition")
        assert lane.read == [((topic, 1), b"retry")]
        assert set(lane.idle.paused) == {(topic, 0)}
    finally:
        await asyncio.to_thread(lane.consumer.close)
