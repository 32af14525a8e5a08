"""The graded suspension policy (SPEC H2, H6).

Every failing outcome class has a `Threshold`: a count of failures and a minimum age of the
failure episode. A subscription is suspended only when both are reached (see
`streams.domain.health`). The defaults are retryable (25, 12h), permanent (5, 1h) and fatal
(3, 15m), and the early warning goes out at 3 consecutive failures.

Operators change the policy at runtime with ``hookstream config set`` (or a config event on the
``control`` topic). `parse_policy_updates` reads those ``key=value`` pairs. The key grammar::

    suspend.<class>=<count>,<min_age>    both halves of a class's threshold, e.g. 25,12h
    suspend.<class>.count=<count>        only the count
    suspend.<class>.min_age=<min_age>    only the minimum age
    early_warning_at=<count>             consecutive failures that trigger the early warning

``<class>`` is ``retryable``, ``permanent`` or ``fatal``. A count is a whole number within
1..10000. A minimum age is a duration such as ``90s``, ``15m``, ``12h`` or ``2d`` within 0..30d;
``0`` (with or without a unit) turns the age gate off. Keys are exact and lower case. Giving a
whole pair and one of its halves for the same class in one update is refused as ambiguous.

Every bad key or value is reported at once, as a `ValidationError` naming each key; the policy
in force is then unchanged.

``early_warning_at`` is deliberately *not* required to be below the class counts: the defaults
themselves warn at 3 while fatal failures count to 3, and because of the age gates a count is a
minimum, not the moment of suspension, so no ordering rule could promise that the warning comes
first. When the warning and the suspension fall on the same outcome, only the suspension is
reported (see `streams.domain.health`).

`policy_to_dict` and `policy_from_dict` give the JSON form stored in Kafka.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from streams.domain.durations import parse_duration
from streams.domain.models import OutcomeClass
from streams.errors import ValidationError

__all__ = [
    "FAILURE_CLASSES",
    "MAX_COUNT",
    "MAX_MIN_AGE_S",
    "SuspensionPolicy",
    "Threshold",
    "is_policy_key",
    "parse_policy_updates",
    "policy_from_dict",
    "policy_to_dict",
]

#: The failing classes, from the mildest to the most severe.
FAILURE_CLASSES: tuple[OutcomeClass, ...] = (
    OutcomeClass.RETRYABLE,
    OutcomeClass.PERMANENT,
    OutcomeClass.FATAL,
)

MAX_COUNT = 10_000
MAX_MIN_AGE_S = 30 * 86_400.0
_FORMAT_VERSION = 1


def _count_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be a whole number"
    if not 1 <= value <= MAX_COUNT:
        return f"must be within 1..{MAX_COUNT}"
    return None


def _age_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number of seconds"
    if not (math.isfinite(value) and 0.0 <= value <= MAX_MIN_AGE_S):
        return "must be within 0s..30d"
    return None


@dataclass(frozen=True, slots=True)
class Threshold:
    """Suspend when ``count`` failures are reached and the episode is ``min_age_s`` old."""

    count: int
    min_age_s: float

    def __post_init__(self) -> None:
        problem = _count_problem(self.count) or _age_problem(self.min_age_s)
        if problem is not None:
            raise ValueError(f"threshold ({self.count}, {self.min_age_s}): {problem}")

    @property
    def min_age_ms(self) -> int:
        return math.ceil(self.min_age_s * 1000)


@dataclass(frozen=True, slots=True)
class SuspensionPolicy:
    """One threshold per failing class and the early-warning count (H2, H6)."""

    retryable: Threshold = Threshold(25, 12 * 3600.0)
    permanent: Threshold = Threshold(5, 3600.0)
    fatal: Threshold = Threshold(3, 15 * 60.0)
    early_warning_at: int = 3

    def __post_init__(self) -> None:
        problem = _count_problem(self.early_warning_at)
        if problem is not None:
            raise ValueError(f"early_warning_at {problem}")

    def threshold(self, outcome: OutcomeClass) -> Threshold:
        """The threshold of a failing class; SUCCESS has none."""
        if outcome is OutcomeClass.SUCCESS:
            raise ValueError("a success has no suspension threshold")
        result: Threshold = getattr(self, outcome.value)
        return result


# --- runtime updates -------------------------------------------------------------------------

_KEY = re.compile(r"^suspend\.(retryable|permanent|fatal)(?:\.(count|min_age))?$")
_WARNING_KEY = "early_warning_at"
_INT = re.compile(r"^[0-9]{1,6}$")
_ZERO_AGE = re.compile(r"^0+(?:\.0+)?(?:ms|s|m|h|d)?$")


def is_policy_key(key: str) -> bool:
    """Whether ``key`` belongs to the suspension policy (the CLI routes ``config set`` by it)."""
    return key == _WARNING_KEY or _KEY.match(key) is not None


def _parse_count(text: str) -> int:
    text = text.strip()
    if _INT.match(text) is None:
        raise ValueError(f"{text!r} is not a whole number within 1..{MAX_COUNT}")
    value = int(text)
    if not 1 <= value <= MAX_COUNT:
        raise ValueError(f"{value} is not within 1..{MAX_COUNT}")
    return value


def _parse_age(text: str) -> float:
    text = text.strip()
    if _ZERO_AGE.match(text):
        return 0.0
    value = parse_duration(text)
    if value > MAX_MIN_AGE_S:
        raise ValueError(f"{text!r} is longer than 30d")
    return value


def _parse_pair(text: str) -> Threshold:
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not <count>,<min_age> such as 25,12h")
    return Threshold(_parse_count(parts[0]), _parse_age(parts[1]))


def _apply_one(policy: SuspensionPolicy, key: str, value: str) -> SuspensionPolicy:
    if key == _WARNING_KEY:
        return replace(policy, early_warning_at=_parse_count(value))
    match = _KEY.match(key)
    if match is None:
        raise KeyError(key)
    name, part = match.group(1), match.group(2)
    old: Threshold = getattr(policy, name)
    if part is None:
        new = _parse_pair(value)
    elif part == "count":
        new = Threshold(_parse_count(value), old.min_age_s)
    else:
        new = Threshold(old.count, _parse_age(value))
    return _with_threshold(policy, OutcomeClass(name), new)


def _with_threshold(
    policy: SuspensionPolicy, outcome: OutcomeClass, threshold: Threshold
) -> SuspensionPolicy:
    if outcome is OutcomeClass.RETRYABLE:
        return replace(policy, retryable=threshold)
    if outcome is OutcomeClass.PERMANENT:
        return replace(policy, permanent=threshold)
    return replace(policy, fatal=threshold)


def _ambiguous(keys: list[str]) -> dict[str, str]:
    whole = {key for key in keys if _KEY.match(key) and key.count(".") == 1}
    return {
        key: f"conflicts with {key.rsplit('.', 1)[0]} in the same update"
        for key in keys
        if key.count(".") == 2 and key.rsplit(".", 1)[0] in whole
    }


def parse_policy_updates(current: SuspensionPolicy, updates: Mapping[str, str]) -> SuspensionPolicy:
    """``current`` with ``updates`` applied; raises `ValidationError` naming every bad key."""
    errors = _ambiguous(list(updates))
    policy = current
    for key, value in updates.items():
        if key in errors:
            continue
        if not is_policy_key(key):
            errors[key] = (
                "unknown key; use suspend.<retryable|permanent|fatal>[.count|.min_age] "
                "or early_warning_at"
            )
            continue
        try:
            policy = _apply_one(policy, key, value)
        except ValueError as exc:
            errors[key] = str(exc)
    if errors:
        raise ValidationError(errors)
    return policy


# --- JSON form -------------------------------------------------------------------------------


def policy_to_dict(policy: SuspensionPolicy) -> dict[str, Any]:
    """The JSON-able form of ``policy``, as stored in Kafka."""
    data: dict[str, Any] = {"version": _FORMAT_VERSION, "early_warning_at": policy.early_warning_at}
    for outcome in FAILURE_CLASSES:
        threshold = policy.threshold(outcome)
        data[outcome.value] = {"count": threshold.count, "min_age_s": threshold.min_age_s}
    return data


def _threshold_from(data: Mapping[str, Any], name: str, errors: dict[str, str]) -> Threshold:
    section = data.get(name)
    if not isinstance(section, Mapping):
        errors[name] = "must be an object with count and min_age_s"
        return Threshold(1, 0.0)
    count: Any = section.get("count")
    age: Any = section.get("min_age_s")
    count_problem, age_problem = _count_problem(count), _age_problem(age)
    if count_problem:
        errors[f"{name}.count"] = count_problem
    if age_problem:
        errors[f"{name}.min_age_s"] = age_problem
    if count_problem or age_problem:
        return Threshold(1, 0.0)
    return Threshold(int(count), float(age))


def policy_from_dict(data: Mapping[str, Any]) -> SuspensionPolicy:
    """Read `policy_to_dict`'s form back; raises `ValidationError` naming every bad field."""
    errors: dict[str, str] = {}
    version = data.get("version", _FORMAT_VERSION)
    if version != _FORMAT_VERSION:
        errors["version"] = f"unsupported policy format {version!r}"
    thresholds = {c.value: _threshold_from(data, c.value, errors) for c in FAILURE_CLASSES}
    warning: Any = data.get("early_warning_at")
    warning_problem = _count_problem(warning)
    if warning_problem:
        errors["early_warning_at"] = warning_problem
    if errors:
        raise ValidationError(errors)
    return SuspensionPolicy(
        retryable=thresholds["retryable"],
        permanent=thresholds["permanent"],
        fatal=thresholds["fatal"],
        early_warning_at=int(warning),
    )
