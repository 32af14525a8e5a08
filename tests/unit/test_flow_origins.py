"""F3: a busy origin that answers quickly waits at intake; a slow or hanging one is deferred.

`FlowControl` is plain asyncio: these tests drive it with attempt functions that sleep or hang,
and count what it hands back to a retry tier (``defer``) and what it settles.
"""

from __future__ import annotations

import asyncio

import pytest

from streams.domain.models import Delivery, Event, Secret, Subscription
from streams.lanes import flow as flow_module
from streams.lanes.flow import Ended, FlowControl, OriginGate

TP = ("routed", 0)


def _sub(sub_id: str, url: str) -> Subscription:
    return Subscription(
        id=sub_id,
        tenant_id="t1",
        name=sub_id,
        url=url,
        filters=("*",),
        secrets=(Secret("whsec_dGVzdA=="),),
    )


def _delivery(sub: Subscription, n: int) -> Delivery:
    event = Event(f"evt_{n}", "t1", "order.created", 0, "{}", 0)
    return Delivery(f"dlv_{sub.id}_{n}", sub.id, "t1", event)


class Recorder:
    def __init__(self, hang: set[str], seconds: float) -> None:
        self.hang = hang
        self.seconds = seconds
        self.deferred: list[str] = []
        self.settled: list[int] = []
        self.attempted: list[str] = []
        self.release = asyncio.Event()
        self.waiting_for: set[int] = set()
        self.all_settled = asyncio.Event()

    async def attempt(self, sub: Subscription, delivery: Delivery) -> Ended:
        self.attempted.append(delivery.delivery_id)
        if sub.id in self.hang:
            await self.release.wait()
        else:
            await asyncio.sleep(self.seconds)
        return Ended()

    def defer(self, delivery: Delivery, due_ms: int, reason: str) -> None:
        self.deferred.append(delivery.delivery_id)

    def settle(self, tp: tuple[str, int], offset: int) -> None:
        self.settled.append(offset)
        self.waiting_for.discard(offset)
        if not self.waiting_for:
            self.all_settled.set()

    async def wait_settled(self, offsets: range) -> None:
        self.waiting_for = set(offsets) - set(self.settled)
        self.all_settled.clear()
        if self.waiting_for:
            await asyncio.wait_for(self.all_settled.wait(), timeout=10)


def _control(recorder: Recorder, subs: dict[str, Subscription], origin_cap: int) -> FlowControl:
    return FlowControl(
        slots=64,
        origin_max_in_flight=origin_cap,
        attempt=recorder.attempt,
        defer=recorder.defer,
        settled=recorder.settle,
        lookup=subs.get,
    )


async def test_f3_a_saturated_fast_origin_is_never_deferred() -> None:
    sub = _sub("sub_fast", "https://fast.example/hook")
    recorder = Recorder(hang=set(), seconds=0.002)
    control = _control(recorder, {sub.id: sub}, origin_cap=2)
    total = 600  # far more than the queue cap (256) and the origin's 2 slots
    for offset in range(total):
        control.submit(TP, offset, _delivery(sub, offset), sub)
        if offset % 50 == 0:
            await asyncio.sleep(0)
    await recorder.wait_settled(range(total))
    assert recorder.deferred == []
    assert sorted(recorder.settled) == list(range(total))
    assert len(recorder.attempted) == total


async def test_f3_a_hanging_origin_sheds_its_queue_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flow_module, "STALL_S", 0.2)
    dead = _sub("sub_dead", "https://dead.example/hook")
    live = _sub("sub_live", "https://live.example/hook")
    recorder = Recorder(hang={dead.id}, seconds=0.001)
    control = _control(recorder, {dead.id: dead, live.id: live}, origin_cap=2)
    for offset in range(300):  # fills the dead subscription's queue (cap 256)
        control.submit(TP, offset, _delivery(dead, offset), dead)
    await asyncio.sleep(0.3)  # no attempt has ended for longer than STALL_S: the origin is slow
    control.submit(TP, 300, _delivery(dead, 300), dead)
    # everything queued beyond the origin's own slots went back to a retry tier, settled
    assert control.queued == 2
    assert len(recorder.deferred) == 301 - 2 - 2  # minus the 2 hanging, minus the 2 queued
    assert set(recorder.deferred).isdisjoint(recorder.attempted)
    for offset in range(1000, 1050):
        control.submit(TP, offset, _delivery(live, offset), live)
    await recorder.wait_settled(range(1000, 1050))
    assert control.queued == 2  # the dead origin's 2 still wait; its 2 attempts still hang
    recorder.release.set()
    await control.drain(1.0)


