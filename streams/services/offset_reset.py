"""Offset reset (R4): move a consumer group of hookstream back (or forward) to a datetime.

The dispatcher's group (``<group_id>-dispatch``) reads `routed`, `backfill` and every retry
tier; the router's (``<group_id>-router``) reads `events`. Resetting the dispatcher's group to
a datetime sends every delivery consumed since then again, with the same webhook-id (D2), so
receivers drop what they already have. Resetting the router's group routes the events again:
the archive gets copies, the deliveries keep their keys.

Kafka refuses to move the offsets of a group with live members, and so does this: the workers
must be stopped first (`ConflictError` names the members otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import LIBRDKAFKA_LOG, make_consumer, watermarks
from streams.domain.dedup import RESET_MARK
from streams.errors import ConflictError, HookstreamError, ValidationError
from streams.settings import Settings

GROUPS = ("dispatch", "router")


@dataclass(frozen=True, slots=True)
class OffsetMove:
    topic: str
    partition: int
    current: int | None  # the committed offset, None when the group has none
    target: int


def group_name(settings: Settings, group: str) -> str:
    if group not in GROUPS:
        raise ValidationError({"group": f"must be one of {', '.join(GROUPS)}"})
    return f"{settings.group_id}-{group}"


def group_topics(settings: Settings, group: str) -> list[str]:
    """The topics a hookstream consumer group reads."""
    if group == "router":
        return [settings.topic("events")]
    tiers = [topic for _delay, topic in load_topology(settings).retry_tiers]
    return [settings.topic("routed"), settings.topic("backfill"), *tiers]


def _admin(settings: Settings) -> AdminClient:
    conf: dict[str, Any] = {"bootstrap.servers": settings.kafka_bootstrap, "logger": LIBRDKAFKA_LOG}
    return AdminClient(conf)  # librdkafka's log lines through Python logging (X2)


def check_stopped(settings: Settings, group_id: str) -> None:
    """ConflictError when ``group_id`` has active members (workers still running)."""
    try:
        admin = _admin(settings)  # kept referenced until its future resolves
        described = admin.describe_consumer_groups([group_id])[group_id].result(timeout=15)
    except KafkaException as exc:
        raise HookstreamError(f"cannot describe consumer group {group_id}: {exc}") from exc
    members = list(described.members or [])
    if members:
        hosts = ", ".join(sorted({f"{m.client_id}@{m.host}" for m in members}))
        raise ConflictError(
            f"consumer group {group_id} has {len(members)} active member(s) ({hosts}); "
            "stop every hookstream worker first, then reset"
        )


def _committed(settings: Settings, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, asked by a consumer of the group that never subscribes:
    the admin API's ListConsumerGroupOffsets crashes librdkafka 2.x when the group's coordinator
    moves meanwhile (confluentinc/librdkafka#5040, docs/deployment.md)."""
    consumer = make_consumer(settings, group)
    try:
        asked = [
            TopicPartition(topic, part)
            for topic in group_topics(settings, group)
            for part in watermarks(consumer, topic)
        ]
        found = consumer.committed(asked, timeout=15)
    except KafkaException as exc:
        name = group_name(settings, group)
        raise HookstreamError(f"cannot read the offsets of {name}: {exc}") from exc
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def plan_reset(settings: Settings, group: str, to_ms: int) -> list[OffsetMove]:
    """Where each partition of the group's topics would go: the first offset at or after
    ``to_ms``, or the partition's end when nothing is that recent."""
    current = _committed(settings, group)
    consumer = make_consumer(settings, f"{group}-reset-plan")
    moves: list[OffsetMove] = []
    try:
        for topic in group_topics(settings, group):
            marks = watermarks(consumer, topic)
            asked = [TopicPartition(topic, part, to_ms) for part in marks]
            for tp in consumer.offsets_for_times(asked, timeout=15):
                low, high = marks[tp.partition]
                target = high if tp.offset < 0 else max(low, tp.offset)
                moves.append(
                    OffsetMove(topic, tp.partition, current.get((topic, tp.partition)), target)
                )
    finally:
        consumer.close()
    return moves


def reset_offsets(
    settings: Settings, group: str, to_ms: int, *, dry_run: bool = False
) -> list[OffsetMove]:
    """R4: reset ``group`` (dispatch or router) to ``to_ms``; refused while workers run."""
    group_id = group_name(settings, group)
    check_stopped(settings, group_id)
    moves = plan_reset(settings, group, to_ms)
    if dry_run or not moves:
        return moves
    # the mark tells the dispatcher this replay is wanted: it sends what succeeded before (Q1)
    offsets = [TopicPartition(m.topic, m.partition, m.target, metadata=RESET_MARK) for m in moves]
    request = [ConsumerGroupTopicPartitions(group_id, offsets)]
    admin = _admin(settings)
    try:
        result = admin.alter_consumer_group_offsets(request)[group_id].result(15)
    except KafkaException as exc:
        raise ConflictError(f"Kafka refused to reset {group_id}: {exc}") from exc
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        raise HookstreamError(f"could not reset {len(failed)} partition(s): {failed[0].error}")
    return moves
