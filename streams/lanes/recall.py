"""What a dispatcher reads back when it is assigned partitions (Q1, R4).

The ledger's recent successes of the newly assigned partitions (the attempts topic is
co-partitioned with the lanes) are read back, so copies of them are not sent again; partitions
an operator rewound (`RESET_MARK` on a committed offset) are sent again on purpose.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams.adapters import codec
from streams.adapters.topic_reader import read_since
from streams.domain.dedup import RESET_MARK, RecentSuccesses
from streams.domain.models import Attempt, OutcomeClass
from streams.errors import DecodeError, HookstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)


def recallable(consumer: Consumer, partitions: list[TopicPartition]) -> list[int]:
    """The assigned partition numbers whose recent successes should be read back: all but
    those an operator rewound (`RESET_MARK` on any lane's committed offset, R4)."""
    numbers = {p.partition for p in partitions}
    try:
        committed = consumer.committed(partitions, timeout=10)
    except KafkaException as exc:
        log.warning("committed offsets not read: %s", exc)
        return sorted(numbers)
    rewound = {tp.partition for tp in committed if tp.metadata == RESET_MARK}
    if rewound:
        log.info("partitions %s were rewound by an operator: sent again", sorted(rewound))
    return sorted(numbers - rewound)


def recall_successes(
    settings: Settings,
    recent: RecentSuccesses,
    partitions: list[int],
    clock: Callable[[], float] = time.time,
) -> None:
    """Read the ledger's recent successes of ``partitions`` into ``recent`` (Q1)."""
    if not partitions:
        return
    now = clock()
    since_ms = int((now - settings.dedup_window) * 1000)
    topic = settings.topic("attempts")
    found = 0
    try:
        for msg in read_since(settings, topic, partitions, since_ms):
            try:
                att = codec.decode(Attempt, msg.value() or b"")
            except DecodeError:
                continue
            if att.outcome is OutcomeClass.SUCCESS:
                recent.add(att.delivery_id, att.started_at / 1000)
                found += 1
    except HookstreamError as exc:  # at-least-once still holds; only more copies go out
        log.warning("recent successes not read back: %s", exc)
    log.info(
        "recalled %d recent successes of partitions %s in %.2fs",
        found,
        partitions,
        clock() - now,
    )