async def test_f7_held_counts_each_partitions_unsettled_deliveries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`held` (queued + running per source partition) drives the dispatcher's per-partition
    intake pause: it must rise with every delivery taken in and fall with every one settled,
    shed to a retry tier, or dropped on revocation, and never go stale."""
    monkeypatch.setattr(flow_module, "STALL_S", 0.2)
    dead = _sub("sub_dead", "https://dead.example/hook")
    live = _sub("sub_live", "https://live.example/hook")
    recorder = Recorder(hang={dead.id}, seconds=0.001)
    control = _control(recorder, {dead.id: dead, live.id: live}, origin_cap=2)
    busy, quiet = ("routed", 1), ("routed", 2)
    for offset in range(300):  # fills the dead subscription's queue (cap 256)
        control.submit(busy, offset, _delivery(dead, offset), dead)
    for offset in range(1000, 1005):
        control.submit(quiet, offset, _delivery(live, offset), live)
    assert control.held == {busy: 300, quiet: 5}
    await recorder.wait_settled(range(1000, 1005))
    assert control.held == {busy: 300}  # 2 hanging, 298 queued; the quiet partition is clear

    await asyncio.sleep(0.3)  # the dead origin is slow now: the next one sheds the queue
    control.submit(busy, 300, _delivery(dead, 300), dead)
    assert control.held == {busy: 4}  # its 2 hanging and the 2 its origin slots allow
    control.forget({busy})  # revoked: the queued are dropped, the running still count
    assert control.held == {busy: 2}
    recorder.release.set()
    await recorder.wait_settled(range(2))
    assert control.held == {}


async def test_f3_a_paused_partition_is_freed_of_a_stalled_origins_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`shed_slow`: a backlog far below the queue cap still holds its partition's intake share;
    once the origin has stalled, the backlog queued from the paused partitions goes back to a
    retry tier (settled, no attempt), while other partitions and healthy origins keep theirs."""
    monkeypatch.setattr(flow_module, "STALL_S", 0.2)
    dead = _sub("sub_dead", "https://dead.example/hook")
    slow_ok = _sub("sub_ok", "https://ok.example/hook")
    recorder = Recorder(hang={dead.id}, seconds=0.02)
    control = _control(recorder, {dead.id: dead, slow_ok.id: slow_ok}, origin_cap=2)
    paused, other = ("routed", 3), ("routed", 4)
    for offset in range(30):  # 2 hang, 28 queue: nowhere near the queue cap of 256
        control.submit(paused, offset, _delivery(dead, offset), dead)
    for offset in range(30, 40):
        control.submit(other, offset, _delivery(dead, offset), dead)
    for offset in range(100, 140):  # an origin that answers, in the paused partition
        control.submit(paused, offset, _delivery(slow_ok, offset), slow_ok)
    await asyncio.sleep(0)

    assert control.shed_slow({paused}) == 0  # nothing has stalled yet
    await asyncio.sleep(0.3)  # no attempt to the dead origin has ended for longer than STALL_S
    shed = control.shed_slow({paused})

    assert shed == 28  # the dead origin's queued deliveries from the paused partition
    assert control.held[other] == 10  # another partition's backlog is not touched
    assert set(recorder.deferred).isdisjoint(recorder.attempted)
    assert all(d.startswith("dlv_sub_dead_") for d in recorder.deferred)
    await recorder.wait_settled(range(100, 140))  # the answering origin's all went out
    assert control.held[paused] == 2  # only the dead origin's 2 hanging attempts
    recorder.release.set()
    await control.drain(1.0)


async def test_f3_an_origin_waiter_cancelled_after_its_slot_was_passed_on_stays_cancelled() -> None:
    """Shutdown cancels pumps waiting at an origin's gate; a release in between may already
    have dropped the cancelled waiter. The pump must end cancelled, not with a ValueError."""
    gate = OriginGate(1, adaptive=False)
    await gate.acquire()
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)  # waiting for the one slot
    waiter.cancel()  # its future is cancelled at once ...
    gate.release()  # ... and the release drops it before the pump sees the cancellation
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.running == 0
    await asyncio.wait_for(gate.acquire(), 1.0)  # the slot is free for the next one


