"""The per-endpoint circuit breaker (SPEC H7, H8).

A `Breaker` guards one endpoint *origin* (``scheme://host:port``, see `origin_of`), shared by
every subscription that points there, so a dead host is not attempted once per subscription
(H8). It knows nothing about subscriptions and never changes one's status: the health record and
the suspension policy do that (H2). It lives in one dispatcher worker's memory, with the other
origins' breakers (`streams.domain.breaker_registry.BreakerRegistry`).

States and transitions::

    CLOSED --(trip)--> OPEN --(cooldown over, allow)--> HALF_OPEN --(probe ok)--> CLOSED
                                    ^                        |
                                    +----(probe failed)------+   cooldown doubles

- **Trip.** In CLOSED the breaker trips on ``consecutive_failures`` failed attempts in a row, or
  when at least ``min_attempts`` attempts fell within the last ``window_s`` and the failed share
  of them is at least ``failure_rate``. The window is a ring of time buckets (``bucket_s`` wide,
  at most `MAX_BUCKETS` of them), so memory is fixed and every call is O(1) amortised; it is
  exact to within one bucket.
- **Open.** `Breaker.allow` answers DEFER, with ``retry_at_ms`` set to the end of the cooldown.
  A deferral is not an attempt: the caller parks the delivery and records nothing (H7).
  Results of attempts that were already in flight when the breaker tripped are ignored.
- **Half-open.** The first `allow` after the cooldown returns PROBE and lets exactly one attempt
  through; every other call is deferred until the probe's result is recorded. A success closes
  the breaker and resets the cooldown to ``cooldown_s``; a failure reopens it with the cooldown
  doubled, up to ``max_cooldown_s``. A probe whose result never comes back is given up after
  ``probe_timeout_s``, and the next caller probes. The first result recorded while a probe is
  out is taken as the probe's (keep ``cooldown_s`` above the delivery timeout so no older
  attempt is still in flight).

The breaker counts *attempts*, not deliveries: every HTTP attempt is recorded with
`Breaker.record`. What counts as a failure is decided by `breaker_signal`: the breaker asks "is
the host up and answering?", so a retryable outcome (5xx, 408, 429, timeouts, refused or reset
connections) and a fatal one (the host's name no longer resolves) are failures, while a
permanent 4xx or 3xx is a *success* for the breaker: a 404 proves the host is alive, and
holding back every other subscription on that host would not help. A destination refused by the
SSRF guard or an invalid certificate says nothing about load and is not recorded at all.

Times are integer milliseconds passed in by the caller; nothing here reads a clock.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from urllib.parse import urlsplit

from streams.domain.models import OutcomeClass

__all__ = [
    "ALLOW",
    "MAX_BUCKETS",
    "PROBE",
    "Admission",
    "Breaker",
    "BreakerConfig",
    "BreakerState",
    "TransitionListener",
    "Verdict",
    "breaker_signal",
    "origin_of",
]

#: The window never holds more buckets than this; longer windows get wider buckets.
MAX_BUCKETS = 120


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Verdict(StrEnum):
    ALLOW = "allow"  # closed: attempt it
    PROBE = "probe"  # half-open: attempt it as the one probe, and record its result
    DEFER = "defer"  # park it until retry_at_ms; it is not an attempt


@dataclass(frozen=True, slots=True)
class Admission:
    """`Breaker.allow`'s answer. ``retry_at_ms`` is set for DEFER only."""

    verdict: Verdict
    retry_at_ms: int | None = None

    @property
    def admitted(self) -> bool:
        return self.verdict is not Verdict.DEFER


ALLOW = Admission(Verdict.ALLOW)
PROBE = Admission(Verdict.PROBE)

