"""`lanes.tiers.TierTimers`: retries held until due, and the pauses that bound them (D6, D1).

A tier partition is paused once it holds `READ_AHEAD` retries and resumed once half of them
have fired. Timers fire on the event loop while the dispatcher's read thread may be inside
``consume``; the consumer must then not be called from the loop (two threads in one
librdkafka consumer), so the resume waits for `apply`, which the dispatcher calls between
reads. The consumer here records its calls and the thread that made them.
"""

from __future__ import annotations

import asyncio
import threading

from confluent_kafka import TopicPartition

from streams.domain.models import Delivery, Event
from streams.lanes.tiers import READ_AHEAD, TierTimers

TP = ("hs.retry.1s", 3)


class RecordingConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int]], str]] = []

    def _note(self, what: str, parts: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in parts]
        self.calls.append((what, tps, threading.current_thread().name))

    def pause(self, parts: list[TopicPartition]) -> None:
        self._note("pause", parts)

    def resume(self, parts: list[TopicPartition]) -> None:
        self._note("resume", parts)


def _delivery(n: int, due_at: int) -> Delivery:
    event = Event(f"evt_{n}", "t1", "order.created", 0, "{}", 0)
    return Delivery(f"dlv_{n}", "sub_1", "t1", event, due_at=due_at)


class Fired(list[int]):
    """The offsets handed to the dispatcher; ``full`` is set once READ_AHEAD have fired."""

    def __init__(self) -> None:
        super().__init__()
        self.full = asyncio.Event()

    def take(self, tp: tuple[str, int], offset: int, delivery: Delivery) -> None:
        self.append(offset)
        if len(self) >= READ_AHEAD:
            self.full.set()


def _timers(fired: Fired, assigned: set[tuple[str, int]]) -> TierTimers:
    return TierTimers(fired.take, lambda tp: tp in assigned, clock=lambda: 1000.0)


async def test_d1_a_fired_timer_never_calls_the_consumer_the_next_apply_resumes() -> None:
    fired = Fired()
    consumer = RecordingConsumer()
    timers = _timers(fired, {TP})
    timers.bind(asyncio.get_running_loop(), consumer)  # type: ignore[arg-type]
    # due at once: every timer fires on the next turns of the loop
    for offset in range(READ_AHEAD):
        timers.schedule(TP, offset, _delivery(offset, due_at=0), deferred_ms=0)
    assert consumer.calls == [("pause", [TP], threading.current_thread().name)]
    await asyncio.wait_for(fired.full.wait(), 30)
    assert sorted(fired) == list(range(READ_AHEAD))
    assert [c[0] for c in consumer.calls] == ["pause"], "a timer called the consumer"
    timers.apply(consumer)  # type: ignore[arg-type]
    assert consumer.calls[1:] == [("resume", [TP], threading.current_thread().name)]
    timers.apply(consumer)  # type: ignore[arg-type]
    assert len(consumer.calls) == 2, "one resume per pause"


async def test_d6_a_partition_paused_again_before_apply_stays_paused() -> None:
    fired = Fired()
    consumer = RecordingConsumer()
    timers = _timers(fired, {TP})
    timers.bind(asyncio.get_running_loop(), consumer)  # type: ignore[arg-type]
    for offset in range(READ_AHEAD):
        timers.schedule(TP, offset, _delivery(offset, due_at=0), deferred_ms=0)
    await asyncio.wait_for(fired.full.wait(), 30)
    # the resume is owed; the partition fills up again (far-off retries) before it is made
    far = 10_000_000
    for offset in range(READ_AHEAD, 2 * READ_AHEAD):
        timers.schedule(TP, offset, _delivery(offset, due_at=far), deferred_ms=0)
    timers.apply(consumer)  # type: ignore[arg-type]
    assert [c[0] for c in consumer.calls] == ["pause"], "still paused: no second pause, no resume"
    timers.cancel([TP])


async def test_d1_a_revoked_partition_is_not_resumed_by_apply() -> None:
    fired = Fired()
    consumer = RecordingConsumer()
    assigned = {TP}
    timers = _timers(fired, assigned)
    timers.bind(asyncio.get_running_loop(), consumer)  # type: ignore[arg-type]
    for offset in range(READ_AHEAD):
        timers.schedule(TP, offset, _delivery(offset, due_at=0), deferred_ms=0)
    await asyncio.wait_for(fired.full.wait(), 30)
    assigned.clear()  # revoked: the dispatcher's revoke callback lifted the pause already
    timers.apply(consumer)  # type: ignore[arg-type]
    assert [c[0] for c in consumer.calls] == ["pause"]
