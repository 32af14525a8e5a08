"""Q1, D1: a dispatcher stops starting attempts that Kafka could not record."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from streams.adapters.kafka_clients import BatchAcks
from streams.domain.commit_gate import CommitGate


def test_q1_the_gate_holds_at_the_cap_whatever_kafka_answers() -> None:
    gate = CommitGate(cap=1024, stalled_cap=64)
    assert not gate.held(uncommitted=1023, unacknowledged=0, unanswered_s=0.0)
    assert gate.held(uncommitted=1024, unacknowledged=0, unanswered_s=0.0)


def test_q1_with_kafka_silent_it_holds_at_the_stalled_cap() -> None:
    gate = CommitGate(cap=1024, stalled_cap=64, stall_s=0.25)
    assert not gate.held(uncommitted=500, unacknowledged=200, unanswered_s=0.2)  # answers come
    assert gate.held(uncommitted=500, unacknowledged=64, unanswered_s=0.25)  # silent: hold
    assert not gate.held(uncommitted=500, unacknowledged=63, unanswered_s=5.0)  # few at stake


def test_q1_batch_acks_time_the_silence_from_when_records_began_to_wait() -> None:
    """An idle stretch is not a silence: the clock starts when a record waits with none before
    it, and a delivery report restarts it. No broker is needed: the reports are called here as
    the producer would."""
    acks = BatchAcks()
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 1000})
    assert acks.unacknowledged(time.monotonic()) == (0, 0.0)
    time.sleep(0.3)  # idle
    acks.produce(producer, "t", "k", b"v")
    waiting, silent = acks.unacknowledged(time.monotonic())
    assert waiting == 1 and silent < 0.2
    time.sleep(0.3)
    waiting, silent = acks.unacknowledged(time.monotonic())
    assert waiting == 1 and silent >= 0.3
    acks._open(None, None)  # the record's delivery report
    assert acks.unacknowledged(time.monotonic()) == (0, 0.0)
    producer.purge()
