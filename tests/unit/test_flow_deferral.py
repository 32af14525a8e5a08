"""F1: a throttled subscription's overflow comes back in line, one turn apart, not all at once.

A subscription limited to 50/s under a 500/s flood holds about two seconds of deliveries in
memory and hands the rest to a retry tier. If they all came back at once, only a queue's worth
would fit and the rest would be deferred again every cycle; in line, each comes back once.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from streams.domain.models import Delivery, Event, Secret, Subscription
from streams.domain.ratelimit import deferred_due, rate_raised, released_by_raise
from streams.lanes.flow import Ended, FlowControl

TP = ("routed", 0)
NOW = 1_000.0


def _sub(rate: float | None) -> Subscription:
    return Subscription(
        id="sub_limited",
        tenant_id="t1",
        name="limited",
        url="https://limited.example/hook",
        filters=("*",),
        secrets=(Secret("whsec_dGVzdA=="),),
        rate_limit=rate,
    )


def _delivery(sub: Subscription, n: int) -> Delivery:
    event = Event(f"evt_{n}", "t1", "order.created", 0, "{}", 0)
    return Delivery(f"dlv_{n}", sub.id, "t1", event)


class Deferrals:
    def __init__(self) -> None:
        self.due_ms: dict[str, int] = {}
        self.settled: list[int] = []

    def defer(self, delivery: Delivery, due_ms: int, reason: str) -> None:
        assert reason == "rate_limited"
        self.due_ms[delivery.delivery_id] = due_ms

    def settle(self, tp: tuple[str, int], offset: int) -> None:
        self.settled.append(offset)


async def _never(sub: Subscription, delivery: Delivery) -> Ended:
    raise AssertionError("nothing is attempted in these tests: the pumps never get to run")


def _control(deferrals: Deferrals, sub: Subscription) -> FlowControl:
    return FlowControl(
        slots=64,
        origin_max_in_flight=64,
        attempt=_never,
        defer=deferrals.defer,
        settled=deferrals.settle,
        lookup={sub.id: sub}.get,
        clock=lambda: NOW,
    )


async def test_f1_a_flood_is_deferred_in_line_one_turn_apart() -> None:
    sub = _sub(rate=50.0)
    deferrals = Deferrals()
    control = _control(deferrals, sub)
    for offset in range(500):  # ten seconds of a 500/s flood arriving at once
        control.submit(TP, offset, _delivery(sub, offset), sub)
    assert control.queued == 100  # two seconds at 50/s stay in memory
    dues = [deferrals.due_ms[f"dlv_{n}"] for n in range(100, 500)]
    # the first comes back when the queue ahead has drained, then one every 1/50 s, in order
    assert dues[0] == int((NOW + 2.0) * 1000)
    assert all(19 <= later - earlier <= 21 for earlier, later in pairwise(dues))
    assert sorted(deferrals.settled) == list(range(100, 500))  # deferred means settled
    await control.drain(0.1)


async def test_f1_new_deliveries_queue_behind_the_deferred_ones_returning_ones_go_in() -> None:
    sub = _sub(rate=50.0)
    deferrals = Deferrals()
    control = _control(deferrals, sub)
    for offset in range(101):
        control.submit(TP, offset, _delivery(sub, offset), sub)
    last_due = deferrals.due_ms["dlv_100"]
    control.forget({TP})  # the queue in memory empties (here: its partition was revoked)
    assert control.queued == 0
    # a new delivery does not jump ahead of the one waiting in the retry tier ...
    control.submit(TP, 200, _delivery(sub, 200), sub)
    assert deferrals.due_ms["dlv_200"] == last_due + 20
    # ... while the deferred one, back at its due time, takes its turn in memory
    returning = structs.replace(_delivery(sub, 100), due_at=last_due)
    control.submit(TP, 300, returning, sub)
    assert control.queued == 1
    await control.drain(0.1)


async def test_f1_a_raised_limit_ends_the_line_drawn_at_the_old_rate() -> None:
    slow = _sub(rate=1.0)
    deferrals = Deferrals()
    control = _control(deferrals, slow)
    for offset in range(40):  # 8 in memory, 32 deferred one second apart
        control.submit(TP, offset, _delivery(slow, offset), slow)
    assert deferrals.due_ms["dlv_39"] == int((NOW + 8 + 31) * 1000)
    fast = replace(slow, rate_limit=100.0)
    control.limits_changed(fast, raised=True)
    # a new delivery no longer waits behind the old line: memory has room at 100/s
    control.submit(TP, 40, _delivery(fast, 40), fast)
    assert "dlv_40" not in deferrals.due_ms and control.queued == 9
    await control.drain(0.1)


def test_f1_a_raise_is_a_higher_rate_or_none() -> None:
    assert rate_raised(1.0, 2.0) and rate_raised(1.0, None)
    assert not rate_raised(2.0, 1.0) and not rate_raised(2.0, 2.0)
    assert not rate_raised(None, 5.0)  # from no limit to one: nothing waits on a limit


def test_f1_only_never_attempted_deliveries_deferred_before_the_raise_come_back_early() -> None:
    def released(**change: object) -> bool:
        args: dict[str, object] = {
            "never_attempted": True,
            "deferred_ms": 1_000,
            "raised_ms": 2_000,
            "due_ms": 9_000,
            "now_ms": 3_000,
        }
        args.update(change)
        return released_by_raise(**args)  # type: ignore[arg-type]

    assert released()
    assert not released(never_attempted=False)  # a retry may wait out a backoff (D6)
    assert not released(raised_ms=None)  # never raised
    assert not released(deferred_ms=2_500)  # deferred after the raise: already at the new rate
    assert not released(due_ms=1_500)  # due before the raise: the old rate did not hold it
    assert not released(now_ms=9_500)  # due anyway


async def test_f1_an_unthrottled_subscription_never_waits_behind_a_line() -> None:
    sub = _sub(rate=None)
    deferrals = Deferrals()
    control = _control(deferrals, sub)
    for offset in range(200):
        control.submit(TP, offset, _delivery(sub, offset), sub)
    assert deferrals.due_ms == {} and control.queued == 200
    await control.drain(0.1)


@given(
    st.floats(min_value=0.1, max_value=1000.0),
    st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=50),
)
def test_f1_the_line_never_hands_out_two_turns_closer_than_the_rate(
    rate: float, gaps: list[float]
) -> None:
    now, line_end, dues = 0.0, 0.0, []
    for gap in gaps:
        now += gap
        line_end = deferred_due(now, 1.0, rate, line_end)
        dues.append(line_end)
        assert line_end >= now + 1.0  # never before the wait asked for
    assert all(b - a >= 1.0 / rate - 1e-9 for a, b in pairwise(dues))
