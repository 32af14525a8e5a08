"""The event loop's CPU per delivery attempt, in one process, without reading Kafka (P1).

    python -m bench.attempt --attempts 20000 --runs 5

P1's worker spends most of its event loop in the attempts (docs/benchmarks.md, "Where the event
loop's CPU goes, by task"), and one end-to-end run takes minutes and varies by 10% from one to
the next. This measures that part alone, in seconds: the dispatcher's own `FlowControl`,
`Sender`, `Outbox` and `H1Transport`, wired as the worker wires them, attempt ``--attempts``
deliveries of one subscription to nginx (``return 200``) on uvloop. The outbox writes its
records to Kafka at ``--bootstrap`` (topics of a prefix of its own, made and deleted by the run).
A run counts only when nginx received every attempt. Reported per run: the CPU time of the event
loop's thread per attempt (µs; the producer's and nginx's threads are not counted), and the
median over runs, in ``bench/results/attempt-<time>.json``. Each side of a change is measured by
running this from its checkout, alternating; the figure compares code within one session, it
is not a target. It leaves out routing, the dispatcher's reads and everything the worker runs
beside the attempts: `bench.ab` and P1 say what a change does to the whole worker.

``--path direct`` drives `Sender.attempt` from as many long-lived coroutines as flow control
would run attempts at once, with no flow control (`_direct`); ``--path both`` alternates the
two, one run of each per repetition, and reports both medians: what flow control's queue, pump
and task per attempt cost (docs/benchmarks.md, "Attempts without flow control").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop
from confluent_kafka import Producer

from bench.nginx import Nginx, nginx_receiver
from bench.report import RESULTS_DIR, machine, write_json
from streams.adapters.breaker_log import BreakerLog
from streams.adapters.http1 import H1Transport
from streams.adapters.kafka_admin import TopicAdmin, apply_topics, delete_topics
from streams.adapters.kafka_clients import make_producer
from streams.domain.backoff import RetryPolicy
from streams.domain.dedup import RecentSuccesses
from streams.domain.idempotency import delivery_id
from streams.domain.models import Delivery, Event, Secret, Subscription
from streams.domain.signing import generate_secret
from streams.lanes.breakers import FleetBreakers
from streams.lanes.flow import FlowControl
from streams.lanes.outbox import Outbox
from streams.lanes.sending import Sender
from streams.settings import Settings, load_settings

_PAD = "x" * 880  # an envelope of about 1 KB, as in the end-to-end benchmark


class _NoRegistry:
    def get(self, subscription_id: str) -> Subscription | None:
        return None


def _deliveries(sub: Subscription, count: int) -> list[Delivery]:
    now = int(time.time() * 1000)
    out = []
    for n in range(count):
        event = Event(
            id=f"evt_{n}",
            tenant_id=sub.tenant_id,
            type="order.created",
            timestamp=now,
            data_json=f'{{"n":{n},"pad":"{_PAD}"}}',
            published_at=now,
        )
        out.append(Delivery(delivery_id(event.id, sub.id), sub.id, sub.tenant_id, event))
    return out


async def _run(settings: Settings, url: str, attempts: int, path: str = "flow") -> float:
    tiers = [(60.0, settings.topic("retry.1m"))]
    producer = make_producer(settings)
    outbox = Outbox(settings, producer, tiers, partitions=12)
    transport = H1Transport(max_connections=settings.dispatch_concurrency)
    policy = RetryPolicy(schedule=(60.0,), jitter=0.1, window=3600)
    breakers = FleetBreakers(settings, BreakerLog(settings), "bench")
    sender = Sender(
        settings,
        _NoRegistry(),  # type: ignore[arg-type]
        outbox,
        transport,
        policy,
        breakers,
        RecentSuccesses(settings.dedup_window),
    )
    sub = Subscription(
        id="sub_attempt",
        tenant_id="bench",
        name="bench",
        url=url,
        filters=("order.*",),
        secrets=(Secret(generate_secret(os.urandom)),),
    )
    left = [attempts]
    done = asyncio.get_running_loop().create_future()

    def settled(tp: tuple[str, int], offset: int) -> None:
        left[0] -= 1
        if left[0] == 0:
            done.set_result(None)

    flow = FlowControl(
        slots=settings.dispatch_concurrency,
        origin_max_in_flight=settings.origin_max_in_flight,
        attempt=sender.attempt,
        defer=sender.defer,
        settled=settled,
        lookup=lambda _id: sub,
    )
    deliveries = _deliveries(sub, attempts)
    tp = (settings.topic("routed"), 0)
    began = time.thread_time()
    if path == "direct":
        slots = min(settings.dispatch_concurrency, settings.origin_max_in_flight)  # as in flow
        await _direct(sender, sub, deliveries, slots, outbox, producer, tp)
    else:
        for offset, delivery in enumerate(deliveries):
            flow.submit(tp, offset, delivery, sub)
            if offset % 500 == 499:
                outbox.seal({tp: offset}, offset)
                producer.poll(0)
                await asyncio.sleep(0)
        await done
    spent = time.thread_time() - began
    outbox.seal({tp: attempts}, attempts)
    await outbox.flush()
    await transport.aclose()
    return spent / attempts * 1e6


async def _direct(
    sender: Sender,
    sub: Subscription,
    deliveries: list[Delivery],
    slots: int,
    outbox: Outbox,
    producer: Producer,
    tp: tuple[str, int],
) -> None:
    """``--path direct``: ``slots`` long-lived coroutines take the deliveries in turn and await
    `Sender.attempt` on each, with no flow control and no task per delivery: the part of an
    attempt's cost that is not flow control's (its queue, pump and task per attempt)."""
    queue = iter(enumerate(deliveries))

    async def one_slot() -> None:
        for offset, delivery in queue:
            await sender.attempt(sub, delivery)
            if offset % 500 == 499:
                outbox.seal({tp: offset}, offset)
                producer.poll(0)

    await asyncio.gather(*(one_slot() for _ in range(slots)))


def _arrived(nginx: Nginx, expected: int) -> None:
    """Every attempt of the run reached nginx (it answers 200 to all): the figure is of
    deliveries, not of failures."""
    deadline = time.monotonic() + 5
    seen = nginx.log.poll()
    while seen < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        seen += nginx.log.poll()
    if seen != expected:
        raise SystemExit(f"bench.attempt: nginx saw {seen} requests of the run's {expected}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", type=int, default=20000, help="deliveries per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument(
        "--path",
        choices=("flow", "direct", "both"),
        default="flow",
        help="flow: through FlowControl, as the worker runs them; direct: without it "
        "(see `_direct`); both: alternating, one run of each per repetition",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    prefix = f"benchattempt{uuid.uuid4().hex[:8]}."
    settings = load_settings(
        kafka_bootstrap=args.bootstrap,
        topic_prefix=prefix,
        group_id=prefix.rstrip("."),
        allow_private_destinations=True,
    )
    apply_topics(settings)
    paths = ("flow", "direct") if args.path == "both" else (args.path,)
    by_path: dict[str, list[float]] = {path: [] for path in paths}
    try:
        with nginx_receiver() as nginx:
            for _ in range(args.runs):
                for path in paths:
                    spent = uvloop.run(_run(settings, nginx.url, args.attempts, path))
                    by_path[path].append(spent)
                    _arrived(nginx, args.attempts)
                    print(f"{path}: loop CPU per attempt: {spent:.1f} µs", flush=True)
    finally:
        delete_topics(settings, TopicAdmin(settings).names_with_prefix(prefix))
    result: dict[str, Any] = {
        "scenario": "attempt",
        "machine": machine("bench.attempt"),
        "attempts": args.attempts,
        "runs_us": [round(r, 2) for r in by_path[paths[0]]],
        "median_us": round(statistics.median(by_path[paths[0]]), 2),
    }
    if len(paths) == 2:
        result["path"] = "both"
        result["direct_runs_us"] = [round(r, 2) for r in by_path["direct"]]
        result["direct_median_us"] = round(statistics.median(by_path["direct"]), 2)
    path = write_json(result, args.results_dir)
    print(json.dumps({"median_us": result["median_us"], "results": str(path)}))


if __name__ == "__main__":
    main()