async def test_f4_deliveries_let_go_while_the_breaker_was_open_wait_for_the_ramp() -> None:
    """Deliveries let go while the origin's breaker was open (no ramp applies then) and still
    waiting for a dispatch slot when it closes go back in line behind the recovery ramp,
    instead of landing on the endpoint at once (the storm F4 prevents)."""
    sub = _sub("sub_back", "https://back.example/hook")
    first = asyncio.Event()
    attempted: list[str] = []
    ramp: dict[str, float | None] = {"rate": None}  # None: the breaker is open, no ramp

    async def attempt(sub: Subscription, delivery: Delivery) -> Ended:
        attempted.append(delivery.delivery_id)
        if len(attempted) == 1:
            await first.wait()  # holds the only dispatch slot
        return Ended()

    control = FlowControl(
        slots=1,
        origin_max_in_flight=64,
        attempt=attempt,
        defer=lambda *_: None,
        settled=lambda *_: None,
        lookup={sub.id: sub}.get,
        ramp=lambda _origin, _now: ramp["rate"],
    )
    for offset in range(20):
        control.submit(TP, offset, _delivery(sub, offset), sub)
    await asyncio.sleep(0.1)  # 19 are let go and wait for the slot
    assert len(attempted) == 1
    ramp["rate"] = 2.0  # the breaker closed: 2/s, and a ramp starts with no token saved
    first.set()
    await asyncio.sleep(0.3)
    assert len(attempted) == 1, "deliveries let go before the close skipped the ramp"
    await asyncio.sleep(0.5)
    assert len(attempted) >= 2  # they come in the ramp's turn
    ramp["rate"] = None  # the ramp is over: the rest go at once
    await asyncio.sleep(1.2)
    assert len(attempted) == 20
    assert len(set(attempted)) == 20


async def test_f4_r2_a_backfill_read_from_its_lane_is_paced_there_not_by_the_ramp() -> None:
    """A re-enable starts the origin's recovery ramp; the backfill that goes with it is paced
    where it is written (R2, P5). Read from the backfill topic, its deliveries are neither held
    nor counted by the ramp: held, they came out at the ramp's rate, then above their own pace
    once the ramp outgrew it. A live delivery of the same origin still waits for the ramp."""
    backfilled = _sub("sub_backfilled", "https://back.example/hook")
    live = _sub("sub_live", "https://back.example/other")
    attempted: list[str] = []

    async def attempt(sub: Subscription, delivery: Delivery) -> Ended:
        attempted.append(delivery.delivery_id)
        return Ended()

    control = FlowControl(
        slots=64,
        origin_max_in_flight=64,
        attempt=attempt,
        defer=lambda *_: None,
        settled=lambda *_: None,
        lookup={backfilled.id: backfilled, live.id: live}.get,
        ramp=lambda _origin, _now: 1.0,  # 1/s, starting with no token saved
        paced_topics=frozenset({"backfill"}),
    )
    for offset in range(10):
        control.submit(("backfill", 0), offset, _delivery(backfilled, offset), backfilled)
    control.submit(TP, 0, _delivery(live, 0), live)
    control.submit(TP, 1, _delivery(live, 1), live)
    await asyncio.sleep(0.3)
    assert sorted(attempted) == sorted(f"dlv_sub_backfilled_{n}" for n in range(10))
    await asyncio.sleep(1.0)
    # the ramp's first token went to the live lane, not to the ten backfilled deliveries
    assert attempted[10:] == ["dlv_sub_live_0"]


async def test_q1_held_flow_control_starts_nothing_until_let_go() -> None:
    """While the dispatcher's `CommitGate` holds (Kafka cannot record outcomes), queued
    deliveries wait; attempts already under way are not touched."""
    sub = _sub("sub_held", "https://held.example/hook")
    recorder = Recorder(hang=set(), seconds=0.0)
    control = _control(recorder, {sub.id: sub}, origin_cap=64)
    control.submit(TP, 0, _delivery(sub, 0), sub)
    await recorder.wait_settled(range(1))
    control.hold(True)
    for offset in range(1, 6):
        control.submit(TP, offset, _delivery(sub, offset), sub)
    await asyncio.sleep(0.2)
    assert recorder.attempted == ["dlv_sub_held_0"]
    control.hold(False)
    await recorder.wait_settled(range(1, 6))
    assert len(recorder.attempted) == 6
