"""`lanes.idle.caught_up`: when a backfill or retry-tier partition counts as read to its end,
so `IdleLanes` may leave it out of the dispatcher's fetches (P2) without leaving a record
behind (D1)."""

from __future__ import annotations

from confluent_kafka import OFFSET_INVALID

from streams.lanes.idle import caught_up


def test_d1_a_partition_with_records_left_is_not_caught_up() -> None:
    assert caught_up(5, 0, 7) is None
    assert caught_up(OFFSET_INVALID, 0, 7) is None  # nothing read yet, records there


def test_p2_a_partition_read_to_its_high_watermark_is_caught_up_at_it() -> None:
    assert caught_up(7, 0, 7) == 7
    assert caught_up(OFFSET_INVALID, 4, 4) == 4  # nothing read, nothing to read


def test_d1_unknown_watermarks_never_count_as_caught_up() -> None:
    assert caught_up(OFFSET_INVALID, OFFSET_INVALID, OFFSET_INVALID) is None
    assert caught_up(3, -1, -1) is None
