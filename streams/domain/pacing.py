"""Pacing of backfills and replays (R2, F4, P5), pure: the clock is the caller's.

A `Pacer` hands out send times spaced ``1 / rate`` apart. It keeps the *scheduled* time of the
next send rather than the time the last one happened, so a late wake-up (a busy event loop, a
slow produce) is made up by the next sends instead of lowering the rate: over any long window
the number of sends is ``rate x window``, up to the burst. After an idle spell it never owes
more than ``burst`` sends, so a paused backfill does not come back with a flood.

`effective_rate` decides the rate of one subscription's backfill or replay: the operator's
requested rate or the backfill default, never above the subscription's own rate limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Backfill and replay rate when neither the operator nor the settings ask for another (R2).
DEFAULT_BACKFILL_RATE = 5.0
#: The fastest any backfill or replay may go, per subscription.
MAX_BACKFILL_RATE = 10_000.0


def _check_rate(rate: float) -> float:
    if not (math.isfinite(rate) and 0 < rate <= MAX_BACKFILL_RATE):
        raise ValueError(f"a pacing rate must be within (0, {MAX_BACKFILL_RATE:g}] per second")
    return float(rate)


def effective_rate(
    requested: float | None,
    default: float = DEFAULT_BACKFILL_RATE,
    subscription_limit: float | None = None,
) -> float:
    """The rate a backfill or replay runs at: ``requested`` (else ``default``), capped by the
    subscription's own ``rate_limit`` when it has one (F4: a backfill never outruns it)."""
    rate = _check_rate(requested if requested is not None else default)
    if subscription_limit is not None and subscription_limit > 0:
        rate = min(rate, float(subscription_limit))
    return rate


@dataclass(slots=True)
class Pacer:
    """Spaces sends ``1 / rate`` seconds apart; ``burst`` sends may go back to back after idling.

    `reserve` books the next send and says how long to wait for it; the caller sleeps that long
    (with whatever clock it injected into `reserve`) and then sends.
    """

    rate: float
    burst: float = 1.0
    _next_at: float | None = None

    def __post_init__(self) -> None:
        self.rate = _check_rate(self.rate)
        if not (math.isfinite(self.burst) and self.burst >= 1):
            raise ValueError("burst must be at least 1")

    @property
    def interval(self) -> float:
        return 1.0 / self.rate

    def set_rate(self, rate: float) -> None:
        """Change the rate from the next booking on (a subscription's limit may change)."""
        self.rate = _check_rate(rate)

    def reserve(self, now: float) -> float:
        """Book one send; return the seconds to wait before it (0 when it may go now)."""
        earliest = now - (self.burst - 1) * self.interval
        slot = earliest if self._next_at is None else max(self._next_at, earliest)
        self._next_at = slot + self.interval
        return max(0.0, slot - now)
