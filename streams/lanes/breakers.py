"""The dispatcher's side of the fleet's shared breakers and recovery ramps (H7, H8, F4).

`FleetBreakers` answers, for one delivery due for an origin, whether to attempt it, attempt it
as the half-open probe, or defer it (`admit`); feeds attempt results back (`record`); and gives
flow control the origin's slow-start rate after an outage (`ramp_rate`). The state is the shared
`FleetView` that `BreakerLog` follows (see `streams.domain.fleet_breaker` for who may make which
transition); this worker adds only:

- a local failure window per origin (`BreakerRegistry`, used while the shared breaker is
  closed), whose trip this worker proposes as the fleet's trip;
- which claim's probe it has sent (one probe per claim), and a short local hold after proposing
  a trip, until the trip is read back (its own deliveries stop at once, the others' within the
  topic's propagation time);
- how many deliveries it deferred per origin (something is waiting: the cooldown stays under
  ``recovery_probe_bound``, F4).

A healthy origin costs one dictionary read per admission and no Kafka write: records are written
only on transitions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable

from streams import metrics
from streams.adapters.breaker_log import BreakerLog
from streams.domain.breaker import BreakerConfig, BreakerState
from streams.domain.breaker_registry import BreakerRegistry
from streams.domain.fleet_breaker import (
    BreakerRecord,
    FleetDecision,
    Step,
    admit,
    claim,
    probe_ended,
    reset,
    trip,
)
from streams.domain.ramp import Ramp, RampConfig
from streams.settings import Settings

log = logging.getLogger(__name__)

#: How long a claimant waits to read its claim back before deferring the delivery instead.
CLAIM_WAIT_S = 2.0
#: After proposing a claim or a trip, how often the view is read for it.
CLAIM_POLL_S = 0.01
#: A delivery that waited out a claim while the breaker closed comes back this much later.
REQUEUE_MS = 500
#: At most this many deferred deliveries per origin are remembered to come back at its close.
HELD_CAP = 100_000


def breaker_config(settings: Settings) -> BreakerConfig:
    return BreakerConfig(
        consecutive_failures=settings.breaker_failures,
        failure_rate=settings.breaker_failure_rate,
        min_attempts=settings.breaker_min_attempts,
        window_s=settings.breaker_window,
        cooldown_s=settings.breaker_cooldown,
        max_cooldown_s=settings.breaker_max_cooldown,
    )


class FleetBreakers:
    def __init__(
        self,
        settings: Settings,
        breaker_log: BreakerLog,
        me: str,
        share: Callable[[], float] = lambda: 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = breaker_config(settings)
        self._log = breaker_log
        self.me = me
        self._share = share
        self._clock = clock
        self._probe_bound = settings.recovery_probe_bound
        self._recheck_ms = int(settings.breaker_cooldown * 1000)
        self._ramp_config = (
            RampConfig(
                start_rate=settings.recovery_start_rate,
                step_s=settings.recovery_step,
                max_rate=settings.recovery_max_rate,
                growth=settings.recovery_growth,
            )
            if settings.recovery_ramp
            else None
        )
        self._local = BreakerRegistry(self.config)
        self._probes: dict[str, int] = {}  # origin -> the claim version whose probe was sent
        self._holds: dict[str, tuple[int, int]] = {}  # origin -> (version tripped at, until ms)
        self._waiting: Counter[str] = Counter()  # deferrals per origin since it last closed
        self._ramps: dict[str, tuple[int, Ramp]] = {}  # origin -> (closing version, its ramp)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_closed: Callable[[str], None] | None = None
        breaker_log.add_listener(self._applied)
        metrics.set_breakers(breaker_log.counts())

    def bind(self, loop: asyncio.AbstractEventLoop, on_closed: Callable[[str], None]) -> None:
        """Call ``on_closed(origin)`` on ``loop`` whenever an origin's shared breaker closes."""
        self._loop = loop
        self._on_closed = on_closed

    def state(self, origin: str) -> str:
        """The fleet's breaker state of ``origin`` (S4): the same on every worker."""
        record = self._log.get(origin)
        return BreakerState.CLOSED.value if record is None else record.state.value

    # --- the hot path ------------------------------------------------------------------------

    async def admit(self, origin: str, now_ms: int) -> FleetDecision:
        """Attempt (ALLOW), attempt as the probe (PROBE) or DEFER a delivery due for ``origin``."""
        decision = self._decide(origin, now_ms)
        if decision.step is Step.CLAIM:
            decision = await self._claim(origin, now_ms)
            if decision.step is Step.ALLOW:
                # closed while this delivery waited for the claim: it passed flow control
                # before the close, so it goes back in line behind the recovery ramp (F4)
                return FleetDecision(Step.DEFER, int(self._clock() * 1000) + REQUEUE_MS)
        if decision.step is Step.PROBE:
            record = self._log.get(origin)
            assert record is not None
            self._probes[origin] = record.version
        elif decision.step is Step.DEFER:
            self._waiting[origin] += 1
        return decision

    def _decide(self, origin: str, now_ms: int) -> FleetDecision:
        record = self._log.get(origin)
        if record is None and not self._holds:
            return admit(None, self.me, now_ms, probe_sent=False, recheck_ms=0)
        version = 0 if record is None else record.version
        hold = self._holds.get(origin)
        if hold is not None:
            if hold[0] == version and now_ms < hold[1]:
                return FleetDecision(Step.DEFER, hold[1])
            del self._holds[origin]
        sent = record is not None and self._probes.get(origin) == record.version
        return admit(record, self.me, now_ms, probe_sent=sent, recheck_ms=self._recheck_ms)

    async def _claim(self, origin: str, now_ms: int) -> FleetDecision:
        """Propose to hold the probe; wait to read back which claim won."""
        record = self._log.get(origin)
        proposal = None if record is None else claim(record, self.me, now_ms, self.config)
        if proposal is not None:
            self._log.propose(proposal)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CLAIM_WAIT_S
            while loop.time() < deadline:
                current = self._log.get(origin)
                if current is not None and current.version >= proposal.version:
                    break
                await asyncio.sleep(CLAIM_POLL_S)
        decision = self._decide(origin, now_ms)
        if decision.step is Step.CLAIM:  # not read back in time: ask again in a second
            return FleetDecision(Step.DEFER, now_ms + 1000)
        return decision

    def record(self, origin: str, success: bool, probe: bool, now_ms: int) -> None:
        """One attempt's breaker signal (`breaker_signal`); ``probe`` if it was the probe."""
        record = self._log.get(origin)
        if probe:
            if record is None or self._probes.get(origin) != record.version:
                return  # the lease ran out and another worker claimed: its probe decides
            bound = self._probe_bound if self._waiting[origin] > 0 else None
            ended = probe_ended(
                record, self.me, success, now_ms, self.config, waiting_bound_s=bound
            )
            if ended is not None:
                self._log.propose(ended)
            return
        if record is not None and record.state is not BreakerState.CLOSED:
            return  # an attempt sent before the trip: it says nothing new
        local = self._local.get(origin, now_ms)
        if local.record(success, now_ms) is not BreakerState.OPEN:
            return
        self._local.forget(origin)
        proposal = trip(record, origin, self.me, now_ms, self.config)
        if proposal is not None:
            self._holds[origin] = (proposal.version - 1, proposal.open_until)
            self._log.propose(proposal)

    def reset(self, origin: str, since_ms: int, now_ms: int) -> None:
        """R1: a subscription to ``origin`` was re-enabled at ``since_ms``: close the shared
        breaker (and start a ramp), unless a close at least that recent is already there."""
        record = self._log.get(origin)
        fresh = record is not None and record.changed_at >= since_ms
        if fresh and record is not None and record.state is BreakerState.CLOSED:
            return
        self._local.forget(origin)
        self._log.propose(reset(record, origin, self.me, now_ms, self.config))

    # --- the recovery ramp (F4) --------------------------------------------------------------

    def ramp_rate(self, origin: str, now: float) -> float | None:
        """This worker's sending rate to ``origin`` (``now`` in seconds) while it ramps up after
        closing; None when no ramp applies (never tripped, ramp over, or ramps turned off)."""
        record = self._log.get(origin)
        if record is None or self._ramp_config is None or record.state is not BreakerState.CLOSED:
            return None
        held = self._ramps.get(origin)
        if held is None or held[0] != record.version:
            held = self._ramps[origin] = (
                record.version,
                Ramp(self._ramp_config, record.changed_at),
            )
        return held[1].rate(int(now * 1000), self._share())  # once over, None for good

    def overloaded(self, origin: str, now_ms: int) -> None:
        """A 429, 5xx, timeout or slowdown from ``origin``: halve its ramp, if it ramps."""
        held = self._ramps.get(origin)
        if held is not None and held[1].halve(now_ms):
            log.info("recovery ramp halved", extra={"origin": origin})

    # --- the shared view changed (the reader thread) -----------------------------------------

    def _applied(self, record: BreakerRecord) -> None:
        metrics.set_breakers(self._log.counts())
        if record.writer == self.me:
            metrics.record_breaker_transition(record.state.value)
        log.info(
            "breaker %s (version %d, by %s)",
            record.state.value,
            record.version,
            record.writer,
            extra={"origin": record.origin},
        )
        loop = self._loop
        if record.state is BreakerState.CLOSED and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._closed, record.origin)

    def _closed(self, origin: str) -> None:
        self._waiting.pop(origin, None)
        self._local.forget(origin)
        if self._on_closed is not None:
            self._on_closed(origin)


def routed_share(assigned: set[tuple[str, int]], routed: str, partitions: int) -> float:
    """This worker's share of the live lane's partitions: its share of a recovery ramp."""
    return max(1, sum(topic == routed for topic, _ in list(assigned))) / partitions


def worker_id() -> str:
    """This worker process's name in breaker records: new at every start, so a restarted
    worker never takes the probe its previous life claimed for its own."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class BreakerHeld:
    """The deliveries this worker deferred per origin because of its breaker (bounded), so
    they can come back as soon as the breaker closes (F4)."""

    def __init__(self, cap: int = HELD_CAP) -> None:
        self._cap = cap
        self._held: dict[str, set[str]] = {}

    def add(self, origin: str, delivery_id: str) -> None:
        ids = self._held.setdefault(origin, set())
        if len(ids) < self._cap:  # past it, a delivery comes back at its due time
            ids.add(delivery_id)

    def pop(self, origin: str) -> set[str]:
        return self._held.pop(origin, set())
