"""Everything the dispatcher writes back to Kafka, in one place.

`Outbox` turns settlements into records: the attempt ledger, retries on their tier, dead
letters and health outcomes. Health outcomes are aggregated per subscription between commits
(SPEC §5: each extra Faust event per delivery costs half the hot path's budget): consecutive
successes of one subscription collapse into the latest one, which moves the health record
exactly as the whole run would (a success resets it), while every failure is kept in order.

The analytics agent reads **digests**, not the ledger (O2): every attempt that counts as a
delivery is also folded into its subscription's `Tally` (its window aggregates and the steps
of its retry backlog) in its partition's digest, and each digest is written once per commit
(or sooner, at `DIGEST_MAX_SUBSCRIPTIONS` or `DIGEST_MAX_STEPS`) under the key of one of its
subscriptions, so the producer's partitioner puts it in their common partition. One Faust
record per partition and commit, holding a few aggregates, replaces one record per attempt that
the agent would decode and fold on the event loop deliveries share; the agent counts a digest
once by its own position. A digest is written with the batch it belongs to, before that batch's
positions are committed: a worker that dies between an attempt and its batch's commit loses
that attempt from the analytics (the ledger keeps it), and the delivery is attempted again.

Two ways to commit after it (D1). `seal` writes the buffered outcomes and closes the records
produced so far under the positions settled so far; `committable` then hands back the positions
of the sealed batches Kafka has acknowledged, in order, without waiting for anyone. `flush`
writes the buffered outcomes and waits until Kafka has acknowledged every record, so the caller
may commit everything settled so far (at a rebalance and at shutdown).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import orjson
from confluent_kafka import Producer
from msgspec import structs

from streams import metrics
from streams.adapters import codec
from streams.adapters.kafka_clients import TP, BatchAcks, flush, partition_of
from streams.domain.analytics import Tally
from streams.domain.analytics_window import counts_as_delivery
from streams.domain.durations import format_duration
from streams.domain.models import (
    AnalyticsDigest,
    Attempt,
    DeadLetter,
    Delivery,
    HealthOutcome,
    OutcomeClass,
)
from streams.domain.settle import Settlement
from streams.settings import Settings

#: A partition's digest is written before the commit once it holds this many subscriptions'
#: tallies, or this many backlog steps (retries fired or scheduled): Kafka refuses records over
#: 1 MiB by default, and a tally is under a kilobyte in most cases and about 10 KiB at most
#: (two latency sketches of every bucket).
DIGEST_MAX_SUBSCRIPTIONS: Final = 50
DIGEST_MAX_STEPS: Final = 5_000
#: Subscriptions whose partition is remembered; the memo starts over beyond this many.
PARTITION_MEMO_MAX: Final = 200_000


@dataclass(slots=True)
class _Digest:
    key: str  # a subscription of the partition: the producer's partitioner puts the digest there
    tallies: dict[str, Tally] = field(default_factory=dict)
    steps: int = 0


class Outbox:
    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        tiers: list[tuple[float, str]],
        partitions: int,
        wrote: Callable[[str, str], None] | None = None,
    ) -> None:
        """``tiers`` are the retry tiers (delay, topic); ``partitions`` the lane partitions, by
        which attempts are grouped into digests; ``wrote`` hears of each record written to a
        tier (topic, key), so a tier partition paused while idle is read again at once."""
        self._producer = producer
        self._wrote = wrote
        self._tiers = tiers
        self._tier_names = [format_duration(delay) for delay, _ in tiers]
        self._attempts = settings.topic("attempts")
        self._digests_topic = settings.topic("attempt-digests")
        self._partitions = partitions
        self._partition_of: dict[str, int] = {}
        self._digests: dict[int, _Digest] = {}  # by partition, until the next seal
        self.digests_written = 0
        self._dlq = settings.topic("dlq")
        self._health = settings.topic("health")
        self._acks = BatchAcks()
        self._pending_health: list[HealthOutcome] = []
        self._last_success: dict[str, int] = {}  # subscription -> index of its trailing success
        self.health_written = 0

    def _send(self, topic: str, key: str, value: bytes) -> None:
        self._acks.produce(self._producer, topic, key, value)

    def settle(self, outcome: Settlement) -> None:
        """Write what one attempt decided: its ledger entry and its consequence."""
        sub_id = outcome.attempt.subscription_id
        ledger = codec.encode(outcome.attempt)
        self._send(self._attempts, sub_id, ledger)
        if counts_as_delivery(outcome.attempt):
            self._digest(sub_id, outcome.attempt)
        if outcome.retry is not None and outcome.retry_tier is not None:
            self._to_tier(self._tiers[outcome.retry_tier][1], sub_id, codec.encode(outcome.retry))
            metrics.record_retry(self._tier_names[outcome.retry_tier])
        if outcome.dead_letter is not None:
            self.dead_letter(outcome.dead_letter)
        if outcome.health is not None:
            self.health(outcome.health)

    def dead_letter(self, letter: DeadLetter) -> None:
        self._send(self._dlq, letter.subscription_id or "invalid", codec.encode(letter))
        metrics.record_dead_letter(letter.reason)

    def defer(self, delivery: Delivery, due_at_ms: int, now_ms: int, jitter: float) -> None:
        """Hand a delivery to a retry tier without an attempt: it comes back at ``due_at_ms``.

        The tier is the longest whose earliest due time is not after ``due_at_ms``, so the tier's
        pause logic never holds the delivery much past its time.
        """
        wait_s = max(0.0, (due_at_ms - now_ms) / 1000)
        tier = 0
        for index, (delay, _topic) in enumerate(self._tiers):
            if (1 - jitter) * delay <= wait_s:
                tier = index
        deferred = structs.replace(delivery, due_at=due_at_ms)
        self._to_tier(self._tiers[tier][1], delivery.subscription_id, codec.encode(deferred))

    def _to_tier(self, topic: str, key: str, value: bytes) -> None:
        self._send(topic, key, value)
        if self._wrote is not None:
            self._wrote(topic, key)

    def health(self, outcome: HealthOutcome) -> None:
        """Queue a delivery's terminal outcome; written (aggregated) at the next flush."""
        sub_id = outcome.subscription_id
        index = self._last_success.get(sub_id)
        if outcome.outcome is OutcomeClass.SUCCESS:
            if index is not None:
                self._pending_health[index] = outcome  # a run of successes: keep the latest
                return
            self._last_success[sub_id] = len(self._pending_health)
        elif index is not None:
            del self._last_success[sub_id]
        self._pending_health.append(outcome)

    def _write_health(self) -> None:
        for outcome in self._pending_health:
            self._send(self._health, outcome.subscription_id, codec.encode(outcome))
        self.health_written += len(self._pending_health)
        self._pending_health.clear()
        self._last_success.clear()

    def _digest(self, sub_id: str, attempt: Attempt) -> None:
        """Fold one attempt into its subscription's tally in its partition's digest."""
        partition = self._partition_of.get(sub_id)
        if partition is None:
            if len(self._partition_of) >= PARTITION_MEMO_MAX:
                self._partition_of.clear()
            partition = partition_of(sub_id, self._partitions)
            self._partition_of[sub_id] = partition
        digest = self._digests.get(partition)
        if digest is None:
            digest = self._digests[partition] = _Digest(sub_id)
        tally = digest.tallies.get(sub_id)
        if tally is None:
            tally = digest.tallies[sub_id] = Tally()
        steps = len(tally.steps)
        tally.add(attempt)
        digest.steps += len(tally.steps) - steps
        if len(digest.tallies) >= DIGEST_MAX_SUBSCRIPTIONS or digest.steps >= DIGEST_MAX_STEPS:
            del self._digests[partition]
            self._write_digest(digest)

    def _write_digest(self, digest: _Digest) -> None:
        record = AnalyticsDigest(
            sealed_at=int(time.time() * 1000),
            subscription_ids=tuple(digest.tallies),
            tallies=tuple(orjson.dumps(t.to_dict()) for t in digest.tallies.values()),
        )
        self._send(self._digests_topic, digest.key, codec.encode(record))
        self.digests_written += 1

    def write_buffered(self) -> None:
        self._write_health()
        for digest in self._digests.values():
            self._write_digest(digest)
        self._digests.clear()

    def seal(self, positions: dict[TP, int], mark: int) -> None:
        """Write buffered health outcomes and digests, and close the records produced so far:
        ``positions`` (with the caller's ``mark``) become committable once Kafka has
        acknowledged them all."""
        self.write_buffered()
        self._acks.seal(positions, mark)

    def committable(self) -> tuple[dict[TP, int], int]:
        """Positions of the leading sealed batches Kafka has acknowledged, and the highest mark
        among them; raises `KafkaIOError` once a produce of the leading batch has failed."""
        return self._acks.committable_marked()

    def unacknowledged(self, now: float) -> tuple[int, float]:
        """Records waiting for Kafka, and for how long it has acknowledged none (Q1)."""
        return self._acks.unacknowledged(now)

    def forget(self, partitions: list[TP]) -> None:
        """Drop revoked partitions' positions from the sealed batches still waiting."""
        self._acks.forget(partitions)

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Write buffered health outcomes and digests, then wait for every record to be
        acknowledged."""
        self.write_buffered()
        await flush(self._producer, self._acks, timeout_s)
