"""The ledger's reader: `attempts` and `dlq` materialised into the worker's state (S6).

One confluent-kafka consumer on its own thread, assigned by hand the partitions this worker
holds (the Faust assignor's, so the ledger lives where the subscription's health and analytics
live), reads both topics in batches (``consume(1000)``, waiting up to ``ledger_fetch_wait`` to
fill a fetch) and writes each partition's records into `LedgerStore` in one batch together with
the partition's next offsets. The topics are the changelog: there is no second copy on Kafka.

- **Restore.** A partition taken over starts at the next offset its local state records, or at
  the beginning of the topic when it has none (a new worker, a wiped disk), and is not *ready*
  (its reads answer 503) until it has read up to the end the topic had when it was assigned.
  The time each restore took is logged and kept in `restores`.
- **Consistency.** An attempt is readable once the dispatcher's producer has sent it (about
  ``producer_linger``) and this reader has fetched it (at most ``ledger_fetch_wait``): typically
  well under a second. Reads never see half a batch.
- **Expiry.** Every ``ledger_sweep_interval`` the reader deletes deliveries whose latest
  attempt, and dead letters whose time, are past their topic's ``retention.ms``, and the state
  of subscriptions the registry no longer has (seen absent on two sweeps in a row).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from streams import metrics
from streams.adapters.kafka_clients import make_consumer
from streams.adapters.ledger_store import LedgerStore
from streams.domain import ledger_keys as k
from streams.settings import Settings

log = logging.getLogger(__name__)

BATCH: Final = 1000
#: Entries expired per partition and sweep at most; the rest goes at the next sweep.
SWEEP_BUDGET: Final = 20_000
#: How often the reader publishes its store's compaction state (`hookstream_ledger_compaction`).
STATS_INTERVAL_S: Final = 2.0

#: One partition's (offset, value) of `attempts`, and of `dlq`.
_Records = tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]


class Materialiser:
    def __init__(
        self,
        settings: Settings,
        store: LedgerStore,
        partitions: int,
        retention_ms: tuple[int, int],
        deleted: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``retention_ms`` is (attempts, dlq); ``deleted(sub_id)`` tells that the registry
        knows ``sub_id`` no longer exists."""
        self._settings = settings
        self._store = store
        self._partitions = partitions
        self._topics = (settings.topic("attempts"), settings.topic("dlq"))
        self._retention = retention_ms
        self._deleted = deleted
        self._clock = clock
        self._lock = threading.Lock()
        self._wanted: set[int] = set()
        self._ready: set[int] = set()
        self._assigned: set[int] = set()
        self._targets: dict[tuple[int, int], int] = {}  # (topic index, partition) -> end
        self._started: dict[int, float] = {}
        self._absent: set[str] = set()
        self._next_sweep = 0.0
        self._next_stats = 0.0
        self.restores: dict[int, float] = {}  # partition -> seconds its last restore took
        self.skipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-reader", daemon=True)

    # --- the event loop's side ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def want(self, partitions: set[int]) -> None:
        """Materialise these partitions (the ones this worker holds) and no others."""
        with self._lock:
            self._wanted = set(partitions)
            self._ready &= self._wanted

    def ready(self) -> set[int]:
        """The partitions read up to where the topic ended when they were assigned."""
        with self._lock:
            return set(self._ready)

    # --- the reader's thread ----------------------------------------------------------------

    def _run(self) -> None:
        wait_ms = max(1, round(self._settings.ledger_fetch_wait * 1000))
        consumer = make_consumer(
            self._settings,
            "ledger",
            **{"fetch.wait.max.ms": wait_ms, "fetch.min.bytes": 65536},
        )
        try:
            while not self._stop.is_set():
                try:
                    self._step(consumer)
                except KafkaException as exc:  # the broker is away: try again, never exit
                    log.warning("ledger reader: %s", exc)
                    self._stop.wait(1.0)
                except Exception:  # one bad batch must not stop the ledger (Q2)
                    log.exception("ledger batch not applied")
                    self._stop.wait(1.0)
        finally:
            consumer.close()

    def _step(self, consumer: object) -> None:
        self._sync(consumer)
        messages = consumer.consume(BATCH, 0.2) if self._assigned else []  # type: ignore[attr-defined]
        if not self._assigned:
            self._stop.wait(0.2)
        grouped = self._group(messages)
        now_ms = int(self._clock() * 1000)
        expired = (now_ms - self._retention[0], now_ms - self._retention[1])
        for part, (attempts, letters) in grouped.items():
            self.skipped += self._store.apply(part, attempts, letters, expired)
            for index, records in enumerate((attempts, letters)):
                if records:
                    self._reached(index, part, records[-1][0] + 1)
        if self._clock() >= self._next_stats:
            self._next_stats = self._clock() + STATS_INTERVAL_S
            metrics.set_ledger_compaction(*self._store.compaction())
        if self._clock() >= self._next_sweep:
            self._next_sweep = self._clock() + self._settings.ledger_sweep_interval
            self.sweep()

    def _group(self, messages: list[Any]) -> dict[int, _Records]:
        """Each assigned partition's (offset, value) of `attempts` and of `dlq`."""
        grouped: dict[int, _Records] = {}
        assigned, attempts_topic = self._assigned, self._topics[0]
        for msg in messages:  # every attempt passes here: no allocation but its own tuple
            if msg.error() is not None:
                continue
            part = msg.partition()
            lists = grouped.get(part)
            if lists is None:
                if part not in assigned:
                    continue
                lists = grouped[part] = ([], [])
            lists[0 if msg.topic() == attempts_topic else 1].append(
                (msg.offset(), msg.value() or b"")
            )
        return grouped

    def _sync(self, consumer: object) -> None:
        with self._lock:
            wanted = set(self._wanted)
        gone = self._assigned - wanted
        new = wanted - self._assigned
        if gone:
            tps = [TopicPartition(t, p) for t in self._topics for p in gone]
            consumer.incremental_unassign(tps)  # type: ignore[attr-defined]
            self._assigned -= gone
            for index in (0, 1):
                for p in gone:
                    self._targets.pop((index, p), None)
        if new:
            tps = []
            for p in sorted(new):
                self._started[p] = time.monotonic()
                for index, (topic, kind) in enumerate(
                    zip(self._topics, (k.ATTEMPTS_TOPIC, k.DLQ_TOPIC), strict=True)
                ):
                    start = self._store.next_offset(p, kind)
                    low, high = consumer.get_watermark_offsets(  # type: ignore[attr-defined]
                        TopicPartition(topic, p), timeout=10
                    )
                    if max(low, start or 0) < high:
                        self._targets[(index, p)] = high
                    offset = OFFSET_BEGINNING if start is None else start
                    tps.append(TopicPartition(topic, p, offset))
            consumer.incremental_assign(tps)  # type: ignore[attr-defined]
            self._assigned |= new
            for p in new:
                self._maybe_ready(p)

    def _reached(self, index: int, partition: int, next_offset: int) -> None:
        end = self._targets.get((index, partition))
        if end is not None and next_offset >= end:
            del self._targets[(index, partition)]
            self._maybe_ready(partition)

    def _maybe_ready(self, partition: int) -> None:
        if any((i, partition) in self._targets for i in (0, 1)):
            return
        took = time.monotonic() - self._started.get(partition, time.monotonic())
        self.restores[partition] = took
        with self._lock:
            if partition in self._wanted:
                self._ready.add(partition)
        log.info("ledger partition %d ready after %.2fs", partition, took)

    def sweep(self) -> None:
        """Expire entries past their topic's retention, and drop deleted subscriptions."""
        now_ms = int(self._clock() * 1000)
        attempts_before = now_ms - self._retention[0]
        letters_before = now_ms - self._retention[1]
        expired = dropped = 0
        absent: set[str] = set()
        for p in range(self._partitions):
            expired += self._store.expire(p, attempts_before, letters_before, SWEEP_BUDGET)
            for sub_id in self._store.subscriptions(p):
                if not self._deleted(sub_id):
                    continue
                if sub_id in self._absent:
                    dropped += self._store.drop_subscription(p, sub_id)
                else:
                    absent.add(sub_id)
        self._absent = absent
        if expired or dropped:
            log.info("ledger sweep: %d expired, %d of deleted subscriptions", expired, dropped)
