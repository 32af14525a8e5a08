"""Where a dispatcher's read of the ledger starts when it is assigned partitions (Q1)."""

from __future__ import annotations

from streams.domain.dedup import RecentSuccesses
from streams.lanes.recall import MAX_LOOKBACK_S, SKEW_S, recall_since, recalled_until

NOW = 1_800_000_000.0


def test_q1_without_a_committed_record_the_read_covers_one_dedup_window() -> None:
    assert recall_since(NOW, 120.0, None) == int((NOW - 120) * 1000)


def test_q1_a_recent_committed_position_keeps_the_window() -> None:
    written_ms = int((NOW - 30) * 1000)  # the commit is 30 s behind: the window covers it
    assert recall_since(NOW, 120.0, written_ms) == int((NOW - 120) * 1000)


def test_q1_a_commit_held_back_past_the_window_reads_from_its_record() -> None:
    written_ms = int((NOW - 200) * 1000)
    assert recall_since(NOW, 120.0, written_ms) == int((NOW - 200 - SKEW_S) * 1000)


def test_q1_the_read_never_goes_back_further_than_the_bound() -> None:
    written_ms = int((NOW - 6 * 3600) * 1000)
    assert recall_since(NOW, 120.0, written_ms) == int((NOW - MAX_LOOKBACK_S) * 1000)


def test_q1_recalled_successes_outlive_the_backlog_they_were_read_for() -> None:
    """Read back 300 s with a 120 s window: kept 300 s from now, not 120 s (in the 14:04 run
    a new owner took over 2 min to reach the deliveries it had recalled, and sent them)."""
    recent = RecentSuccesses(120.0)
    recent.keep("dlv_old", recalled_until(NOW, int((NOW - 300) * 1000), 120.0))
    assert recent.seen("dlv_old", NOW + 290)
    assert not recent.seen("dlv_old", NOW + 310)
    assert recalled_until(NOW, int((NOW - 60) * 1000), 120.0) == NOW + 120  # the window


def test_q1_a_long_recall_does_not_hold_back_the_expiry_of_later_successes() -> None:
    """What succeeds after a recall is forgotten a window later, while the recalled ids wait
    for their own time: memory stays bounded by the window plus what was read back."""
    recent = RecentSuccesses(120.0)
    recent.keep("dlv_recalled", NOW + 1800)
    for n in range(100):
        recent.add(f"dlv_{n}", NOW + n)
    assert recent.seen("dlv_99", NOW + 200)
    assert not recent.seen("dlv_0", NOW + 200)
    assert len(recent) == 1 + 20  # the recalled id and the last 120 s of successes
    assert recent.seen("dlv_recalled", NOW + 1799)
    assert not recent.seen("dlv_recalled", NOW + 1801) and len(recent) == 0
