"""Reading the `archive` topic by time, for backfills and replays (R2, R3).

`ArchiveReader` turns a time window into an offset range per partition (Kafka's
``offsets_for_times``), then reads exactly those ranges from any position, so a resumed backfill
reads what the first run meant to and nothing more. Records are keyed by tenant: a reader that
looks for one tenant's events skips the others without decoding them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import make_consumer, watermarks
from streams.domain.models import Event
from streams.domain.recovery import Window
from streams.errors import DecodeError, HookstreamError
from streams.settings import Settings

Ranges = dict[int, tuple[int, int]]  # partition -> [start, end) offsets


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """One archive record: its coordinates, and the event when it is the tenant's."""

    partition: int
    offset: int
    event: Event | None
    at_ms: int = 0  # the record's timestamp: when the router archived it


class ArchiveReader:
    """A consumer outside any group, assigned to the archive's partitions by hand."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.topic("archive")
        self._consumer: Consumer = make_consumer(
            settings, f"archive-{uuid.uuid4().hex[:8]}", **{"enable.partition.eof": False}
        )
        self._ends: dict[int, int] = {}

    def close(self) -> None:
        self._consumer.close()

    def ranges(self, window: Window) -> Ranges:
        """The offsets of ``window`` per partition: first record at or after its start, up to
        the first record at or after its end (the end of the partition when there is none)."""
        marks = watermarks(self._consumer, self.topic)
        if window.empty:
            return {part: (high, high) for part, (_low, high) in marks.items()}

        def locate(at_ms: int) -> dict[int, int]:
            asked = [TopicPartition(self.topic, part, at_ms) for part in marks]
            found = self._consumer.offsets_for_times(asked, timeout=15)
            out = {}
            for tp in found:
                low, high = marks[tp.partition]
                out[tp.partition] = high if tp.offset < 0 else max(low, tp.offset)
            return out

        starts, ends = locate(window.start_ms), locate(window.end_ms)
        return {part: (starts[part], max(starts[part], ends[part])) for part in marks}

    def start(self, positions: dict[int, int], ends: dict[int, int]) -> None:
        """Read every partition from ``positions`` up to ``ends`` (exclusive)."""
        self._ends = {p: end for p, end in ends.items() if positions.get(p, end) < end}
        parts = [TopicPartition(self.topic, p, positions[p]) for p in sorted(self._ends)]
        self._consumer.assign(parts)
        if parts:
            self._consumer.resume(parts)  # a partition paused by an earlier read of this reader

    @property
    def finished(self) -> bool:
        return not self._ends

    def batch(
        self, tenant_id: str | None, size: int = 500, timeout_s: float = 0.5
    ) -> list[ArchivedRecord]:
        """The next records inside the ranges; the event is decoded only for ``tenant_id``
        (every tenant's when None). Records past a partition's end are dropped."""
        out: list[ArchivedRecord] = []
        key = None if tenant_id is None else tenant_id.encode()
        for msg in self._consumer.consume(size, timeout_s):
            part, offset = msg.partition(), msg.offset()
            if msg.error() is not None or part is None or offset is None:
                continue
            end = self._ends.get(part)
            if end is None or offset >= end:
                continue
            if offset + 1 >= end:
                del self._ends[part]
                self._consumer.pause([TopicPartition(self.topic, part)])
            event = None
            if key is None or msg.key() == key:
                try:
                    event = codec.decode(Event, msg.value() or b"")
                except DecodeError:
                    event = None
            out.append(ArchivedRecord(part, offset, event, msg.timestamp()[1]))
        return out

    def read(
        self, tenant_id: str | None, ranges: Ranges, timeout_s: float = 120.0
    ) -> Iterator[ArchivedRecord]:
        """Every record of ``ranges`` in one go (counts, dry runs, single lookups)."""
        self.start({p: r[0] for p, r in ranges.items()}, {p: r[1] for p, r in ranges.items()})
        deadline = time.monotonic() + timeout_s
        while not self.finished:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading {self.topic}")
            yield from self.batch(tenant_id)
