"""Idle lanes out of the dispatcher's fetches (P2): backfill and retry-tier partitions that are
caught up and quiet are paused, and resumed as soon as their high watermark moves.

The dispatcher's one consumer reads `routed`, `backfill` and every retry tier, partition p of
each (range assignment keeps them co-partitioned: one subscription's lanes share its limits on
one worker). The backfill lane and the tiers are empty most of the time, yet every fetch the
consumer sends names all of their partitions, and the broker answers each fetch for all of
them, at the rate of the live lane's fetches. `IdleLanes` pauses a partition of those lanes
that was read up to its high watermark and has not moved for `CHECK_S` (pausing leaves the
assignment as it is; a tier partition with retries waiting in memory is in use), and asks the
broker for the paused partitions' high watermarks every `WATCH_S` through an admin client: one
ListOffsets request for all of them, waited for on a thread (`latest_offsets`), never through
the consumer. A partition whose
watermark moved is resumed at the dispatcher's next step, so a record written to a quiet lane
is read at most about `WATCH_S` later than without the pause; a retry or deferral this worker
writes itself (`wrote`, from the outbox) wakes its partition at once, so a tier read back
within moments (breaker deferrals, F4) keeps its timing. A later read never makes a retry
early (D6), and a tier's delay is far longer, so it is not late either; the backfill lane is
paced in deliveries per second, which a 0.1 s shift does not move. When the broker does not
answer, every paused partition is resumed (nothing waits on a watch that cannot see). Nothing
is lost (D1): a paused partition's position and commit stay where they were, and librdkafka
reads on from there after the resume.

The retry tiers were left out for a while: with them paused, the recovery ramp's test (F4,
`test_recovery_ramp.py`) failed in 7 of 9 runs, because deliveries read in one burst at a
resume passed flow control while the breaker was half open (no ramp yet) and went out together
once it closed. Flow control now sends such a delivery back in line behind the ramp when its
turn comes after the close (`streams.lanes.flow`), so the tiers are idle lanes too.

The consumer's calls (`step`) are made by the dispatcher between two reads, like `TierTimers`'
and `IntakePacer`'s: the consumer is never used by two threads at once. A partition another
pauser holds (the intake's share, a tier's read-ahead) is left to it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from streams.adapters.kafka_clients import LIBRDKAFKA_LOG, partition_of
from streams.logging import RepeatedWarning
from streams.settings import Settings

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: A partition caught up at two checks this far apart, its position unchanged, is paused.
CHECK_S = 1.0
#: How often the paused partitions' high watermarks are asked for.
WATCH_S = 0.1
#: How long one watermark request may take before every paused partition is resumed.
ANSWER_S = 5.0
#: After failing this long, the watch asks through a new admin client. librdkafka's admin
#: client kept a leader epoch from before a rolling broker restart and every ListOffsets failed
#: with FENCED_LEADER_EPOCH for as long as the worker ran (the 50k cluster chaos run of
#: 2026-12-02: every paused partition resumed each watch, a warning a second on each worker).
RENEW_AFTER_S = 10.0


class IdleLanes:
    def __init__(
        self,
        settings: Settings,
        topics: Iterable[str],
        assigned: set[TP],
        partitions: int,
        clock: Callable[[], float] = time.monotonic,
        admin: Callable[[], Any] | None = None,
    ) -> None:
        """``admin`` makes the watch's admin client (default: librdkafka's, at the settings'
        bootstrap servers)."""
        self._bootstrap = settings.kafka_bootstrap
        self._new_admin = admin or self._librdkafka_admin
        self._partitions = partitions
        self._topics = frozenset(topics)
        self._assigned = assigned  # the dispatcher's own set, read between two reads
        self._clock = clock
        self.paused: dict[TP, int] = {}  # paused here -> its high watermark when paused
        self._woken: set[TP] = set()  # paused partitions whose watermark moved: resume them
        self._last: dict[TP, int] = {}  # position at the last check
        self._next_check = 0.0
        self._admin: Any = None
        self._failing_since: float | None = None
        # while the broker is away these fail at every check and watch: a line, then a count
        # every 10 s (the watch flushes both)
        self._no_positions = RepeatedWarning(log, "idle lanes: positions unknown", clock=clock)
        self._no_watermarks = RepeatedWarning(
            log, "idle lanes: watermarks unknown, paused partitions resumed", clock=clock
        )

    # --- the consumer's side: between two reads ---------------------------------------------
    def step(self, consumer: Consumer, held: Callable[[], set[TP]]) -> None:
        """Resume what woke; every `CHECK_S`, pause what has stayed caught up since the last
        check. ``held`` names the partitions another part of the dispatcher holds or uses (the
        intake's share, a tier's read-ahead or waiting retries). Between two reads."""
        if self._woken:
            held_elsewhere = held()
            woken, self._woken = self._woken, set()
            resume = [TopicPartition(*tp) for tp in woken if tp in self._assigned]
            for tp in woken:
                self.paused.pop(tp, None)
                self._last.pop(tp, None)  # two checks again before the next pause
            resume = [p for p in resume if (p.topic, p.partition) not in held_elsewhere]
            if resume:
                consumer.resume(resume)
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_S
        self._pause_idle(consumer, held())

    def _pause_idle(self, consumer: Consumer, held_elsewhere: set[TP]) -> None:
        tps = [
            tp
            for tp in list(self._assigned)
            if tp[0] in self._topics and tp not in self.paused and tp not in held_elsewhere
        ]
        if not tps:
            return
        try:
            positions = consumer.position([TopicPartition(*tp) for tp in tps])
        except KafkaException as exc:
            self._no_positions(error=str(exc))
            return
        pause: list[TopicPartition] = []
        for part in positions:
            tp = (part.topic, part.partition)
            low, high = consumer.get_watermark_offsets(part, cached=True)
            mark = caught_up(part.offset, low, high)
            last, self._last[tp] = self._last.get(tp), part.offset
            if mark is not None and last == part.offset:
                pause.append(TopicPartition(part.topic, part.partition))
                self.paused[tp] = mark
        if pause:
            consumer.pause(pause)

    def wrote(self, topic: str, key: str) -> None:
        """This worker wrote a record keyed ``key`` to ``topic`` (a retry or a deferral): its
        partition, if paused here, is resumed at the next step, not a watch later."""
        if self.paused:
            tp = (topic, partition_of(key, self._partitions))
            if tp in self.paused:
                self._woken.add(tp)

    def forget(self, tps: Iterable[TP]) -> None:
        """Partitions were revoked: the revoke lifted their pauses; drop what is known of them."""
        for tp in tps:
            self.paused.pop(tp, None)
            self._woken.discard(tp)
            self._last.pop(tp, None)

    # --- the watch: a task of the event loop, through an admin client ----------------------------
    async def watch(self, stop: asyncio.Event) -> None:
        """Every `WATCH_S` until ``stop``: wake the paused partitions whose watermark moved."""
        while not stop.is_set():
            await asyncio.sleep(WATCH_S)
            await self.watch_once()
            self._no_positions.flush()
            self._no_watermarks.flush()

    async def watch_once(self) -> None:
        """Ask for the paused partitions' watermarks once; wake those that moved, or all of
        them when the broker does not answer."""
        asked = dict(self.paused)
        if not asked:
            return
        try:
            latest = await asyncio.wait_for(self._watermarks(list(asked)), ANSWER_S)
        except Exception as exc:  # a watch that cannot see wakes everything
            self._no_watermarks(resumed=len(asked), error=str(exc))
            self._woken.update(asked)
            now = self._clock()
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._failing_since >= RENEW_AFTER_S:
                log.info("idle lanes: asking through a new admin client")
                self._admin, self._failing_since = None, now
            return
        self._failing_since = None
        self._woken.update(tp for tp, mark in asked.items() if latest.get(tp, mark) > mark)

    def _librdkafka_admin(self) -> AdminClient:
        conf: dict[str, Any] = {"bootstrap.servers": self._bootstrap, "logger": LIBRDKAFKA_LOG}
        return AdminClient(conf)

    async def _watermarks(self, tps: list[TP]) -> dict[TP, int]:
        if self._admin is None:
            self._admin = self._new_admin()
        return await asyncio.to_thread(latest_offsets, self._admin, tps)


def latest_offsets(admin: Any, tps: list[TP]) -> dict[TP, int]:
    """The high watermarks of ``tps``: one ListOffsets request, waited for on the calling thread.

    The watch runs this on a thread of its own. The admin client answers with a future per
    partition; awaiting each on the event loop (``asyncio.wrap_future``) cost a chained asyncio
    future and a wake-up of the loop per partition per watch: 600 a second for the 60 idle
    partitions of one worker, 40% of an idle worker's event-loop CPU (py-spy, 2026-12-04). Here
    the loop wakes once per watch. Every answer is looked at, failed or not, and the first
    failure raises (after a leader moves they all fail at once)."""
    admin.poll(0)  # serves the client's log lines
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    asked = {TopicPartition(*tp): latest for tp in tps}
    futures = admin.list_offsets(asked, request_timeout=ANSWER_S)
    concurrent.futures.wait(futures.values(), timeout=ANSWER_S)
    offsets: dict[TP, int] = {}
    failure: BaseException | None = None
    for part, future in futures.items():
        error = future.exception(timeout=0)  # TimeoutError: no answer within ANSWER_S
        if error is not None:
            failure = failure or error
        else:
            offsets[(part.topic, part.partition)] = int(future.result().offset)
    if failure is not None:
        raise failure
    return offsets


def caught_up(position: int, low: int, high: int) -> int | None:
    """The high watermark a partition was read up to, or None when it has records left to read
    or its watermarks are not known yet. A partition nothing was read from since its
    assignment (``position`` invalid) is caught up only when it holds no records at all."""
    if high < 0:
        return None
    if position == OFFSET_INVALID:
        return high if low == high else None
    return high if position >= high else None
