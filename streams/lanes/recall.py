"""What a dispatcher reads back when it is assigned partitions (Q1, R4).

The ledger's successes of the newly assigned partitions (the attempts topic is co-partitioned
with the lanes) are read back, so copies of them are not sent again; partitions an operator
rewound (`RESET_MARK` on a committed offset) are sent again on purpose.

How far back: every delivery past a lane's committed position comes to the new owner again,
and none of them was attempted before its record was written. So the read starts at the record
at the live lane's oldest committed position (less `SKEW_S` for the workers' clocks), or one
dedup window ago if that is earlier, and never more than `MAX_LOOKBACK_S` ago. A window alone
was not enough: in a cluster chaos run (chaos-cluster-20261202T1328) one worker's produce acks
hung for minutes and its commits with them; when the partition moved, 1,800 deliveries made
3-4 minutes earlier, outside the 2-minute window, went out again (1.8% duplicates). In the run
after that fix (chaos-cluster-20261202T1404, 1.2%) two more gaps showed: a 10 s read that timed
out (`READ_TIMEOUT_S`), and recalled successes that expired a window after the recall while the
new owner was still working through a backlog of over 2 minutes (`recalled_until`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams.adapters import codec
from streams.adapters.topic_reader import read_since, timestamps_at
from streams.domain.dedup import RESET_MARK, RecentSuccesses
from streams.domain.models import Attempt, OutcomeClass
from streams.errors import DecodeError, HookstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)


#: At most this far back (s): a commit held back longer sends the older deliveries again.
MAX_LOOKBACK_S = 1800.0
#: How long the read may take. 10 s read about 24,000 successes on a loaded 2-core box and
#: timed out (chaos-cluster-20261202T1404): the rest went out again. It runs in the rebalance
#: callback, well inside the group's 300 s poll interval.
READ_TIMEOUT_S = 60.0
#: Margin (s) for the clocks of the worker that routed a record and the one that attempted it.
SKEW_S = 10.0


def recallable(
    consumer: Consumer, partitions: list[TopicPartition], live_topic: str
) -> tuple[list[int], list[TopicPartition]]:
    """The assigned partition numbers whose successes should be read back (all but those an
    operator rewound, `RESET_MARK` on any lane's committed offset, R4), and the committed
    positions of their live lane (``live_topic``). A retry tier's position is left out: a
    record waiting there for its time holds it, hours old on a long tier, and what follows it
    is not due yet either."""
    numbers = {p.partition for p in partitions}
    try:
        committed = consumer.committed(partitions, timeout=10)
    except KafkaException as exc:
        log.warning("committed offsets not read: %s", exc)
        return sorted(numbers), []
    rewound = {tp.partition for tp in committed if tp.metadata == RESET_MARK}
    if rewound:
        log.info("partitions %s were rewound by an operator: sent again", sorted(rewound))
    positions = [
        tp
        for tp in committed
        if tp.topic == live_topic and tp.partition not in rewound and tp.offset >= 0
    ]
    return sorted(numbers - rewound), positions


def recall_since(now_s: float, window_s: float, oldest_position_ms: int | None) -> int:
    """Where the read of the ledger starts (ms): see the module docstring."""
    since_s = now_s - window_s
    if oldest_position_ms is not None:
        since_s = min(since_s, max(oldest_position_ms / 1000 - SKEW_S, now_s - MAX_LOOKBACK_S))
    return int(since_s * 1000)


def recalled_until(now_s: float, since_ms: int, window_s: float) -> float:
    """How long a recalled success counts: a dedup window from now, or as long as the read
    reached back if that is longer, so it outlives the working through of the backlog behind
    the committed position (which built up at the same pace)."""
    return now_s + max(window_s, now_s - since_ms / 1000)


def recall_successes(
    settings: Settings,
    recent: RecentSuccesses,
    partitions: list[int],
    clock: Callable[[], float] = time.time,
    positions: list[TopicPartition] | None = None,
) -> None:
    """Read the ledger's successes of ``partitions`` since `recall_since` into ``recent``, each
    kept for a dedup window from now, or for as long back as the read reached if that is
    longer (Q1). ``positions`` are the live lane's committed positions."""
    if not partitions:
        return
    now = clock()
    oldest: int | None = None
    if positions:
        try:
            stamps = timestamps_at(settings, positions)
            oldest = min(stamps.values()) if stamps else None
        except HookstreamError as exc:  # the window alone, as before
            log.warning("committed positions not read: %s", exc)
    since_ms = recall_since(now, settings.dedup_window, oldest)
    until_s = recalled_until(now, since_ms, settings.dedup_window)
    topic = settings.topic("attempts")
    found = 0
    try:
        for msg in read_since(settings, topic, partitions, since_ms, READ_TIMEOUT_S):
            try:
                att = codec.decode(Attempt, msg.value() or b"")
            except DecodeError:
                continue
            if att.outcome is OutcomeClass.SUCCESS:
                recent.keep(att.delivery_id, until_s)
                found += 1
    except HookstreamError as exc:  # at-least-once still holds; only more copies go out
        log.warning("recent successes not read back: %s", exc)
    log.info(
        "recalled %d successes of partitions %s since %.0fs ago in %.2fs",
        found,
        partitions,
        now - since_ms / 1000,
        clock() - now,
    )
