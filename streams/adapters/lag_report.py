"""What a consumer-lag measurement says (SPEC O1): `PartitionLag`, `TopicLag`, `LagReport`.

Plain values and their arithmetic, with no Kafka in them: where a group resumes in a partition
(its commit clamped into the log, the log start when it has none), the record lag from there to
the high watermark, and per (group, topic) the summed lag and the age of the oldest record not
committed (0 when nothing lags, none when no lagging partition could be read). Which consumer
groups belong to a pipeline is decided here too, by name (`hookstream_groups`).

It is apart from `streams.adapters.lag`, which takes the measurement from the broker, because
`hookstream lag`, the lag exporter and the unit tests read a report without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition as one consumer group sees it."""

    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed this partition
    low: int  # log start offset
    high: int  # high watermark (log end offset)
    oldest_timestamp_ms: int | None = None  # timestamp of the record at `position`, if read

    @property
    def position(self) -> int:
        """Where the group resumes: its commit, clamped into the log (earliest when none)."""
        if self.committed is None or self.committed < self.low:
            return self.low
        return min(self.committed, self.high)

    @property
    def lag(self) -> int:
        return self.high - self.position


@dataclass(frozen=True, slots=True)
class TopicLag:
    """One topic as one consumer group sees it: summed records, the oldest record's age."""

    group: str
    topic: str
    partitions: int
    lag: int
    age_s: float | None  # None: lagging, but no lagging partition could be read this round


@dataclass(frozen=True, slots=True)
class LagReport:
    taken_at: float  # unix seconds
    partitions: tuple[PartitionLag, ...]

    def topics(self) -> list[TopicLag]:
        """Per (group, topic) totals, sorted by group then topic."""
        grouped: dict[tuple[str, str], list[PartitionLag]] = {}
        for part in self.partitions:
            grouped.setdefault((part.group, part.topic), []).append(part)
        return [
            TopicLag(group, topic, len(parts), sum(p.lag for p in parts), self._age(parts))
            for (group, topic), parts in sorted(grouped.items())
        ]

    def _age(self, parts: list[PartitionLag]) -> float | None:
        lagging = [p for p in parts if p.lag > 0]
        if not lagging:
            return 0.0
        stamps = [p.oldest_timestamp_ms for p in lagging if p.oldest_timestamp_ms is not None]
        if not stamps:
            return None
        return max(0.0, self.taken_at - min(stamps) / 1000)


def hookstream_groups(group_id: str, names: Iterable[str]) -> list[str]:
    """The groups among ``names`` that belong to the pipeline whose group id is ``group_id``."""
    lane_prefix = f"{group_id}-"
    return sorted(n for n in set(names) if n == group_id or n.startswith(lane_prefix))
