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

Its JVM gets the development broker's heap (`BROKER_HEAP`, 256-512 MiB, the JVM's default G1)
unless ``--broker-jvm`` says otherwise. The broker logs its collections (``-Xlog:gc``, kept in
``bench/results/raw/``) and the run reports the pauses after the warm-up (`gc_summary`): a
collection stops the broker, and a publish or a fetch that meets one waits it out, in
hookstream's run and the floor's alike. Kafka's own start-script settings (a fixed 1 GiB heap,
G1 with a 20 ms pause goal) were measured against it on 2026-12-02 and did not pay: fewer
pauses, but of up to 307 ms against 54 (docs/benchmarks.md, "Bench broker heap").
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import raw_dir
from chaos.cluster import free_port_pair
from streams.adapters.local_kafka import BROKER_HEAP

#: Seconds of produce and fetch traffic through a fresh broker before a run measures on it.
WARM_S = 45.0
#: The bench broker's heap and GC flags (``--broker-jvm`` overrides them).
BENCH_JVM = " ".join(BROKER_HEAP)
_PAUSE = re.compile(r"^\[([0-9]+)ms\].*Pause .* ([0-9.]+)ms$")


def own_broker(args: argparse.Namespace, say: Callable[[str], None]) -> Callable[[], None]:
    """Start a broker of this run's own with a new data dir, point ``args.bootstrap`` at it and
    return what stops it and removes its data. Its jars come from the dev broker's cache."""
    from streams.adapters.local_kafka import LocalKafka
    from streams.settings import load_settings

    port = free_port_pair()
    data = Path(tempfile.mkdtemp(prefix="hookstream-bench-broker-"))
    jars = load_settings().kafka_dir / "jars"
    settings = load_settings(kafka_bootstrap=f"127.0.0.1:{port}", data_dir=data)
    gc_log = data / "gc.log"
    jvm = (*args.broker_jvm.split(), f"-Xlog:gc:file={gc_log}:timemillis")
    jars_dir = jars if jars.is_dir() else None
    kafka = LocalKafka(settings, jars_dir=jars_dir, say=say, jvm_options=jvm)
    started = kafka.start()
    args.bootstrap = started.bootstrap
    say(f"the run's own broker at {started.bootstrap} ({started.seconds:.1f}s), data in {data}")

    warmed_ms = 0  # set once warmed: the pauses before it are the warm-up's

    def stop() -> None:
        kafka.stop()
        log = gc_log.read_text() if gc_log.is_file() else ""
        args.broker_gc = gc_summary(log, since_ms=warmed_ms)
        kept = raw_dir(args.results_dir) / f"broker-gc-{time.strftime('%Y%m%dT%H%M%S')}.log"
        kept.write_text(log)
        say(f"the run's own broker ({args.broker_jvm}): pauses after warm-up {args.broker_gc}")
        shutil.rmtree(data, ignore_errors=True)
        say("the run's own broker stopped and its data removed")

    try:
        records = warm(started.bootstrap, WARM_S)
    except BaseException:
        stop()
        raise
    warmed_ms = int(time.time() * 1000)
    say(f"broker warmed: {records:,} records produced and read back in {WARM_S:.0f}s")
    return stop


def gc_summary(log: str, since_ms: int = 0) -> dict[str, float]:
    """The stop-the-world pauses in a JVM's ``-Xlog:gc:...:timemillis`` output from ``since_ms``
    (Unix ms) on, the runs and not the warm-up: count, total, p99 and max in ms."""
    found = (_PAUSE.search(line) for line in log.splitlines())
    pauses = sorted(float(m.group(2)) for m in found if m and int(m.group(1)) >= since_ms)
    if not pauses:
        return {"pauses": 0}
    p99 = pauses[min(len(pauses) - 1, int(len(pauses) * 0.99))]
    return {
        "pauses": len(pauses),
        "total_ms": round(sum(pauses), 1),
        "p99_ms": round(p99, 2),
        "max_ms": round(pauses[-1], 2),
    }


def warm(bootstrap: str, seconds: float) -> int:
    """Produce small records to a topic of 12 partitions and read them back, for ``seconds``:
    the produce, fetch and commit paths a run uses, until the broker's JIT has compiled them.
    Returns how many records went through."""
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
