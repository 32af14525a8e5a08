"""The dispatcher's intake per partition (F3, F7): one partition may not hold the whole buffer.

One partition of `routed` or `backfill` may fill at most 1/`PARTITION_SHARE` of the intake
buffer: beyond it that partition's intake pauses (until half of it has settled) and the others'
goes on, so a subscription whose deliveries pile up (a slow endpoint, a tenant out of fair
slots) does not keep every other partition's deliveries waiting in Kafka. While a partition is
paused, its queued deliveries to slow or stalled origins are deferred (`FlowControl.shed_slow`)
at most every `SHED_INTERVAL_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Message, TopicPartition

from streams import metrics
from streams.lanes.flow import FlowControl

log = logging.getLogger(__name__)

TP = tuple[str, int]
PARTITION_SHARE = 8
SHED_INTERVAL_S = 0.25


class IntakePacer:
    def __init__(
        self,
        flow: FlowControl,
        assigned: Callable[[TP], bool],
        tier_topics: set[str],
        backfill_topic: str,
    ) -> None:
        self._flow = flow
        self._assigned = assigned
        self._tiers = tier_topics
        self._backfill = backfill_topic
        self.paused: set[TP] = set()  # partitions holding their share of the buffer
        self._next_shed = 0.0

    def pace(self, consumer: Consumer, cap: int) -> None:
        """Pause the intake of a `routed` or `backfill` partition that holds ``cap`` deliveries
        taken in and not settled; resume it once it holds half as many."""
        held = self._flow.held
        for tp in [tp for tp in self.paused if held[tp] <= cap // 2]:
            self.paused.discard(tp)
            if self._assigned(tp):
                consumer.resume([TopicPartition(tp[0], tp[1])])
        for tp, count in held.items():
            if count < cap or tp in self.paused or tp[0] in self._tiers:
                continue
            if self._assigned(tp):
                consumer.pause([TopicPartition(tp[0], tp[1])])
                self.paused.add(tp)
                metrics.record_intake_paused("backfill" if tp[0] == self._backfill else "live")

    def shed_slow(self) -> None:
        """A paused partition may be held by a slow origin's backlog: hand that back (F3)."""
        if not self.paused or time.monotonic() < self._next_shed:
            return
        self._next_shed = time.monotonic() + SHED_INTERVAL_S
        shed = self._flow.shed_slow(set(self.paused))
        if shed:
            log.info("deferred %d deliveries to slow endpoints out of paused partitions", shed)


def serve_group_events(consumer: Consumer, held: set[TP], timeout_s: float = 0.1) -> list[Message]:
    """One read that lets librdkafka deliver the group's events without taking new records.

    A member the group went on without (its session expired while the coordinator moved:
    commits fail with UNKNOWN_MEMBER_ID) only rejoins through a read, which hands it the
    rebalance; a dispatcher at its cap of uncommitted deliveries reads nothing and would wait
    for ever. Every assigned partition is paused for this one read, then those not in ``held``
    (the dispatcher's own pauses) are resumed. On the lane's read thread. A record the read
    still returns (from a partition assigned within it) is the caller's to take.
    """
    before = consumer.assignment()
    consumer.pause(before)
    try:
        return consumer.consume(1, timeout_s)
    finally:
        now = {(p.topic, p.partition) for p in consumer.assignment()}
        resume = [p for p in before if (p.topic, p.partition) in now - held]
        if resume:
            consumer.resume(resume)
