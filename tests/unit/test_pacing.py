"""The backfill pacer (R2, F4, P5): a steady rate, bounded bursts, never above the limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.pacing import DEFAULT_BACKFILL_RATE, Pacer, effective_rate


def _drive(pacer: Pacer, sends: int, start: float = 100.0, lag: float = 0.0) -> list[float]:
    """Send as fast as the pacer allows; each wake-up is ``lag`` seconds late."""
    now, times = start, []
    for _ in range(sends):
        wait = pacer.reserve(now)
        now += wait + (lag if wait > 0 else 0.0)
        times.append(now)
    return times


def test_r2_sends_are_spaced_by_the_rate() -> None:
    times = _drive(Pacer(20.0), 101)
    assert times[-1] - times[0] == pytest.approx(100 / 20)


def test_p5_late_wakeups_do_not_lower_the_long_run_rate() -> None:
    """A sleeper that always wakes 10 ms late still averages the rate (the slots are kept)."""
    times = _drive(Pacer(20.0, burst=2), 201, lag=0.01)
    rate = 200 / (times[-1] - times[0])
    assert rate == pytest.approx(20.0, rel=0.02)


def test_f4_an_idle_pacer_allows_at_most_its_burst() -> None:
    pacer = Pacer(10.0, burst=3)
    pacer.reserve(0.0)
    waits = [pacer.reserve(1000.0) for _ in range(5)]  # long idle, then a rush
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.1) and waits[4] == pytest.approx(0.2)


@given(
    rate=st.floats(min_value=0.1, max_value=1000),
    gaps=st.lists(st.floats(min_value=0, max_value=5), min_size=1, max_size=60),
)
def test_f4_never_more_than_burst_plus_rate_times_elapsed(rate: float, gaps: list[float]) -> None:
    """Whatever the arrival pattern, sends up to t are at most burst + rate x t."""
    pacer = Pacer(rate, burst=2)
    now = 0.0
    sent: list[float] = []
    for gap in gaps:
        now += gap
        sent.append(now + pacer.reserve(now))
    first = sent[0]
    for index, at in enumerate(sent):
        assert index + 1 <= 2 + rate * (at - first) + 1e-6


def test_r2_effective_rate_defaults_to_five_and_respects_the_subscription_limit() -> None:
    assert effective_rate(None) == DEFAULT_BACKFILL_RATE == 5.0
    assert effective_rate(20.0, subscription_limit=8.0) == 8.0
    assert effective_rate(None, default=2.0, subscription_limit=8.0) == 2.0
    assert effective_rate(50.0) == 50.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 1e9])
def test_bad_rates_are_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        Pacer(bad)
    with pytest.raises(ValueError):
        effective_rate(bad)


def test_set_rate_changes_the_spacing_from_the_next_send() -> None:
    pacer = Pacer(10.0)
    pacer.reserve(0.0)
    pacer.set_rate(1.0)
    assert pacer.reserve(0.0) == pytest.approx(0.1)
    assert pacer.reserve(0.0) == pytest.approx(1.1)
