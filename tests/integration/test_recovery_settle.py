"""A re-enable's backfill reaches past it, for the routers that have not seen it yet (D1, R2).

The active version of a re-enabled subscription reaches each worker's registry through the
`subscriptions` topic: milliseconds later on one healthy worker, seconds later on a fleet
whose broker fails over. A router that has not applied it yet still skips the subscription.
The cluster's recovery scenario lost such an event, archived 396 ms after a re-enable, when the
backfill's window ended at the re-enable. Here the router's view is held back on purpose.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from streams.adapters.registry import SubscriptionRegistry
from streams.domain.idempotency import delivery_id
from streams.domain.models import Subscription
from streams.services import recovery
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.recovery_support import runner, suspend
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration


class LaggingView:
    """The registry as a router sees it before the re-enabled version has reached it."""

    def __init__(self, registry: SubscriptionRegistry, hidden: str) -> None:
        self._registry = registry
        self._hidden = hidden
        self.lagging = True

    def match(self, tenant_id: str, event_type: str) -> list[Subscription]:
        found = self._registry.match(tenant_id, event_type)
        return [s for s in found if not (self.lagging and s.id == self._hidden)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)


async def test_r2_events_a_lagging_router_skipped_after_the_reenable_are_backfilled_once(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """Three kinds of event, each must reach the endpoint exactly once:
    - S, published while it is suspended: the backfill's window before the re-enable;
    - L, archived after the re-enable by a router that still skips it: the settle time;
    - F, routed live once the router has the version, inside the settle time too: the live
      path delivers it and the backfill does not send it again."""
    receiver = receiver_factory()
    url = receiver.route("/back", Respond(200))
    marker_url = receiver.route("/marker", Respond(200))
    settings = make_settings(reenable_settle="6s")
    async with PipelineHarness(settings) as h, runner(h) as running:
        sub = await h.subscribe(url, ["invoice.*"])
        await h.subscribe(marker_url, ["marker.*"])
        sub = await suspend(h, sub, int(time.time() * 1000))
        suspended = [make_event("acme", "invoice.paid", n, "s") for n in range(3)]
        await h.publish(suspended)
        view = LaggingView(h.pipeline.registry, sub.id)
        assert h.pipeline.router is not None
        h.pipeline.router._registry = view  # type: ignore[assignment]  # the fault

        assert h.pipeline.transport is not None
        result = await recovery.reenable(h.settings, sub.id, h.pipeline.transport, rate=50)
        assert result.ok, result.probe
        assert result.window is not None
        assert result.window.end_ms == result.subscription.updated_at + 6000

        lagged = [make_event("acme", "invoice.paid", n, "l") for n in range(3)]
        await h.publish([*lagged, make_event("acme", "marker.seen", 1, "l")])
        # the marker is behind them on the tenant's partition: once it is delivered, the
        # router has archived the lagged events and skipped the subscription for them
        await h.wait_for(lambda: len(receiver.requests_to("/marker")) >= 1, 30)
        assert len(receiver.requests_to("/back")) == 1  # the probe only
        view.lagging = False
        fresh = [make_event("acme", "invoice.paid", n, "f") for n in range(3)]
        await h.publish(fresh)
        await h.wait_for(lambda: len(receiver.requests_to("/back")) >= 4, 30)
        assert time.time() * 1000 < result.window.end_ms, "the live copies came after the window"

        await h.wait_for(lambda: running.finished_jobs >= 1, 90)
        await asyncio.sleep(2)  # a second copy would arrive now
        progress = await asyncio.to_thread(recovery.backfill_progress, settings, sub.id)
    got = Counter(
        r.headers["webhook-id"] for r in receiver.requests_to("/back") if b"invoice.paid" in r.body
    )
    expected = {delivery_id(e.id, sub.id): 1 for e in suspended + lagged + fresh}
    assert got == Counter(expected), {
        "missing": sorted(set(expected) - set(got)),
        "twice": sorted(k for k, n in got.items() if n > 1),
    }
    assert progress is not None
    assert progress["state"] == "finished" and progress["done"] == progress["total"] == 9
