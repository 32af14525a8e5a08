"""One backfill or replay job, run to its end: dead letters first, then the archive window.

`JobRun` is the body of a job for `streams.lanes.backfill.BackfillRunner`. It waits until the
worker's registry shows the subscription version the job was made for (so the dispatcher does
not park its records as if the subscription were still suspended) and until its windows have
ended (a re-enable's reach `reenable_settle` past it, R2), fixes the job's ranges and total on
its first run, then writes each selected delivery to the `backfill` topic at the job's pace,
checkpointing its progress about once a second. Dead letters selected by the job are written
first; an archived event whose delivery was among them is not written twice, nor is one
archived after the re-enable that the live path already attempted (`Job.overlaps_live`): it is
counted done. The dispatcher settles a backfilled copy of a delivery that just succeeded
without sending it (its dedup of recent successes, Q1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from confluent_kafka import Producer

from streams.adapters import codec
from streams.adapters.archive_reader import ArchiveReader
from streams.adapters.kafka_clients import ProduceTracker, produce
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.idempotency import delivery_id
from streams.domain.models import DeadLetter, Delivery, Subscription
from streams.domain.pacing import Pacer, effective_rate
from streams.domain.recovery import (
    Job,
    JobState,
    Progress,
    from_letter,
    letter_selected,
    redelivery,
    selects,
)
from streams.errors import HookstreamError
from streams.services.ledger import LedgerSource, letters_to_replay
from streams.settings import Settings

log = logging.getLogger(__name__)

#: How long a job waits for the worker's registry to show the version it was made for.
VERSION_WAIT_S = 30.0
#: A pause before the first record, so every worker's registry has the new version too.
START_GRACE_S = 1.0
#: How long after a window's end its records are read: the routers' archive records of its
#: last moments are acknowledged by then (their producers linger for milliseconds).
WINDOW_SLACK_S = 2.0
CHECKPOINT_EVERY_S = 1.0
#: How long a job waits for the ledger state of its subscription while partitions move.
LEDGER_WAIT_S = 300.0
T = TypeVar("T")


class JobRun:
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        job: Job,
        progress: Progress,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[Any]],
        producer: Producer,
        acks: ProduceTracker,
        checkpoint: Callable[[], Awaitable[None]],
        ledger: LedgerSource,
    ) -> None:
        """``ledger`` gives the job's dead letters and the deliveries' attempt counts (S6)."""
        self._settings = settings
        self._ledger = ledger
        self._registry = registry
        self.job = job
        self.progress = progress
        self._clock = clock
        self._sleep = sleep
        self._producer = producer
        self._acks = acks
        self._checkpoint = checkpoint
        self._topic = settings.topic("backfill")
        self._pacer = Pacer(job.rate)
        self._last_checkpoint = time.monotonic()
        self._dlq_ids: set[str] = set()
        self._seen: set[str] = set()

    # --- the phases ----------------------------------------------------------------------------
    async def execute(self) -> None:
        sub = await self._subscription()
        if sub is None:
            self.progress.state = JobState.ABORTED
            return
        await self._windows_ended()
        letters = await self._letters(sub)
        self._dlq_ids = {d.delivery.delivery_id for d in letters if d.delivery is not None}
        reader = ArchiveReader(self._settings)
        try:
            if not self.progress.started:
                await asyncio.to_thread(self._plan, reader, sub, len(letters))
                await self._checkpoint()
            await self._sleep(START_GRACE_S)
            await self._write_letters(letters)
            await self._write_archive(reader)
        finally:
            await asyncio.to_thread(reader.close)
        if self.progress.state is JobState.RUNNING:
            self.progress.state = JobState.FINISHED
        await self._checkpoint()

    async def _subscription(self) -> Subscription | None:
        deadline = time.monotonic() + VERSION_WAIT_S
        while True:
            sub = self._registry.get(self.job.subscription_id)
            if sub is not None and sub.updated_at >= self.job.min_version:
                return sub
            if time.monotonic() > deadline:
                return sub  # a newer write may have replaced it; deleted: None
            await asyncio.sleep(0.1)

    async def _windows_ended(self) -> None:
        """Wait until the job's windows are over and what was archived or parked in them is on
        Kafka: a re-enable's backfill reaches past its own time (`reenable_settle`)."""
        end_s = self.job.writes_after_ms / 1000 + WINDOW_SLACK_S
        while (left := end_s - self._clock()) > 0:
            await self._sleep(min(left, 1.0))

    async def _letters(self, sub: Subscription) -> list[DeadLetter]:
        """The job's dead letters: one per delivery, with its lifetime attempt count (R3)."""
        if self.job.dlq_window is None:
            return []
        window = self.job.dlq_window
        assert window is not None
        found = await self._asked(
            lambda: letters_to_replay(
                self._ledger, sub.id, self.job.dlq_reason, window.start_ms, window.end_ms
            )
        )
        return [d for d in found if letter_selected(d, sub.id, self.job.dlq_reason, None)]

    def _plan(self, reader: ArchiveReader, sub: Subscription, letters: int) -> None:
        """Fix the archive ranges and count the total, once per job."""
        total = letters
        window = self.job.archive_window
        if window is not None:
            ranges = reader.ranges(window)
            self.progress.positions = {p: start for p, (start, _end) in ranges.items()}
            self.progress.ends = {p: end for p, (_start, end) in ranges.items()}
            seen: set[str] = set()
            for record in reader.read(sub.tenant_id, ranges):
                event = record.event
                if event is None or not selects(sub, event) or event.id in seen:
                    continue
                seen.add(event.id)
                if delivery_id(event.id, sub.id) not in self._dlq_ids:
                    total += 1
        self.progress.total = total
        self.progress.started = True

    async def _write_letters(self, letters: list[DeadLetter]) -> None:
        for letter in letters[self.progress.dlq_written :]:
            sub = self._current()
            if sub is None:
                return
            now_ms = int(self._clock() * 1000)
            await self._send(sub, from_letter(letter, self.job.lane, now_ms))
            self.progress.dlq_written += 1
            await self._maybe_checkpoint()
        self.progress.dlq_finished = True

    async def _write_archive(self, reader: ArchiveReader) -> None:
        progress = self.progress
        if not progress.ends:
            return
        reader.start(dict(progress.positions), dict(progress.ends))
        loop = asyncio.get_running_loop()
        while not reader.finished:
            sub = self._current()
            if sub is None:
                return
            batch = await loop.run_in_executor(None, reader.batch, sub.tenant_id)
            counts = await self._counts(sub, batch)
            for record in batch:
                event = record.event
                if event is not None and selects(sub, event) and event.id not in self._seen:
                    self._seen.add(event.id)
                    key = delivery_id(event.id, sub.id)
                    attempts = counts.get(key, 0)
                    if self.job.overlaps_live(record.at_ms, attempts):
                        self.progress.done += 1  # the live path has it (R2)
                    elif key not in self._dlq_ids:
                        now_ms = int(self._clock() * 1000)
                        number = attempts + 1  # after its lifetime count (D7)
                        delivery = redelivery(key, sub, event, self.job.lane, number, now_ms)
                        await self._send(sub, delivery)
                progress.positions[record.partition] = record.offset + 1
                await self._maybe_checkpoint()

    async def _counts(self, sub: Subscription, batch: list[Any]) -> dict[str, int]:
        """The lifetime attempt counts of a batch's deliveries to ``sub``, from the ledger."""
        keys = [
            delivery_id(r.event.id, sub.id)
            for r in batch
            if r.event is not None and selects(sub, r.event)
        ]
        if not keys:
            return {}
        return await self._asked(lambda: self._ledger.attempt_counts(sub.id, keys))

    async def _asked(self, ask: Callable[[], Awaitable[T]]) -> T:
        """``ask()`` of the ledger state, asked again while its partition moves between workers
        (503): a rebalance pauses the job instead of failing it."""
        deadline = time.monotonic() + LEDGER_WAIT_S
        while True:
            try:
                return await ask()
            except HookstreamError as exc:
                if time.monotonic() > deadline:
                    raise
                log.info("backfill job waits for the ledger: %s", exc)
                await asyncio.sleep(1.0)

    # --- writing -------------------------------------------------------------------------------
    def _current(self) -> Subscription | None:
        """The subscription now; None when it was deleted (the job is aborted). A suspended or
        disabled one still gets its records: the dispatcher parks them (H4), nothing is lost."""
        sub = self._registry.get(self.job.subscription_id)
        if sub is None:
            self.progress.state = JobState.ABORTED
        return sub

    async def _send(self, sub: Subscription, delivery: Delivery) -> None:
        self._pacer.set_rate(effective_rate(self.job.rate, self.job.rate, sub.rate_limit))
        wait = self._pacer.reserve(self._clock())
        if wait > 0:
            await self._sleep(wait)
        produce(self._producer, self._topic, sub.id, codec.encode(delivery), on_delivery=self._acks)
        self._producer.poll(0)
        self.progress.done += 1

    async def _maybe_checkpoint(self) -> None:
        if time.monotonic() - self._last_checkpoint >= CHECKPOINT_EVERY_S:
            self._last_checkpoint = time.monotonic()
            await self._checkpoint()
