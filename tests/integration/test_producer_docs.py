"""docs/producers.md's Python examples publish events hookstream accepts (SPEC section 4, Q2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from streams.adapters.ingest import decode_ingest_event
from streams.adapters.kafka_clients import make_consumer
from streams.domain.models import Event
from streams.settings import Settings
from tests.conftest import REPO

pytestmark = pytest.mark.integration

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_examples() -> list[str]:
    return [str(m.group(1)) for m in _BLOCK.finditer((REPO / "docs/producers.md").read_text())]


def test_producer_docs_examples_publish_valid_events(
    make_settings: Callable[..., Settings], make_topic: Callable[[str, int], str]
) -> None:
    """Each Python example runs as written and its event passes ingest validation."""
    settings = make_settings()
    topic = make_topic(settings.topic("events"), 1)
    examples = python_examples()
    assert len(examples) == 2, "docs/producers.md should hold the JSON and the Avro example"
    env = {
        **os.environ,
        "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
    }
    for code in examples:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    consumer = make_consumer(settings, "docs")
    consumer.assign([TopicPartition(topic, 0, 0)])
    events: list[Event] = []
    deadline = time.monotonic() + 30
    while len(events) < 2 and time.monotonic() < deadline:
        for msg in consumer.consume(10, 0.5):
            if msg.error() is not None:
                continue
            # confluent-kafka types headers loosely; a consumed record holds (name, bytes) pairs
            pairs: list[tuple[str, bytes]] = list(msg.headers() or [])  # type: ignore[arg-type]
            found = [v for k, v in pairs if k == "content-type"]
            content_type = bytes(found[0]).decode() if found and found[0] else None
            events.append(decode_ingest_event(msg.value() or b"", content_type, 0))
            assert msg.key() == b"acme"
    consumer.close()
    assert [(e.id, e.type) for e in events] == [
        ("evt_1001", "invoice.paid"),
        ("evt_1003", "invoice.paid"),
    ]
