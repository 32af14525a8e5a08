"""O2, D1: the dispatcher's outbox writes the attempt ledger and, per partition and commit, one
digest of the same attempts, folded ahead into a tally per subscription, for the analytics agent.

A recording producer stands in for Kafka here: what is checked is which records the outbox
hands the producer, and when. The digests' path through a real broker and a real analytics
agent is `tests/integration/test_stats.py`.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from streams.adapters import codec
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.agents.analytics import _tallies
from streams.domain.analytics import Tally
from streams.domain.models import (
    AnalyticsDigest,
    Attempt,
    AttemptDigest,
    DeliveryState,
    Lane,
    OutcomeClass,
)
from streams.domain.settle import Settlement
from streams.lanes import outbox as outbox_module
from streams.lanes.outbox import Outbox
from streams.settings import Settings, load_settings

T0 = 1_714_564_800_000
_ids = itertools.count()


class RecordingProducer:
    """Takes every record and acknowledges none until asked (`ack`)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes]] = []
        self.reports: list[Any] = []

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any = None) -> None:
        self.records.append((topic, key, value))
        self.reports.append(on_delivery)

    def ack(self, index: int) -> None:
        """Kafka acknowledges the record produced ``index``-th."""
        self.reports[index](None, None)

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def on(self, topic: str) -> list[tuple[bytes, bytes]]:
        return [(key, value) for t, key, value in self.records if t == topic]


@pytest.fixture
def settings() -> Settings:
    return load_settings(topic_prefix="t.", retry_schedule=(1.0, 60.0))


def settled(sub: str, lane: Lane = Lane.LIVE, excerpt: str | None = None) -> Settlement:
    return Settlement(
        Attempt(
            delivery_id=f"d{next(_ids)}",
            subscription_id=sub,
            tenant_id="acme",
            event_id="e",
            event_type="order.created",
            attempt=1,
            lane=lane,
            started_at=T0,
            duration_ms=3.5,
            outcome=OutcomeClass.SUCCESS,
            reason="http_200",
            state=DeliveryState.SUCCESS,
            http_status=200,
            response_excerpt=excerpt,
            published_at=T0 - 10,
        )
    )


def subs_in(partitions: int, wanted: int, count: int, taken: int = 0) -> list[str]:
    """``count`` subscription ids of partition ``wanted``."""
    found = [f"sub_{i}" for i in range(10_000) if partition_of(f"sub_{i}", partitions) == wanted]
    return found[taken : taken + count]


def digests(producer: RecordingProducer, settings: Settings) -> list[tuple[str, AnalyticsDigest]]:
    return [
        (key.decode(), codec.decode(AnalyticsDigest, value))
        for key, value in producer.on(settings.topic("attempt-digests"))
    ]


def read(producer: RecordingProducer, settings: Settings) -> list[tuple[str, list[Tally]]]:
    """Each digest's key and its tallies, as the analytics agent reads them."""
    return [
        (key.decode(), [tally for _, tally in _tallies(value)])
        for key, value in producer.on(settings.topic("attempt-digests"))
    ]


def tally_of(ledger: list[bytes]) -> Tally:
    tally = Tally()
    for raw in ledger:
        tally.add(codec.decode(Attempt, raw))
    return tally


def make(settings: Settings) -> tuple[Outbox, RecordingProducer, int]:
    producer = RecordingProducer()
    partitions = load_topology(settings).lane_partitions
    tiers = [(1.0, settings.topic("retry.1s"))]
    return Outbox(settings, producer, tiers, partitions), producer, partitions  # type: ignore[arg-type]


