"""H1, H2, H3, H6, D10: the health record and how delivery outcomes move it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.classify import classify
from streams.domain.health import (
    DEDUP_WINDOW,
    MAX_ERROR_CHARS,
    HealthRecord,
    HealthStep,
    apply_outcome,
    reset,
)
from streams.domain.models import HealthOutcome, OutcomeClass
from streams.domain.policy import SuspensionPolicy, Threshold
from streams.errors import ValidationError

S, R, P, F = (
    OutcomeClass.SUCCESS,
    OutcomeClass.RETRYABLE,
    OutcomeClass.PERMANENT,
    OutcomeClass.FATAL,
)
T0 = 1_714_564_800_000
MIN = 60_000
HOUR = 3_600_000
POLICY = SuspensionPolicy()
SUB = "sub-1"
_ids = itertools.count()


def outcome(
    cls: OutcomeClass,
    at: int,
    delivery_id: str | None = None,
    *,
    reason: str | None = None,
    http_status: int | None = None,
    error: str | None = None,
    attempts: int = 1,
) -> HealthOutcome:
    """One delivery's terminal outcome; every call is a new delivery unless an id is given."""
    return HealthOutcome(
        subscription_id=SUB,
        delivery_id=delivery_id or f"d{next(_ids)}",
        outcome=cls,
        reason=reason or cls.value,
        at=at,
        origin="https://hooks.example.com:443",
        attempts=attempts,
        http_status=http_status,
        error=error,
    )


def run(
    outcomes: Iterable[HealthOutcome],
    record: HealthRecord | None = None,
    policy: SuspensionPolicy = POLICY,
) -> tuple[HealthRecord, list[HealthStep]]:
    steps = []
    for item in outcomes:
        step = apply_outcome(record, item, policy, item.at)
        steps.append(step)
        record = step.record
    assert record is not None
    return record, steps


def suspensions(steps: list[HealthStep]) -> list[str]:
    return [s.suspend.status_reason for s in steps if s.suspend is not None]


def test_H1_a_failure_fills_the_record() -> None:
    item = outcome(R, T0, http_status=503, error="x" * 900, reason="http_503")
    record = apply_outcome(None, item, POLICY, T0).record
    assert record.subscription_id == SUB
    assert (record.consecutive_failures, record.retryable_failures) == (1, 1)
    assert record.first_failure_at == T0 == record.last_attempt_at
    assert record.last_outcome is R and record.last_status == 503
    assert record.last_reason == "http_503"
    assert record.last_error == "x" * MAX_ERROR_CHARS
    assert record.last_success_at is None
    assert record.episode == 1
    assert record.last_delivery_id == item.delivery_id


def test_H1_D10_four_failures_then_one_success_reset_the_counters() -> None:
    failures = [outcome(cls, T0 + i * MIN) for i, cls in enumerate([R, P, R, F])]
    record, _ = run(failures)
    assert record.consecutive_failures == 4
    assert (record.retryable_failures, record.permanent_failures, record.fatal_failures) == (
        2,
        1,
        1,
    )
    record, _ = run([outcome(S, T0 + 5 * MIN, http_status=200)], record)
    assert record.consecutive_failures == 0
    assert record.retryable_failures == record.permanent_failures == record.fatal_failures == 0
    assert record.first_failure_at is None
    assert record.last_success_at == T0 + 5 * MIN
    assert record.last_outcome is S
    assert not record.failing


def test_H2_duration_gate_holds_30_fast_failures_then_the_next_late_one_suspends() -> None:
    fast = [outcome(R, T0 + i * MIN) for i in range(30)]  # 30 failures within half an hour
    record, steps = run(fast)
    assert record.consecutive_failures == 30
    assert suspensions(steps) == []
    just_before = outcome(R, T0 + 12 * HOUR - 1)
    record, steps = run([just_before], record)
    assert suspensions(steps) == []
    record, steps = run([outcome(R, T0 + 12 * HOUR)], record)
    assert suspensions(steps) == ["auto_suspend:retryable:32"]
    decision = steps[0].suspend
    assert decision is not None
    assert decision.first_failure_at == T0 and decision.episode == record.episode
    assert record.suspended_episode == record.episode


