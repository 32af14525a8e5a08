"""The recovery scenario: suspended, fixed, re-enabled behind a probe, backfilled (R1, R2).

Needs a running broker (`hookstream kafka start`). Run with ``python -m streams.demo.recovery``.

1. A worker runs with a strict suspension policy; a subscription points at an endpoint that
   answers 404, so a few events get it suspended by the health agent (H3).
2. More events arrive while it is suspended: they wait in the archive (H4).
3. A first re-enable is refused: the probe hits the still-broken endpoint (R1).
4. The endpoint is fixed; the second re-enable's probe passes and the backfill delivers the
   missed events, paced, with their webhook-ids (R2, D2).

The backfill runner runs in this process next to the worker (the worker runs it too once it is
registered as a worker component); the worker's dispatcher delivers what it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.adapters.local_kafka import LocalKafka
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.secretbox import local_key
from streams.adapters.ssrf import guarded_transport
from streams.agents.ledger import standalone
from streams.demo.receivers import DemoReceivers
from streams.demo.run import DEMO_POLICY
from streams.demo.state import start_worker, stop_worker
from streams.domain.idempotency import delivery_id
from streams.domain.models import Event, SubscriptionStatus
from streams.errors import HookstreamError
from streams.lanes.backfill import BackfillRunner
from streams.services import recovery
from streams.services.config import set_policy
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription, get_subscription
from streams.settings import Settings, load_settings

BEFORE, DURING = 8, 20
RATE = 5.0


def scenario_settings() -> Settings:
    run = uuid.uuid4().hex[:6]
    # Its names must not start with the demo's ("demo." and "hookstream-demo"): a `hookstream
    # demo` started meanwhile deletes everything under those prefixes, groups included.
    return local_key(
        load_settings(
            topic_prefix=f"recovery-{run}.",
            group_id=f"hookstream-recovery-{run}",
            retry_schedule="1s,2s",
            retry_window="1m",
            allow_private_destinations=True,
            web_port=6068,
        )
    )


def _events(run: str, first: int, count: int) -> list[Event]:
    now = int(time.time() * 1000)
    return [
        Event(
            id=f"evt_{run}_{n}",
            tenant_id="demo",
            type="invoice.paid",
            timestamp=now,
            data_json=orjson.dumps({"n": n}).decode(),
            published_at=now,
        )
        for n in range(first, first + count)
    ]


async def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


def _status(settings: Settings, sub_id: str) -> tuple[SubscriptionStatus, str | None]:
    sub = get_subscription(settings, sub_id)
    return sub.status, sub.status_reason


async def run_scenario(settings: Settings, say: Callable[[str], None]) -> bool:
    """Run the whole story; True when every missed event arrived after the re-enable."""
    apply_topics(settings)
    receivers = DemoReceivers()
    await receivers.start()
    endpoint = await receivers.add("shop", "gone")
    await asyncio.to_thread(set_policy, settings, DEMO_POLICY)
    sub = await asyncio.to_thread(
        create_subscription,
        settings,
        {"tenant_id": "demo", "name": "shop", "url": receivers.url("shop"),
         "filters": ["invoice.*"], "rate_limit": RATE},
    )  # fmt: skip
    endpoint.secret = sub.secrets[0].value
    worker = start_worker(settings)
    stop = asyncio.Event()
    registry = SubscriptionRegistry(settings)
    ledger = standalone(settings, settings.data_dir / "demo-ledger")
    runner = BackfillRunner(settings, registry, ledger)
    tasks = [asyncio.create_task(registry.run(stop)), asyncio.create_task(runner.run(stop))]
    transport = guarded_transport(settings, body_cap=settings.response_body_cap)
    run = uuid.uuid4().hex[:6]
    try:
        say(f"1. {sub.id} -> {sub.url} answers 404; policy {DEMO_POLICY}")
        await asyncio.sleep(8)  # the worker joins its groups
        await asyncio.to_thread(publish_events, settings, _events(run, 0, BEFORE))

        def suspended() -> bool:
            return _status(settings, sub.id)[0] is SubscriptionStatus.SUSPENDED

        await _until(suspended, 90, "the suspension")
        say(f"   suspended: {_status(settings, sub.id)[1]}")
        missed = _events(run, BEFORE, DURING)
        await asyncio.to_thread(publish_events, settings, missed)
        say(f"2. {DURING} events published while suspended: they wait in the archive")
        refused = await recovery.reenable(settings, sub.id, transport)
        say(f"3. re-enable with the endpoint still broken: probe {refused.probe.outcome} "
            f"(HTTP {refused.probe.status}) -> {refused.subscription.status_reason}")  # fmt: skip
        endpoint.behaviour = "ok"
        result = await recovery.reenable(settings, sub.id, transport)
        say(f"4. endpoint fixed; re-enable: probe {result.probe.outcome}, backfill "
            f"{result.job_id} at {RATE:g}/s, from {settings.reenable_settle:g}s on (the "
            "workers take the active version meanwhile)")  # fmt: skip
        began = time.monotonic()
        wanted = {delivery_id(e.id, sub.id) for e in missed}
        await _until(lambda: wanted <= endpoint.delivered, 120, "the backfill")
        took = time.monotonic() - began
        say(f"   backfill delivered {len(wanted)} missed events in {took:.1f}s, same "
            f"webhook-ids, signatures verified {endpoint.verified}, bad "
            f"{endpoint.bad_signatures}")  # fmt: skip
        return endpoint.bad_signatures == 0
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
        await transport.aclose()
        await asyncio.to_thread(ledger.close)
        stop_worker(settings, worker)
        await receivers.stop()
        names = [spec.full_name for spec in load_topology(settings).topics]
        await asyncio.to_thread(delete_topics, settings, names)


def main() -> None:
    ok = asyncio.run(run_scenario(scenario_settings(), print))
    sys.exit(0 if ok else 1)


def run_recovery(
    say: Callable[[str], None], run: Callable[[Coroutine[Any, Any, bool]], bool] = asyncio.run
) -> None:
    """The recovery scenario (R1, R2) on the local broker, which it starts if needed; ``run``
    runs its coroutine (the CLI's also stops it on SIGTERM)."""
    settings = scenario_settings()
    started = LocalKafka(settings, say=say).start()
    say(f"kafka ready at {started.bootstrap} ({started.seconds:.1f}s)")
    if not run(run_scenario(settings, say)):
        raise HookstreamError("the recovery scenario did not complete; see the lines above")


if __name__ == "__main__":
    main()