def test_o2_one_digest_per_partition_and_commit_tallies_the_ledger(settings: Settings) -> None:
    box, producer, partitions = make(settings)
    a, b = subs_in(partitions, 3, 2)
    (c,) = subs_in(partitions, 7, 1)
    outcomes = [settled(a), settled(c), settled(b), settled(a)]
    for outcome in outcomes:
        box.settle(outcome)
    assert digests(producer, settings) == [], "written at the commit, not before"

    box.seal({}, 0)
    ledger = [value for _, value in producer.on(settings.topic("attempts"))]
    assert len(ledger) == 4
    written = digests(producer, settings)
    assert len(written) == 2
    by_partition = {partition_of(key, partitions): digest for key, digest in written}
    # each digest is keyed by a subscription of its partition, so the partitioner puts it there
    assert sorted(by_partition) == [3, 7]
    assert by_partition[3].subscription_ids == (a, b)
    assert by_partition[7].subscription_ids == (c,)
    tallies = {partition_of(key, partitions): found for key, found in read(producer, settings)}
    assert tallies[3] == [tally_of([ledger[0], ledger[3]]), tally_of([ledger[2]])]
    assert tallies[7] == [tally_of([ledger[1]])]
    assert tallies[3][0].attempts == 2
    assert box.digests_written == 2

    box.seal({}, 0)
    assert len(digests(producer, settings)) == 2, "nothing settled since: no empty digest"


def test_o2_a_digest_of_an_older_worker_reads_as_the_same_tallies(settings: Settings) -> None:
    """Digests an older worker wrote hold the ledger's bytes; the agent folds them into the
    tallies this release writes, so an upgrade loses none of them."""
    box, producer, partitions = make(settings)
    a, b = subs_in(partitions, 2, 2)
    for outcome in (settled(a), settled(b, Lane.PROBE), settled(b), settled(a, Lane.RETRY)):
        box.settle(outcome)
    box.seal({}, 0)
    ledger = [value for _, value in producer.on(settings.topic("attempts"))]
    legacy = codec.encode(AttemptDigest(sealed_at=T0, attempts=tuple(ledger)))
    ((_, current),) = read(producer, settings)
    assert [tally for _, tally in _tallies(legacy)] == current
    assert [sub for sub, _ in _tallies(legacy)] == [a, b]


def test_o2_probe_and_test_sends_stay_out_of_the_digests(settings: Settings) -> None:
    box, producer, partitions = make(settings)
    (sub,) = subs_in(partitions, 0, 1)
    box.settle(settled(sub, Lane.PROBE))
    box.settle(settled(sub, Lane.TEST))
    box.settle(settled(sub, Lane.RETRY))
    box.seal({}, 0)
    assert len(producer.on(settings.topic("attempts"))) == 3  # the ledger has every attempt
    ((_, (tally,)),) = read(producer, settings)
    assert tally.attempts == 1 and [s.fires for s in tally.steps] == [True]


def test_o2_a_large_digest_is_written_before_the_commit(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka caps a record's size: a digest is written as soon as it holds its cap of
    subscriptions, or of retry steps."""
    monkeypatch.setattr(outbox_module, "DIGEST_MAX_SUBSCRIPTIONS", 3)
    monkeypatch.setattr(outbox_module, "DIGEST_MAX_STEPS", 4)
    box, producer, partitions = make(settings)
    subs = subs_in(partitions, 5, 7)
    for sub in subs:
        box.settle(settled(sub))
    early = digests(producer, settings)
    assert [len(d.subscription_ids) for _, d in early] == [3, 3], "written before the commit"
    for _ in range(5):
        box.settle(settled(subs[0], Lane.RETRY))
    assert len(digests(producer, settings)) == 3, "four retry steps: written early too"
    box.seal({}, 0)
    counted = sum(t.attempts for _, tallies in read(producer, settings) for t in tallies)
    assert counted == 12, "every attempt in exactly one digest"


def test_d1_digests_belong_to_the_batch_they_are_sealed_with(settings: Settings) -> None:
    """A batch's positions become committable only once its digests are acknowledged too."""
    box, producer, partitions = make(settings)
    (sub,) = subs_in(partitions, 1, 1)
    box.settle(settled(sub))
    box.seal({("t.routed", 1): 41}, 1)
    assert [topic for topic, _, _ in producer.records] == ["t.attempts", "t.attempt-digests"]
    producer.ack(0)
    assert box.committable() == ({}, 0), "the digest is not acknowledged yet"
    producer.ack(1)
    assert box.committable() == ({("t.routed", 1): 41}, 1)
