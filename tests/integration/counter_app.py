"""A test-only hookstream worker that counts, so table state can be observed from outside.

It consumes ``<prefix>counter-input`` (3 partitions, created by the test: hookstream never
creates the topics it consumes), adds each JSON value's ``n`` to a changelog-backed table under
the record's key, and serves the table at ``/counts``. Run it as a process, configured through the
HOOKSTREAM_* environment variables::

    python -m tests.integration.counter_app
"""

from __future__ import annotations

from typing import Any

import faust

from streams.app import create_app, run_worker
from streams.settings import Settings, load_settings

INPUT_TOPIC = "counter-input"
PARTITIONS = 3


def register_counter(app: faust.App, settings: Settings) -> None:
    """The counting agent, its `counts` table and the `/counts` view."""
    topic = app.topic(
        settings.topic(INPUT_TOPIC),
        key_type=bytes,
        key_serializer="raw",
        value_serializer="json",
        partitions=PARTITIONS,
    )
    counts = app.Table("counts", default=int, partitions=PARTITIONS)

    @app.agent(topic)
    async def count(stream: Any) -> None:
        async for key, value in stream.items():
            counts[key.decode()] += int(value["n"])

    @app.page("/counts")
    async def show_counts(web: Any, request: Any) -> Any:
        return web.json(dict(counts.items()))


def main() -> None:
    settings = load_settings()
    run_worker(create_app(settings, components=[register_counter]), settings)


if __name__ == "__main__":
    main()
