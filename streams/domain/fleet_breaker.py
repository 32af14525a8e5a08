"""The fleet's shared circuit breaker per endpoint origin (SPEC H7, H8), pure.

Every worker follows one compacted topic (``breakers``, keyed by origin) whose records are
`BreakerRecord` values, and folds them into a `FleetView`. The view is the breaker: admission
(`admit`) reads only it, so every worker answers the same for one origin, and a worker that
starts reads the topic from the beginning and knows every open origin before it sends anything.

**Who may make a transition: compare-and-set on a version, the log decides.** A worker that wants
a transition writes the next record, numbered ``current.version + 1``. Every reader applies a
record only if its version is above the version it holds (`FleetView.apply`), and all readers
see one origin's records in the same order (one key, one partition), so when two workers race
for one version, the first record in the log wins everywhere and the other is ignored
everywhere. (A proposal is always built on an applied record, so a newer version never rests
on a loser; taking any newer version, not only the next, also bridges records that compaction
removed.) A
worker acts on a transition it proposed only once it has read it back as applied: the one
half-open probe goes to the worker whose claim won, fleet-wide.

- CLOSED -> OPEN (`trip`): any worker whose own attempts trip its local window (`Breaker`'s
  rules: 5 failures in a row, or the failure rate). Detection is per worker; the open state is
  shared.
- OPEN -> HALF_OPEN (`claim`): a worker with a delivery due once the cooldown is over. The claim
  names the worker and holds a lease (``probe_until``); once the lease has passed, any worker
  may claim again (a worker that died holding the probe costs one lease).
- HALF_OPEN -> CLOSED or OPEN (`probe_ended`): only the worker named by the claim. A failed probe
  doubles the cooldown, up to ``max_cooldown_s``, or up to ``waiting_bound_s`` while deliveries
  wait for the origin (F4: a recovered endpoint is not left idle for ten minutes).
- any -> CLOSED (`reset`): a re-enabled subscription starts with a closed breaker (R1).

Times are integer milliseconds on the workers' wall clocks, passed in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from streams.domain.breaker import BreakerConfig, BreakerState

__all__ = [
    "BreakerRecord",
    "FleetDecision",
    "FleetView",
    "Step",
    "admit",
    "claim",
    "probe_ended",
    "reset",
    "trip",
]


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """One origin's shared breaker state: the value of the ``breakers`` topic."""

    origin: str
    version: int  # 1 for an origin's first record; each transition adds one
    state: BreakerState
    changed_at: int  # when this state was entered
    cooldown_ms: int  # the cooldown in force (OPEN) or used next time it opens
    open_until: int = 0  # OPEN: the end of the cooldown
    probe_owner: str = ""  # HALF_OPEN: the worker whose probe is out
    probe_until: int = 0  # HALF_OPEN: the end of that probe's lease
    writer: str = ""  # the worker that wrote the record


class Step(StrEnum):
    ALLOW = "allow"  # closed: attempt it
    PROBE = "probe"  # this worker holds the half-open probe: attempt it as the probe
    CLAIM = "claim"  # the cooldown (or a probe's lease) is over: propose a claim first
    DEFER = "defer"  # not now: back at ``retry_at_ms``; not an attempt (H7)


@dataclass(frozen=True, slots=True)
class FleetDecision:
    step: Step
    retry_at_ms: int = 0


_ALLOW = FleetDecision(Step.ALLOW)
_PROBE = FleetDecision(Step.PROBE)
_CLAIM = FleetDecision(Step.CLAIM)


def admit(
    record: BreakerRecord | None, me: str, now_ms: int, *, probe_sent: bool, recheck_ms: int
) -> FleetDecision:
    """What one worker may do with a delivery due for ``record``'s origin now.

    ``probe_sent`` says whether this worker already sent the probe its claim won (one probe per
    claim); ``recheck_ms`` bounds how long a delivery waits behind a probe in flight.
    """
    if record is None or record.state is BreakerState.CLOSED:
        return _ALLOW
    if record.state is BreakerState.OPEN:
        if now_ms < record.open_until:
            return FleetDecision(Step.DEFER, record.open_until)
        return _CLAIM
    if now_ms >= record.probe_until:
        return _CLAIM  # the probe's result never came back (its worker died): probe again
    if record.probe_owner == me and not probe_sent:
        return _PROBE
    return FleetDecision(Step.DEFER, min(record.probe_until, now_ms + recheck_ms))


