"""The Faust agents' consumer fetches in batches (SPEC P2, §5: fewer per-record stages).

`create_app` gives every worker `PacedFetchTransport`; its consumer thread builds the aiokafka
consumer with the settings' fetch size and wait. No broker is needed: nothing here starts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from streams.adapters.agent_fetch import (
    PacedFetchConsumerThread,
    PacedFetchTransport,
    apply_fetch_pacing,
)
from streams.app import DEFAULT_COMPONENTS, create_app
from streams.settings import load_settings
from tests.conftest import REPO


def test_p2_worker_app_builds_its_agents_consumer_with_the_fetch_settings(tmp_path: Path) -> None:
    async def build() -> tuple[Any, Any, Any]:
        settings = load_settings(
            data_dir=tmp_path,
            topics_file=REPO / "topics.yaml",
            agent_fetch_min_bytes=12345,
            agent_fetch_wait="250ms",
        )
        app = create_app(settings, DEFAULT_COMPONENTS)
        thread = cast(Any, app.consumer)._thread
        consumer = thread._create_worker_consumer(app.transport)
        try:
            return app.transport, thread, consumer
        finally:
            await consumer.stop()
            thread.thread_loop.close()  # the thread never ran, so it did not close its loop

    transport, thread, consumer = asyncio.run(build())
    assert isinstance(transport, PacedFetchTransport)
    assert isinstance(thread, PacedFetchConsumerThread)
    assert (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms) == (12345, 250)


def test_p2_pacing_refuses_a_consumer_without_the_fetch_attributes() -> None:
    with pytest.raises(RuntimeError, match="_fetch_min_bytes"):
        apply_fetch_pacing(object(), 1, 1)
