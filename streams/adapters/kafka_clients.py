"""confluent-kafka producers and consumers, configured in one place.

The delivery lanes use confluent-kafka directly (SPEC §5: its consumer is far faster than a
per-event Faust stream). Producers are idempotent with acks=all; consumers never auto-commit:
lanes commit positions themselves, only after records are settled (D1).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from aiokafka.partitioner import murmur2
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.errors import HookstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)


class KafkaIOError(HookstreamError):
    """A produce or commit failed in a way the lane cannot settle."""


class ProduceError(KafkaIOError):
    """Kafka did not take a record a lane produced: the lane stops short of committing past it,
    and whoever reads its partitions next does the work again (D1)."""


#: librdkafka's own lines ("Connect to ... failed", several a second per client while the
#: broker is away) go through Python logging, as JSON, throttled (`streams.logging`).
LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

#: The fetch wait of a consumer that follows its topics and never pauses a partition (the
#: router, the registries, the shared breakers' reader). With ``fetch.min.bytes`` 1 the broker
#: answers a fetch as soon as a record is there, whatever the wait, so the wait does not delay
#: a record: it only sets how often a quiet consumer asks again, and each ask costs every broker
#: it fetches from. At 20 ms, two idle workers kept each broker of a three-node cluster at about
#: 55% of a core against 15% without them (docs/benchmarks.md, "Followers' fetch wait"). The
#: dispatcher keeps the default: it pauses and resumes partitions, and a resumed partition is
#: fetched only once the fetch in flight has returned.
FOLLOW_FETCH_WAIT_MS: Final = 500


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "logger": LIBRDKAFKA_LOG,
        "enable.idempotence": True,
        "acks": "all",
        # Every delivery waits for one linger (its `routed` record): 1 ms halves the p50 of
        # librdkafka's 5 ms at 300-1,000/s and costs no throughput (docs/benchmarks.md,
        # "Producer linger 1 ms").
        "linger.ms": settings.producer_linger * 1000,
        "compression.type": "lz4",
        # The Java client's partitioner, as Faust (aiokafka) uses: every producer of a
        # subscription-keyed topic puts one subscription in the same partition.
        "partitioner": "murmur2_random",
        "client.id": f"{settings.group_id}-producer",
    }
    config.update(overrides)
    return config


def consumer_config(settings: Settings, group_suffix: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "logger": LIBRDKAFKA_LOG,
        "group.id": f"{settings.group_id}-{group_suffix}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # Range assignment co-partitions the lanes: partition p of routed, backfill and every
        # retry tier goes to the same worker, so one subscription's lanes share its limits.
        "partition.assignment.strategy": "range",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 2000,
        "max.poll.interval.ms": 300000,
        "fetch.wait.max.ms": 20,
        # A partition that held the local fetch queue over its threshold is fetched again only
        # after this backoff (librdkafka: 1 s). The dispatcher pauses a busy partition at its
        # intake share and resumes it at half: each resume then idled 0.7-1 s, halving a hot
        # partition's throughput (docs/benchmarks.md, "Fetch backoff after a resume").
        "fetch.queue.backoff.ms": 20,
        "client.id": f"{settings.group_id}-{group_suffix}",
    }
    config.update(overrides)
    return config


def partition_of(key: str, partitions: int) -> int:
    """The partition `producer_config`'s partitioner (the Java client's murmur2) gives a
    non-empty ``key`` among ``partitions``: where a subscription's records are."""
    return int((murmur2(key.encode()) & 0x7FFFFFFF) % partitions)


def make_producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def write_flushed(settings: Settings, action: Callable[[Producer], None], what: str) -> None:
    """An operator's write of a few keyed records (a subscription, a key, the policy): produced
    by ``action`` on a producer of its own and flushed before returning; raises `HookstreamError`
    naming ``what`` when Kafka did not acknowledge every record within 15 s.

    The producer is not idempotent. An idempotent producer first asks the cluster for a
    producer id, and its first record waited about 0.5 s for that on the local broker (against
    10-60 ms without), so every ``POST /subscriptions`` took half a second. Idempotence guards
    the order and uniqueness of a producer's retried records in a stream; these writes are one
    record per key to a compacted topic, so a retry can at most write the same value twice,
    which every reader takes as one (a policy change's audit record on ``control`` could then
    be listed twice).
    """
    tracker = ProduceTracker()
    producer = make_producer(settings, on_delivery=tracker, **{"enable.idempotence": False})
    action(producer)
    if producer.flush(15) or tracker.failed:
        raise HookstreamError(f"could not {what}: {tracker.failed or 'timed out'}")


