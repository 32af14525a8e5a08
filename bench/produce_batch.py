"""What batching the produce calls would save: ``produce`` per record against ``produce_batch``.

    python -m bench.produce_batch --runs 3

The router produces an `archive` and a `routed` record per event, the dispatcher an `attempts`
record per delivery, each with its own ``Producer.produce`` call and a delivery report to a
Python callable (`BatchAcks`). confluent-kafka also offers ``produce_batch``: one call for a
list of records. This produces ``--records`` records of 1.2 KB (half random, so lz4 has work
like on real payloads) with hookstream's producer settings (`producer_config`: idempotent,
acks=all, lz4, linger 1 ms) in groups of ``--batch``, three ways, interleaved per run:
one ``produce`` per record with a delivery callable (what the lanes do), one ``produce_batch``
per group with the same callable, and one ``produce`` per record without a callable. Each
figure is µs of the whole process's CPU per record (`resource.getrusage`, so librdkafka's
threads, the compression and the delivery reports count), the median over runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.adapters.kafka_clients import producer_config
from streams.settings import load_settings

VALUE = os.urandom(600) + b"x" * 600


class _Acks:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, err: Any, msg: Any) -> None:
        self.count += 1


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _per_record(
    producer: Producer,
    call: Callable[[_Acks | None], None],
    with_acks: bool,
    groups: int,
    batch: int,
) -> float:
    """µs of the process's CPU per record for ``groups`` calls of ``call`` (``batch`` records
    each), their delivery reports included."""
    acks = _Acks() if with_acks else None
    queued = len(producer)
    began = _cpu()
    for _ in range(groups):
        call(acks)
        producer.poll(0)
        while len(producer) > queued + 10_000:
            producer.poll(0.001)
    producer.flush(60)
    produced = groups * batch
    if acks is not None and acks.count != produced:
        raise RuntimeError(f"{acks.count} delivery reports for {produced} records")
    return (_cpu() - began) * 1e6 / produced


def measure(bootstrap: str, runs: int, records: int, batch: int) -> dict[str, float]:
    topic = f"bench-batch-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    producer = Producer(producer_config(load_settings(kafka_bootstrap=bootstrap)))
    keys = [f"sub_{n % 997:05d}".encode() for n in range(batch)]

    def each(acks: _Acks | None) -> None:
        for key in keys:
            if acks is None:
                producer.produce(topic, VALUE, key=key)
            else:
                producer.produce(topic, VALUE, key=key, on_delivery=acks)

    def batched(acks: _Acks | None) -> None:
        queued = producer.produce_batch(
            topic, [{"key": key, "value": VALUE} for key in keys], on_delivery=acks
        )
        if queued != len(keys):
            raise RuntimeError(f"produce_batch queued {queued} of {len(keys)}")

    cases: dict[str, tuple[Callable[[_Acks | None], None], bool]] = {
        "produce, callable": (each, True),
        "produce_batch, callable": (batched, True),
        "produce, no callable": (each, False),
    }
    figures: dict[str, list[float]] = {name: [] for name in cases}
    try:
        producer.produce(topic, VALUE, key=b"warm")
        producer.flush(30)  # connected, and the producer id acquired, before any timing
        for _ in range(runs):  # interleaved, so a slow moment of the box hits every case
            for name, (call, with_acks) in cases.items():
                figures[name].append(
                    _per_record(producer, call, with_acks, records // batch, batch)
                )
                time.sleep(0.5)
    finally:
        producer.flush(30)
        admin.delete_topics([topic])[topic].result(30)
    return {name: statistics.median(values) for name, values in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.produce_batch", description=__doc__)
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--runs", type=int, default=3, help="repeats; the median is reported")
    parser.add_argument("--records", type=int, default=200_000, help="records per case and run")
    parser.add_argument("--batch", type=int, default=500, help="records per group (a lane batch)")
    args = parser.parse_args(argv)
    results = measure(args.bootstrap, args.runs, args.records, args.batch)
    for name, micros in results.items():
        print(f"{name:>24}: {micros:5.2f} µs of the process's CPU per record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
