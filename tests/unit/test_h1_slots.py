"""F3, §5: the H1 transport's slot count, taken without a coroutine while one is free."""

from __future__ import annotations

import asyncio

from streams.adapters.http1 import _Slots


async def test_F3_slots_are_taken_at_once_while_free_then_handed_on_in_order() -> None:
    slots = _Slots(2)
    assert slots.try_take() and slots.try_take()
    assert not slots.try_take()
    order: list[int] = []

    async def wait(n: int) -> None:
        await slots.take()
        order.append(n)

    waiters = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert order == []
    slots.give()
    slots.give()
    await asyncio.sleep(0)
    assert order == [0, 1]
    assert not slots.try_take()  # a waiter is still in line: nobody jumps it
    slots.give()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    assert slots.free == 0


async def test_F3_a_waiter_cancelled_as_it_is_handed_a_slot_hands_it_on() -> None:
    slots = _Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # handed to the first...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)  # the slot went on to the second
    slots.give()
    assert slots.free == 1


async def test_F3_a_cancelled_waiter_leaves_the_line() -> None:
    slots = _Slots(1)
    assert slots.try_take()
    waiter = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    slots.give()
    assert slots.free == 1
    assert slots.try_take()
