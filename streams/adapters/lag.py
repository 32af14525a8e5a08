"""Consumer lag of hookstream's consumer groups, measured with Kafka's admin API (SPEC O1).

Which groups: the Faust app group (``<group_id>``) and every ``<group_id>-<lane>`` group that
exists on the broker (``-router``, ``-dispatch`` and any lane added later).

**Record lag** per partition is the high watermark minus the group's committed offset. A
partition the group consumes but never committed, or whose commit fell below the log start
(retention deleted those records), counts from the log start, because hookstream's consumers
start from the earliest record. Cost per measurement: one ListGroups, one DescribeGroups, one
Metadata, one OffsetFetch per group and two ListOffsets requests (log start and end) for all
partitions.

The committed offsets are read by a consumer of each group that never joins it, not by the
admin API's ListConsumerGroupOffsets: librdkafka 2.x (2.16 included) answers a NOT_COORDINATOR
error on that admin request (the group's coordinator moved, as it does whenever a broker of a
cluster stops) by dereferencing the consumer group an admin client does not have, and the
worker dies of SIGSEGV (confluentinc/librdkafka#5040; seen in the cluster chaos runs, Q1). A
consumer has that group and looks the coordinator up again.

**Time lag** per (group, topic) is the age of the oldest record the group has not committed:
now minus the timestamp of the record at the committed offset, the largest over the topic's
lagging partitions, and 0 when nothing lags. A short-lived consumer that joins no group and
commits nothing fetches exactly that one record per lagging partition. This costs one fetch per
lagging partition, so it is bounded: at most ``max_age_probes`` partitions (largest lag first)
and ``age_timeout_s`` seconds per measurement; a topic whose lagging partitions could not be
read gets no time-lag value in that round.

On a retry tier, committed offsets trail by design: the dispatcher holds each retry record
until it is due and commits it once it is settled, so a tier's time lag normally stays below
its delay plus the jitter. docs/observability.md explains how the alerts account for it.

This module takes the measurement; the report it returns, and the arithmetic of positions, lags
and ages, is `streams.adapters.lag_report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

# confluent-kafka re-exports these from private modules without listing them in __all__
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from streams.adapters import lag_metrics
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import LIBRDKAFKA_LOG, KafkaIOError
from streams.adapters.lag_report import LagReport, PartitionLag, hookstream_groups
from streams.domain.durations import format_duration
from streams.settings import Settings

if TYPE_CHECKING:
    import faust

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 15.0

TP = tuple[str, int]
_EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]  # unannotated in the library
_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def _wait(future: Future[Any], what: str) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaIOError(f"cannot read {what}: {exc}") from exc
    except TimeoutError as exc:
        raise KafkaIOError(f"Kafka did not answer about {what}") from exc


class LagReader:
    """Measures the lag of one pipeline's consumer groups. Blocking: run it off the event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        max_age_probes: int = 200,
        age_timeout_s: float = 3.0,
    ) -> None:
        self._settings = settings
        self._max_age_probes = max_age_probes
        self._age_timeout_s = age_timeout_s
        self._admin = self._new_admin()
        self._offset_readers: dict[str, Consumer] = {}  # group -> a consumer that never joins

    def _new_admin(self) -> AdminClient:
        conf: dict[str, Any] = {
            "bootstrap.servers": self._settings.kafka_bootstrap,
            "socket.timeout.ms": 10000,
            "logger": LIBRDKAFKA_LOG,  # X2: through Python logging, never raw on stderr
        }
        return AdminClient(conf)

    def renew(self) -> None:
        """Replace the AdminClient after a failed measurement. librdkafka 2.x can abort the
        process (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``,
        confluentinc/librdkafka#4605) when an admin client whose group-coordinator requests
        timed out meets the next broker disconnect; a fresh client carries no such requests."""
        self.close()
        self._admin = self._new_admin()

    def groups(self) -> list[str]:
        """Every consumer group of this pipeline that exists on the broker."""
        listing = _wait(self._admin.list_consumer_groups(), "consumer groups")
        names = [g.group_id for g in listing.valid]
        return hookstream_groups(self._settings.group_id, names)

    def measure(self, groups: Sequence[str] | None = None, *, with_age: bool = True) -> LagReport:
        """Lag of ``groups`` (default: every group of this pipeline), with time lag if asked."""
        chosen = list(groups) if groups is not None else self.groups()
        metadata = self._metadata()
        candidates = self._pipeline_partitions(metadata)
        committed = {group: self._committed(group, candidates) for group in chosen}
        for group, tps in self._assigned(chosen).items():
            for tp in tps:
                committed[group].setdefault(tp, None)
        self._add_sibling_partitions(committed, metadata)
        wanted = {tp for offsets in committed.values() for tp in offsets}
        low = self._offsets(wanted, _EARLIEST)
        high = self._offsets(wanted, _LATEST)
        taken_at = time.time()
        parts = [
            PartitionLag(group, topic, part, offset, low[(topic, part)], high[(topic, part)])
            for group, offsets in committed.items()
            for (topic, part), offset in sorted(offsets.items())
            if (topic, part) in low and (topic, part) in high
        ]
        if with_age:
            parts = self._with_ages(parts)
        return LagReport(taken_at=taken_at, partitions=tuple(parts))

    def close(self) -> None:
        """Close the groups' offset readers (the AdminClient closes with the reader)."""
        readers, self._offset_readers = self._offset_readers, {}
        for consumer in readers.values():
            with contextlib.suppress(Exception):
                consumer.close()

    # --- the requests -----------------------------------------------------------------------
    def _metadata(self) -> Any:
        try:
            return self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaIOError(f"cannot read topic metadata: {exc}") from exc

    def _pipeline_partitions(self, metadata: Any) -> list[TopicPartition]:
        """Every partition of this pipeline's topics and of its Faust app's internal topics."""
        prefixes = (self._settings.topic_prefix, f"{self._settings.group_id}-")
        return [
            TopicPartition(name, part)
            for name, meta in sorted(metadata.topics.items())
            if name.startswith(prefixes) and meta.error is None
            for part in sorted(meta.partitions)
        ]

    def _offset_reader(self, group: str) -> Consumer:
        consumer = self._offset_readers.get(group)
        if consumer is None:
            consumer = self._offset_readers[group] = Consumer(
                {
                    "bootstrap.servers": self._settings.kafka_bootstrap,
                    "logger": LIBRDKAFKA_LOG,
                    "group.id": group,  # only to ask its coordinator: it never subscribes
                    "enable.auto.commit": False,
                    "socket.timeout.ms": 10000,
                }
            )
        return consumer

    def _committed(self, group: str, candidates: list[TopicPartition]) -> dict[TP, int | None]:
        """The offsets ``group`` committed, among ``candidates``."""
        if not candidates:
            return {}
        try:
            found = self._offset_reader(group).committed(candidates, timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaIOError(f"cannot read the offsets of group {group}: {exc}") from exc
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in found
            if tp.error is None and tp.offset >= 0  # -1001: never committed
        }

    def _assigned(self, groups: list[str]) -> dict[str, set[TP]]:
        """Partitions the groups' live members are assigned, committed or not."""
        if not groups:
            return {}
        futures = self._admin.describe_consumer_groups(groups, request_timeout=10)
        assigned: dict[str, set[TP]] = {}
        for group, future in futures.items():
            description = _wait(future, f"group {group}")
            tps = assigned.setdefault(group, set())
            for member in description.members:
                if member.assignment is not None:
                    tps.update(
                        (tp.topic, tp.partition) for tp in member.assignment.topic_partitions
                    )
        return assigned

    def _add_sibling_partitions(
        self, committed: dict[str, dict[TP, int | None]], metadata: Any
    ) -> None:
        """A group that commits on some partitions of a topic consumes all of them."""
        for offsets in committed.values():
            for topic in {topic for topic, _ in offsets}:
                meta = metadata.topics.get(topic)
                if meta is None or meta.error is not None:
                    continue
                for part in meta.partitions:
                    offsets.setdefault((topic, part), None)

    def _offsets(self, tps: set[TP], spec: Any) -> dict[TP, int]:
        if not tps:
            return {}
        request = {TopicPartition(topic, part): spec for topic, part in tps}
        futures = self._admin.list_offsets(request, request_timeout=10)
        found: dict[TP, int] = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(timeout=REQUEST_TIMEOUT_S).offset
            except KafkaException as exc:  # a deleted topic: leave it out of this round
                log.debug("no offsets for %s[%d]: %s", tp.topic, tp.partition, exc)
        return found

    # --- time lag ---------------------------------------------------------------------------
    def _with_ages(self, parts: list[PartitionLag]) -> list[PartitionLag]:
        lagging = sorted((p for p in parts if p.lag > 0), key=lambda p: -p.lag)
        targets = {(p.topic, p.partition, p.position) for p in lagging[: self._max_age_probes]}
        if not targets:
            return parts
        stamps = self._timestamps(targets)
        return [
            _with_stamp(p, stamps.get((p.topic, p.partition, p.position))) if p.lag > 0 else p
            for p in parts
        ]

    def _timestamps(self, targets: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], int]:
        """The timestamp of the record at each (topic, partition, offset), within the bound."""
        consumer = Consumer(
            {
                "bootstrap.servers": self._settings.kafka_bootstrap,
                "logger": LIBRDKAFKA_LOG,
                # never joins this group and never commits: it only reads by assignment
                "group.id": f"{self._settings.group_id}.lag-probe",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.max.bytes": 1048576,
                "max.partition.fetch.bytes": 65536,
            }
        )
        pending = {(topic, part): offset for topic, part, offset in targets}
        stamps: dict[tuple[str, int, int], int] = {}
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in pending.items()])
            deadline = time.monotonic() + self._age_timeout_s
            while pending and time.monotonic() < deadline:
                for msg in consumer.consume(len(pending), 0.2):
                    key = (msg.topic(), msg.partition())
                    if msg.error() is not None or key not in pending:
                        continue
                    # the first record at or after the committed offset (compaction may skip)
                    stamps[(key[0], key[1], pending.pop(key))] = msg.timestamp()[1]
                    consumer.pause([TopicPartition(key[0], key[1])])
        finally:
            consumer.close()
        return stamps


