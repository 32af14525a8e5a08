"""R4: resetting the dispatcher's group to a datetime redelivers, with the same webhook-ids."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.cli.replay import replay
from streams.domain.idempotency import delivery_id
from streams.errors import ConflictError
from streams.lanes.pipeline import Pipeline
from streams.services.offset_reset import reset_offsets
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.workers import settings_env
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration


async def test_r4_reset_to_a_datetime_redelivers_the_same_webhook_ids(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))
    settings = make_settings()
    async with PipelineHarness(settings) as h:
        sub = await h.subscribe(url, ["*"])
        before = int(time.time() * 1000)
        await asyncio.sleep(1)
        events = [make_event("acme", "order.created", n) for n in range(6)]
        await h.publish(events)
        await h.wait_for(lambda: len(receiver.requests) >= 6, 30)
        with pytest.raises(ConflictError, match="active member"):
            await asyncio.to_thread(reset_offsets, settings, "dispatch", before)
        await h.pipeline.stop()  # the workers stop first
        # the group's members leave on close; Kafka may take a moment to show it empty
        deadline = time.monotonic() + 30
        while True:
            try:
                moves = await asyncio.to_thread(reset_offsets, settings, "dispatch", before)
                break
            except ConflictError:
                assert time.monotonic() < deadline
                await asyncio.sleep(1)
        routed = [m for m in moves if m.topic == settings.topic("routed")]
        assert sum((m.current or 0) - m.target for m in routed) == 6
        h.pipeline = Pipeline(settings)
        await h.pipeline.start()
        await h.pipeline.wait_ready(60)
        await h.wait_for(lambda: len(receiver.requests) >= 12, 60)
    expected = {delivery_id(e.id, sub.id) for e in events}
    counts = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert counts == Counter({key: 2 for key in expected}), "same keys again (D2)"


def test_r4_cli_dry_run_shows_the_moves_and_refuses_a_bad_group(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    apply_topics(settings)
    try:
        env = settings_env(settings)
        args = ["--reset-offsets", "--to-datetime", "2020-01-01T00:00:00Z", "--dry-run"]
        done = CliRunner().invoke(replay, [*args, "--group", "router"], env=env)
        assert done.exit_code == 0, done.output
        assert f"{settings.topic('events')}[0]" in done.output and "would move" in done.output
        bad = CliRunner().invoke(replay, [*args, "--group", "nope"], env=env)
        assert bad.exit_code != 0
    finally:
        delete_topics(settings, [t.full_name for t in load_topology(settings).topics])