def make_consumer(settings: Settings, group_suffix: str, **overrides: Any) -> Consumer:
    return Consumer(consumer_config(settings, group_suffix, **overrides))


class ProduceTracker:
    """Counts delivery reports so a lane can tell that everything it produced was acked."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))

    def raise_failed(self) -> None:
        """Raise `ProduceError` if a record failed since the last call, forgetting them."""
        if self.failed:
            errors, self.failed = self.failed[:3], []
            raise ProduceError(f"produce failed: {'; '.join(errors)}")


TP = tuple[str, int]


class _Batch:
    """The records one consumed batch caused to be produced, and how many Kafka has acked."""

    __slots__ = ("acked", "error", "lock", "mark", "owner", "positions", "produced", "sealed")

    def __init__(self, lock: threading.Lock, owner: BatchAcks) -> None:
        self.lock = lock
        self.owner = owner
        self.produced = 0  # only the lane's thread adds to it
        self.acked = 0  # delivery reports, from whichever thread serves the producer
        self.error: str | None = None
        self.positions: dict[TP, int] = {}
        self.mark = 0
        self.sealed = False

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        with self.lock:
            self.acked += 1
            self.owner.waiting -= 1
            self.owner.acked_at = time.monotonic()
            if err is not None and self.error is None:
                self.error = str(err)

    @property
    def done(self) -> bool:
        return self.sealed and self.acked >= self.produced


class BatchAcks:
    """Commit-after-settle for a lane that keeps consuming while its produced records are acked.

    Each consumed batch's produced records are counted; a batch's positions become committable
    once all of its records are acknowledged and every earlier batch is too, so a commit never
    moves past a record whose outputs Kafka has not confirmed (D1). A failed produce stops the
    commits at its batch: `committable` raises and the lane stops there.
    Delivery reports may arrive on any thread that polls the shared producer.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: deque[_Batch] = deque()
        self._open = _Batch(self._lock, self)
        self.waiting = 0  # records produced and not acknowledged yet, every batch
        # monotonic: Kafka's last acknowledgement, or when records began waiting after none did
        self.acked_at = time.monotonic()

    def produce(self, producer: Producer, topic: str, key: str, value: bytes) -> None:
        """Produce one record on behalf of the batch being consumed."""
        batch = self._open
        batch.produced += 1
        produce(producer, topic, key, value, on_delivery=batch)
        with self._lock:  # its report may have come already: then this brings it back to 0
            if self.waiting <= 0:
                self.acked_at = time.monotonic()
            self.waiting += 1

    def seal(self, positions: dict[TP, int], mark: int = 0) -> None:
        """Close the current batch: ``positions`` are committable once its records are acked.

        ``mark`` is the caller's progress count as of these positions (`committable_marked`)."""
        batch, self._open = self._open, _Batch(self._lock, self)
        batch.positions = positions
        batch.mark = mark
        batch.sealed = True
        self._batches.append(batch)

    def unacknowledged(self, now: float) -> tuple[int, float]:
        """Records waiting for Kafka's acknowledgement, and for how many seconds Kafka has
        acknowledged none of them (0 while none wait)."""
        with self._lock:
            waiting, since = self.waiting, self.acked_at
        return waiting, (now - since) if waiting > 0 else 0.0

    @property
    def unacked(self) -> int:
        """Produced records of sealed batches not yet acknowledged."""
        return sum(b.produced - b.acked for b in self._batches)

    def committable(self) -> dict[TP, int]:
        """Positions of the leading batches whose records are all acked, removing them.

        Raises `KafkaIOError` once a produce of the leading batch has failed.
        """
        return self.committable_marked()[0]

    def committable_marked(self) -> tuple[dict[TP, int], int]:
        """`committable`, and the highest mark among the batches it removed (0 if none)."""
        positions: dict[TP, int] = {}
        mark = 0
        while self._batches:
            head = self._batches[0]
            if head.error is not None:
                raise ProduceError(f"produce failed: {head.error}")
            if not head.done:
                break
            self._batches.popleft()
            positions.update(head.positions)
            mark = max(mark, head.mark)
        return positions, mark

    def raise_failed(self) -> None:
        """Raise `ProduceError` if any record produced so far has failed."""
        for batch in (*self._batches, self._open):
            if batch.error is not None:
                raise ProduceError(f"produce failed: {batch.error}")

    def forget(self, partitions: list[TP]) -> None:
        """Drop revoked partitions from the batches still waiting: their new owner has them."""
        for batch in self._batches:
            for tp in partitions:
                batch.positions.pop(tp, None)