def _with_stamp(part: PartitionLag, stamp: int | None) -> PartitionLag:
    return PartitionLag(
        part.group, part.topic, part.partition, part.committed, part.low, part.high, stamp
    )


class LagExporter:
    """Measures lag every ``interval_s`` seconds and publishes it as hookstream's lag gauges."""

    def __init__(
        self, settings: Settings, interval_s: float = 15.0, reader: LagReader | None = None
    ) -> None:
        self._settings = settings
        self.interval_s = interval_s
        self._reader = reader or LagReader(settings)
        self._tiers = [
            (topic, format_duration(delay), delay)
            for delay, topic in load_topology(settings).retry_tiers
        ]
        self.last: LagReport | None = None

    def export_once(self) -> LagReport:
        """One blocking measurement, published to `streams.metrics`."""
        report = self._reader.measure()
        lag_metrics.publish_lag(
            [(p.group, p.topic, p.partition, p.lag) for p in report.partitions],
            [(t.group, t.topic, t.age_s) for t in report.topics() if t.age_s is not None],
            self._tiers,
            report.taken_at,
        )
        self.last = report
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Export until ``stop`` is set. A failed round is logged and counted, never fatal."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                await loop.run_in_executor(None, self.export_once)
            except Exception as exc:  # the worker must keep delivering without lag metrics
                lag_metrics.record_lag_error()
                log.warning("consumer lag measurement failed: %s", exc)
                self._reader.renew()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
        await loop.run_in_executor(None, self._reader.close)


def lag_component(app: faust.App, settings: Settings) -> None:
    """Faust component: export this pipeline's consumer lag every 15 s while the worker runs."""
    from mode import Service

    class LagService(Service):
        _stop: asyncio.Event
        _task: asyncio.Task[None]

        async def on_start(self) -> None:
            self._stop = asyncio.Event()
            exporter = LagExporter(settings)
            self._task = asyncio.create_task(exporter.run(self._stop), name="hookstream-lag")

        async def on_stop(self) -> None:
            self._stop.set()
            await asyncio.wait([self._task], timeout=REQUEST_TIMEOUT_S + 5)

    app.service(LagService)
