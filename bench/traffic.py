"""Paced traffic for the flow-control benchmarks: several streams of events at fixed rates.

`pipeline` starts what one run needs: a fresh nginx that logs each request's path (every
subscription of a scenario has a URL path of its own) and a `Rig` with the scenario's
subscriptions and worker settings. `stages` splits deliveries' latency at the points the
pipeline records (`bench.hops`): the router's routing time of the `routed` record and the
attempt's start in the ledger.

A `Stream` is one producer's events: a tenant, a rate (events/s) and the (event type,
subscription) pairs its events go to, taken in turn, so one stream can spread its events over
many subscriptions that each match one type. `publish` sends every stream at its rate in 10 ms
ticks from this process and remembers, for each delivery the events should cause, when its
event was published; nginx's access log says when the delivery arrived.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

from bench import hops
from bench.nginx import Nginx, nginx_receiver
from bench.report import percentile
from bench.rig import Rig, RigConfig, produce_event
from streams.adapters import codec, stage_clock
from streams.adapters.topic_reader import scan
from streams.domain.idempotency import delivery_id
from streams.domain.models import Attempt, Delivery, Event

TICK_S = 0.01
_PAD = "x" * 880  # about 1 KB envelopes, like the other benchmarks
#: a scenario's subscriptions: (id, create_subscription input)
Subs = tuple[tuple[str, Mapping[str, Any]], ...]


def say(text: str) -> None:
    print(text, flush=True)


@contextmanager
def pipeline(
    args: argparse.Namespace,
    work: Path,
    subs: Callable[[Nginx], Subs],
    worker_env: Mapping[str, str] | None = None,
) -> Iterator[Rig]:
    """A fresh nginx (paths logged) and a rig with the scenario's subscriptions."""
    with nginx_receiver(log_path=True) as receiver:
        config = RigConfig(
            bootstrap=args.bootstrap,
            subscriptions=1,  # the rig's own: its probe events say when the worker is ready
            extra_subscriptions=subs(receiver),
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            worker_env=dict(worker_env or {}),
        )
        with Rig(config, receiver, work) as rig:
            yield rig


def wait_quiet(threshold: float | None, max_wait_s: float) -> None:
    """Wait (at most ``max_wait_s``) until the 1-minute load average is ``threshold`` or less.

    The machine is shared: a run that starts in the middle of someone else's burst measures
    the burst. Called before each run, or before each pair of runs that are compared.
    """
    if threshold is None or os.getloadavg()[0] <= threshold:
        return
    say(f"  waiting for the 1-minute load ({os.getloadavg()[0]:.1f}) to fall to {threshold:g}")
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] > threshold and time.monotonic() < deadline:
        time.sleep(5)
    say(f"  load now {os.getloadavg()[0]:.1f}")


def load_1m() -> float:
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Stream:
    label: str
    tenant: str
    rate: float  # events/s
    targets: tuple[tuple[str, str], ...]  # (event type, the subscription it matches), in turn


@dataclass
class Published:
    began: float
    warmup_s: float
    ended: float = 0.0
    sent: dict[str, dict[str, float]] = field(default_factory=dict)  # label -> id -> time

    @property
    def measured_from(self) -> float:
        return self.began + self.warmup_s

    def measured(self, label: str) -> dict[str, float]:
        """The deliveries of ``label`` whose events went out after the warm-up."""
        start = self.measured_from
        return {key: at for key, at in self.sent[label].items() if at >= start}

    def events(self, label: str) -> int:
        return len(self.sent[label])


def publish(
    rig: Rig,
    streams: Sequence[Stream],
    seconds: float,
    warmup_s: float,
    active: Callable[[str, float], bool] | None = None,
) -> Published:
    """Publish every stream at its rate for ``warmup_s + seconds``; flush; return what went.

    With ``active``, a stream publishes only while ``active(label, seconds since it began)``
    holds, and starts again at its rate, without a burst for the time it was off.
    """
    producer = rig.producer()
    topic = rig.settings.topic("events")
    tag = uuid.uuid4().hex[:6]
    owed = [0.0] * len(streams)
    turn = [0] * len(streams)
    done = Published(began=time.time(), warmup_s=warmup_s)
    for stream in streams:
        done.sent[stream.label] = {}
    ticks = round((seconds + warmup_s) / TICK_S)
    for i in range(ticks):
        pause = done.began + i * TICK_S - time.time()
        if pause > 0:
            time.sleep(pause)
        for index, stream in enumerate(streams):
            if active is not None and not active(stream.label, i * TICK_S):
                owed[index] = 0.0
                continue
            owed[index] += stream.rate * TICK_S
            while owed[index] >= 1.0:
                owed[index] -= 1.0
                event_type, sub_id = stream.targets[turn[index] % len(stream.targets)]
                event = _event(f"evt_{tag}_{stream.label}_{turn[index]}", stream.tenant, event_type)
                turn[index] += 1
                now = time.time()
                produce_event(producer, topic, event)
                done.sent[stream.label][delivery_id(event.id, sub_id)] = now
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("the benchmark's producer could not flush to Kafka within 60 s")
    done.ended = time.time()
    return done


