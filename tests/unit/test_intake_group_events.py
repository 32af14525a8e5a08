"""`lanes.intake.serve_group_events`: a dispatcher waiting on failed commits still serves its
group's events, without taking new records and without undoing its own pauses (D1, F3).

A member the group dropped while the coordinator moved (UNKNOWN_MEMBER_ID) rejoins only through
a read. The consumer here records calls and answers the read with nothing.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from streams.lanes.intake import serve_group_events


class Consumer:
    def __init__(self, assigned: list[tuple[str, int]]) -> None:
        self.assigned = [TopicPartition(t, p) for t, p in assigned]
        self.paused: set[tuple[str, int]] = set()
        self.reads_paused: list[set[tuple[str, int]]] = []

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def pause(self, parts: list[TopicPartition]) -> None:
        self.paused |= {(p.topic, p.partition) for p in parts}

    def resume(self, parts: list[TopicPartition]) -> None:
        self.paused -= {(p.topic, p.partition) for p in parts}

    def consume(self, n: int, timeout: float) -> list[object]:
        self.reads_paused.append(set(self.paused))
        return []


def test_d1_the_read_sees_every_partition_paused_and_only_own_pauses_remain() -> None:
    tps = [("routed", 0), ("routed", 1), ("retry.1s", 0)]
    consumer = Consumer(tps)
    consumer.pause([TopicPartition("retry.1s", 0)])  # the tier's own pause
    held = {("retry.1s", 0)}
    assert serve_group_events(consumer, held) == []  # type: ignore[arg-type]
    assert consumer.reads_paused == [set(tps)], "a partition was readable during the read"
    assert consumer.paused == held, "the dispatcher's own pause was lifted, or another stayed"


def test_d1_a_partition_revoked_during_the_read_is_not_resumed() -> None:
    consumer = Consumer([("routed", 0), ("routed", 1)])

    def revoke_one(n: int, timeout: float) -> list[object]:
        consumer.assigned = [TopicPartition("routed", 0)]  # the rebalance inside the read
        consumer.paused.discard(("routed", 1))  # the revoke callback lifts its pause
        return []

    consumer.consume = revoke_one  # type: ignore[method-assign]
    serve_group_events(consumer, set())  # type: ignore[arg-type]
    assert consumer.paused == set()
