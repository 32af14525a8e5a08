"""A lane's offset commits, sent without waiting for Kafka's answer (D1).

The router and the dispatcher commit only positions whose records are settled; `AsyncCommitter`
sends those commits through librdkafka's asynchronous commit and reads the answers from the
consumer's ``on_commit`` callback, so a lane never stops reading while a commit travels.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.adapters.kafka_clients import TP, commit

log = logging.getLogger(__name__)


#: Sends an `AsyncCommitter` remembers until Kafka answers them.
SENT_KEPT = 64


class AsyncCommitter:
    """A lane's commits, sent without waiting for Kafka's answer.

    A synchronous commit awaited in line stopped a lane's reading for 7-11 ms at the median and
    up to 60 ms, every commit interval (docs/benchmarks.md, "Commits beside the intake"). Here
    `send` hands the positions to librdkafka, which sends commits in the order they were made,
    and returns; the answer comes back through the consumer's ``on_commit`` callback
    (`on_commit`), served by the lane's own next ``consume``. Positions stay *pending* until an
    answer confirms them, and every `send` carries all pending positions, so one refused commit
    is carried by the next and an idle partition is not left behind. No lock is held across a
    Kafka call.

    ``mark`` is the lane's own progress count as of the positions sent (the dispatcher's
    settled deliveries); `confirmed_mark` is the highest mark whose positions Kafka has all
    taken, for a lane that bounds how much may be settled and not committed (Q1).
    """

    def __init__(self, lane: str) -> None:
        self._lane = lane
        self._lock = threading.Lock()
        self._pending: dict[TP, int] = {}
        self._confirmed: dict[TP, int] = {}
        # every send carries all pending positions, so a later one covers the earlier ones:
        # dropping the oldest (Kafka away for long) only delays `confirmed_mark`
        self._sent: deque[tuple[dict[TP, int], int]] = deque(maxlen=SENT_KEPT)
        self.confirmed_mark = 0
        self.failures = 0

    @property
    def pending(self) -> dict[TP, int]:
        """Positions sent or to be sent that Kafka has not confirmed yet."""
        with self._lock:
            return dict(self._pending)

    def add(self, positions: dict[TP, int]) -> dict[TP, int]:
        """Make ``positions`` pending (for a synchronous commit); returns all pending ones."""
        with self._lock:
            self._pending.update(positions)
            return dict(self._pending)

    def send(self, consumer: Consumer, positions: dict[TP, int], mark: int = 0) -> None:
        """Commit ``positions`` and every earlier position not confirmed yet, without waiting."""
        with self._lock:
            self._pending.update(positions)
            if not self._pending:
                self.confirmed_mark = max(self.confirmed_mark, mark)
                return
            self._sent.append((dict(self._pending), mark))
            offsets = [TopicPartition(t, p, o) for (t, p), o in self._pending.items()]
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:  # the positions stay pending: the next send carries them
            self._refused(str(exc))

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The consumer's ``on_commit`` callback: confirm what Kafka took."""
        refused: list[str] = []
        with self._lock:
            for tp in partitions:
                if tp.error is not None or tp.offset < 0:
                    if tp.error is not None:
                        refused.append(f"{tp.topic}[{tp.partition}]: {tp.error}")
                    continue
                self._took((tp.topic, tp.partition), tp.offset)
            self._settle_sent()
        if err is not None or refused:
            self._refused(str(err) if err is not None else "; ".join(refused[:3]))

    def commit_sync(self, consumer: Consumer, positions: dict[TP, int], mark: int = 0) -> None:
        """Commit ``positions`` and every pending one, waiting for Kafka to take them (a thread
        of its own, or a rebalance callback); raises `KafkaIOError`, leaving them pending."""
        ready = self.add(positions)
        commit(consumer, ready)
        self.confirm(ready, mark)

    def confirm(self, positions: dict[TP, int], mark: int) -> None:
        """Record a synchronous commit of ``positions`` that Kafka took."""
        with self._lock:
            for key, offset in positions.items():
                self._took(key, offset)
            self.confirmed_mark = max(self.confirmed_mark, mark)
            self._settle_sent()

    def forget(self, partitions: list[TP]) -> None:
        """Drop revoked partitions: the revoke's own commit or their new owner covers them."""
        with self._lock:
            for tp in partitions:
                self._pending.pop(tp, None)
                self._confirmed.pop(tp, None)
                for positions, _mark in self._sent:
                    positions.pop(tp, None)
            self._settle_sent()

    def _took(self, tp: TP, offset: int) -> None:
        """Kafka holds ``offset`` for ``tp`` (called under the lock)."""
        if offset > self._confirmed.get(tp, -1):
            self._confirmed[tp] = offset
        if self._pending.get(tp, offset + 1) <= offset:
            del self._pending[tp]

    def _settle_sent(self) -> None:
        """Retire the sends whose positions are all confirmed (called under the lock)."""
        kept: deque[tuple[dict[TP, int], int]] = deque(maxlen=SENT_KEPT)
        for positions, mark in self._sent:
            if any(self._confirmed.get(tp, -1) < pos for tp, pos in positions.items()):
                kept.append((positions, mark))
            else:
                self.confirmed_mark = max(self.confirmed_mark, mark)
        self._sent = kept

    def _refused(self, error: str) -> None:
        self.failures += 1
        log.warning(
            "%s commit refused; the next commit carries its positions: %s", self._lane, error
        )