#: Called as ``listener(old, new, now_ms)`` on every state change (the breaker-transition metric).
TransitionListener = Callable[[BreakerState, BreakerState, int], None]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """When a breaker trips and how long it stays open (H7 defaults)."""

    consecutive_failures: int = 5
    failure_rate: float = 0.5
    min_attempts: int = 20
    window_s: float = 30.0
    cooldown_s: float = 30.0
    max_cooldown_s: float = 600.0
    probe_timeout_s: float = 60.0
    bucket_s: float = 1.0

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.min_attempts < 1:
            raise ValueError("consecutive_failures and min_attempts must be at least 1")
        if not 0.0 < self.failure_rate <= 1.0:
            raise ValueError("failure_rate must be within (0, 1]")
        spans = (self.window_s, self.cooldown_s, self.probe_timeout_s, self.bucket_s)
        if not all(math.isfinite(s) and s > 0 for s in spans):
            raise ValueError("window_s, cooldown_s, probe_timeout_s and bucket_s must be > 0")
        if not (math.isfinite(self.max_cooldown_s) and self.max_cooldown_s >= self.cooldown_s):
            raise ValueError("max_cooldown_s must be at least cooldown_s")


def breaker_signal(outcome: OutcomeClass, reason: str) -> bool | None:
    """What one attempt tells the breaker: True (host up), False (failure) or None (nothing)."""
    if reason in ("blocked_destination", "tls_invalid"):
        return None
    return outcome in (OutcomeClass.SUCCESS, OutcomeClass.PERMANENT)


