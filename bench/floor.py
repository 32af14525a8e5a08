"""The floor of SPEC P2 and P1: a minimal relay with hookstream's two Kafka hops and HTTP client.

    python -m bench.floor --hops FILE   (configured by HOOKSTREAM_* like a worker)

P2 judges hookstream's publish-to-receive latency against what the same pieces cost with no
hookstream logic in between. This process is those pieces and nothing else:

- hop 1 reads ``events`` with the router's consumer (`make_consumer` with the lanes' settings,
  `take` with the router's 100 ms wait, on a `LaneThread`) and produces every record, as it
  came, to ``routed`` through one shared producer made by `make_producer` (the pipeline's:
  idempotent, acks=all, the configured linger, lz4);
- hop 2 reads ``routed`` with the dispatcher's consumer settings and 50 ms wait, and POSTs each
  record's value to the URL with the worker's delivery transport (``http_client``, built as the
  pipeline builds it), labelled ``webhook-id: <event id>`` so nginx logs it.

There is no registry, matching, envelope, signing, flow control, ledger, retry or health:
positions are committed every 200 ms without waiting for anything to settle. Requests under way
are capped at the worker's dispatch concurrency, so under P1's backlog the floor reads as the
worker does, a slot at a time (at P2's rate the cap never binds). Both hops run on
one uvloop event loop with a read thread each, like the worker's lanes. For the hop breakdown it
writes one line per request to ``--hops``: the event id, when hop 1 read the record, when the
broker appended the relayed one (with LogAppendTime on ``routed``, else ``nan``) and when hop 2
started the request (seconds since the epoch). `bench.rig.Rig` runs it in place of the
worker (``RigConfig(floor=True)``), so the same publisher, nginx and samplers measure it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import time
from pathlib import Path
from typing import IO

import orjson
import uvloop
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)

from streams.adapters.http import HttpRequest, Transport
from streams.adapters.kafka_clients import (
    header,
    make_consumer,
    make_producer,
    take,
)
from streams.adapters.lane_thread import LaneThread
from streams.adapters.ssrf import guarded_transport
from streams.settings import Settings, load_settings


def floor_command(url: str, hops: Path) -> tuple[str, ...]:
    """`bench.worker.Worker`'s command for the floor relay."""
    return ("-m", "bench.floor", "--url", url, "--hops", str(hops))


COMMIT_INTERVAL_S = 0.2
READ_HEADER = "floor-read-at"
TIMEOUT_S = 10.0


def _commit(consumer: Consumer, positions: dict[tuple[str, int], int]) -> None:
    if positions:
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        consumer.commit(offsets=offsets, asynchronous=True)


def _forward(producer: Producer, topic: str, msg: Message, read_at: float) -> None:
    while True:
        try:
            producer.produce(
                topic,
                key=msg.key(),
                value=msg.value(),
                headers=[(READ_HEADER, repr(read_at).encode())],
            )
            return
        except BufferError:
            producer.poll(0.05)


