"""The demo scenario: a local Kafka, the topics, a worker, four receivers, real deliveries.

Receivers: `healthy` (200), `flaky` (500 twice per delivery, then 200), `broken` (always 500)
and `gone` (always 404). The demo publishes events, waits until every delivery is settled, and
prints what happened: delivered, retried, dead-lettered, and signatures verified.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from streams.adapters.kafka_admin import apply_topics
from streams.adapters.local_kafka import LocalKafka
from streams.demo.receivers import DemoReceivers
from streams.domain.models import Event
from streams.services.events import publish_events
from streams.services.ledger import list_dead_letters
from streams.services.subscriptions import create_subscription
from streams.settings import Settings, load_settings

# name -> (behaviour, event-type filter, number of events of that type)
ENDPOINTS: dict[str, tuple[str, str, str]] = {
    "healthy": ("ok", "*", ""),
    "flaky": ("flaky", "order.*", "order.created"),
    "broken": ("fail", "invoice.*", "invoice.paid"),
    "gone": ("gone", "user.*", "user.signup"),
}
DEMO_OVERRIDES = {
    "topic_prefix": "demo.",
    "group_id": "hookstream-demo",
    "retry_schedule": "1s,2s,4s",
    "retry_window": "5m",
    "allow_private_destinations": True,
    "web_port": 6067,
}


@dataclass
class Summary:
    published: int
    expected_deliveries: int
    delivered: int
    attempts: int
    retried_then_delivered: int
    dead_lettered: dict[str, int]
    verified: int
    bad_signatures: int
    seconds: float


def demo_settings() -> Settings:
    return load_settings(**DEMO_OVERRIDES)


def _worker_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
            "HOOKSTREAM_GROUP_ID": settings.group_id,
            "HOOKSTREAM_DATA_DIR": str(settings.data_dir.resolve()),
            "HOOKSTREAM_RETRY_SCHEDULE": "1s,2s,4s",
            "HOOKSTREAM_RETRY_WINDOW": "5m",
            "HOOKSTREAM_ALLOW_PRIVATE_DESTINATIONS": "true",
            "HOOKSTREAM_WEB_PORT": str(settings.web_port),
            "HOOKSTREAM_TOPICS_FILE": str(settings.topics_file.resolve()),
        }
    )
    return env


def start_worker(settings: Settings) -> subprocess.Popen[bytes]:
    """`hookstream worker` in a child process, logging to the data dir."""
    log_path = settings.data_dir / "demo-worker.log"
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],
            env=_worker_env(settings),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


def _events(per_type: int, run_id: str) -> list[Event]:
    now = int(time.time() * 1000)
    types = [t for _, _, t in ENDPOINTS.values() if t]
    return [
        Event(
            id=f"evt_{run_id}_{etype}_{i}",
            tenant_id="demo",
            type=etype,
            timestamp=now,
            data_json=orjson.dumps({"n": i, "kind": etype}).decode(),
            published_at=now,
        )
        for etype in types
        for i in range(per_type)
    ]


async def _wait_settled(
    settings: Settings,
    receivers: DemoReceivers,
    per_type: int,
    since_ms: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[str, int]:
    total_types = sum(1 for _, _, t in ENDPOINTS.values() if t)
    want_delivered = {"healthy": per_type * total_types, "flaky": per_type}
    want_dead = per_type * 2  # broken (exhausted) and gone (404)
    deadline = time.monotonic() + timeout_s
    dead: dict[str, int] = {}
    while time.monotonic() < deadline:
        await asyncio.sleep(2)
        done = {n: len(receivers.endpoints[n].delivered) for n in want_delivered}
        letters = await asyncio.to_thread(list_dead_letters, settings, None, None, since_ms)
        dead = {}
        for letter in letters:
            key = letter.reason.split(":")[0]
            dead[key] = dead.get(key, 0) + 1
        say(f"  delivered {done}  dead-lettered {sum(dead.values())}/{want_dead}")
        if done == want_delivered and sum(dead.values()) >= want_dead:
            break
    return dead


async def run_demo(per_type: int, say: Callable[[str], None], keep_running: bool) -> Summary:
    settings = demo_settings()
    began = time.monotonic()
    kafka = LocalKafka(settings, say=say)
    started = kafka.start()
    say(f"kafka ready at {started.bootstrap} ({started.seconds:.1f}s)")
    plan = apply_topics(settings)
    say(f"topics: {'created/updated' if plan.has_changes else 'up to date'} (prefix demo.)")
    receivers = DemoReceivers()
    await receivers.start()
    for name, (behaviour, _, _) in ENDPOINTS.items():
        receivers.add(name, behaviour)
    for name, (_, pattern, _) in ENDPOINTS.items():
        sub = await asyncio.to_thread(
            create_subscription,
            settings,
            {"tenant_id": "demo", "name": name, "url": receivers.url(name), "filters": [pattern]},
            subscription_id=f"sub_demo_{name}",
        )
        receivers.endpoints[name].secret = sub.secrets[0].value
        say(f"subscription {sub.id}: {pattern:<10} -> {sub.url}")
    worker = start_worker(settings)
    say(f"worker started (pid {worker.pid}); log in {settings.data_dir / 'demo-worker.log'}")
    try:
        run_id = uuid.uuid4().hex[:8]
        since_ms = int(time.time() * 1000)
        events = _events(per_type, run_id)
        await asyncio.to_thread(publish_events, settings, events)
        say(f"published {len(events)} events; waiting for every delivery to settle")
        dead = await _wait_settled(settings, receivers, per_type, since_ms, 180, say)
        eps = receivers.endpoints
        return Summary(
            published=len(events),
            expected_deliveries=len(events) + per_type * 3,
            delivered=sum(len(e.delivered) for e in eps.values()),
            attempts=sum(e.requests for e in eps.values()),
            retried_then_delivered=len(eps["flaky"].delivered),
            dead_lettered=dead,
            verified=sum(e.verified for e in eps.values()),
            bad_signatures=sum(e.bad_signatures for e in eps.values()),
            seconds=time.monotonic() - began,
        )
    finally:
        worker.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(30)
        if worker.poll() is None:
            worker.kill()
        await receivers.stop()
        if not keep_running and not started.already_running:
            kafka.stop()
            say("kafka stopped (pass --keep-kafka to leave it running)")
