"""What one Kafka produce call costs the calling thread, in a burst and at a moderate rate.
See docs/benchmarks.md, "CPU below saturation".

    python -m bench.produce_cost --runs 3

A worker below saturation calls ``Producer.produce`` a few times per delivery, each time
after its event loop has been idle for a while. This times the call with hookstream's
producer settings (`producer_config`) on the real broker, three ways, interleaved per run:
back to back (a burst), one call after each sleep of ``1 / --rate`` seconds (paced), and, as
the baseline of a thread that has just slept, a call that does nothing after the same sleep.
Figures are the median µs of the calling thread's CPU time per call, the median over runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.adapters.kafka_clients import producer_config
from streams.settings import load_settings

VALUE = b"x" * 1000


def _timed(call: Callable[[int], object], calls: int, pause_s: float) -> float:
    """Median thread CPU µs of ``call``, with ``pause_s`` of sleep before each one."""
    costs: list[float] = []
    for number in range(calls):
        if pause_s:
            time.sleep(pause_s)
        began = time.thread_time()
        call(number)
        costs.append(time.thread_time() - began)
    return statistics.median(costs) * 1e6


def measure(bootstrap: str, runs: int, calls: int, rate: float) -> dict[str, float]:
    topic = f"bench-produce-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    producer = Producer(producer_config(load_settings(kafka_bootstrap=bootstrap)))

    def produce(number: int) -> None:
        producer.produce(topic, VALUE, key=str(number % 7).encode())
        producer.poll(0)

    cases: dict[str, tuple[Callable[[int], object], float]] = {
        "burst": (produce, 0.0),
        "paced": (produce, 1 / rate),
        "nothing, paced": (lambda _number: None, 1 / rate),
    }
    figures: dict[str, list[float]] = {name: [] for name in cases}
    try:
        produce(0)
        producer.flush(30)  # connected, and the producer id acquired, before any timing
        for _ in range(runs):  # interleaved, so a slow moment of the box hits every case
            for name, (call, pause_s) in cases.items():
                figures[name].append(_timed(call, calls, pause_s))
                producer.flush(30)
    finally:
        producer.flush(30)
        admin.delete_topics([topic])[topic].result(30)
    return {name: statistics.median(values) for name, values in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.produce_cost", description=__doc__)
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--runs", type=int, default=3, help="repeats; the median is reported")
    parser.add_argument("--calls", type=int, default=1000, help="calls per case and repeat")
    parser.add_argument("--rate", type=float, default=300.0, help="paced calls per second")
    args = parser.parse_args(argv)
    results = measure(args.bootstrap, args.runs, args.calls, args.rate)
    for name, micros in results.items():
        print(f"{name:>16}: {micros:6.1f} µs of the thread's CPU per call")
    print(f"{'paced / burst':>16}: {results['paced'] / results['burst']:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
