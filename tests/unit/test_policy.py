"""H2, H6: the graded suspension policy, its runtime updates and its stored form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.models import OutcomeClass
from streams.domain.policy import (
    MAX_COUNT,
    MAX_MIN_AGE_S,
    SuspensionPolicy,
    Threshold,
    is_policy_key,
    parse_policy_updates,
    policy_from_dict,
    policy_to_dict,
)
from streams.errors import ValidationError

DEFAULT = SuspensionPolicy()


def test_H2_H6_defaults_are_the_specified_pairs() -> None:
    assert DEFAULT.retryable == Threshold(25, 12 * 3600.0)
    assert DEFAULT.permanent == Threshold(5, 3600.0)
    assert DEFAULT.fatal == Threshold(3, 900.0)
    assert DEFAULT.early_warning_at == 3
    assert DEFAULT.threshold(OutcomeClass.FATAL) is DEFAULT.fatal
    with pytest.raises(ValueError, match="no suspension threshold"):
        DEFAULT.threshold(OutcomeClass.SUCCESS)


def test_H2_the_operator_example_applies_every_key() -> None:
    updated = parse_policy_updates(
        DEFAULT,
        {
            "suspend.retryable": "40,1d",
            "suspend.permanent.count": "7",
            "suspend.fatal.min_age": "30m",
            "early_warning_at": "4",
        },
    )
    assert updated == SuspensionPolicy(
        retryable=Threshold(40, 86400.0),
        permanent=Threshold(7, 3600.0),  # min_age kept
        fatal=Threshold(3, 1800.0),  # count kept
        early_warning_at=4,
    )


@pytest.mark.parametrize("zero", ["0", "0s", "0m", "0.0h", " 0 "])
def test_H2_a_zero_min_age_turns_the_age_gate_off(zero: str) -> None:
    updated = parse_policy_updates(DEFAULT, {"suspend.fatal.min_age": zero})
    assert updated.fatal == Threshold(3, 0.0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("suspend.retryable", "25", "<count>,<min_age>"),
        ("suspend.retryable", "25,12h,1", "<count>,<min_age>"),
        ("suspend.retryable.count", "0", "1..10000"),
        ("suspend.retryable.count", "10001", "1..10000"),
        ("suspend.retryable.count", "-1", "whole number"),
        ("suspend.retryable.count", "2.5", "whole number"),
        ("suspend.permanent.min_age", "31d", "longer than 30d"),
        ("suspend.permanent.min_age", "12", "duration"),
        ("suspend.permanent.min_age", "-5m", "duration"),
        ("suspend.fatal.min_age", "soon", "duration"),
        ("early_warning_at", "0", "1..10000"),
        ("early_warning_at", "three", "whole number"),
        ("suspend.success", "1,1h", "unknown key"),
        ("suspend.fatal.max_age", "1h", "unknown key"),
        ("Suspend.fatal", "1,1h", "unknown key"),
        ("retry_schedule", "1m", "unknown key"),
    ],
)
def test_H2_bad_keys_and_values_are_named(key: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_policy_updates(DEFAULT, {key: value})
    assert list(caught.value.fields) == [key]
    assert message in caught.value.fields[key]


def test_H2_every_bad_key_is_reported_at_once_and_nothing_applies() -> None:
    current = SuspensionPolicy(fatal=Threshold(4, 60.0))
    updates = {
        "suspend.fatal.count": "9",  # fine on its own
        "suspend.permanent.count": "0",
        "early_warning_at": "x",
    }
    with pytest.raises(ValidationError) as caught:
        parse_policy_updates(current, updates)
    assert set(caught.value.fields) == {"suspend.permanent.count", "early_warning_at"}
    assert current.fatal == Threshold(4, 60.0)


def test_H2_a_pair_and_one_of_its_halves_together_are_ambiguous() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_policy_updates(
            DEFAULT, {"suspend.fatal": "3,15m", "suspend.fatal.count": "4", "early_warning_at": "2"}
        )
    assert list(caught.value.fields) == ["suspend.fatal.count"]


def test_H6_early_warning_may_equal_or_pass_a_class_count() -> None:
    updated = parse_policy_updates(DEFAULT, {"early_warning_at": "30"})
    assert updated.early_warning_at == 30 > updated.fatal.count


def test_H2_policy_keys_are_recognised_for_routing() -> None:
    assert is_policy_key("suspend.retryable")
    assert is_policy_key("suspend.fatal.min_age")
    assert is_policy_key("early_warning_at")
    assert not is_policy_key("suspend")
    assert not is_policy_key("retry_window")


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"count": 0, "min_age_s": 1.0},
        {"count": 1, "min_age_s": -1.0},
        {"count": 1, "min_age_s": 1e9},
    ],
)
def test_H2_thresholds_refuse_out_of_bounds_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        Threshold(**kwargs)


thresholds = st.builds(
    Threshold,
    count=st.integers(1, MAX_COUNT),
    min_age_s=st.floats(0.0, MAX_MIN_AGE_S, allow_nan=False),
)
policies = st.builds(
    SuspensionPolicy,
    retryable=thresholds,
    permanent=thresholds,
    fatal=thresholds,
    early_warning_at=st.integers(1, MAX_COUNT),
)


@given(policies)
def test_H2_stored_form_round_trips_through_json(policy: SuspensionPolicy) -> None:
    assert policy_from_dict(json.loads(json.dumps(policy_to_dict(policy)))) == policy


@given(
    policies,
    st.sampled_from(["retryable", "permanent", "fatal"]),
    st.integers(1, MAX_COUNT),
    st.integers(0, 30 * 24),
)
def test_H2_a_pair_update_sets_exactly_that_class(
    policy: SuspensionPolicy, name: str, count: int, hours: int
) -> None:
    age = f"{hours}h"
    updated = parse_policy_updates(policy, {f"suspend.{name}": f"{count},{age}"})
    assert updated.threshold(OutcomeClass(name)) == Threshold(count, hours * 3600.0)
    for other in {"retryable", "permanent", "fatal"} - {name}:
        assert updated.threshold(OutcomeClass(other)) == policy.threshold(OutcomeClass(other))
    assert updated.early_warning_at == policy.early_warning_at


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("fatal"), "fatal"),
        (lambda d: d["fatal"].update(count=0), "fatal.count"),
        (lambda d: d["fatal"].update(count=True), "fatal.count"),
        (lambda d: d["permanent"].update(min_age_s="1h"), "permanent.min_age_s"),
        (lambda d: d["retryable"].update(min_age_s=float("inf")), "retryable.min_age_s"),
        (lambda d: d.update(early_warning_at=None), "early_warning_at"),
        (lambda d: d.update(version=2), "version"),
    ],
)
def test_H2_stored_form_is_validated(mutate: Any, field: str) -> None:
    data = policy_to_dict(DEFAULT)
    mutate(data)
    with pytest.raises(ValidationError) as caught:
        policy_from_dict(data)
    assert list(caught.value.fields) == [field]
