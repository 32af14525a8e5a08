"""A mergeable latency sketch with a stated relative error (SPEC O2), pure.

hookstream keeps latencies as counts in fixed logarithmic buckets, never as raw samples. With a
relative accuracy ``a`` (1% by default) and ``gamma = (1 + a) / (1 - a)``, bucket ``i`` holds the
values in ``(gamma^(i-1), gamma^i]`` and reports them as ``2 * gamma^i / (gamma + 1)``, which is
within ``a`` of every value in the bucket. Hence the guarantee:

    for any q, |quantile(q) - x| <= a * x, where x is the exact q-quantile of the values added,

for values in ``[MIN_VALUE, MAX_VALUE]`` milliseconds. Values below `MIN_VALUE` (including 0) are
counted in a zero bucket and reported as 0, so their error is at most `MIN_VALUE` in absolute
terms; values above `MAX_VALUE` are clamped to it.

**The rank definition.** For ``n`` values sorted ascending as ``x[0] <= ... <= x[n-1]``, the
q-quantile (``0 <= q <= 1``) is ``x[floor(q * (n - 1))]``: the lower of the two nearest ranks, so
it is always one of the values added. The sketch answers with the bucket holding that rank.

**Memory.** The range is fixed, so the bucket indices are fixed too: at most `MAX_BUCKETS`
(about 1,400 for a = 1%) whatever the number of values, and only non-empty buckets are kept.
Latencies that share a band (a receiver answering in 20-300 ms) use about 140.

**Merging** adds counts bucket by bucket, so ``merge(a, b)`` equals the sketch of the union,
exactly, in any order: windows, workers and subscriptions combine without loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

from streams.errors import DecodeError

#: The relative accuracy of every hookstream latency sketch.
RELATIVE_ACCURACY: Final = 0.01
#: Smallest latency tracked with relative accuracy, in ms (10 µs); smaller ones count as 0.
MIN_VALUE: Final = 0.01
#: Largest latency tracked, in ms (about 115 days: far past the backfill window); larger ones
#: are clamped to it.
MAX_VALUE: Final = 1e10

_GAMMA: Final = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LN_GAMMA: Final = math.log(_GAMMA)


def bucket_index(value: float) -> int:
    """The bucket of a value in ``[MIN_VALUE, MAX_VALUE]``: ``ceil(log_gamma(value))``."""
    return math.ceil(math.log(value) / _LN_GAMMA)


def bucket_value(index: int) -> float:
    """The value a bucket reports: within the relative accuracy of everything it holds."""
    return 2 * math.exp(index * _LN_GAMMA) / (_GAMMA + 1)


MIN_INDEX: Final = bucket_index(MIN_VALUE)
MAX_INDEX: Final = bucket_index(MAX_VALUE)
#: The most non-empty buckets a sketch can have (plus the zero bucket).
MAX_BUCKETS: Final = MAX_INDEX - MIN_INDEX + 1


@dataclass(slots=True)
class LatencySketch:
    """Counts of latencies (ms) in log-scale buckets. Mutable: `add` and `merge` change it."""

    buckets: dict[int, int] = field(default_factory=dict)
    zero_count: int = 0
    count: int = 0
    min: float | None = None
    max: float | None = None

    def add(self, value: float, times: int = 1) -> None:
        """Count ``value`` (ms) ``times`` times. Negative values count as 0 (clock skew)."""
        if times <= 0:
            return
        value = min(max(value, 0.0), MAX_VALUE)
        if value < MIN_VALUE:
            self.zero_count += times
        else:
            index = bucket_index(value)
            self.buckets[index] = self.buckets.get(index, 0) + times
        self.count += times
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    def merge(self, other: LatencySketch) -> LatencySketch:
        """Add ``other``'s counts to this sketch; returns it."""
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.zero_count += other.zero_count
        self.count += other.count
        if other.min is not None:
            self.min = other.min if self.min is None else min(self.min, other.min)
        if other.max is not None:
            self.max = other.max if self.max is None else max(self.max, other.max)
        return self

    def copy(self) -> LatencySketch:
        return LatencySketch(dict(self.buckets), self.zero_count, self.count, self.min, self.max)

    def quantile(self, q: float) -> float | None:
        """The q-quantile (rank ``floor(q * (count - 1))``), or None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        if self.count == 0:
            return None
        rank = math.floor(q * (self.count - 1))
        if rank < self.zero_count:
            return 0.0
        seen = self.zero_count
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen > rank:
                return self._clamped(bucket_value(index))
        return self.max  # unreachable while the counts are consistent

    def _clamped(self, value: float) -> float:
        """Never report beyond the extremes actually seen (they are exact)."""
        assert self.min is not None and self.max is not None
        return min(max(value, self.min), self.max)

    # --- serialisation: compact, JSON-ready -----------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"n", "z", "lo", "hi", "i", "c"}``: bucket indices delta-encoded, then counts."""
        indices = sorted(self.buckets)
        deltas = [b - a for a, b in zip([0, *indices], indices, strict=False)]
        return {
            "n": self.count,
            "z": self.zero_count,
            "lo": self.min,
            "hi": self.max,
            "i": deltas,
            "c": [self.buckets[i] for i in indices],
        }

    @classmethod
    def from_dict(cls, data: Any) -> LatencySketch:
        """Read `to_dict`'s form back. Raises `DecodeError` for anything inconsistent."""
        try:
            deltas, counts = list(data["i"]), list(data["c"])
            zero, total = int(data["z"]), int(data["n"])
            low = None if data["lo"] is None else float(data["lo"])
            high = None if data["hi"] is None else float(data["hi"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError("invalid_sketch", f"not a latency sketch: {exc!r}") from exc
        if len(deltas) != len(counts):
            raise DecodeError("invalid_sketch", "bucket indices and counts differ in length")
        buckets: dict[int, int] = {}
        index = 0
        for delta, n in zip(deltas, counts, strict=True):
            index += int(delta)
            if int(n) <= 0 or not MIN_INDEX <= index <= MAX_INDEX:
                raise DecodeError("invalid_sketch", f"bucket {index} with count {n}")
            buckets[index] = int(n)
        if zero < 0 or zero + sum(buckets.values()) != total:
            raise DecodeError("invalid_sketch", "bucket counts do not add up to the total")
        return cls(buckets, zero, total, low, high)


def sketch_of(values: list[float]) -> LatencySketch:
    """A sketch holding ``values``."""
    sketch = LatencySketch()
    for value in values:
        sketch.add(value)
    return sketch
