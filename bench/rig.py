"""A whole hookstream pipeline for one benchmark run: topics, subscriptions, a worker, nginx.

With ``RigConfig(floor=True)`` the rig runs P2's floor relay (`bench.floor`) on the same topics
in the worker's place, with no subscriptions, so the same phases measure it the same way.

`Rig` applies topics.yaml under a prefix of its own (and a group id of its own), creates the
subscriptions, starts ONE worker process and waits until a probe event has travelled all the way
to nginx. Then the phases (`throughput_phase`, `latency_phase`) publish events from this process
and read nginx's access log to learn when each delivery arrived. Leaving the rig stops the
worker and deletes every topic it created, so runs never see each other's records.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.broker_requests import BrokerRequests, per_delivery
from bench.broker_requests import figures as broker_figures
from bench.cpu import BoxSampler, bootstrap_broker_pid, per_delivery_us
from bench.floor import floor_command
from bench.nginx import Nginx, free_port
from bench.worker import Worker
from streams.adapters import codec
from streams.adapters.ingest import encode_json_event
from streams.adapters.kafka_admin import TopicAdmin, apply_topics, delete_topics, load_topology
from streams.adapters.kafka_clients import make_producer
from streams.adapters.secretbox import local_key
from streams.domain.idempotency import delivery_id
from streams.domain.models import Event, Secret, Subscription
from streams.domain.signing import generate_secret
from streams.domain.topic_plan import ConfigAlter, ConfigChange
from streams.services.subscriptions import create_subscription
from streams.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
TENANT = "bench"
EVENT_TYPE = "order.created"
#: How long a run waits, once its worker is ready, for the broker's request probe to sample.
PROBE_WAIT_S = 60.0
JSON_HEADERS: list[tuple[str, str | bytes | None]] = [("content-type", b"application/json")]
# Makes the delivered envelope about 1 KB, like the HTTP client benchmark's body.
_PAD = "x" * 880


@dataclass(frozen=True)
class RigConfig:
    bootstrap: str
    subscriptions: int = 1  # matching subscriptions, each pointing at nginx
    bulk_subscriptions: int = 0  # extra non-matching ones, produced straight to the topic
    concurrency: int = 256
    batch_size: int = 500
    ready_timeout_s: float = 180.0
    # subscriptions of the scenario's own, as (id, create_subscription input), made after the
    # matching ones; they are not in `Rig.sub_ids` (the phases above never address them)
    extra_subscriptions: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    worker_env: Mapping[str, str] = field(default_factory=dict)  # more HOOKSTREAM_* settings
    # run P2's floor relay (`bench.floor`) instead of a worker: no subscriptions, the same
    # topics, and each event delivered once, labelled with its own id
    floor: bool = False
    # the broker stamps `events` and `routed` records with their append time (LogAppendTime),
    # so a run can tell the Kafka hops apart (`bench.hops`); nothing in hookstream reads the
    # timestamps of these two topics
    append_times: bool = False
    # the worker writes when each delivery reached each of its stages, to the µs
    # (`streams.adapters.stage_clock`, `Rig.stage_clock`); a worker's setting, not the floor's
    stage_clock: bool = False
    # count the broker's requests by kind (`bench.broker_requests`); a local broker only
    broker_requests: bool = False


def make_event(run: str, n: int, event_type: str = EVENT_TYPE) -> Event:
    now = int(time.time() * 1000)
    return Event(
        id=f"evt_{run}_{n}",
        tenant_id=TENANT,
        type=event_type,
        timestamp=now,
        data_json=f'{{"n":{n},"pad":"{_PAD}"}}',
        published_at=now,
    )


class Rig:
    def __init__(self, config: RigConfig, receiver: Nginx, workdir: Path) -> None:
        self.config = config
        self.receiver = receiver
        self.run_id = uuid.uuid4().hex[:10]
        prefix = f"bench{self.run_id}."
        # S5: endpoint secrets encrypted under a key generated into the run's data dir
        self.settings: Settings = local_key(
            load_settings(
                kafka_bootstrap=config.bootstrap,
                topic_prefix=prefix,
                group_id=prefix.rstrip("."),
                data_dir=workdir / f"data-{self.run_id}",
                topics_file=REPO / "topics.yaml",
                web_port=free_port(),
                allow_private_destinations=True,
                dispatch_concurrency=config.concurrency,
                dispatch_batch_size=config.batch_size,
            )
        )
        self.workdir = workdir
        self.sub_ids: list[str] = []
        self.extra_sub_ids: list[str] = []
        self.worker: Worker | None = None
        self.box: BoxSampler | None = None
        self.requests: BrokerRequests | None = None  # the broker's requests by kind
        self.ready_s = 0.0
        self._probes = 0

    # --- set up and tear down -------------------------------------------------------------
    def __enter__(self) -> Rig:
        apply_topics(self.settings)
        try:
            if self.config.append_times:
                stamp_appends(self.settings, ("events", "routed"))
            if self.config.bulk_subscriptions:
                self._bulk_subscriptions(self.config.bulk_subscriptions)
            for i in range(0 if self.config.floor else self.config.subscriptions):
                data = {"tenant_id": TENANT, "url": self.receiver.url, "filters": ["order.*"]}
                sub = create_subscription(self.settings, data, subscription_id=f"sub_bench_{i}")
                self.sub_ids.append(sub.id)
            for sub_id, extra in self.config.extra_subscriptions:
                sub = create_subscription(self.settings, extra, subscription_id=sub_id)
                self.extra_sub_ids.append(sub.id)
            began = time.monotonic()
            log = self.workdir / f"worker-{self.run_id}.log"
            env = dict(self.config.worker_env)
            if self.config.stage_clock and not self.config.floor:
                env["HOOKSTREAM_STAGE_CLOCK"] = str(self.stage_clock)
            if self.config.floor:
                command = floor_command(self.receiver.url, self.floor_hops)
                self.worker = Worker(self.settings, log, env, command)
            else:
                self.worker = Worker(self.settings, log, env)
            broker_pid = bootstrap_broker_pid(self.config.bootstrap)
            self.box = BoxSampler(self.receiver.pid, broker_pid)
            if broker_pid is not None and self.config.broker_requests:
                self.requests = BrokerRequests(broker_pid)
            self._wait_ready()
            if self.requests is not None and not self.requests.wait_first(PROBE_WAIT_S):
                why = self.requests.error or f"no sample within {PROBE_WAIT_S:.0f} s"
                print(f"the broker's requests are not counted: {why}", file=sys.stderr, flush=True)
            self.ready_s = time.monotonic() - began
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.box is not None:
            self.box.stop()
        if self.requests is not None:
            self.requests.stop()
        if self.worker is not None:
            self.worker.stop()
        # topics.yaml's topics start with the prefix, faust's changelogs with the group id;
        # the prefix is the group id plus a dot, so this finds both
        names = TopicAdmin(self.settings).names_with_prefix(self.settings.group_id)
        delete_topics(self.settings, names)

    def _bulk_subscriptions(self, count: int) -> None:
        """Subscriptions nobody's events match, written straight to the registry topic."""
        producer = make_producer(self.settings, **{"linger.ms": 50, "batch.size": 1_000_000})
        topic = self.settings.topic("subscriptions")
        secret = (Secret(generate_secret(os.urandom)),)
        now = int(time.time() * 1000)
        for i in range(count):
            # half in the benchmark's own tenant with other types, half in other tenants
            tenant = TENANT if i % 2 else f"tenant{i % 1000}"
            filters = (f"other{i}.created",) if i % 2 else ("order.*",)
            sub = Subscription(
                id=f"sub_bulk_{i}",
                tenant_id=tenant,
                name=f"bulk {i}",
                url=self.receiver.url,
                filters=filters,
                secrets=secret,
                created_at=now,
                updated_at=now,
            )
            _produce(producer, topic, sub.id, codec.encode(sub))
        _flush(producer)

    def _wait_ready(self) -> None:
        """Publish a probe event every second until one is delivered."""
        assert self.worker is not None
        producer = self.producer()
        deadline = time.monotonic() + self.config.ready_timeout_s
        wanted: set[str] = set()
        next_probe = 0.0
        while True:
            if not self.worker.alive():
                raise RuntimeError("the worker exited during start-up:\n" + self.worker.log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError("no probe delivery arrived in time:\n" + self.worker.log_tail())
            if time.monotonic() >= next_probe:
                event = make_event(f"{self.run_id}probe", self._probes, "order.probe")
                self._probes += 1
                wanted.update(self.delivery_ids(event))
                _produce(producer, self.settings.topic("events"), TENANT, _json(event), True)
                producer.flush(5)
                next_probe = time.monotonic() + 1.0
            self.receiver.log.poll()
            if any(key in self.receiver.log.received for key in wanted):
                return
            time.sleep(0.1)

    # --- helpers for phases ---------------------------------------------------------------
    def producer(self, **overrides: Any) -> Producer:
        return make_producer(self.settings, **{"linger.ms": 0, **overrides})

    @property
    def floor_hops(self) -> Path:
        """Where the floor relay writes its hop times (`bench.floor`)."""
        return self.settings.data_dir / "floor-hops.txt"

    @property
    def stage_clock(self) -> Path:
        """Where the worker writes its stage clock (`RigConfig.stage_clock`)."""
        return self.settings.data_dir / "stage-clock.txt"

    def others_cpu(self, start: float, end: float) -> dict[str, float | None]:
        """The broker's, nginx's and this process' (the publisher's) CPU (% of one core) and
        the whole box's (% of one core, summed over all cores) between two wall-clock times."""
        box = self.box
        assert box is not None  # set on entering the rig, before any phase
        return {
            "broker_cpu_percent": box.percent("broker", start, end),
            "nginx_cpu_percent": box.percent("nginx", start, end),
            "bench_cpu_percent": box.percent("bench", start, end),
            "box_cpu_percent": box.percent("box", start, end),
        }

    def broker_requests(
        self, start: float, end: float, deliveries_per_s: float
    ) -> dict[str, float]:
        """The broker's requests per delivery by kind, and their ``total``, between two
        wall-clock times; {} when they are not counted (`RigConfig.broker_requests`)."""
        if self.requests is None:
            return {}
        found = per_delivery(self.requests.per_second(start, end), deliveries_per_s)
        if not found:
            why = self.requests.error or "fewer than two samples in the window"
            print(f"the broker's requests were not counted: {why}", file=sys.stderr, flush=True)
        return found

    def delivery_ids(self, event: Event) -> list[str]:
        if self.config.floor:
            return [event.id]  # the floor labels each request with its event's id
        return [delivery_id(event.id, sub_id) for sub_id in self.sub_ids]

    def wait_delivered(self, ids: set[str], stall_s: float = 30.0) -> int:
        """Wait until every id arrived, or nothing new arrived for ``stall_s``; return found."""
        pending = set(ids)
        last_progress = time.monotonic()
        received = self.receiver.log.received
        while pending:
            if self.receiver.log.poll():
                last_progress = time.monotonic()
            pending = {key for key in pending if key not in received}
            if time.monotonic() - last_progress > stall_s:
                break
            if self.worker is not None and not self.worker.alive():
                raise RuntimeError("the worker died:\n" + self.worker.log_tail())
            time.sleep(0.2)
        return len(ids) - len(pending)


def stamp_appends(settings: Settings, names: tuple[str, ...]) -> None:
    """Make the broker stamp these topics' records with their append time."""
    topology = load_topology(settings)
    change = (ConfigChange("message.timestamp.type", None, "LogAppendTime"),)
    TopicAdmin(settings).alter_configs(ConfigAlter(topology.get(n), change) for n in names)


def produce_event(producer: Producer, topic: str, event: Event) -> None:
    """Publish one event to the ingest topic as a producer would (JSON, keyed by tenant)."""
    _produce(producer, topic, event.tenant_id, _json(event), True)


def _json(event: Event) -> bytes:
    return encode_json_event(event)


def _produce(
    producer: Producer, topic: str, key: str, value: bytes, json: bool = False, **kwargs: Any
) -> None:
    while True:
        try:
            producer.produce(
                topic,
                key=key.encode(),
                value=value,
                headers=JSON_HEADERS if json else None,
                **kwargs,
            )
            return
        except BufferError:
            producer.poll(0.05)


def _flush(producer: Producer) -> None:
    if producer.flush(60):
        raise RuntimeError("the benchmark's producer could not flush to Kafka within 60 s")


def throughput_phase(rig: Rig, events: int) -> dict[str, Any]:
    """Publish ``events`` as fast as possible; the receive rate over the steady window."""
    assert rig.worker is not None
    producer = rig.producer(**{"linger.ms": 20, "batch.size": 1_000_000})
    topic = rig.settings.topic("events")
    ids: list[str] = []
    started = time.time()
    for n in range(events):
        event = make_event(rig.run_id, n)
        ids.extend(rig.delivery_ids(event))
        _produce(producer, topic, TENANT, _json(event), True)
        if n % 5000 == 0:
            producer.poll(0)
    _flush(producer)
    published = time.time()
    rig.wait_delivered(set(ids))
    received = rig.receiver.log.received
    times = sorted(received[key] for key in ids if key in received)
    result: dict[str, Any] = {
        "events": events,
        "expected_deliveries": len(ids),
        "delivered": len(times),
        "duplicates": rig.receiver.log.duplicates(ids),
        "publish_s": published - started,
        "worker_ready_s": rig.ready_s,
    }
    if len(times) < 20:
        return result
    # steady window: after publishing ended, from the 5th to the 95th percentile of arrivals
    start = max(published, times[len(times) // 20])
    end = times[len(times) * 19 // 20]
    inside = sum(1 for t in times if start <= t <= end)
    result.update(
        {
            "deliveries_per_s": inside / max(end - start, 1e-3),
            "overall_per_s": len(times) / max(times[-1] - started, 1e-3),
            "steady_window_s": end - start,
            "worker_cpu_percent": rig.worker.cpu_percent(start, end),
            "worker_rss_mib": (rig.worker.peak_rss(start, end) or rig.worker.peak_rss()) / 2**20,
            **rig.others_cpu(start, end),
        }
    )
    result.update(per_delivery_us(result, result["deliveries_per_s"]))
    requests = rig.broker_requests(start, end, result["deliveries_per_s"])
    result.update(broker_requests=requests, **broker_figures(requests))
    return result
