"""Time how late the worker's event loop runs a timer into ``hookstream_event_loop_lag_seconds``
(O1).

The router, the dispatcher's reads and attempts, the HTTP responses and faust's agents share one
event loop: while one of them computes, every delivery ready on the loop waits. A timer set
for every `PERIOD_S` (50 ms) and observed for how late it fires measures that wait from the
outside, whatever caused it (a batch routed in one go, a table flush, a collector pass), where
a profile shows only what ran. It tells a delivery-latency tail that is the loop's own (lag as
long as the tail) from one outside it: Kafka, the network, a thread waiting for a core
(docs/observability.md).
A block longer than the period is always seen, as its length less up to a period; a shorter
one is seen as often as it is long against the period (a 25 ms block half the time), so the
histogram's shape holds over many blocks. Twenty wake-ups a second cost an otherwise idle loop
0.27-0.33% of a core (uvloop, 10 s each way on a box busy with CI); every 20 ms cost 0.55-0.83%.
"""

from __future__ import annotations

import asyncio

from streams.metrics.families import LOOP_LAG

PERIOD_S = 0.05


async def watch_loop_lag(stop: asyncio.Event, period_s: float = PERIOD_S) -> None:
    """Observe the loop's lag every ``period_s`` until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    observe = LOOP_LAG.observe
    while not stop.is_set():
        due = loop.time() + period_s
        await asyncio.sleep(period_s)
        observe(max(0.0, loop.time() - due))
