"""Slow start after an outage (SPEC F4), pure.

When an origin's shared breaker closes after an outage (or a subscription is re-enabled, R1), the
backlog that waited for it must not land at once. `Ramp` is the fleet's sending rate to that
origin: ``start_rate`` requests per second for the first ``step_s``, then ``growth`` times as
many each further ``step_s`` (TCP's slow start, one step per "round trip"), until it reaches
``max_rate``, where the ramp ends and only the subscriptions' own limits and the per-origin
concurrency cap apply. The default growth is 3, not TCP's 2: a step here is a second, not a
round trip, and at 5/s doubling takes 8 s to reach 1,000/s where tripling takes 5 s; a backlog
of 2,000 then drains in about 6 s instead of 9 (`bench.recovery`). An overload signal (429,
5xx, timeout, a slowdown) halves the rate, at most once per step, and the halved rate holds for
two steps before growing again, so an endpoint that keeps signalling overload (once a step) sees
the rate fall to its floor, an eighth of the start.

The ramp is anchored at the time the shared breaker closed (its record's ``changed_at``), so
every worker computes the same fleet rate; each worker sends its ``share`` of it (its share of the
lanes' partitions), and the shares add up to the fleet rate. Halvings are per worker: each
worker's attempts see the same struggling endpoint, so each halves its own share.

Times are integer milliseconds passed in by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Ramp", "RampConfig"]

#: The ramp never halves below this fraction of its start rate.
FLOOR_LEVEL = -3


@dataclass(frozen=True, slots=True)
class RampConfig:
    start_rate: float = 5.0
    step_s: float = 1.0
    max_rate: float = 10000.0
    growth: float = 3.0

    def __post_init__(self) -> None:
        values = (self.start_rate, self.step_s, self.max_rate)
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError("start_rate, step_s and max_rate must be > 0")
        if self.max_rate < self.start_rate:
            raise ValueError("max_rate must be at least start_rate")
        if not (math.isfinite(self.growth) and 1 < self.growth <= 16):
            raise ValueError("growth must be above 1 and at most 16")


class Ramp:
    """One origin's slow start, as one worker applies it."""

    __slots__ = ("_anchor_ms", "_config", "_halved_ms", "_level", "done")

    def __init__(self, config: RampConfig, started_ms: int) -> None:
        self._config = config
        self._anchor_ms = started_ms  # the rate is start_rate * 2**level from here
        self._level = 0.0  # log2 of the rate's multiple of start_rate, before the steps
        self._halved_ms: int | None = None
        self.done = False

    def fleet_rate(self, now_ms: int) -> float | None:
        """Requests per second the whole fleet may send now; None once the ramp is over."""
        if self.done:
            return None
        config = self._config
        steps = max(0, now_ms - self._anchor_ms) // math.ceil(config.step_s * 1000)
        rate = config.start_rate * math.pow(2.0, self._level + steps * math.log2(config.growth))
        if rate >= config.max_rate:
            self.done = True
            return None
        return rate

    def rate(self, now_ms: int, share: float) -> float | None:
        """This worker's rate: its ``share`` (0 < share <= 1) of `fleet_rate`."""
        fleet = self.fleet_rate(now_ms)
        return None if fleet is None else fleet * min(1.0, max(share, 1e-3))

    def halve(self, now_ms: int) -> bool:
        """An overload signal: halve the rate (once per step); True if it was halved."""
        if self.done:
            return False
        step_ms = math.ceil(self._config.step_s * 1000)
        if self._halved_ms is not None and now_ms - self._halved_ms < step_ms:
            return False
        steps = max(0, now_ms - self._anchor_ms) // step_ms
        grown = self._level + steps * math.log2(self._config.growth)
        self._level = max(FLOOR_LEVEL, grown - 1)
        self._anchor_ms = now_ms + step_ms  # the halved rate holds two steps, not one
        self._halved_ms = now_ms
        return True
