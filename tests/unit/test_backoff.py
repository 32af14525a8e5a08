"""D6, F2, F4: the retry schedule, its jitter, its window and Retry-After."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.backoff import (
    DEFAULT_SCHEDULE,
    RetryDecision,
    RetryPolicy,
    plan_retry,
    retry_after_bounds,
)

HOUR_MS = 3_600_000
T0 = 1_714_564_800_000


def test_D6_default_schedule_is_1m_5m_30m_2h_with_five_attempts() -> None:
    policy = RetryPolicy()
    assert DEFAULT_SCHEDULE == (60.0, 300.0, 1800.0, 7200.0)
    assert policy.schedule == DEFAULT_SCHEDULE
    assert policy.attempts == 5
    assert policy.jitter == 0.1
    assert policy.window == 86400.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": (60.0, -1.0)}, "positive"),
        ({"schedule": (0.0,)}, "positive"),
        ({"schedule": (math.nan,)}, "positive"),
        ({"schedule": (math.inf,)}, "positive"),
        ({"schedule": (300.0, 60.0)}, "must not decrease"),
        ({"jitter": 1.0}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"window": 0.0}, "window"),
        ({"window": math.inf}, "window"),
    ],
)
def test_D6_policy_refuses_nonsense(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]  # each case sets one typed field


@pytest.mark.parametrize(
    ("failed_attempt", "tier", "delay_ms"),
    [(1, 0, 60_000), (2, 1, 300_000), (3, 2, 1_800_000), (4, 3, 7_200_000)],
)
def test_D6_each_failed_attempt_goes_to_its_tier(
    failed_attempt: int, tier: int, delay_ms: int
) -> None:
    decision = plan_retry(RetryPolicy(), failed_attempt, T0, T0, lambda: 0.5)
    assert decision == RetryDecision(tier, T0 + delay_ms, exhausted=False, reason="backoff")


def test_D6_jitter_is_plus_or_minus_ten_percent() -> None:
    low = plan_retry(RetryPolicy(), 1, T0, T0, lambda: 0.0)
    high = plan_retry(RetryPolicy(), 1, T0, T0, lambda: 0.999_999)
    assert low.due_at_ms == T0 + 54_000
    assert high.due_at_ms is not None
    assert T0 + 65_999 <= high.due_at_ms <= T0 + 66_000


def test_D6_due_times_round_up_so_a_retry_is_never_early() -> None:
    policy = RetryPolicy(schedule=(1.0625,), jitter=0.0)  # 1062.5 ms, exact in binary
    assert plan_retry(policy, 1, T0, T0, lambda: 0.5).due_at_ms == T0 + 1063
    assert plan_retry(policy, 1, T0, T0, lambda: 0.5, 1.0625).due_at_ms == T0 + 1063


def test_D6_after_the_last_tier_the_delivery_is_exhausted() -> None:
    decision = plan_retry(RetryPolicy(), 5, T0, T0, lambda: 0.5)
    assert decision == RetryDecision(None, None, exhausted=True, reason="attempts_exhausted")


def test_D6_the_window_caps_the_total() -> None:
    policy = RetryPolicy(window=3 * 3600.0)
    # an hour into retrying, the 2h tier lands exactly on the 3h window's end: still allowed
    at_the_end = plan_retry(policy, 4, T0 - HOUR_MS, T0, lambda: 0.5)
    assert at_the_end == RetryDecision(3, T0 + 2 * HOUR_MS, exhausted=False, reason="backoff")
    # one millisecond later it would overrun the window
    overrun = plan_retry(policy, 4, T0 - HOUR_MS - 1, T0, lambda: 0.5)
    assert overrun == RetryDecision(None, None, exhausted=True, reason="window_exhausted")


def test_D6_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        plan_retry(RetryPolicy(), 0, T0, T0, lambda: 0.5)


@pytest.mark.parametrize("bad", [1.0, -0.01, math.nan])
def test_D6_random_source_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="random source"):
        plan_retry(RetryPolicy(), 1, T0, T0, lambda: bad)


@pytest.mark.parametrize(
    ("retry_after_s", "wait_ms"),
    [(10.0, 60_000), (0.0, 60_000), (90.0, 90_000), (120.0, 120_000), (3600.0, 120_000)],
)
def test_F2_retry_after_is_clamped_to_step_and_twice_the_step(
    retry_after_s: float, wait_ms: int
) -> None:
    decision = plan_retry(RetryPolicy(), 1, T0, T0, lambda: 0.0, retry_after_s)
    assert decision == RetryDecision(0, T0 + wait_ms, exhausted=False, reason="retry_after")


def test_F2_jitter_on_retry_after_only_adds() -> None:
    decision = plan_retry(RetryPolicy(), 1, T0, T0, lambda: 0.999_999, 90.0)
    assert decision.due_at_ms is not None
    assert T0 + 90_000 < decision.due_at_ms <= T0 + 99_000


def test_F2_odd_retry_after_values_fall_back_to_the_step() -> None:
    assert retry_after_bounds(60.0, math.nan) == 60.0
    assert retry_after_bounds(60.0, math.inf) == 120.0
    assert retry_after_bounds(60.0, -5.0) == 60.0


_schedules = st.lists(
    st.floats(min_value=0.001, max_value=30 * 86400.0), min_size=0, max_size=8
).map(lambda steps: tuple(sorted(steps)))


@st.composite
def _policies(draw: st.DrawFn) -> RetryPolicy:
    return RetryPolicy(
        schedule=draw(_schedules),
        jitter=draw(st.floats(min_value=0.0, max_value=0.999)),
        window=draw(st.floats(min_value=0.001, max_value=90 * 86400.0)),
    )


_rands = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
_retry_afters = st.none() | st.floats(allow_nan=True, allow_infinity=True)


@given(
    policy=_policies(),
    failed_attempt=st.integers(min_value=1, max_value=10),
    first_ms=st.integers(min_value=0, max_value=2**42),
    elapsed_ms=st.integers(min_value=0, max_value=100 * 86_400_000),
    r=_rands,
    retry_after_s=_retry_afters,
)
def test_D6_F2_invariants(
    policy: RetryPolicy,
    failed_attempt: int,
    first_ms: int,
    elapsed_ms: int,
    r: float,
    retry_after_s: float | None,
) -> None:
    now_ms = first_ms + elapsed_ms
    decision = plan_retry(policy, failed_attempt, first_ms, now_ms, lambda: r, retry_after_s)
    window_end = first_ms + math.floor(policy.window * 1000)
    if failed_attempt > len(policy.schedule):
        assert decision.exhausted and decision.reason == "attempts_exhausted"
        return
    step = policy.schedule[failed_attempt - 1]
    if retry_after_s is None:
        low, high = step * (1 - policy.jitter), step * (1 + policy.jitter)
    else:
        low = retry_after_bounds(step, retry_after_s)
        high = low * (1 + policy.jitter)
        assert step <= low <= 2 * step
    # float rounding may cost the jittered lower bound a millisecond; Retry-After gets none
    earliest_ms = now_ms + math.ceil(low * 1000) - (1 if retry_after_s is None else 0)
    if decision.exhausted:
        # only the window can end it here, and only when even the earliest pick would overrun it
        assert decision.reason == "window_exhausted"
        assert now_ms + math.ceil(high * 1000) + 1 > window_end  # 1 ms: float rounding
        assert decision.tier is None and decision.due_at_ms is None
        return
    assert decision.tier == failed_attempt - 1
    assert 0 <= decision.tier < len(policy.schedule)
    assert decision.due_at_ms is not None
    delay_ms = decision.due_at_ms - now_ms
    assert delay_ms >= 0  # never negative
    assert decision.due_at_ms >= earliest_ms  # never early, never before the honoured Retry-After
    assert delay_ms <= math.ceil(high * 1000) + 1  # jitter stays within its bounds
    assert decision.due_at_ms <= window_end  # never past the window
    if retry_after_s is not None:
        assert decision.reason == "retry_after"


@given(
    schedule=_schedules.filter(lambda s: len(s) >= 2),
    r=_rands,
)
def test_D6_without_jitter_later_tiers_never_wait_less(
    schedule: tuple[float, ...], r: float
) -> None:
    policy = RetryPolicy(schedule=schedule, jitter=0.0, window=1e12)
    due = [plan_retry(policy, n, T0, T0, lambda: r).due_at_ms for n in range(1, len(schedule) + 1)]
    assert due == sorted(due)  # type: ignore[type-var]  # none is None: the window is huge
