"""The ``breakers`` topic, followed (H8): every worker's copy of the fleet's shared breakers.

`BreakerLog` reads every partition of the compacted topic from the beginning on a thread of its
own and folds the records into a `FleetView` (compare-and-set on the version, in log order);
`ready` is set once it has read what the topic held at start, so a worker that starts while an
origin is open knows it before its dispatcher sends anything. `propose` writes a transition; it
takes effect, here as everywhere, only when it is read back and applied. ``on_apply`` is called
on the reader thread with each record taken.

The broker answers the reader's fetch as soon as a record is there (``fetch.min.bytes`` 1;
its wait, `FOLLOW_FETCH_WAIT_MS`, only paces a quiet reader's asks) and the producer lingers
1 ms, so a transition written by one worker is applied by the others within tens of
milliseconds on a healthy cluster. The producer is made, and has the topic's metadata and a
broker connection, before the view is ready: made on the first trip instead, it spent some
500 ms connecting while every other worker went on sending to the dead origin.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Producer, TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import (
    FOLLOW_FETCH_WAIT_MS,
    make_consumer,
    make_producer,
    watermarks,
)
from streams.domain.fleet_breaker import BreakerRecord, FleetView
from streams.errors import DecodeError
from streams.settings import Settings

log = logging.getLogger(__name__)

Listener = Callable[[BreakerRecord], None]


class BreakerLog:
    """Follows the ``breakers`` topic into a `FleetView`; writes proposals to it."""

    def __init__(self, settings: Settings, on_apply: Listener | None = None) -> None:
        self._settings = settings
        self.topic = settings.topic("breakers")
        self.view = FleetView()
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[Listener] = [on_apply] if on_apply is not None else []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer = make_producer(settings, **{"linger.ms": 1})

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def get(self, origin: str) -> BreakerRecord | None:
        with self._lock:
            return self.view.get(origin)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return self.view.counts()

    def records(self) -> list[BreakerRecord]:
        with self._lock:
            return list(self.view.records())

    def start(self) -> BreakerLog:
        self._thread = threading.Thread(target=self._follow, name="breakers", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._producer.flush(timeout_s)

    def propose(self, record: BreakerRecord) -> None:
        """Write a transition; it counts once read back and taken (`FleetView.apply`)."""
        try:
            self._producer.produce(self.topic, key=record.origin, value=codec.encode(record))
        except (BufferError, KafkaException) as exc:
            log.warning("breaker transition not written: %s", exc, extra={"origin": record.origin})
        self._producer.poll(0)

    def apply(self, record: BreakerRecord) -> bool:
        """Fold one record into the view (the reader thread, or a test)."""
        with self._lock:
            taken = self.view.apply(record)
        if taken:
            for listener in self._listeners:
                try:
                    listener(record)
                except Exception:  # a listener's bug must not stop the view
                    log.exception("breaker listener failed")
        return taken

    def _follow(self) -> None:
        try:  # the first trip must not wait for a connection and the topic's metadata
            self._producer.list_topics(self.topic, timeout=10)
        except KafkaException as exc:  # produce connects on its own later
            log.warning("breakers producer not warmed up: %s", exc)
        while not self._stop.is_set():
            try:
                self._read()
            except Exception as exc:  # the broker went away: read again from the start; the
                # view is kept meanwhile (records already held are skipped as not newer)
                log.warning("breakers topic not followed (%s); starting over", exc)
                time.sleep(1.0)

    def _read(self) -> None:
        consumer = make_consumer(
            self._settings,
            f"breakers-{uuid.uuid4().hex[:8]}",
            **{"fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS},
        )
        try:
            ends = {p: high for p, (low, high) in watermarks(consumer, self.topic).items()}
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
            behind = {p for p, high in ends.items() if high > 0}
            if not behind:
                self.ready.set()
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is not None:
                        continue
                    self._take(msg.value() or b"")
                    if behind and (msg.offset() or 0) + 1 >= ends.get(msg.partition() or 0, 0):
                        behind.discard(msg.partition() or 0)
                        if not behind:
                            log.info("breakers read: %d origins", len(self.view))
                            self.ready.set()
        finally:
            consumer.close()

    def _take(self, value: bytes) -> None:
        if not value:
            return  # a tombstone: nothing to apply
        try:
            record = codec.decode(BreakerRecord, value)
        except DecodeError as exc:
            log.warning("breaker record skipped: %s", exc)
            return
        self.apply(record)