def test_H2_the_count_gate_holds_a_long_but_thin_episode() -> None:
    record, steps = run([outcome(R, T0), outcome(R, T0 + 48 * HOUR)])
    assert suspensions(steps) == []
    assert record.consecutive_failures == 2


def test_H3_suspension_is_decided_once_per_episode_even_when_redelivered() -> None:
    items = [outcome(P, T0 + i * 20 * MIN) for i in range(8)]  # 5th at 80 min: suspends
    record, steps = run(items)
    assert suspensions(steps) == ["auto_suspend:permanent:5"]
    # A crash makes the health agent read the same batch again.
    again, steps = run(items, record)
    assert suspensions(steps) == []
    assert all(step.ignored == "duplicate" for step in steps)
    assert again == record
    # Later failures of the same episode do not suspend again either.
    record, steps = run([outcome(F, T0 + 10 * HOUR + i) for i in range(5)], record)
    assert suspensions(steps) == []


def test_H3_an_immediate_duplicate_does_not_count_twice() -> None:
    item = outcome(R, T0)
    record, steps = run([item, item])
    assert record.consecutive_failures == 1
    assert steps[1].ignored == "duplicate"


def test_H3_a_new_episode_can_be_suspended_again() -> None:
    first = [outcome(F, T0 + i * 10 * MIN) for i in range(3)]
    record, steps = run(first)
    assert suspensions(steps) == ["auto_suspend:fatal:3"]
    record = reset(record, T0 + HOUR)
    second = [outcome(F, T0 + 2 * HOUR + i * 10 * MIN) for i in range(3)]
    record, steps = run(second, record)
    assert suspensions(steps) == ["auto_suspend:fatal:3"]
    assert record.episode == 2
    keys = {step.suspend.key for step in steps if step.suspend is not None}
    assert keys == {f"{SUB}:suspend:2"}


def test_D10_one_terminal_outcome_moves_the_counter_by_exactly_one() -> None:
    # The dispatcher made five attempts, then sent one terminal outcome for the delivery.
    exhausted = outcome(R, T0, attempts=5, http_status=500)
    record = apply_outcome(None, exhausted, POLICY, T0).record
    assert record.consecutive_failures == 1
    rescued = outcome(S, T0 + MIN, attempts=3, http_status=200)  # failed twice, then 200
    record = apply_outcome(record, rescued, POLICY, T0 + MIN).record
    assert record.consecutive_failures == 0


@given(st.lists(st.sampled_from([S, R, P, F]), max_size=40))
def test_D10_each_outcome_moves_the_counter_by_one_or_resets_it(
    classes: list[OutcomeClass],
) -> None:
    record: HealthRecord | None = None
    for i, cls in enumerate(classes):
        before = 0 if record is None else record.consecutive_failures
        record = apply_outcome(record, outcome(cls, T0 + i * MIN), POLICY, T0 + i * MIN).record
        expected = 0 if cls is S else before + 1
        assert record.consecutive_failures == expected
        total = record.retryable_failures + record.permanent_failures + record.fatal_failures
        assert total == record.consecutive_failures


def test_H2_a_policy_change_takes_effect_on_the_next_outcome() -> None:
    items = [outcome(R, T0 + i * HOUR) for i in range(10)]  # 10 failures over 9 hours
    record, steps = run(items)
    assert suspensions(steps) == []
    stricter = SuspensionPolicy(retryable=Threshold(10, 6 * 3600.0))
    record, steps = run([outcome(R, T0 + 10 * HOUR)], record, stricter)
    assert suspensions(steps) == ["auto_suspend:retryable:11"]


def test_H2_a_410_counts_at_the_permanent_threshold() -> None:
    verdict = classify(410, None)
    assert (verdict.outcome, verdict.reason) == (P, "http_410")
    gone = [
        outcome(verdict.outcome, T0 + i * 15 * MIN, reason=verdict.reason, http_status=410)
        for i in range(5)
    ]  # the 5th arrives at exactly one hour
    record, steps = run(gone)
    assert suspensions(steps) == ["auto_suspend:permanent:5"]
    assert record.last_reason == "http_410" and record.last_status == 410


