"""What the dispatcher does when Kafka moves its partitions (D1, Q1).

Librdkafka calls `Rebalancing._on_assign` and `Rebalancing._on_revoke` on the lane's read thread,
inside a ``take``. An assignment recalls the partitions' recent successes (the dedup window);
a revocation drops the deliveries queued on the partitions (nothing more starts there), lets
attempts under way finish, writes what the outbox buffers, commits the positions settled so far
after a producer flush, and then forgets the partitions' timers, pauses and pending copies on the
event loop. `streams.lanes.dispatcher.Dispatcher` holds the state these work on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from streams.adapters.commits import AsyncCommitter
from streams.adapters.kafka_clients import TP, commit
from streams.domain.dedup import RecentSuccesses
from streams.domain.offsets import OffsetTracker
from streams.lanes.flow import FlowControl
from streams.lanes.idle import IdleLanes
from streams.lanes.intake import IntakePacer
from streams.lanes.outbox import Outbox
from streams.lanes.recall import recall_successes, recallable
from streams.lanes.tiers import TierTimers
from streams.settings import Settings

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How long a rebalance waits for attempts under way on revoked partitions.
REVOKE_GRACE_S = 10.0


class Rebalancing:
    """The dispatcher's rebalance callbacks, and the release of revoked partitions."""

    _settings: Settings
    _clock: Callable[[], float]
    _producer: Producer
    _assigned: set[TP]
    _rebalances: int
    _lock: threading.Lock
    _recent: RecentSuccesses
    _tracker: OffsetTracker
    _flow: FlowControl
    _outbox: Outbox
    _committer: AsyncCommitter
    _intake: IntakePacer
    _tiers_held: TierTimers
    _idle: IdleLanes
    _pending_at: dict[TP, dict[int, str]]
    _pending: dict[str, int]
    _loop: asyncio.AbstractEventLoop | None

    def _unpend(self, delivery_id: str) -> None:
        """One copy of ``delivery_id`` is no longer pending (settled, or its partition revoked)."""
        left = self._pending.pop(delivery_id, 1) - 1
        if left > 0:
            self._pending[delivery_id] = left

    def _is_assigned(self, tp: TP) -> bool:
        return tp in self._assigned

    def _rebalance_count(self) -> int:
        return self._rebalances

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        numbers, positions = recallable(consumer, partitions, self._settings.topic("routed"))
        recall_successes(self._settings, self._recent, numbers, self._clock, positions)
        with self._lock:
            self._assigned.update((p.topic, p.partition) for p in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        tps = [(p.topic, p.partition) for p in partitions]
        # librdkafka keeps a partition paused across a rebalance that hands it back, while the
        # pause bookkeeping goes (`_cancel_timers`): lift the pauses, or it is never read (D1)
        try:
            consumer.resume(partitions)
        except KafkaException as exc:
            log.warning("revoked partitions not resumed: %s", exc)
        # Nothing more starts on these partitions: what waits in the queues is the new owner's
        # to send. Attempts started after the positions below are taken would be sent again
        # by the new owner, which reads the ledger before their records are in it (Q1).
        try:
            self._on_loop(self._stop_starting, tps)
        except Exception as exc:  # the queues go in `_cancel_timers` below instead
            log.warning("revoked partitions' queues not dropped: %s", exc)
        # Let attempts already under way on these partitions finish and settle first (one
        # deadline), so their offsets are committed and the new owner does not send them again.
        deadline = time.monotonic() + REVOKE_GRACE_S
        while time.monotonic() < deadline and any(self._flow.running[tp] > 0 for tp in tps):
            time.sleep(0.05)
        try:
            positions = self._on_loop(self._release, tps)
        except Exception as exc:  # nothing committed: the new owner replays from the last commit
            log.warning("revoked partitions not released: %s", exc)
            positions = {}
        try:
            if self._producer.flush(10) == 0:
                commit(consumer, positions)
        except Exception as exc:  # the new owner replays from the last commit: at-least-once
            log.warning("commit on revoke failed: %s", exc)
        # the dispatcher's coroutine is inside `take` now: it touches neither of these meanwhile
        self._outbox.forget(tps)
        self._committer.forget(tps)
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._cancel_timers, tps)

    def _stop_starting(self, tps: list[TP]) -> None:
        """Revoked partitions: their queued deliveries are dropped and their waiting timers can
        no longer hand any over (`_spawn` checks the assignment). On the event loop."""
        with self._lock:
            self._assigned.difference_update(tps)
        self._flow.forget(set(tps))

    def _release(self, tps: list[TP]) -> dict[TP, int]:
        """Write the outbox's buffered health outcomes and digests, then take revoked
        partitions' positions out of the tracker. On the event loop, where deliveries settle,
        both happen between two settlements: every delivery settled under those positions has
        every record produced, so committing them after a producer flush loses none (D1, D10)."""
        self._outbox.write_buffered()
        with self._lock:
            positions = {tp: pos for tp in tps if (pos := self._tracker.position(tp)) is not None}
            self._tracker.revoke(tps)
            self._assigned.difference_update(tps)
        return positions

    def _on_loop(self, step: Callable[[list[TP]], _T], tps: list[TP]) -> _T:
        """``step(tps)`` on the dispatcher's event loop, waited for: a rebalance callback runs
        on the lane's read thread, while flow control and the outbox belong to the loop. In
        place when the loop is this thread's, or not running (nothing settles on it)."""
        loop = self._loop
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if loop is None or here or not loop.is_running():
            return step(tps)

        async def on_loop() -> _T:
            return step(tps)

        try:
            done = asyncio.run_coroutine_threadsafe(on_loop(), loop)
        except RuntimeError:  # closed meanwhile
            return step(tps)
        return done.result(timeout=REVOKE_GRACE_S)

    def _cancel_timers(self, tps: list[TP]) -> None:
        self._flow.forget(set(tps))
        for tp in tps:
            for delivery_id in self._pending_at.pop(tp, {}).values():
                self._unpend(delivery_id)
            self._intake.paused.discard(tp)
        self._tiers_held.cancel(tps)
        self._idle.forget(tps)