class Floor:
    def __init__(self, settings: Settings, url: str, hops: IO[str]) -> None:
        self._settings = settings
        self._url = url
        self._hops = hops
        self._producer = make_producer(settings)
        self._transport: Transport | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self.stop = asyncio.Event()

    async def run(self) -> None:
        # built inside the loop, as the worker's pipeline builds it
        self._transport = guarded_transport(
            self._settings,
            max_connections=self._settings.dispatch_concurrency,
            body_cap=self._settings.response_body_cap,
        )
        try:
            await asyncio.gather(self._hop_in(), self._hop_out())
            if self._sends:
                await asyncio.wait(self._sends, timeout=TIMEOUT_S)
        finally:
            await self._transport.aclose()
            self._producer.flush(10)
            self._hops.flush()

    def _reader(self, topic: str, group: str, wait_s: float) -> _Reader:
        return _Reader(make_consumer(self._settings, group), topic, wait_s, group)

    async def _hop_in(self) -> None:
        reader = self._reader(self._settings.topic("events"), "floor-in", 0.1)
        routed = self._settings.topic("routed")
        try:
            while not self.stop.is_set():
                msgs = await reader.read(self._settings.dispatch_batch_size)
                now = time.time()
                for msg in msgs:
                    _forward(self._producer, routed, msg, now)
                self._producer.poll(0)  # delivery reports, as the router serves them
                await reader.commit_due()
        finally:
            await reader.close()

    async def _hop_out(self) -> None:
        reader = self._reader(self._settings.topic("routed"), "floor-out", 0.05)
        # at most as many requests under way as the worker's dispatch slots: with P1's backlog
        # the floor would otherwise read every record at once and queue a task for each
        slots = self._settings.dispatch_concurrency
        try:
            while not self.stop.is_set():
                if len(self._sends) >= slots:
                    await asyncio.wait(self._sends, return_when=asyncio.FIRST_COMPLETED)
                    continue
                batch = min(self._settings.dispatch_batch_size, slots - len(self._sends))
                for msg in await reader.read(batch):
                    task = asyncio.create_task(self._send(msg))
                    self._sends.add(task)
                    task.add_done_callback(self._sends.discard)
                if await reader.commit_due():
                    self._hops.flush()  # the bench reads the file while the floor runs
        finally:
            await reader.close()

    async def _send(self, msg: Message) -> None:
        assert self._transport is not None
        body = msg.value() or b""
        event_id = str(orjson.loads(body)["id"])
        read_at = header(msg, READ_HEADER) or "nan"
        kind, stamp = msg.timestamp()
        appended = repr(stamp / 1000) if kind == TIMESTAMP_LOG_APPEND_TIME else "nan"
        started = time.time()
        request = HttpRequest(
            url=self._url,
            body=body,
            headers={"webhook-id": event_id, "content-type": "application/json"},
            timeout_s=TIMEOUT_S,
        )
        try:
            await self._transport.send(request)
        except Exception as exc:  # a floor that cannot deliver shows as missing deliveries
            print(f"floor: {event_id}: {exc}", flush=True)
        self._hops.write(f"{event_id} {read_at} {appended} {started!r}\n")


class _Reader:
    """One consumer read through a thread of its own, its positions committed now and then."""

    def __init__(self, consumer: Consumer, topic: str, wait_s: float, name: str) -> None:
        self._consumer = consumer
        self._thread = LaneThread(name)
        self._wait_s = wait_s
        self._positions: dict[tuple[str, int], int] = {}
        self._last_commit = time.monotonic()
        consumer.subscribe([topic])

    async def read(self, batch: int) -> list[Message]:
        msgs = await self._thread.call(functools.partial(take, self._consumer, batch, self._wait_s))
        good = []
        for msg in msgs:
            if msg.error() is None:
                good.append(msg)
                self._positions[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
        return good

    async def commit_due(self) -> bool:
        """Commit what was read, once every `COMMIT_INTERVAL_S`; whether it did."""
        if time.monotonic() - self._last_commit < COMMIT_INTERVAL_S:
            return False
        positions, self._positions = self._positions, {}
        await self._thread.call(functools.partial(_commit, self._consumer, positions))
        self._last_commit = time.monotonic()
        return True

    async def close(self) -> None:
        positions, self._positions = self._positions, {}
        await self._thread.call(functools.partial(_commit, self._consumer, positions))
        await self._thread.call(self._consumer.close)
        self._thread.stop()


def read_hops(path: Path) -> dict[str, dict[str, float]]:
    """The hops file, per event id: when hop 1 read it (``route``), when the broker appended
    the relayed record (``produce``; only with LogAppendTime on ``routed``) and when hop 2
    started the request (``dispatch``), in seconds."""
    found: dict[str, dict[str, float]] = {"route": {}, "produce": {}, "dispatch": {}}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) != 4:
            continue
        for name, value in zip(("route", "produce", "dispatch"), parts[1:], strict=True):
            if value != "nan":
                found[name].setdefault(parts[0], float(value))
    return found


async def _main(url: str, hops_path: Path) -> None:
    settings = load_settings()
    with hops_path.open("a", buffering=1 << 16) as hops:
        floor = Floor(settings, url, hops)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, floor.stop.set)
        print("floor: relaying", flush=True)
        await floor.run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--hops", type=Path, required=True, help="where to write hop times")
    parser.add_argument("--url", required=True, help="the receiver's URL")
    args = parser.parse_args(argv)
    uvloop.run(_main(args.url, args.hops))


if __name__ == "__main__":
    main()
