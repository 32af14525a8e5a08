"""O2: the latency sketch answers percentiles within its stated error and merges exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.sketch import (
    MAX_BUCKETS,
    MAX_VALUE,
    MIN_VALUE,
    RELATIVE_ACCURACY,
    LatencySketch,
    sketch_of,
)
from streams.errors import DecodeError

# float rounding at a bucket's edge may add a few ulps to the 1% bound
TOLERANCE = RELATIVE_ACCURACY * (1 + 1e-9)

latencies = st.floats(min_value=MIN_VALUE, max_value=1e7, allow_nan=False, allow_infinity=False)
samples = st.lists(latencies, min_size=1, max_size=400)
quantiles = st.floats(min_value=0.0, max_value=1.0)


def exact_quantile(values: list[float], q: float) -> float:
    """The documented rank definition: the value at rank floor(q * (n - 1)), sorted ascending."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


@given(samples, quantiles)
def test_o2_quantile_within_relative_error(values: list[float], q: float) -> None:
    """O2: for random samples, |sketch quantile - true quantile| <= a * true quantile."""
    estimate = sketch_of(values).quantile(q)
    truth = exact_quantile(values, q)
    assert estimate is not None
    assert abs(estimate - truth) <= TOLERANCE * truth


@given(samples, samples)
def test_o2_merge_equals_sketch_of_the_union(a: list[float], b: list[float]) -> None:
    """O2: merge(a, b) == sketch(a + b), in either order."""
    union = sketch_of(a + b)
    assert sketch_of(a).merge(sketch_of(b)) == union
    assert sketch_of(b).merge(sketch_of(a)) == union


@given(st.lists(st.floats(min_value=0, max_value=MAX_VALUE * 10, allow_nan=False), max_size=200))
def test_o2_serialisation_round_trips(values: list[float]) -> None:
    sketch = sketch_of(values)
    assert LatencySketch.from_dict(sketch.to_dict()) == sketch


@given(st.lists(st.floats(min_value=0, max_value=1e12, allow_nan=False), max_size=500))
def test_o2_memory_is_bounded_whatever_the_values(values: list[float]) -> None:
    """O2: no raw samples; the bucket count never exceeds the fixed range's."""
    sketch = sketch_of(values)
    assert len(sketch.buckets) <= MAX_BUCKETS
    assert sketch.count == len(values)


def test_o2_known_distribution_percentiles() -> None:
    """O2: 1..10000 ms uniformly: p50, p95 and p99 within 1% of 5000, 9500 and 9900."""
    sketch = sketch_of([float(v) for v in range(1, 10_001)])
    for q, truth in ((0.5, 5000.0), (0.95, 9500.0), (0.99, 9900.0)):
        value = sketch.quantile(q)
        assert value is not None and abs(value - truth) <= TOLERANCE * truth
    assert len(sketch.buckets) < 500  # 4 decades at 1%: about 460 buckets, not 10,000 samples


def test_o2_known_two_speed_receiver_percentiles() -> None:
    """O2: 90% of answers at 50 ms and 10% at 200 ms (a receiver with a slow tail), merged from
    ten windows: p50 is 50 ms and p95 and p99 are 200 ms, each within 1%."""
    windows = [sketch_of([50.0] * 90 + [200.0] * 10) for _ in range(10)]
    merged = LatencySketch()
    for window in windows:
        merged.merge(window)
    assert merged.count == 1000
    for q, truth in ((0.5, 50.0), (0.9, 50.0), (0.95, 200.0), (0.99, 200.0)):
        value = merged.quantile(q)
        assert value is not None and abs(value - truth) <= TOLERANCE * truth, (q, value)
    assert len(merged.buckets) == 2  # two buckets, not 1,000 samples


def test_o2_tiny_huge_and_empty_values() -> None:
    """Values under MIN_VALUE report as 0, over MAX_VALUE clamp; an empty sketch has none."""
    assert LatencySketch().quantile(0.5) is None
    sketch = sketch_of([0.0, -3.0, MIN_VALUE / 2, MAX_VALUE * 100])
    assert sketch.zero_count == 3 and sketch.quantile(0.0) == 0.0
    assert sketch.quantile(1.0) == MAX_VALUE
    with pytest.raises(ValueError, match="outside"):
        sketch.quantile(1.5)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"n": 2, "z": 0, "lo": 1.0, "hi": 1.0, "i": [1], "c": [1]},  # counts do not add up
        {"n": 1, "z": 0, "lo": 1.0, "hi": 1.0, "i": [1, 2], "c": [1]},
        {"n": 1, "z": 0, "lo": 1.0, "hi": 1.0, "i": [10**6], "c": [1]},  # outside the range
        {"n": 0, "z": 0, "lo": None, "hi": None, "i": [1], "c": [0]},
    ],
)
def test_o2_inconsistent_serialisations_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(DecodeError):
        LatencySketch.from_dict(bad)