async def flush(
    producer: Producer, acks: ProduceTracker | BatchAcks, timeout_s: float = 30.0
) -> None:
    """Wait until every produced record is acked; raise KafkaIOError if any was not."""
    loop = asyncio.get_running_loop()
    remaining = await loop.run_in_executor(None, producer.flush, timeout_s)
    if remaining:
        raise KafkaIOError(f"{remaining} records still unacknowledged after {timeout_s}s")
    acks.raise_failed()


def produce(producer: Producer, topic: str, key: str, value: bytes, **kwargs: Any) -> None:
    """Produce, waiting out a full local queue instead of failing."""
    while True:
        try:
            producer.produce(topic, key=key.encode(), value=value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def take(
    consumer: Consumer,
    max_records: int,
    timeout_s: float,
    rebalances: Callable[[], int] | None = None,
) -> list[Message]:
    """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one only.

    ``Consumer.consume(n, timeout)`` waits until it has n records or the timeout ends, so at a
    low rate every record would wait out the timeout. Here a lane blocks until one record is
    there, then takes whatever else is already fetched without waiting.

    The second read can serve a rebalance queued behind the first record. That record then
    belongs to an assignment that has ended, even if the partition came straight back: counted
    under the new one, it would move the partition's commit position past the records the new
    assignment has yet to read again (D1). ``rebalances`` (a count the lane's rebalance
    callbacks raise) tells; the record is dropped, and the new assignment reads it again.
    """
    first: list[Message] = consumer.consume(1, timeout_s)
    if not first or max_records <= 1:
        return first
    before = rebalances() if rebalances is not None else 0
    rest: list[Message] = consumer.consume(max_records - 1, 0)
    if rebalances is not None and rebalances() != before:
        return rest
    return first + rest


def commit(consumer: Consumer, positions: dict[tuple[str, int], int]) -> None:
    """Commit positions synchronously; raise KafkaIOError when Kafka refuses."""
    if not positions:
        return
    offsets = [TopicPartition(topic, part, pos) for (topic, part), pos in positions.items()]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        raise KafkaIOError(f"commit failed: {exc}") from exc


def coordinates(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a consumed record."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaIOError("a consumed record has no topic, partition or offset")
    return topic, partition, offset


def header(msg: Message, name: str) -> str | None:
    """A record header's value as text (case-insensitive name), or None."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    for key, value in pairs:
        if key.lower() == name and value is not None:
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


def watermarks(
    consumer: Consumer, topic: str, timeout_s: float = 30.0
) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of ``topic``.

    Right after a topic is created its partitions may have no leader for a moment; such
    retriable errors are retried until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                raise HookstreamError(
                    f"topic {topic} is missing; run `hookstream topics apply` first"
                )
            return {
                part: consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
                for part in sorted(meta.partitions)
            }
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() == KafkaError.NOT_LEADER_FOR_PARTITION
            )
            if not retriable or time.monotonic() > deadline:
                raise KafkaIOError(f"cannot read offsets of {topic}: {exc}") from exc
            time.sleep(0.2)
