"""The `control` topic as re-enable and replay use it: append, read back, and job progress.

- `append` writes control events and returns where Kafka put them (partition, offset, time),
  which the re-enable claim needs: the order of one subscription's claims is their offsets.
- `read_partition` reads one control partition between a time and an offset.
- The backfill runner's consumer group (``<group_id>-backfill``) keeps, with its committed
  position on each control partition, the progress of the job it is running there (commit
  metadata, in the compacted ``__consumer_offsets``). `stored_progress` reads it back for the
  admin API and the CLI, from any process.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import make_consumer, make_producer, watermarks
from streams.domain.models import ControlEvent
from streams.errors import DecodeError, HookstreamError
from streams.settings import Settings

#: The consumer-group suffix of the backfill runner.
RUNNER_GROUP = "backfill"


@dataclass(frozen=True, slots=True)
class Appended:
    partition: int
    offset: int
    at: int  # the record's timestamp, ms


def append(
    settings: Settings, events: list[ControlEvent], timeout_s: float = 15.0
) -> list[Appended]:
    """Write ``events`` to `control` (keyed by subscription id) and wait for each to be acked."""
    done: list[Appended | None] = [None] * len(events)
    failed: list[str] = []

    def report(index: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.append(str(err))
                return
            _kind, at = msg.timestamp()
            done[index] = Appended(msg.partition() or 0, msg.offset() or 0, at)

        return on_delivery

    producer = make_producer(settings)
    topic = settings.topic("control")
    for index, event in enumerate(events):
        producer.produce(
            topic,
            key=event.subscription_id.encode(),
            value=codec.encode(event),
            on_delivery=report(index),
        )
    left = producer.flush(timeout_s)
    if left or failed or any(d is None for d in done):
        raise HookstreamError(f"could not write to {topic}: {failed or 'timed out'}")
    return [d for d in done if d is not None]


def read_partition(
    settings: Settings, partition: int, since_ms: int, through_offset: int, timeout_s: float = 20.0
) -> list[tuple[int, int, ControlEvent]]:
    """(offset, timestamp, event) of one control partition, from ``since_ms`` up to and
    including ``through_offset``."""
    topic = settings.topic("control")
    consumer = make_consumer(settings, f"control-read-{uuid.uuid4().hex[:8]}")
    out: list[tuple[int, int, ControlEvent]] = []
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, partition, since_ms)], 10)
        start = found[0].offset
        if start < 0 or start > through_offset:
            return out
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading {topic}")
            for msg in consumer.consume(500, 0.5):
                offset = msg.offset()
                if msg.error() is not None or offset is None:
                    continue
                if offset > through_offset:
                    return out
                try:
                    event = codec.decode(ControlEvent, msg.value() or b"")
                except DecodeError:
                    event = None
                if event is not None:
                    out.append((offset, msg.timestamp()[1], event))
                if offset == through_offset:
                    return out
    finally:
        consumer.close()


def stored_progress(settings: Settings) -> list[str]:
    """The progress metadata the backfill runner committed on every control partition.

    HookstreamError when Kafka cannot say now (its group coordinator moves during a broker's
    restart: ``NOT_COORDINATOR``); callers show the progress as unknown, never a 500."""
    topic = settings.topic("control")
    consumer = make_consumer(settings, RUNNER_GROUP)  # never subscribes: only reads commits
    try:
        parts = sorted(watermarks(consumer, topic))
        committed = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        return [tp.metadata for tp in committed if tp.metadata]
    except KafkaException as exc:
        raise HookstreamError(f"the backfill progress cannot be read now: {exc}") from exc
    finally:
        consumer.close()
