"""H7, H8, F4: the dispatcher's side of the shared breaker, over a log that applies in order.

`InOrderLog` stands in for the ``breakers`` topic: a proposal is applied when `deliver` is
called, in the order proposals were made, the way every worker reads one partition. Two
`FleetBreakers` (two workers) share it.
"""

from __future__ import annotations

import asyncio

import pytest

from streams.adapters.breaker_log import BreakerLog
from streams.domain.breaker import BreakerState
from streams.domain.fleet_breaker import BreakerRecord, Step
from streams.lanes.breakers import FleetBreakers
from streams.settings import Settings, load_settings

ORIGIN = "http://hooks.example.com:80"
T0 = 1_714_564_800_000


class InOrderLog(BreakerLog):
    """A breakers log without a broker: proposals wait in `pending` until `deliver`."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.pending: list[BreakerRecord] = []

    def propose(self, record: BreakerRecord) -> None:
        self.pending.append(record)

    def deliver(self) -> None:
        while self.pending:
            self.apply(self.pending.pop(0))


@pytest.fixture
def fleet() -> tuple[InOrderLog, FleetBreakers, FleetBreakers]:
    settings = load_settings(
        breaker_failures=3,
        breaker_cooldown="2s",
        recovery_start_rate=4,
        recovery_step="1s",
        recovery_growth=2,
    )
    log = InOrderLog(settings)
    now = [T0 / 1000]
    a = FleetBreakers(settings, log, "a", share=lambda: 0.5, clock=lambda: now[0])
    b = FleetBreakers(settings, log, "b", share=lambda: 0.5, clock=lambda: now[0])
    return log, a, b


def test_h8_one_workers_trip_holds_it_at_once_and_the_other_once_read(
    fleet: tuple[InOrderLog, FleetBreakers, FleetBreakers],
) -> None:
    log, a, b = fleet
    for i in range(3):
        a.record(ORIGIN, False, probe=False, now_ms=T0 + i)
    assert len(log.pending) == 1 and log.pending[0].state is BreakerState.OPEN
    held = asyncio.run(a.admit(ORIGIN, T0 + 10))
    assert held.step is Step.DEFER, "the tripping worker stops before the record is read back"
    assert asyncio.run(b.admit(ORIGIN, T0 + 10)).step is Step.ALLOW, "b has not read it yet"
    log.deliver()
    decision = asyncio.run(b.admit(ORIGIN, T0 + 20))
    assert decision.step is Step.DEFER and decision.retry_at_ms == T0 + 2 + 2000
    assert b.state(ORIGIN) == a.state(ORIGIN) == "open"


def test_h8_after_the_cooldown_one_claim_wins_and_only_its_worker_probes(
    fleet: tuple[InOrderLog, FleetBreakers, FleetBreakers],
) -> None:
    log, a, b = fleet
    for i in range(3):
        a.record(ORIGIN, False, probe=False, now_ms=T0 + i)
    log.deliver()
    after = T0 + 3000

    async def both() -> list[Step]:
        first = asyncio.ensure_future(a.admit(ORIGIN, after))
        second = asyncio.ensure_future(b.admit(ORIGIN, after + 1))
        await asyncio.sleep(0.05)  # both claims are written
        log.deliver()
        return [(await first).step, (await second).step]

    assert asyncio.run(both()) == [Step.PROBE, Step.DEFER]
    assert asyncio.run(a.admit(ORIGIN, after + 2)).step is Step.DEFER, "one probe per claim"
    a.record(ORIGIN, True, probe=True, now_ms=after + 50)
    b.record(ORIGIN, True, probe=True, now_ms=after + 50)  # not b's probe: ignored
    assert len(log.pending) == 1
    log.deliver()
    assert a.state(ORIGIN) == "closed"


def test_f4_a_close_starts_one_fleet_ramp_shared_by_the_workers(
    fleet: tuple[InOrderLog, FleetBreakers, FleetBreakers],
) -> None:
    log, a, b = fleet
    assert a.ramp_rate(ORIGIN, T0 / 1000) is None, "an origin that never tripped has no ramp"
    a.reset(ORIGIN, since_ms=T0, now_ms=T0)  # R1: a re-enabled subscription
    log.deliver()
    b.reset(ORIGIN, since_ms=T0, now_ms=T0 + 5)  # already closed since then: nothing written
    assert log.pending == []
    rates = [w.ramp_rate(ORIGIN, (T0 + 500) / 1000) for w in (a, b)]
    assert rates == [2.0, 2.0], "each worker sends its share of the fleet's 4/s"
    assert a.ramp_rate(ORIGIN, (T0 + 1500) / 1000) == 4.0
    a.overloaded(ORIGIN, T0 + 1500)
    assert a.ramp_rate(ORIGIN, (T0 + 1600) / 1000) == 2.0
    assert b.ramp_rate(ORIGIN, (T0 + 1600) / 1000) == 4.0, "halvings are per worker"
