"""Everything the dispatcher writes back to Kafka, in one place.

`Outbox` turns settlements into records: the attempt ledger, retries on their tier, dead
letters and health outcomes. Health outcomes are aggregated per subscription between commits
(SPEC §5: each extra Faust event per delivery costs half the hot path's budget): consecutive
successes of one subscription collapse into the latest one, which moves the health record
exactly as the whole run would (a success resets it), while every failure is kept in order.
`flush` writes the buffered outcomes, then waits until Kafka has acknowledged every record, so
the caller may commit the offsets of the deliveries settled so far (D1).
"""

from __future__ import annotations

from dataclasses import replace

from confluent_kafka import Producer

from streams import metrics
from streams.adapters import codec
from streams.adapters.kafka_clients import ProduceTracker, flush, produce
from streams.domain.durations import format_duration
from streams.domain.models import DeadLetter, Delivery, HealthOutcome, OutcomeClass
from streams.domain.settle import Settlement
from streams.settings import Settings


class Outbox:
    def __init__(
        self, settings: Settings, producer: Producer, tiers: list[tuple[float, str]]
    ) -> None:
        self._producer = producer
        self._tiers = tiers
        self._tier_names = [format_duration(delay) for delay, _ in tiers]
        self._attempts = settings.topic("attempts")
        self._dlq = settings.topic("dlq")
        self._health = settings.topic("health")
        self._acks = ProduceTracker()
        self._pending_health: list[HealthOutcome] = []
        self._last_success: dict[str, int] = {}  # subscription -> index of its trailing success
        self.health_written = 0

    def _send(self, topic: str, key: str, value: bytes) -> None:
        produce(self._producer, topic, key, value, on_delivery=self._acks)

    def settle(self, outcome: Settlement) -> None:
        """Write what one attempt decided: its ledger entry and its consequence."""
        sub_id = outcome.attempt.subscription_id
        self._send(self._attempts, sub_id, codec.encode(outcome.attempt))
        if outcome.retry is not None and outcome.retry_tier is not None:
            self._send(self._tiers[outcome.retry_tier][1], sub_id, codec.encode(outcome.retry))
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
        deferred = replace(delivery, due_at=due_at_ms)
        self._send(self._tiers[tier][1], delivery.subscription_id, codec.encode(deferred))

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

    async def flush(self) -> None:
        """Write buffered health outcomes, then wait for every record to be acknowledged."""
        for outcome in self._pending_health:
            self._send(self._health, outcome.subscription_id, codec.encode(outcome))
        self.health_written += len(self._pending_health)
        self._pending_health.clear()
        self._last_success.clear()
        await flush(self._producer, self._acks)
