"""The backfill runner: backfill and replay jobs from `control` to the `backfill` lane (R2, R3).

One confluent-kafka consumer in group ``<group_id>-backfill`` reads `control`; the group gives
each control partition (and so each subscription) to exactly one worker. Jobs of a partition
run one after another, partitions side by side. A job writes the subscription's deliveries to
the `backfill` topic, keyed by subscription id, with the live delivery's key (D2), paced by a
`Pacer` (default 5/s, never above the subscription's own rate limit, F4): the dispatcher then
delivers them as they come.

Resuming after a crash: while a job runs, the runner commits its control partition *at* the
job's offset, with the job's progress as commit metadata (dead letters written, the archive
position per partition, done / total), after the producer has acknowledged every record the
progress counts. A new owner re-reads the job and continues from that progress: records
written after the last commit (at most about a second's worth) are sent again, with the same
webhook-id. A finished job's offset is committed past it, with its final progress kept in the
metadata so the API can still show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from mode import Service

from streams import metrics
from streams.adapters import codec
from streams.adapters.control_log import RUNNER_GROUP
from streams.adapters.kafka_clients import ProduceTracker, flush, make_consumer, make_producer
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.models import ControlEvent
from streams.domain.recovery import ControlKind, Job, Progress, resume_point
from streams.errors import DecodeError
from streams.lanes.job import JobRun
from streams.services.ledger import LedgerSource
from streams.settings import Settings

log = logging.getLogger(__name__)

COMMIT_EVERY_S = 1.0
#: Finished jobs remembered per partition in the commit metadata (shown by the API).
RECENT_JOBS = 8
#: Kafka's default offset.metadata.max.bytes.
METADATA_LIMIT = 4096


class BackfillRunner:
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        ledger: LedgerSource,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._ledger = ledger
        self._clock = clock
        self._sleep = sleep
        self._topic = settings.topic("control")
        self._producer = make_producer(settings)
        self._acks = ProduceTracker()
        self._jobs: dict[int, deque[tuple[int, Job]]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._stored: dict[int, list[Progress]] = {}  # metadata found at assignment
        self._current: dict[int, Progress] = {}
        self._recent: dict[int, list[Progress]] = {}
        self._consumed: dict[int, int] = {}
        self._to_commit: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.finished_jobs = 0

    # --- rebalance (called on the consumer's thread, inside consume) ---------------------------
    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        for tp in consumer.committed(parts, timeout=10):
            items = _parse(tp.metadata)
            self._stored[tp.partition] = items
            self._recent[tp.partition] = [p for p in items if p.state.value != "running"]

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._drop, [tp.partition for tp in parts])

    def _drop(self, parts: list[int]) -> None:
        for part in parts:
            task = self._tasks.pop(part, None)
            if task is not None:
                task.cancel()
            self._jobs.pop(part, None)
            self._current.pop(part, None)
            self._consumed.pop(part, None)
            self._to_commit.pop(part, None)

    # --- intake --------------------------------------------------------------------------------
    def _take(self, part: int, offset: int, value: bytes) -> None:
        self._consumed[part] = offset + 1
        try:
            event = codec.decode(ControlEvent, value)
            if event.kind != ControlKind.JOB_REQUESTED.value:
                return
            job = Job.from_json(event.payload_json)
        except (DecodeError, ValueError, KeyError, TypeError) as exc:
            log.error("undecodable backfill job skipped: %s", exc)
            return
        self._jobs.setdefault(part, deque()).append((offset, job))
        if part not in self._tasks:
            task = asyncio.get_running_loop().create_task(self._work(part))
            self._tasks[part] = task

    async def _work(self, part: int) -> None:
        queue = self._jobs.get(part)
        try:
            while queue:
                offset, job = queue[0]
                stored = next(
                    (p for p in self._stored.get(part, []) if p.job_id == job.job_id), None
                )
                progress = resume_point(None if stored is None else stored.to_json(), job)
                if progress.state.value != "running":
                    queue.popleft()  # finished before a crash lost the commit past it
                    continue
                self._current[part] = progress
                run = JobRun(
                    self._settings,
                    self._registry,
                    job,
                    progress,
                    self._clock,
                    self._sleep,
                    self._producer,
                    self._acks,
                    functools.partial(self._checkpoint, part, offset),
                    self._ledger,
                )
                await run.execute()
                await self._finish(part, offset, job, progress)
                queue.popleft()
        except Exception:
            log.exception("backfill job failed; it resumes on the next assignment")
        finally:
            self._tasks.pop(part, None)

    async def _checkpoint(self, part: int, offset: int) -> None:
        """Every record the progress counts is acknowledged: the progress may be committed."""
        await flush(self._producer, self._acks)
        self._to_commit[part] = offset
        progress = self._current.get(part)
        if progress is not None:
            metrics.set_backfill_progress(progress.subscription_id, progress.done, progress.total)

    async def _finish(self, part: int, offset: int, job: Job, progress: Progress) -> None:
        await flush(self._producer, self._acks)
        self._current.pop(part, None)
        recent = self._recent.setdefault(part, [])
        recent.insert(0, progress)
        del recent[RECENT_JOBS:]
        self._to_commit[part] = offset + 1
        metrics.backfill_finished(job.subscription_id)
        done = ControlEvent(
            subscription_id=job.subscription_id,
            kind=ControlKind.JOB_FINISHED.value,
            at=int(self._clock() * 1000),
            reason=progress.state.value,
            payload_json=orjson.dumps({"job_id": job.job_id, **progress.view()}).decode(),
        )
        self._producer.produce(
            self._topic,
            key=job.subscription_id.encode(),
            value=codec.encode(done),
            on_delivery=self._acks,
        )
        await flush(self._producer, self._acks)
        self.finished_jobs += 1
        log.info(
            "backfill job ended", extra={"subscription_id": job.subscription_id, **progress.view()}
        )

    # --- commits -------------------------------------------------------------------------------
    def _positions(self) -> list[TopicPartition]:
        out = []
        for part in list(self._consumed):
            if self._jobs.get(part):
                offset = self._to_commit.get(part)
                if offset is None:
                    continue
            else:
                offset = self._consumed[part]
            items = [p for p in (self._current.get(part),) if p is not None]
            meta = _metadata(items + self._recent.get(part, []))
            out.append(TopicPartition(self._topic, part, offset, metadata=meta))
        return out

    def _commit(self, consumer: Consumer) -> None:
        positions = self._positions()
        if positions:
            try:
                consumer.commit(offsets=positions, asynchronous=False)
            except Exception as exc:  # the next commit carries the same or a later position
                log.warning("backfill runner commit failed: %s", exc)

    # --- the loop ------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await self._registry.ready.wait()
        loop = self._loop = asyncio.get_running_loop()
        # The broker answers a fetch as soon as a job is written (fetch.min.bytes 1), so a long
        # wait only spares the broker the empty fetches of a quiet topic: 2 a second, not 50
        # (docs/benchmarks.md, "Backfill fetch wait 500 ms").
        consumer = make_consumer(self._settings, RUNNER_GROUP, **{"fetch.wait.max.ms": 500})
        consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        last = time.monotonic()
        try:
            while not stop.is_set():
                msgs = await loop.run_in_executor(None, consumer.consume, 200, 0.2)
                for msg in msgs:
                    part, offset = msg.partition(), msg.offset()
                    if msg.error() is None and part is not None and offset is not None:
                        self._take(part, offset, msg.value() or b"")
                if time.monotonic() - last >= COMMIT_EVERY_S:
                    await loop.run_in_executor(None, self._commit, consumer)
                    last = time.monotonic()
        finally:
            for task in list(self._tasks.values()):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await loop.run_in_executor(None, self._commit, consumer)
            await loop.run_in_executor(None, consumer.close)


def _metadata(items: list[Progress]) -> str:
    """Progress items as commit metadata, dropping the oldest until it fits."""
    while True:
        text = "[" + ",".join(p.to_json() for p in items) + "]"
        if len(text.encode()) <= METADATA_LIMIT or not items:
            return text
        items = items[:-1]


def _parse(text: str | None) -> list[Progress]:
    if not text:
        return []
    try:
        raw = orjson.loads(text)
        return [Progress.from_json(orjson.dumps(item).decode()) for item in raw]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return []


def backfill_component(app: Any, settings: Settings) -> None:
    """Faust component: run the backfill runner next to the pipeline (after pipeline_component)."""

    class BackfillService(Service):
        _stop: asyncio.Event
        _task: asyncio.Task[None]

        async def on_start(self) -> None:
            self._stop = asyncio.Event()
            runner = BackfillRunner(
                settings,
                app.hookstream_pipeline.registry,
                app.hookstream_ledger,
            )
            self._task = asyncio.create_task(runner.run(self._stop), name="hookstream-backfill")

        async def on_stop(self) -> None:
            self._stop.set()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, 20)

    app.service(BackfillService)
