"""Where a dispatcher's read of the ledger starts when it is assigned partitions (Q1)."""

from __future__ import annotations

from streams.lanes.recall import MAX_LOOKBACK_S, SKEW_S, recall_since

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