def test_H2_fatal_failures_count_toward_the_milder_thresholds_too() -> None:
    # 2 permanent + 3 fatal within an hour: the permanent threshold counts all 5.
    mixed = [outcome(cls, T0 + i * 20 * MIN) for i, cls in enumerate([P, P, F, F, R])]
    record = run(mixed[:4])[0]
    assert record.counted_toward(P) == 4 and record.counted_toward(F) == 2
    assert record.counted_toward(R) == 4
    policy = SuspensionPolicy(fatal=Threshold(3, 0.0), permanent=Threshold(4, 3600.0))
    record, steps = run(mixed, policy=policy)
    # At the 4th (60 min): permanent count 4 and the episode is an hour old.
    assert suspensions(steps) == ["auto_suspend:permanent:4"]


def test_H2_retryable_failures_do_not_count_toward_the_permanent_threshold() -> None:
    mixed = [outcome(cls, T0 + i * 30 * MIN) for i, cls in enumerate([P, R, R, R, P, P, P])]
    record, steps = run(mixed)
    assert record.counted_toward(P) == 4
    assert suspensions(steps) == []


def test_H2_the_most_severe_qualifying_class_is_named() -> None:
    policy = SuspensionPolicy(
        retryable=Threshold(3, 0.0), permanent=Threshold(3, 0.0), fatal=Threshold(3, 0.0)
    )
    _, steps = run([outcome(F, T0 + i) for i in range(3)], policy=policy)
    assert suspensions(steps) == ["auto_suspend:fatal:3"]


def test_H6_the_early_warning_is_emitted_once_per_episode() -> None:
    record, steps = run([outcome(R, T0 + i * MIN) for i in range(6)])
    warnings = [s.warn for s in steps if s.warn is not None]
    assert len(warnings) == 1
    assert warnings[0].consecutive_failures == 3 and warnings[0].key == f"{SUB}:warn:1"
    assert steps[2].warn is warnings[0]
    record, _ = run([outcome(S, T0 + 10 * MIN)], record)
    _, steps = run([outcome(R, T0 + 11 * MIN + i) for i in range(4)], record)
    assert [s.warn.episode for s in steps if s.warn is not None] == [2]


def test_H6_a_lowered_warning_threshold_warns_on_the_next_failure() -> None:
    record, _ = run([outcome(R, T0 + i) for i in range(2)], policy=SuspensionPolicy())
    lowered = SuspensionPolicy(early_warning_at=1)
    _, steps = run([outcome(R, T0 + 5)], record, lowered)
    assert steps[0].warn is not None and steps[0].warn.consecutive_failures == 3


def test_H6_no_warning_on_the_outcome_that_suspends() -> None:
    policy = SuspensionPolicy(fatal=Threshold(3, 0.0))
    _, steps = run([outcome(F, T0 + i) for i in range(4)], policy=policy)
    assert [s.warn for s in steps] == [None] * 4
    assert suspensions(steps) == ["auto_suspend:fatal:3"]


def test_R1_reset_closes_the_episode_and_ignores_older_failures() -> None:
    record, _ = run([outcome(P, T0 + i * MIN) for i in range(4)])
    cleared = reset(record, T0 + HOUR)
    assert cleared.consecutive_failures == 0 and cleared.first_failure_at is None
    assert cleared.episode == record.episode and cleared.recent == ()
    # A delivery still in flight during the suspension ends before the re-enable.
    late = outcome(P, T0 + HOUR - 1)
    step = apply_outcome(cleared, late, POLICY, T0 + HOUR + 5)
    assert step.ignored == "stale" and step.record == cleared
    fresh = apply_outcome(cleared, outcome(P, T0 + HOUR + 1), POLICY, T0 + HOUR + 1).record
    assert fresh.consecutive_failures == 1 and fresh.episode == record.episode + 1