@lru_cache(maxsize=65536)  # called several times per delivery with a few distinct URLs
def origin_of(url: str) -> str:
    """The breaker key of ``url``: ``scheme://host:port``, lower case, default port filled in."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or (443 if scheme == "https" else 80)
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


class Breaker:
    """One origin's breaker. Mutable, O(1) amortised per call, fixed memory."""

    __slots__ = (
        "_attempts",
        "_base_ms",
        "_bucket_ms",
        "_consecutive",
        "_cooldown_ms",
        "_defer",
        "_failed",
        "_failures",
        "_head",
        "_listener",
        "_max_ms",
        "_open_until",
        "_probe_until",
        "_state",
        "_total",
        "config",
        "last_used_ms",
        "transitions",
    )

    def __init__(
        self, config: BreakerConfig | None = None, on_transition: TransitionListener | None = None
    ) -> None:
        self.config = config or BreakerConfig()
        window_ms = math.ceil(self.config.window_s * 1000)
        self._bucket_ms = max(math.ceil(self.config.bucket_s * 1000), -(-window_ms // MAX_BUCKETS))
        slots = max(1, -(-window_ms // self._bucket_ms))
        self._attempts = array("I", bytes(4 * slots))
        self._failures = array("I", bytes(4 * slots))
        self._head: int | None = None  # the newest bucket index the ring holds
        self._total = 0
        self._failed = 0
        self._consecutive = 0
        self._base_ms = math.ceil(self.config.cooldown_s * 1000)
        self._max_ms = math.ceil(self.config.max_cooldown_s * 1000)
        self._cooldown_ms = self._base_ms
        self._state = BreakerState.CLOSED
        self._open_until = 0
        self._probe_until: int | None = None  # lease end of the probe in flight
        self._defer = Admission(Verdict.DEFER, 0)
        self._listener = on_transition
        self.last_used_ms = 0
        self.transitions = 0  # state changes so far

    # --- what callers read ---------------------------------------------------------------------

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def cooldown_s(self) -> float:
        """The cooldown the breaker uses the next time it opens (or uses now, while open)."""
        return self._cooldown_ms / 1000

    @property
    def open_until_ms(self) -> int | None:
        return self._open_until if self._state is BreakerState.OPEN else None

    @property
    def probe_in_flight(self) -> bool:
        return self._probe_until is not None

    @property
    def window(self) -> tuple[int, int]:
        """(attempts, failures) in the sliding window, as of the last recorded attempt."""
        return self._total, self._failed

    # --- the hot path --------------------------------------------------------------------------

    def allow(self, now_ms: int) -> Admission:
        """May an attempt go to this origin now? See the module for the rules."""
        self.last_used_ms = max(self.last_used_ms, now_ms)
        if self._state is BreakerState.CLOSED:
            return ALLOW
        if self._state is BreakerState.OPEN:
            if now_ms < self._open_until:
                return self._defer
            self._change(BreakerState.HALF_OPEN, now_ms)
            return self._grant_probe(now_ms)
        if self._probe_until is None or now_ms >= self._probe_until:
            return self._grant_probe(now_ms)
        # A probe is out: ask again after one base cooldown, not at the probe's lease end (a
        # probe usually answers in seconds; its lease only covers a lost result).
        return Admission(Verdict.DEFER, min(self._probe_until, now_ms + self._base_ms))

    def record(self, success: bool, now_ms: int) -> BreakerState | None:
        """Record one attempt's result; returns the new state if it changed, else None."""
        self.last_used_ms = max(self.last_used_ms, now_ms)
        if self._state is BreakerState.CLOSED:
            return self._record_closed(success, now_ms)
        if self._state is BreakerState.OPEN or self._probe_until is None:
            return None  # an attempt sent before the trip: it says nothing new
        self._probe_until = None
        if success:
            self._close(now_ms)
        else:
            self._cooldown_ms = min(self._cooldown_ms * 2, self._max_ms)
            self._open(now_ms)
        return self._state

    def settled(self, now_ms: int) -> bool:
        """Closed with no failure in its window: forgetting it loses nothing that matters."""
        return self._state is BreakerState.CLOSED and (self._failed == 0 or self._is_stale(now_ms))

    # --- transitions -----------------------------------------------------------------------------

    def _record_closed(self, success: bool, now_ms: int) -> BreakerState | None:
        self._count(now_ms, failed=not success)
        if success:
            self._consecutive = 0
            return None
        self._consecutive += 1
        config = self.config
        tripped = self._consecutive >= config.consecutive_failures or (
            self._total >= config.min_attempts and self._failed >= config.failure_rate * self._total
        )
        if not tripped:
            return None
        self._open(now_ms)
        return self._state

    def _open(self, now_ms: int) -> None:
        self._open_until = now_ms + self._cooldown_ms
        self._defer = Admission(Verdict.DEFER, self._open_until)
        self._change(BreakerState.OPEN, now_ms)

    def _close(self, now_ms: int) -> None:
        self._cooldown_ms = self._base_ms
        self._consecutive = 0
        self._clear_window()
        self._change(BreakerState.CLOSED, now_ms)

    def _grant_probe(self, now_ms: int) -> Admission:
        self._probe_until = now_ms + math.ceil(self.config.probe_timeout_s * 1000)
        return PROBE

    def _change(self, new: BreakerState, now_ms: int) -> None:
        old, self._state = self._state, new
        self.transitions += 1
        if self._listener is not None:
            self._listener(old, new, now_ms)

    # --- the sliding window ----------------------------------------------------------------------

    def _count(self, now_ms: int, *, failed: bool) -> None:
        bucket = now_ms // self._bucket_ms
        self._advance(bucket)
        slots = len(self._attempts)
        if self._head is not None and bucket <= self._head - slots:
            return  # older than the window (a caller's clock reading from long ago)
        slot = bucket % slots
        self._attempts[slot] += 1
        self._total += 1
        if failed:
            self._failures[slot] += 1
            self._failed += 1

    def _advance(self, bucket: int) -> None:
        head = self._head
        if head is not None and bucket <= head:
            return
        self._head = bucket
        if head is None:
            return
        slots = len(self._attempts)
        if bucket - head >= slots:
            self._clear_window()
            self._head = bucket
            return
        for index in range(head + 1, bucket + 1):
            slot = index % slots
            self._total -= self._attempts[slot]
            self._failed -= self._failures[slot]
            self._attempts[slot] = 0
            self._failures[slot] = 0

    def _clear_window(self) -> None:
        for slot in range(len(self._attempts)):
            self._attempts[slot] = 0
            self._failures[slot] = 0
        self._total = self._failed = 0
        self._head = None

    def _is_stale(self, now_ms: int) -> bool:
        return self._head is None or now_ms // self._bucket_ms - self._head >= len(self._attempts)
