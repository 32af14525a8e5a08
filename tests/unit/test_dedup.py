"""Q1: the recent-successes window that keeps copies of delivered deliveries from going out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.domain.dedup import RecentSuccesses


def test_q1_a_success_is_remembered_for_the_window_only() -> None:
    recent = RecentSuccesses(window_s=60)
    recent.add("dlv_a", at_s=100.0)
    assert recent.seen("dlv_a", now_s=159.0)
    assert not recent.seen("dlv_b", now_s=159.0)
    assert not recent.seen("dlv_a", now_s=161.0)
    assert len(recent) == 0


def test_q1_a_later_success_extends_the_memory() -> None:
    recent = RecentSuccesses(window_s=60)
    recent.add("dlv_a", at_s=100.0)
    recent.add("dlv_a", at_s=150.0)
    assert recent.seen("dlv_a", now_s=200.0)
    assert not recent.seen("dlv_a", now_s=211.0)


def test_q1_a_window_of_zero_remembers_nothing() -> None:
    recent = RecentSuccesses(window_s=0)
    recent.add("dlv_a", at_s=100.0)
    assert not recent.seen("dlv_a", now_s=100.0)


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(0, 1000)), max_size=60))
def test_q1_seen_matches_the_newest_success_of_each_id(adds: list[tuple[str, float]]) -> None:
    recent = RecentSuccesses(window_s=100)
    newest: dict[str, float] = {}
    for delivery_id, at_s in adds:  # arrivals out of order, as ledger read-back gives them
        recent.add(delivery_id, at_s)
        newest[delivery_id] = max(at_s, newest.get(delivery_id, at_s))
    now = 1000.0
    for delivery_id in "abcdef":
        expected = delivery_id in newest and newest[delivery_id] >= now - 100
        assert recent.seen(delivery_id, now) == expected
