"""How the Faust agents' consumer fetches: in batches, not a request per record.

Faust's aiokafka consumer asks the broker for records with ``fetch.min.bytes`` = 1, so a fetch
returns as soon as any one of its partitions has a record. hookstream's agents (health, control,
notifications, analytics) read some 48 partitions, and at a steady 100 deliveries/s the attempt
and health records arrive a few at a time: the consumer thread then spent about a third of a
core encoding and decoding fetch requests for all 48 partitions, record after record
(docs/benchmarks.md, "Agents' batched fetch").

`PacedFetchTransport` is Faust's aiokafka transport with one difference: its worker consumer
asks for ``agent_fetch_min_bytes`` and waits at most ``agent_fetch_wait`` for them. The broker
then answers once per wait at low rates and at once when the bytes are there, so the agents'
reaction time grows by at most the wait (100 ms by default), and the delivery lanes, which use
their own confluent-kafka consumers, are not affected.

aiokafka has no public setter for these two after Faust builds the consumer, so the values are
set on the consumer's attributes before it starts; the aiokafka version is pinned and
``tests/unit/test_agent_fetch.py`` checks that the fetcher it starts uses them.

**Handing a record to its stream without four tasks.** Faust's consumer hands every record to
its stream with ``wait_first(callback(record), suspend_flow.wait())``: the hand-over is dropped
if a rebalance suspends the flow while it waits (a full stream queue, a suspended flow). That
call builds four tasks and an ``asyncio.wait`` per record, most of the Faust agents' cost per
record on the event loop (docs/benchmarks.md, "Faust hand-over without tasks").
`PacedFetchConsumer.wait_first` first runs the hand-over up to its first wait: almost always it
has none (the record is queued at once) and is done without a task. When it does wait, the rest
of it races the other awaitables through Faust's own ``wait_first``, as before, so a rebalance
still drops it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults


class PacedFetchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """The aiokafka consumer thread, with the transport's fetch size and wait."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        apply_fetch_pacing(consumer, transport.fetch_min_bytes, transport.fetch_max_wait_ms)
        return consumer


class _Rest:
    """The rest of a coroutine that was run up to its first wait, ``pending``, as an awaitable:
    awaiting it waits for ``pending`` and runs the coroutine on from there."""

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                value = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, thrown in where the coroutine waits
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(value)
                except StopIteration as done:
                    return done.value


class PacedFetchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, running `PacedFetchConsumerThread`, that hands a record to its
    stream without tasks when the hand-over does not wait (see the module)."""

    def _new_consumer_thread(self) -> PacedFetchConsumerThread:
        return PacedFetchConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:  # noqa: ASYNC109  # mode's signature
        if self._stopped.is_set() or self._crashed.is_set():
            return await super().wait_first(*coros, timeout=timeout)
        return await first_inline(coros, functools.partial(super().wait_first, timeout=timeout))


async def first_inline(
    coros: Sequence[Any], race: Callable[..., Awaitable[WaitResults]]
) -> WaitResults:
    """``race(*coros)`` (mode's ``Service.wait_first``), except that a first coroutine done without
    waiting wins alone without any task, and the others are closed unawaited."""
    first = coros[0] if coros else None
    if not inspect.iscoroutine(first):
        return await race(*coros)
    try:
        pending = first.send(None)
    except BaseException as exc:
        for other in coros[1:]:
            if inspect.iscoroutine(other):
                other.close()
        if isinstance(exc, StopIteration):  # done without waiting: the others lost the race
            return WaitResults([first], [exc.value], False)
        raise
    return await race(_Rest(first, pending), *coros[1:])  # an awaitable: the race wraps it


class PacedFetchTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport whose agents' consumer fetches in batches."""

    Consumer = PacedFetchConsumer

    def __init__(
        self, *args: Any, fetch_min_bytes: int, fetch_max_wait_ms: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms


def apply_fetch_pacing(consumer: Any, min_bytes: int, max_wait_ms: int) -> None:
    """Make an unstarted ``aiokafka.AIOKafkaConsumer`` fetch `min_bytes`, waiting `max_wait_ms`."""
    for name in ("_fetch_min_bytes", "_fetch_max_wait_ms"):
        if not hasattr(consumer, name):
            raise RuntimeError(f"aiokafka consumer has no {name}: check the pinned aiokafka")
    consumer._fetch_min_bytes = min_bytes
    consumer._fetch_max_wait_ms = max_wait_ms


def install(app: Any, fetch_min_bytes: int, fetch_max_wait: float) -> None:
    """Give `app` the paced transport, before anything on it reaches its transport."""
    app.transport = PacedFetchTransport(
        app.conf.broker_consumer,
        app,
        fetch_min_bytes=fetch_min_bytes,
        fetch_max_wait_ms=max(1, round(fetch_max_wait * 1000)),
    )
