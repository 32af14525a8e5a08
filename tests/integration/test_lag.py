"""Consumer lag of a stopped group on the real broker: it rises, then returns to 0 (SPEC O1)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer

from streams.adapters.lag import LagExporter, LagReader
from streams.cli.lag import lag
from streams.metrics.families import REGISTRY
from streams.settings import Settings

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def topic(settings: Settings, make_topic: Callable[[str, int], str]) -> str:
    return make_topic(settings.topic("lagtest"), PARTITIONS)


def produce(settings: Settings, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=b"x")
    assert producer.flush(30) == 0


def consume_all(settings: Settings, group: str, topic: str, expected: int) -> None:
    """Consume ``expected`` records as ``group``, commit, and leave the group."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < expected and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
    assert got == expected
    consumer.commit(asynchronous=False)
    consumer.close()


def total_lag(reader: LagReader, group: str, topic: str) -> tuple[int, float | None]:
    [row] = [t for t in reader.measure().topics() if (t.group, t.topic) == (group, topic)]
    return row.lag, row.age_s


def test_o1_lag_rises_while_a_group_is_stopped_and_returns_to_zero(
    settings: Settings, topic: str
) -> None:
    group = f"{settings.group_id}-lanetest"  # a lane-style group: found without being named
    stranger = f"{settings.group_id}x-router"  # another pipeline's group: never reported
    produce(settings, topic, 10)
    consume_all(settings, group, topic, 10)
    consume_all(settings, stranger, topic, 10)
    reader = LagReader(settings)
    assert group in reader.groups() and stranger not in reader.groups()
    assert total_lag(reader, group, topic) == (0, 0.0)

    produce(settings, topic, 30)  # the group is stopped: nobody consumes these
    time.sleep(1.2)
    records, age = total_lag(reader, group, topic)
    assert records == 30
    assert age is not None and 1.0 <= age < 60

    exporter = LagExporter(settings, reader=reader)
    report = exporter.export_once()
    per_partition = [
        REGISTRY.get_sample_value(
            "hookstream_consumer_lag", {"group": group, "topic": topic, "partition": str(p)}
        )
        for p in range(PARTITIONS)
    ]
    assert sum(v or 0 for v in per_partition) == 30
    assert all(v is not None for v in per_partition)
    seconds = REGISTRY.get_sample_value(
        "hookstream_consumer_lag_seconds", {"group": group, "topic": topic}
    )
    assert seconds is not None and seconds >= 1.0
    assert not any(p.group == stranger for p in report.partitions)

    env = {
        "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "HOOKSTREAM_GROUP_ID": settings.group_id,
        "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
    }
    result = CliRunner().invoke(lag, ["--json", "--group", group], env=env)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["topics"]
    assert [(r["group"], r["topic"], r["lag"]) for r in rows] == [(group, topic, 30)]
    table = CliRunner().invoke(lag, ["--partitions"], env=env)
    assert table.exit_code == 0 and group in table.output and "COMMITTED" in table.output

    consume_all(settings, group, topic, 30)  # the group comes back and commits
    assert total_lag(reader, group, topic) == (0, 0.0)
    exporter.export_once()
    assert (
        REGISTRY.get_sample_value(
            "hookstream_consumer_lag_seconds", {"group": group, "topic": topic}
        )
        == 0.0
    )
