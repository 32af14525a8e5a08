"""When each delivery reached each stage of this worker, to the microsecond, for the benchmark.

Off unless ``HOOKSTREAM_STAGE_CLOCK`` names a file (`Settings.stage_clock`). The times the
pipeline keeps for itself are whole milliseconds (Kafka's record timestamps, `Delivery.routed_at`,
`Attempt.started_at`), while at 1,000 events/s a delivery spends well under one in most stages of
the worker: P2's median beyond the floor's could not be split from them (docs/benchmarks.md,
"Where P2's median goes beyond the floor's"). With the clock on, the event loop writes one line
per delivery and stage, ``<stage> <delivery id> <unix time, s>``:

- ``routing``: the router began the batch that holds the delivery's event;
- ``produced``: the router handed the delivery's ``routed`` record to the producer;
- ``taken``: the dispatcher began taking that record in (decoding it, flow control);
- ``started``: flow control started the attempt's task, its slot taken;
- ``sending``: the attempt passed the breaker and builds, signs and sends the request.

A retried delivery has lines for each attempt. Lines are buffered and written every
`FLUSH_INTERVAL_S`; a stamp costs 0.8 µs, 0.05 µs with the clock off (a `timeit` of `stamp`,
docs/benchmarks.md, "The floor and the hops"). Only the event loop's thread stamps, so the file
needs no lock. `bench.latency` reads it into P2's stage
breakdown.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TextIO

#: How often the buffered lines are written out.
FLUSH_INTERVAL_S = 0.1
#: The stages, in the order a delivery reaches them.
STAGES = ("routing", "produced", "taken", "started", "sending")

_out: TextIO | None = None
_timer: asyncio.TimerHandle | None = None


def start(path: Path, loop: asyncio.AbstractEventLoop) -> None:
    """Stamp from now on into ``path`` (appended to), written out every `FLUSH_INTERVAL_S`."""
    global _out
    stop()
    path.parent.mkdir(parents=True, exist_ok=True)
    _out = path.open("a", encoding="utf-8", buffering=1 << 16)
    _flush_soon(loop)


def _flush_soon(loop: asyncio.AbstractEventLoop) -> None:
    global _timer
    if _out is not None:
        _out.flush()
        _timer = loop.call_later(FLUSH_INTERVAL_S, _flush_soon, loop)


def stop() -> None:
    """Write out what is buffered and stop stamping."""
    global _out, _timer
    if _timer is not None:
        _timer.cancel()
        _timer = None
    if _out is not None:
        _out.close()
        _out = None


def now() -> float:
    """The time to stamp later (a batch's start), or 0.0 while the clock is off."""
    return time.time() if _out is not None else 0.0


def stamp(stage: str, delivery_id: str, at: float | None = None) -> None:
    """``delivery_id`` reached ``stage`` now, or at ``at``."""
    if _out is not None:
        _out.write(f"{stage} {delivery_id} {time.time() if at is None else at:.6f}\n")
