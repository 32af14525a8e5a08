"""A backfill survives kill -9 of its worker: it resumes, it does not restart from zero (R2)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.adapters.kafka_admin import apply_topics
from streams.adapters.ssrf import guarded_transport
from streams.domain.idempotency import delivery_id
from streams.domain.models import SubscriptionStatus
from streams.services import recovery
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription, load_registry
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import REPO, settings_env
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

EVENTS = 80
RATE = 10.0


def _child(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.recovery_child"],
            env=settings_env(settings),
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s}s"
        await asyncio.sleep(0.1)


async def test_r2_backfill_resumes_after_kill_9_without_restarting(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))
    settings = make_settings()
    await asyncio.to_thread(apply_topics, settings)
    sub = await asyncio.to_thread(create_subscription, settings, {"tenant_id": "acme", "url": url})

    from streams.services.subscriptions import _save  # the control agent's write (H3)

    suspended = dataclasses.replace(
        sub, status=SubscriptionStatus.SUSPENDED, status_reason="auto_suspend:fatal:3",
        suspended_at=int(time.time() * 1000), updated_at=sub.updated_at + 1,
    )  # fmt: skip
    await asyncio.to_thread(_save, settings, suspended)
    events = [make_event("acme", "order.created", n) for n in range(EVENTS)]
    log = tmp_path / "child.log"
    child = _child(settings, log)
    try:
        await _wait(lambda: "ready" in log.read_text(errors="replace"), 60, "child ready")
        await asyncio.to_thread(publish_events, settings, events)
        await asyncio.sleep(2)
        transport = guarded_transport(settings, body_cap=settings.response_body_cap)
        try:
            result = await recovery.reenable(
                settings, sub.id, transport, source=load_registry(settings), rate=RATE
            )
        finally:
            await transport.aclose()
        assert result.ok, result.probe
        await _wait(lambda: len(receiver.requests) >= 1 + EVENTS // 2, 60, "half the backfill")
        child.kill()  # kill -9 halfway
        child.wait(10)
        before = len(receiver.requests) - 1
        child = _child(settings, log)
        expected = {delivery_id(e.id, sub.id) for e in events}

        def complete() -> bool:
            return expected <= {r.headers["webhook-id"] for r in receiver.requests}

        await _wait(complete, 120, f"the whole backfill\n{log.read_text()[-3000:]}")
        await asyncio.sleep(2)
    finally:
        child.kill()
        child.wait(10)
    counts = Counter(r.headers["webhook-id"] for r in receiver.requests[1:])  # after the probe
    duplicates = sum(n - 1 for n in counts.values())
    assert set(counts) == expected, "every event delivered at least once"
    # Resumed from the last checkpoint (about a second, RATE records) plus the deliveries the
    # dispatcher had not committed; a restart from zero would repeat all `before` of them.
    assert duplicates <= 2 * RATE, (duplicates, before)
    assert duplicates < before
