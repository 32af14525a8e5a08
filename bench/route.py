"""Microbenchmark of the router lane's work per event. See docs/benchmarks.md.

    python -m bench.route --runs 5

`Router._route_batch` over the benchmark's ~1 KB JSON events, in batches of 500 as the lane takes
them, each matching one subscription: decode and validate the event, encode and produce its
archive record, match it, build and encode its delivery and produce that. The records go to a
real broker (``--bootstrap``), into a topic of the run's own, deleted afterwards; no consumer
and no worker. Each figure is the best of ``--runs`` repeats in µs of this thread's CPU time
per event (`time.thread_time`), so time spent waiting for a core is not counted; the
producer's own threads are not in it either.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from confluent_kafka import Message
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.rig import EVENT_TYPE, TENANT, make_event
from streams.adapters import codec
from streams.adapters.ingest import encode_json_event
from streams.adapters.kafka_clients import make_producer
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.models import Secret, Subscription
from streams.lanes.router import Router
from streams.settings import Settings

BATCH = 500


def _messages(count: int) -> list[Message]:
    json_header: list[tuple[str, str | bytes | None]] = [("content-type", b"application/json")]
    return [
        Message(
            topic="events",
            partition=0,
            offset=n,
            key=TENANT.encode(),
            value=encode_json_event(make_event("routebench", n)),
            headers=json_header,
        )
        for n in range(count)
    ]


def measure(bootstrap: str, runs: int, number: int) -> float:
    """The best of ``runs`` repeats, in µs of this thread's CPU per routed event."""
    settings = Settings(kafka_bootstrap=bootstrap)
    topic = f"routebench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    try:
        registry = SubscriptionRegistry(settings)
        sub = Subscription(
            id="sub_routebench",
            tenant_id=TENANT,
            name="routebench",
            url="http://127.0.0.1:9/hook",
            filters=(EVENT_TYPE,),
            secrets=(Secret("whsec_" + "A" * 43 + "="),),
        )
        registry.apply(sub.id.encode(), codec.encode(sub))
        producer = make_producer(settings)
        router = Router(settings, registry, producer)
        router._archive = router._routed = topic  # one throwaway topic for both outputs
        messages = _messages(number)
        best = float("inf")
        for repeat in range(runs + 1):  # the first repeat warms up and is not counted
            began = time.thread_time()
            for start in range(0, number, BATCH):
                router._route_batch(messages[start : start + BATCH])
                producer.poll(0)
            spent = time.thread_time() - began
            if producer.flush(60):
                raise RuntimeError(f"the broker at {bootstrap} did not take the records")
            if router.routed_count % number:
                raise RuntimeError("an event was not routed to its subscription")
            if repeat:
                best = min(best, spent)
        return best / number * 1e6
    finally:
        admin.delete_topics([topic])[topic].result(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route", description=__doc__)
    parser.add_argument("--bootstrap", default=Settings().kafka_bootstrap)
    parser.add_argument("--runs", type=int, default=5, help="repeats; the best is reported")
    parser.add_argument("--number", type=int, default=20_000, help="events per repeat")
    args = parser.parse_args(argv)
    micros = measure(args.bootstrap, args.runs, args.number)
    print(f"route: {micros:.1f} µs of the lane's CPU per event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
