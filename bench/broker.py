"""A broker of one benchmark run's own (SPEC P1, P2): ``bench.e2e --own-broker``.

The dev broker (`make kafka`) also holds every topic the tests and earlier runs created, and
other runs may use it meanwhile: its CPU, requests and collections are not the bench's alone.
This starts a single-node broker on two free ports with a new data dir, so it holds only the
bench's topics, and removes it afterwards. Its jars come from the dev broker's cache.

A JVM that just started runs Kafka's request paths interpreted until the JIT has compiled them:
measured straight after start, the broker spent 510 µs of CPU per delivery in the latency
scenario against about 330 on the long-running dev broker, and both hookstream's and the
floor's first run had a p99 of about 60 ms. So before the run the broker is warmed: `warm`
produces and reads back small records through a topic of its own for ``WARM_S`` seconds.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from chaos.cluster import free_port_pair

#: Seconds of produce and fetch traffic through a fresh broker before a run measures on it.
WARM_S = 45.0


def own_broker(args: argparse.Namespace, say: Callable[[str], None]) -> Callable[[], None]:
    """Start a broker of this run's own with a new data dir, point ``args.bootstrap`` at it and
    return what stops it and removes its data. Its jars come from the dev broker's cache."""
    from streams.adapters.local_kafka import LocalKafka
    from streams.settings import load_settings

    port = free_port_pair()
    data = Path(tempfile.mkdtemp(prefix="hookstream-bench-broker-"))
    jars = load_settings().kafka_dir / "jars"
    settings = load_settings(kafka_bootstrap=f"127.0.0.1:{port}", data_dir=data)
    kafka = LocalKafka(settings, jars_dir=jars if jars.is_dir() else None, say=say)
    started = kafka.start()
    args.bootstrap = started.bootstrap
    say(f"the run's own broker at {started.bootstrap} ({started.seconds:.1f}s), data in {data}")

    def stop() -> None:
        kafka.stop()
        shutil.rmtree(data, ignore_errors=True)
        say("the run's own broker stopped and its data removed")

    try:
        records = warm(started.bootstrap, WARM_S)
    except BaseException:
        stop()
        raise
    say(f"broker warmed: {records:,} records produced and read back in {WARM_S:.0f}s")
    return stop


def warm(bootstrap: str, seconds: float) -> int:
    """Produce small records to a topic of 12 partitions and read them back, for ``seconds``:
    the produce, fetch and commit paths a run uses, until the broker's JIT has compiled them.
    Returns how many records went through."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = "bench-warm-up"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until its answer
    try:
        admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-warm-up",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
        }
    )
    consumer.subscribe([topic])
    body = b"x" * 300
    read = 0
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        for n in range(200):
            producer.produce(topic, body, key=str(sent + n).encode())
        sent += 200
        producer.poll(0)
        read += len(consumer.consume(500, 0.005))
        time.sleep(0.002)  # about 50,000 records a second at most: a run's order of magnitude
    producer.flush(30)
    consumer.close()
    return read
