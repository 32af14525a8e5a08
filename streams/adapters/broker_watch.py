"""Whether this worker can reach its Kafka broker, for /readyz and for the log (SPEC X4, O4).

`BrokerWatch` asks the broker for metadata every ``every_s`` seconds through an AdminClient of
its own. When the broker stops answering it logs "kafka broker unreachable" once, then a
reminder every ``remind_s`` seconds, and "kafka broker reachable again" when it answers; the
clients' own reconnect lines are throttled in `streams.logging`. The worker's readiness
includes `BrokerWatch.up`, so a load balancer stops sending admin requests meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_clients import LIBRDKAFKA_LOG
from streams.settings import Settings

log = logging.getLogger(__name__)

Probe = Callable[[], bool]


class BrokerWatch:
    """Tracks whether the broker answers; `observe` is the transition logic, `run` the loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        every_s: float = 2.0,
        remind_s: float = 30.0,
        probe: Probe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bootstrap = settings.kafka_bootstrap
        self._every_s = every_s
        self._remind_s = remind_s
        self._probe = probe
        self._clock = clock
        self._admin: AdminClient | None = None
        self.up = True  # a worker starts only once the broker answered
        self._down_since = 0.0
        self._next_reminder = 0.0

    def observe(self, reachable: bool) -> None:
        """Record one probe's answer; log the loss once, a reminder, and the return."""
        now = self._clock()
        extra = {"bootstrap": self._bootstrap}
        if reachable:
            if not self.up:
                down_s = round(now - self._down_since, 1)
                log.warning("kafka broker reachable again", extra={**extra, "down_s": down_s})
            self.up = True
        elif self.up:
            self.up = False
            self._down_since = now
            self._next_reminder = now + self._remind_s
            log.warning("kafka broker unreachable: not ready until it answers", extra=extra)
        elif now >= self._next_reminder:
            self._next_reminder = now + self._remind_s
            down_s = round(now - self._down_since, 1)
            log.warning("kafka broker still unreachable", extra={**extra, "down_s": down_s})

    def _answers(self) -> bool:
        if self._probe is not None:
            return self._probe()
        if self._admin is None:
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self._bootstrap,
                    "socket.timeout.ms": 3000,
                    "logger": LIBRDKAFKA_LOG,  # type: ignore[dict-item]  # the stub omits it
                }
            )
        try:
            self._admin.list_topics(timeout=3)
        except KafkaException:
            return False
        finally:
            self._admin.poll(0)  # serves the client's log lines (they wait on its queue)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Probe until ``stop`` is set."""
        while not stop.is_set():
            self.observe(await asyncio.to_thread(self._answers))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._every_s)
