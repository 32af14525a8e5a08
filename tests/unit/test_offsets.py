"""D1: offsets move only past settled records."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.domain.offsets import OffsetTracker

TP = ("hookstream.routed", 0)


def test_d1_position_waits_for_lowest_unsettled() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.consumed(TP, offset)
    assert tracker.position(TP) == 10
    tracker.settled(TP, 11)
    tracker.settled(TP, 12)
    assert tracker.position(TP) == 10, "11 and 12 settled, but 10 is still in flight"
    tracker.settled(TP, 10)
    assert tracker.position(TP) == 13
    assert tracker.in_flight() == 0


def test_d1_to_commit_reports_only_moves() -> None:
    tracker = OffsetTracker()
    tracker.consumed(TP, 0)
    tracker.settled(TP, 0)
    first = tracker.to_commit()
    assert first == {TP: 1}
    tracker.mark_committed(first)
    assert tracker.to_commit() == {}


def test_d1_revoked_partition_is_forgotten() -> None:
    tracker = OffsetTracker()
    tracker.consumed(TP, 5)
    tracker.revoke([TP])
    tracker.settled(TP, 5)  # a late settle after revoke must not resurrect the partition
    assert tracker.position(TP) is None
    assert tracker.to_commit() == {}


@given(st.permutations(list(range(30))), st.integers(min_value=0, max_value=30))
def test_d1_position_never_passes_an_unsettled_offset(order: list[int], settle_count: int) -> None:
    tracker = OffsetTracker()
    for offset in range(30):
        tracker.consumed(TP, offset)
    done = set(order[:settle_count])
    for offset in order[:settle_count]:
        tracker.settled(TP, offset)
    position = tracker.position(TP)
    assert position is not None
    unsettled = [o for o in range(30) if o not in done]
    assert position == (min(unsettled) if unsettled else 30)
    assert all(o in done for o in range(position))
