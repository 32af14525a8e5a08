"""Q1, D1: copies of delivered deliveries are settled without being sent again.

After a crash the router replays its uncommitted batch, which puts a second copy of some
deliveries on `routed`, and a dispatcher that takes over partitions resumes from the last
commit. These tests put such copies on `routed` by hand, on the real broker: first while the
worker that delivered the originals runs, then to a new worker that knows the originals only
from the attempt ledger. A replay is a person's request and always goes out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from msgspec import structs

from streams.adapters import codec
from streams.adapters.kafka_clients import make_producer
from streams.adapters.topic_reader import scan
from streams.domain.idempotency import delivery_id
from streams.domain.models import Delivery, Lane
from streams.lanes.pipeline import Pipeline
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration


def _routed(settings: Settings) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record on `routed`."""
    return [(m.key() or b"", m.value() or b"") for m in scan(settings, settings.topic("routed"))]


def _produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    producer = make_producer(settings)
    for key, value in records:
        producer.produce(settings.topic("routed"), key=key, value=value)
    assert producer.flush(30) == 0


async def test_q1_copies_of_delivered_deliveries_are_not_sent_again(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))
    settings = make_settings()
    async with PipelineHarness(settings) as h:
        await h.subscribe(url, ["order.*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(20)])
        await h.wait_for(lambda: len(receiver.requests) >= 20, timeout_s=30)
        originals = await asyncio.to_thread(_routed, settings)
        assert len(originals) == 20

        # the same worker: it remembers what it delivered
        await asyncio.to_thread(_produce, settings, originals)
        await h.wait_for(lambda: h.settled_count() >= 40, timeout_s=30)

        # a new worker (a restart, or a takeover after a crash): it reads the ledger back
        await h.pipeline.stop()
        h.pipeline = Pipeline(settings)
        await h.pipeline.start()
        await h.pipeline.wait_ready(60)
        await asyncio.to_thread(_produce, settings, originals)
        replayed = structs.replace(codec.decode(Delivery, originals[0][1]), lane=Lane.REPLAY)
        await asyncio.to_thread(_produce, settings, [(originals[0][0], codec.encode(replayed))])
        # the replay is behind the 20 copies on the same partition: once it has arrived,
        # the copies have been settled
        await h.wait_for(lambda: len(receiver.requests) >= 21, timeout_s=30)
        await asyncio.sleep(1.0)
        got = [r.headers["webhook-id"] for r in receiver.requests]

    assert len(got) == 21, "each delivery went out once, plus the one replay"
    assert len(set(got)) == 20
    assert got[-1] == replayed.delivery_id


async def test_q1_a_copy_right_behind_its_original_is_not_sent_alongside_it(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    # The router's replay after a crash lands right behind the originals: both copies are
    # taken in one batch, while the first is still on the wire (the endpoint takes 300 ms).
    receiver = receiver_factory()
    url = receiver.route("/slow", Respond(200, delay_s=0.3))
    settings = make_settings()
    async with PipelineHarness(settings) as h:
        sub = await h.subscribe(url, ["order.*"])
        records, ids = [], []
        for n in range(10):
            event = make_event("acme", "order.created", n)
            delivery = Delivery(delivery_id(event.id, sub.id), sub.id, "acme", event)
            value = codec.encode(delivery)
            records += [(sub.id.encode(), value), (sub.id.encode(), value)]
            ids.append(delivery.delivery_id)
        await asyncio.to_thread(_produce, settings, records)
        await h.wait_for(lambda: h.settled_count() >= 20, timeout_s=30)
        await asyncio.sleep(1.0)
        got = [r.headers["webhook-id"] for r in receiver.requests]
    assert sorted(got) == sorted(ids), "each delivery went out once"


def _hold_back_commits(settings: Settings) -> None:
    """The dispatch group's committed positions on `routed` go back to the start, as if its
    commits had been held back (acks that hung) while it delivered. No `RESET_MARK`: nobody
    asked for these deliveries again."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    group = f"{settings.group_id}-dispatch"
    topic = settings.topic("routed")
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, 0) for p in parts])
    done = admin.alter_consumer_group_offsets([request])[group].result(15)
    assert all(tp.error is None for tp in done.topic_partitions or [])


async def test_q1_deliveries_past_a_commit_held_back_beyond_the_window_are_not_sent_again(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """A partition whose commits were held back for longer than the dedup window comes to a
    new owner: what it delivered past the committed position, more than a window ago, is
    settled from the ledger, not sent again (chaos-cluster-20261202T1328: 1.8% duplicates)."""
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))
    settings = make_settings(dedup_window="2s")
    async with PipelineHarness(settings) as h:
        await h.subscribe(url, ["order.*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(20)])
        await h.wait_for(lambda: len(receiver.requests) >= 20, timeout_s=30)
        await h.pipeline.stop()
        await asyncio.to_thread(_hold_back_commits, settings)
        await asyncio.sleep(3.0)  # the successes are older than the window now

        h.pipeline = Pipeline(settings)
        await h.pipeline.start()
        await h.pipeline.wait_ready(60)
        await h.wait_for(lambda: h.settled_count() >= 20, timeout_s=30)
        await asyncio.sleep(1.0)
        got = [r.headers["webhook-id"] for r in receiver.requests]
    assert len(got) == 20 and len(set(got)) == 20, "each delivery went out once"
