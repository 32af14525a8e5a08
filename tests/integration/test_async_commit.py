"""A lane's commits sent without waiting (`AsyncCommitter`), on the real broker (D1, Q1).

Kafka's answers come back through the consumer's ``on_commit``, served by the consumer's own
``consume``; the committed offsets are read back from the broker, never assumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams.adapters.commits import AsyncCommitter
from streams.adapters.kafka_clients import BatchAcks, ProduceError, make_consumer
from streams.settings import Settings

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 20


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def topic(settings: Settings, make_topic: Callable[[str, int], str]) -> str:
    name = make_topic(settings.topic("commits"), PARTITIONS)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i in range(RECORDS):
        producer.produce(name, value=b"x", partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return name


@contextmanager
def _assigned(settings: Settings, topic: str) -> Iterator[tuple[AsyncCommitter, Consumer]]:
    """A committer and a consumer holding every partition of ``topic``; closed afterwards."""
    committer = AsyncCommitter("test")
    consumer = make_consumer(settings, "commits", on_commit=committer.on_commit)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    try:
        _serve_until(consumer, lambda: consumer.assignment() != [])
        yield committer, consumer
    finally:
        consumer.close()


def _committed(consumer: Consumer, topic: str) -> dict[int, int]:
    tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    return {tp.partition: tp.offset for tp in tps}


def _serve_until(
    consumer: Consumer,
    done: Callable[[], bool],
    committer: AsyncCommitter | None = None,
    timeout_s: float = 30,
) -> None:
    """Serve the consumer's callbacks (its answers to commits) until ``done``; with a
    ``committer``, send again after a refusal, as a lane does at its next interval (a group
    coordinator still loading refuses commits for a moment)."""
    deadline = time.monotonic() + timeout_s
    failures = committer.failures if committer is not None else 0
    while not done():
        assert time.monotonic() < deadline, "Kafka never took the commit"
        consumer.consume(10, 0.1)
        if committer is not None and committer.failures > failures:
            failures = committer.failures
            committer.send(consumer, {})


def test_send_returns_at_once_and_kafka_takes_every_position(
    settings: Settings, topic: str
) -> None:
    """D1: the positions sent are the ones Kafka holds once it answers; the mark follows."""
    with _assigned(settings, topic) as (committer, consumer):
        committer.send(consumer, {(topic, 0): 4}, mark=4)
        committer.send(consumer, {(topic, 1): 7}, mark=11)
        assert committer.pending == {(topic, 0): 4, (topic, 1): 7}  # nothing answered yet
        _serve_until(consumer, lambda: not committer.pending, committer)
        assert committer.confirmed_mark == 11
        assert _committed(consumer, topic) == {0: 4, 1: 7}
        committer.send(consumer, {(topic, 0): 9}, mark=20)
        _serve_until(consumer, lambda: committer.confirmed_mark == 20, committer)
        assert _committed(consumer, topic) == {0: 9, 1: 7}


def test_a_refused_commit_is_carried_by_the_next(settings: Settings, topic: str) -> None:
    """D1: a position Kafka refuses stays pending and goes with the next send, so an idle
    partition is not left behind; the mark does not move until Kafka has taken it."""
    with _assigned(settings, topic) as (committer, consumer):
        committer.send(consumer, {(topic, 0): 1}, mark=1)  # the group's coordinator is up
        _serve_until(consumer, lambda: committer.confirmed_mark == 1, committer)
        missing = (topic + "-none", 0)  # a topic that does not exist: Kafka refuses it
        committer.send(consumer, {(topic, 0): 3, missing: 1}, mark=5)
        _serve_until(consumer, lambda: committer.failures > 0)
        assert committer.confirmed_mark == 1
        # the answer refuses the whole commit, so both stay pending (sending one again that
        # Kafka did take is harmless)
        assert committer.pending == {(topic, 0): 3, missing: 1}
        committer.forget([missing])  # as a rebalance does for a partition that went elsewhere
        committer.send(consumer, {(topic, 1): 2}, mark=9)
        _serve_until(consumer, lambda: committer.confirmed_mark == 9, committer)
        assert _committed(consumer, topic) == {0: 3, 1: 2}


def test_a_synchronous_commit_confirms_what_was_pending(settings: Settings, topic: str) -> None:
    """Q1: the blocking commit a lane falls back on (at its cap, at shutdown) takes every
    pending position with it and moves the mark."""
    with _assigned(settings, topic) as (committer, consumer):
        committer.add({(topic, 0): 6})  # pending from an earlier send
        committer.commit_sync(consumer, {(topic, 1): 5}, 30)
        assert committer.pending == {}
        assert committer.confirmed_mark == 30
        assert _committed(consumer, topic) == {0: 6, 1: 5}


def test_batches_commit_in_order_once_acknowledged(settings: Settings, topic: str) -> None:
    """D1: a sealed batch's positions are handed out only after every record produced before
    the seal is acknowledged, with the highest mark among them."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 50})
    acks = BatchAcks()
    acks.produce(producer, topic, "k", b"one")
    acks.seal({(topic, 0): 1}, mark=1)
    acks.produce(producer, topic, "k", b"two")
    acks.seal({(topic, 0): 2}, mark=2)
    assert acks.committable_marked() == ({}, 0)  # lingering: not acknowledged yet
    assert producer.flush(30) == 0
    assert acks.committable_marked() == ({(topic, 0): 2}, 2)
    assert acks.committable_marked() == ({}, 0)
    acks.raise_failed()  # nothing failed


def test_a_failed_produce_stops_the_commits(settings: Settings, topic: str) -> None:
    """D1: a record Kafka did not take keeps its batch, and every later one, from committing."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "message.timeout.ms": 500})
    acks = BatchAcks()
    acks.produce(producer, topic + "-none", "k", b"lost")  # no such topic: times out
    acks.seal({(topic, 0): 1}, mark=1)
    producer.flush(30)
    with pytest.raises(ProduceError):
        acks.raise_failed()
    with pytest.raises(ProduceError):
        acks.committable_marked()