def _next(record: BreakerRecord | None, origin: str, me: str, now_ms: int) -> BreakerRecord:
    base = record or BreakerRecord(origin, 0, BreakerState.CLOSED, now_ms, 0)
    return replace(base, version=base.version + 1, changed_at=now_ms, writer=me)


def _ms(seconds: float) -> int:
    return math.ceil(seconds * 1000)


def trip(
    record: BreakerRecord | None, origin: str, me: str, now_ms: int, config: BreakerConfig
) -> BreakerRecord | None:
    """CLOSED -> OPEN for the base cooldown; None when the shared breaker is not closed."""
    if record is not None and record.state is not BreakerState.CLOSED:
        return None
    cooldown = _ms(config.cooldown_s)
    return replace(
        _next(record, origin, me, now_ms),
        state=BreakerState.OPEN,
        cooldown_ms=cooldown,
        open_until=now_ms + cooldown,
        probe_owner="",
        probe_until=0,
    )


def claim(
    record: BreakerRecord, me: str, now_ms: int, config: BreakerConfig
) -> BreakerRecord | None:
    """OPEN (cooldown over) or HALF_OPEN (lease over) -> HALF_OPEN with ``me`` probing."""
    if admit(record, me, now_ms, probe_sent=True, recheck_ms=0).step is not Step.CLAIM:
        return None
    return replace(
        _next(record, record.origin, me, now_ms),
        state=BreakerState.HALF_OPEN,
        open_until=0,
        probe_owner=me,
        probe_until=now_ms + _ms(config.probe_timeout_s),
    )


def probe_ended(
    record: BreakerRecord,
    me: str,
    success: bool,
    now_ms: int,
    config: BreakerConfig,
    *,
    waiting_bound_s: float | None = None,
) -> BreakerRecord | None:
    """HALF_OPEN -> CLOSED on success, -> OPEN with the cooldown doubled on failure.

    None unless ``me`` holds the probe of ``record``. ``waiting_bound_s`` (deliveries are waiting
    for the origin) caps the doubled cooldown below ``max_cooldown_s``.
    """
    if record.state is not BreakerState.HALF_OPEN or record.probe_owner != me:
        return None
    closed = replace(
        _next(record, record.origin, me, now_ms), probe_owner="", probe_until=0, open_until=0
    )
    if success:
        return replace(closed, state=BreakerState.CLOSED, cooldown_ms=_ms(config.cooldown_s))
    cap = _ms(config.max_cooldown_s)
    if waiting_bound_s is not None:
        cap = min(cap, max(_ms(waiting_bound_s), _ms(config.cooldown_s)))
    cooldown = min(max(record.cooldown_ms, _ms(config.cooldown_s)) * 2, cap)
    return replace(
        closed, state=BreakerState.OPEN, cooldown_ms=cooldown, open_until=now_ms + cooldown
    )


def reset(
    record: BreakerRecord | None, origin: str, me: str, now_ms: int, config: BreakerConfig
) -> BreakerRecord:
    """Any state -> CLOSED, with the base cooldown (a re-enabled subscription, R1)."""
    return replace(
        _next(record, origin, me, now_ms),
        state=BreakerState.CLOSED,
        cooldown_ms=_ms(config.cooldown_s),
        open_until=0,
        probe_owner="",
        probe_until=0,
    )


class FleetView:
    """Every origin's shared breaker, folded from the ``breakers`` topic in log order."""

    def __init__(self) -> None:
        self._records: dict[str, BreakerRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, origin: str) -> BreakerRecord | None:
        return self._records.get(origin)

    def apply(self, record: BreakerRecord) -> bool:
        """Take ``record`` if it is newer than the version held for its origin; True when it
        was taken. A second record of a version already held lost the race (or is a copy)."""
        current = self._records.get(record.origin)
        if current is not None and record.version <= current.version:
            return False
        self._records[record.origin] = record
        return True

    def records(self) -> Iterable[BreakerRecord]:
        return list(self._records.values())

    def counts(self) -> dict[str, int]:
        """How many origins are in each state (every state named, zeros included)."""
        found = dict.fromkeys((s.value for s in BreakerState), 0)
        for record in self._records.values():
            found[record.state.value] += 1
        return found

    def state_of(self, origin: str) -> BreakerState:
        record = self._records.get(origin)
        return BreakerState.CLOSED if record is None else record.state