def test_H1_late_outcomes_on_the_wrong_side_of_a_success_are_stale() -> None:
    record, _ = run([outcome(S, T0 + 10 * MIN)])
    old_failure = apply_outcome(record, outcome(R, T0), POLICY, T0 + 11 * MIN)
    assert old_failure.ignored == "stale"
    record, _ = run([outcome(R, T0 + 20 * MIN)], record)
    old_success = apply_outcome(record, outcome(S, T0 + 15 * MIN), POLICY, T0 + 21 * MIN)
    assert old_success.ignored == "stale" and old_success.record.failing


def test_H3_a_replay_that_now_succeeds_is_not_taken_for_a_duplicate() -> None:
    record, _ = run([outcome(P, T0, delivery_id="d-replayed")])
    record, steps = run([outcome(S, T0 + MIN, delivery_id="d-replayed")], record)
    assert steps[0].ignored is None and record.consecutive_failures == 0


def test_H1_a_future_stamped_outcome_is_taken_as_now() -> None:
    record = apply_outcome(None, outcome(R, T0 + HOUR), POLICY, T0).record
    assert record.first_failure_at == T0 == record.last_attempt_at


def test_H1_the_dedup_memory_is_bounded() -> None:
    record, _ = run([outcome(R, T0 + i) for i in range(DEDUP_WINDOW * 3)])
    assert len(record.recent) == DEDUP_WINDOW


def test_H1_an_outcome_for_another_subscription_is_refused() -> None:
    with pytest.raises(ValueError, match="another subscription"):
        apply_outcome(HealthRecord("sub-2"), outcome(R, T0), POLICY, T0)


@given(
    st.lists(
        st.tuples(st.sampled_from([S, R, P, F]), st.integers(0, 3 * HOUR), st.booleans()),
        max_size=60,
    )
)
def test_H3_H6_at_most_one_suspension_and_one_warning_per_episode(
    script: list[tuple[OutcomeClass, int, bool]],
) -> None:
    record: HealthRecord | None = None
    now = T0
    decided: list[tuple[str, int]] = []
    previous: HealthOutcome | None = None
    for cls, gap, redeliver in script:
        now += gap
        item = previous if redeliver and previous is not None else outcome(cls, now)
        step = apply_outcome(record, item, POLICY, now)
        record, previous = step.record, item
        if step.suspend is not None:
            decided.append(("suspend", step.suspend.episode))
            threshold = POLICY.threshold(step.suspend.outcome_class)
            assert step.suspend.count >= threshold.count
            assert step.suspend.at - step.suspend.first_failure_at >= threshold.min_age_ms
        if step.warn is not None:
            assert ("suspend", step.warn.episode) not in decided
            decided.append(("warn", step.warn.episode))
    assert len(decided) == len(set(decided))


records = st.builds(
    HealthRecord,
    subscription_id=st.text(min_size=1, max_size=10),
    consecutive_failures=st.integers(0, 10**6),
    first_failure_at=st.none() | st.integers(0, 2**53),
    last_outcome=st.none() | st.sampled_from(list(OutcomeClass)),
    last_status=st.none() | st.integers(100, 599),
    last_error=st.none() | st.text(max_size=MAX_ERROR_CHARS),
    episode=st.integers(0, 10**6),
    warned_episode=st.none() | st.integers(0, 10**6),
    recent=st.lists(
        st.builds(
            lambda c, d: f"{c.value}:{d}", st.sampled_from(list(OutcomeClass)), st.text(max_size=8)
        ),
        max_size=DEDUP_WINDOW,
    ).map(tuple),
)


@given(records)
def test_H1_the_stored_form_round_trips_through_json(record: HealthRecord) -> None:
    assert HealthRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subscription_id", ""),
        ("consecutive_failures", -1),
        ("consecutive_failures", "3"),
        ("first_failure_at", 1.5),
        ("last_outcome", "broken"),
        ("last_error", 5),
        ("episode", None),
        ("recent", "d1"),
        ("recent", ["no-separator"]),
    ],
)
def test_H1_the_stored_form_is_validated(field: str, value: object) -> None:
    data = replace(HealthRecord(SUB), episode=2).to_dict()
    data[field] = value
    with pytest.raises(ValidationError) as caught:
        HealthRecord.from_dict(data)
    assert list(caught.value.fields) == [field]