def _event(event_id: str, tenant: str, event_type: str) -> Event:
    now = int(time.time() * 1000)
    return Event(
        id=event_id,
        tenant_id=tenant,
        type=event_type,
        timestamp=now,
        data_json=f'{{"pad":"{_PAD}"}}',
        published_at=now,
    )


def latencies_ms(sent: dict[str, float], received: dict[str, float]) -> list[float]:
    """Publish-to-receive of every delivery in ``sent`` that arrived, in ms."""
    return [(received[key] - at) * 1000 for key, at in sent.items() if key in received]


def latency_figures(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 50),
        "p95_ms": percentile(values, 95),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values, default=float("nan")),
    }


def max_in_window(times: Iterable[float], window_s: float = 1.0) -> int:
    """The most arrivals within any ``window_s`` seconds (sliding: a window ending at every
    arrival, ``(t - window_s, t]``, which finds the busiest window wherever it starts)."""
    ordered = sorted(times)
    best = 0
    low = 0
    for high, at in enumerate(ordered):
        while ordered[low] <= at - window_s:
            low += 1
        best = max(best, high - low + 1)
    return best


def max_in_fixed_windows(times: Iterable[float], window_s: float = 1.0) -> int:
    """The most arrivals in one whole clock second (fixed windows ``[k, k + window_s)``)."""
    counts: dict[int, int] = {}
    for at in times:
        slot = int(at // window_s)
        counts[slot] = counts.get(slot, 0) + 1
    return max(counts.values(), default=0)


def stages(
    rig: Rig, sent: Mapping[str, float], appended: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Where the deliveries in ``sent`` spent their time (`bench.hops.split` of
    `stage_points`)."""
    return hops.split(sent, stage_points(rig, sent, appended), rig.receiver.log.received)


def stage_points(
    rig: Rig, sent: Mapping[str, float], appended: Mapping[str, float] | None = None
) -> list[hops.Point]:
    """The points the pipeline recorded for the deliveries in ``sent``, each hop named after
    the point it ends at: ``route`` when the router routed the event
    (``Delivery.routed_at``), ``dispatch`` when the attempt started (``Attempt.started_at`` in
    the ledger: the routed record's linger, append and fetch, the dispatcher's intake and flow
    control); `bench.hops` adds ``http``, when nginx logged the request. With ``appended``
    (when the broker appended each event), ``append`` comes first; when ``routed`` is stamped
    with its append time (`RigConfig.append_times`), ``produce`` ends there and ``dispatch``
    starts there."""
    routed: dict[str, float] = {}
    produced: dict[str, float] = {}
    for msg in scan(rig.settings, rig.settings.topic("routed")):
        delivery = codec.decode(Delivery, msg.value() or b"")
        if delivery.delivery_id in sent:
            routed[delivery.delivery_id] = delivery.routed_at / 1000
            kind, stamp = msg.timestamp()
            if kind == TIMESTAMP_LOG_APPEND_TIME:
                produced[delivery.delivery_id] = stamp / 1000
    started: dict[str, float] = {}
    for msg in scan(rig.settings, rig.settings.topic("attempts")):
        attempt = codec.decode(Attempt, msg.value() or b"")
        if attempt.delivery_id in sent:
            started.setdefault(attempt.delivery_id, attempt.started_at / 1000)
    points: list[hops.Point] = [("append", appended)] if appended is not None else []
    points.append(("route", routed))
    if produced:
        points.append(("produce", produced))
    points.append(("dispatch", started))
    return points


def clock_points(path: Path) -> list[hops.Point]:
    """The worker's stage clock (`streams.adapters.stage_clock`) as hop points, one per stage in
    order; a retried delivery counts by its first attempt. Waits for the worker's next write."""
    time.sleep(3 * stage_clock.FLUSH_INTERVAL_S)
    times: dict[str, dict[str, float]] = {stage: {} for stage in stage_clock.STAGES}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            fields = line.split()
            if line.endswith("\n") and len(fields) == 3:  # not a line the worker is writing
                times[fields[0]].setdefault(fields[1], float(fields[2]))
    return [(stage, times[stage]) for stage in stage_clock.STAGES]
