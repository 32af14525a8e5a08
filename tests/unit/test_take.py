"""`kafka_clients.take`: a record read before a rebalance is not handed on after it (D1).

The broker side of `take` is covered by every lane test; here a scripted consumer puts a
rebalance between `take`'s two reads, which a real broker does only by chance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import Consumer

from streams.adapters.kafka_clients import take


class ScriptedConsumer:
    """Answers each ``consume`` with the next scripted batch, running its hook first (the
    rebalance callbacks librdkafka serves inside that call)."""

    def __init__(self, *calls: tuple[list[str], Any]) -> None:
        self.calls = list(calls)
        self.asked: list[tuple[int, float]] = []

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.asked.append((num_messages, timeout))
        batch, hook = self.calls.pop(0)
        if hook is not None:
            hook()
        return batch


def _take(consumer: ScriptedConsumer, rebalances: Callable[[], int] | None = None) -> list[Any]:
    return list(take(cast(Consumer, consumer), 10, 0.1, rebalances))


def test_d1_a_record_from_an_ended_assignment_is_dropped() -> None:
    rebalances = [0]

    def rebalance() -> None:
        rebalances[0] += 1

    consumer = ScriptedConsumer((["old"], None), (["new-1", "new-2"], rebalance))
    assert _take(consumer, lambda: rebalances[0]) == ["new-1", "new-2"]


def test_d1_records_of_one_assignment_are_all_handed_on() -> None:
    rebalances = [3]
    consumer = ScriptedConsumer((["a"], None), (["b", "c"], None))
    assert _take(consumer, lambda: rebalances[0]) == ["a", "b", "c"]
    assert consumer.asked == [(1, 0.1), (9, 0)]  # waits for the first only


def test_a_rebalance_inside_the_first_read_keeps_its_record() -> None:
    """The first read serves the rebalance before it returns a record of the new assignment."""
    rebalances = [0]

    def rebalance() -> None:
        rebalances[0] += 1

    consumer = ScriptedConsumer((["new-1"], rebalance), (["new-2"], None))
    assert _take(consumer, lambda: rebalances[0]) == ["new-1", "new-2"]


def test_without_a_count_every_record_is_handed_on() -> None:
    consumer = ScriptedConsumer((["a"], None), (["b"], None))
    assert _take(consumer) == ["a", "b"]
    empty = ScriptedConsumer(([], None))
    assert _take(empty) == []
    assert empty.asked == [(1, 0.1)]
