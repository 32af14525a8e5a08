"""How the Faust agents' consumer fetches: in batches, not a request per record.

Faust's aiokafka consumer asks the broker for records with ``fetch.min.bytes`` = 1, so a fetch
returns as soon as any one of its partitions has a record. hookstream's agents (health, control,
notifications, analytics) read some 48 partitions, and at a steady 100 deliveries/s the attempt
and health records arrive a few at a time: the consumer thread then spent about a third of a
core encoding and decoding fetch requests for all 48 partitions, record after record
(docs/benchmarks.md, section 8).

`PacedFetchTransport` is Faust's aiokafka transport with one difference: its worker consumer
asks for ``agent_fetch_min_bytes`` and waits at most ``agent_fetch_wait`` for them. The broker
then answers once per wait at low rates and at once when the bytes are there, so the agents'
reaction time grows by at most the wait (100 ms by default), and the delivery lanes, which use
their own confluent-kafka consumers, are not affected.

aiokafka has no public setter for these two after Faust builds the consumer, so the values are
set on the consumer's attributes before it starts; the aiokafka version is pinned and
``tests/unit/test_agent_fetch.py`` checks that the fetcher it starts uses them.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka


class PacedFetchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """The aiokafka consumer thread, with the transport's fetch size and wait."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        apply_fetch_pacing(consumer, transport.fetch_min_bytes, transport.fetch_max_wait_ms)
        return consumer


class PacedFetchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, running `PacedFetchConsumerThread`."""

    def _new_consumer_thread(self) -> PacedFetchConsumerThread:
        return PacedFetchConsumerThread(self, loop=self.loop, beacon=self.beacon)


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
