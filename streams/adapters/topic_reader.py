"""Read a topic up to its current end, once: from the beginning (the CLI) or from a time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

from streams.adapters.kafka_clients import make_consumer, watermarks
from streams.errors import HookstreamError
from streams.settings import Settings


def scan(settings: Settings, topic: str, timeout_s: float = 60.0) -> Iterator[Message]:
    """Yield every record of ``topic`` present now, partition by partition order interleaved."""
    consumer = make_consumer(settings, f"scan-{uuid.uuid4().hex[:8]}")
    try:
        targets = {
            part: high for part, (low, high) in watermarks(consumer, topic).items() if high > low
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in targets])
        deadline = time.monotonic() + timeout_s
        while targets:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading {topic}")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                part = msg.partition()
                if part not in targets:
                    continue
                if (msg.offset() or 0) + 1 >= targets[part]:
                    del targets[part]
                yield msg
    finally:
        consumer.close()


def read_since(
    settings: Settings,
    topic: str,
    partitions: list[int],
    since_ms: int,
    timeout_s: float = 10.0,
) -> Iterator[Message]:
    """Yield the records of some partitions of ``topic`` written at or after ``since_ms``, up
    to their end when the read began. Raises `HookstreamError` after ``timeout_s``."""
    if not partitions:
        return
    consumer = make_consumer(settings, f"tail-{uuid.uuid4().hex[:8]}")
    try:
        wanted = [TopicPartition(topic, p, since_ms) for p in partitions]
        starts = consumer.offsets_for_times(wanted, timeout=timeout_s)
        targets: dict[int, int] = {}
        assign: list[TopicPartition] = []
        for tp in starts:
            _, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if tp.offset >= 0 and tp.offset < high:  # -1: nothing written since since_ms
                targets[tp.partition] = high
                assign.append(TopicPartition(topic, tp.partition, tp.offset))
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while targets:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading the tail of {topic}")
            for msg in consumer.consume(1000, 0.2):
                part = msg.partition()
                if msg.error() is not None or part not in targets:
                    continue
                if (msg.offset() or 0) + 1 >= targets[part]:
                    del targets[part]
                yield msg
    except KafkaException as exc:
        raise HookstreamError(f"could not read the tail of {topic}: {exc}") from exc
    finally:
        consumer.close()


def timestamps_at(
    settings: Settings, positions: list[TopicPartition], timeout_s: float = 5.0
) -> dict[tuple[str, int], int]:
    """The timestamp (ms) of the record at each position, for positions that hold one now.
    Raises `HookstreamError` after ``timeout_s``."""
    consumer = make_consumer(settings, f"peek-{uuid.uuid4().hex[:8]}")
    found: dict[tuple[str, int], int] = {}
    try:
        wanted: set[tuple[str, int]] = set()
        assign: list[TopicPartition] = []
        for tp in positions:
            _, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if 0 <= tp.offset < high:
                wanted.add((tp.topic, tp.partition))
                assign.append(TopicPartition(tp.topic, tp.partition, tp.offset))
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while wanted:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading {len(wanted)} committed positions")
            for msg in consumer.consume(100, 0.2):
                where = (msg.topic() or "", msg.partition() or 0)
                if msg.error() is None and where in wanted:
                    wanted.discard(where)
                    found[where] = msg.timestamp()[1]
                    consumer.pause([TopicPartition(*where)])
        return found
    except KafkaException as exc:
        raise HookstreamError(f"could not read committed positions: {exc}") from exc
    finally:
        consumer.close()
