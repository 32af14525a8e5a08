"""The agents' paced fetch, against the real broker (SPEC P2).

docs/benchmarks.md, "Agents' batched fetch", has what it bought.

The pinned aiokafka starts its fetcher with the size and wait `apply_fetch_pacing` set, and a
lone record still arrives: the broker answers a fetch that is short of its bytes once the wait
ends, so pacing delays the agents by at most the wait and never starves them.
"""

from __future__ import annotations

import asyncio

import aiokafka
import pytest
from aiokafka.structs import TopicPartition
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.adapters.agent_fetch import apply_fetch_pacing

pytestmark = pytest.mark.integration


def test_p2_a_paced_fetch_still_returns_a_lone_record(
    kafka_bootstrap: str, unique_prefix: str
) -> None:
    topic = f"{unique_prefix}paced"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"k", value=b"one small record")
    assert producer.flush(30) == 0

    async def fetch() -> tuple[int, int, bytes | None]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        apply_fetch_pacing(consumer, 1_048_576, 200)
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.start()
        try:
            fetcher = consumer._fetcher
            record = await asyncio.wait_for(consumer.getone(), 30)
            return fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms, record.value
        finally:
            await consumer.stop()

    try:
        assert asyncio.run(fetch()) == (1_048_576, 200, b"one small record")
    finally:
        admin.delete_topics([topic])[topic].result(30)
