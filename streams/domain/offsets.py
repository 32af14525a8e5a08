"""Commit-after-settle bookkeeping (D1), pure.

A lane consumes records in offset order but settles them out of order: deliveries to different
endpoints finish at different times, and retry records wait for their due time. For each
partition the tracker remembers which consumed offsets are not settled yet. The committable
position is the lowest unsettled offset, or one past the last consumed offset when everything is
settled: an offset moves only past records that were delivered, handed to a retry tier or
dead-lettered. A crash therefore replays only unsettled records (at-least-once, made harmless by
the idempotency key, D2).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass
class _PartitionState:
    pending: list[int] = field(default_factory=list)  # min-heap of unsettled offsets
    settled: set[int] = field(default_factory=set)  # settled offsets still above the heap head
    next_offset: int | None = None  # one past the highest consumed offset
    committed: int | None = None  # the last position handed to Kafka


class OffsetTracker:
    """Tracks unsettled offsets per partition and yields the positions that are safe to commit."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}

    def consumed(self, tp: TopicPartition, offset: int) -> None:
        """Record that ``offset`` was taken from ``tp`` and is now in flight."""
        state = self._parts.setdefault(tp, _PartitionState())
        heapq.heappush(state.pending, offset)
        if state.next_offset is None or offset + 1 > state.next_offset:
            state.next_offset = offset + 1

    def settled(self, tp: TopicPartition, offset: int) -> None:
        """Record that the record at ``offset`` is settled."""
        state = self._parts.get(tp)
        if state is None:
            return  # the partition was revoked meanwhile: its new owner replays the record
        state.settled.add(offset)
        while state.pending and state.pending[0] in state.settled:
            state.settled.discard(heapq.heappop(state.pending))

    def in_flight(self, tp: TopicPartition | None = None) -> int:
        """Unsettled records, in one partition or in all."""
        if tp is not None:
            state = self._parts.get(tp)
            return 0 if state is None else len(state.pending) - len(state.settled)
        return sum(len(s.pending) - len(s.settled) for s in self._parts.values())

    def position(self, tp: TopicPartition) -> int | None:
        """The committable position of ``tp`` (the next offset to read after a restart)."""
        state = self._parts.get(tp)
        if state is None:
            return None
        if state.pending:
            return state.pending[0]
        return state.next_offset

    def to_commit(self) -> dict[TopicPartition, int]:
        """Positions that moved since the last call to `committed`."""
        out: dict[TopicPartition, int] = {}
        for tp, state in self._parts.items():
            pos = self.position(tp)
            if pos is not None and pos != state.committed:
                out[tp] = pos
        return out

    def mark_committed(self, positions: dict[TopicPartition, int]) -> None:
        for tp, pos in positions.items():
            state = self._parts.get(tp)
            if state is not None:
                state.committed = pos

    def revoke(self, tps: list[TopicPartition]) -> None:
        """Forget partitions taken away; their unsettled records are replayed elsewhere."""
        for tp in tps:
            self._parts.pop(tp, None)

    def partitions(self) -> list[TopicPartition]:
        return list(self._parts)
