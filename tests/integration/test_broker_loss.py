"""A worker that loses its broker says so, quietly, comes back with it, and stops promptly (D1, X4).

The test runs a broker of its own (`LocalKafka` on free ports and its own data dir, as the chaos
run does), never the shared one, and a real `hookstream worker` on it. With the broker stopped
the worker reports not-ready on /readyz and writes a few lines, not hundreds (hookstream's own
"lost" line once, then a reminder at most every few seconds; aiokafka's and librdkafka's
reconnect lines throttled). When the broker returns the worker is ready again and delivers. With
the broker gone again, SIGTERM stops it within 10 s and without a traceback. The broker's jars
come from the default local broker's cache, or from ``HOOKSTREAM_CHAOS_JARS``, as for the chaos
test.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chaos.cluster import default_jars_dir, free_port_pair
from streams.adapters.kafka_admin import apply_topics
from streams.adapters.local_kafka import LocalKafka
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings, load_settings
from tests.conftest import REPO, TEST_SECRET_KEY
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess
from tests.receivers import Receiver, Respond

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

DOWN_WINDOW_S = 30.0  # how long the broker stays away while the log is counted
#: at most this many worker log lines while the broker is away for DOWN_WINDOW_S: a line per
#: 10 s from each library (aiokafka, librdkafka, faust's transport) and hookstream's own
#: loss line and reminder, not thousands a second
MAX_LINES_DOWN = 15
STOP_DEADLINE_S = 10.0


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[tuple[LocalKafka, Settings]]:
    port = free_port_pair()
    run = uuid.uuid4().hex[:8]
    settings = load_settings(
        kafka_bootstrap=f"127.0.0.1:{port}",
        topic_prefix=f"loss{run}.",
        group_id=f"loss{run}",
        data_dir=tmp_path / "runner",
        topics_file=REPO / "topics.yaml",
        allow_private_destinations=True,
        secret_key=TEST_SECRET_KEY,
        retry_schedule="1s,2s",
        retry_window="2m",
    )
    broker_settings = load_settings(
        kafka_bootstrap=settings.kafka_bootstrap, data_dir=tmp_path / "broker"
    )
    jars = Path(os.environ.get("HOOKSTREAM_CHAOS_JARS") or default_jars_dir())
    kafka = LocalKafka(broker_settings, jars_dir=jars, ready_timeout=240.0)
    kafka.start()
    try:
        apply_topics(settings)
        yield kafka, settings
    finally:
        kafka.stop()


def _wait(
    predicate: Callable[[], bool], timeout_s: float, what: str, tail: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s}s:\n{tail()}")


def _ready(worker: WorkerProcess) -> bool | None:
    try:
        return worker.get("/readyz").status_code == 200
    except Exception:
        return None


def _lines(worker: WorkerProcess) -> list[str]:
    return worker.log_path.read_text(errors="replace").splitlines()


def test_D1_a_worker_survives_losing_its_broker_quietly_and_stops_promptly(
    own_broker: tuple[LocalKafka, Settings],
    tmp_path: Path,
    receiver_factory: Callable[..., Receiver],
) -> None:
    kafka, settings = own_broker
    receiver = receiver_factory()
    create_subscription(
        settings,
        {"tenant_id": "acme", "url": receiver.route("/ok", Respond(200)), "filters": ["*"]},
    )
    worker = WorkerProcess(settings, "worker", tmp_path).start()
    try:
        worker.wait_ready(180)
        publish_events(settings, [make_event("acme", "order.created", 0)])
        _wait(lambda: len(receiver.requests) >= 1, 60, "the first delivery", worker.tail)

        # --- the broker goes away: not ready, and a quiet log -------------------------------
        kafka.stop()
        _wait(lambda: _ready(worker) is False, 60, "/readyz reporting not ready", worker.tail)
        before = len(_lines(worker))
        time.sleep(DOWN_WINDOW_S)
        assert _ready(worker) is False
        during = _lines(worker)[before:]
        assert len(during) <= MAX_LINES_DOWN, "\n".join(during[-60:])
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
        text = "\n".join(_lines(worker))
        assert "kafka broker unreachable" in text, worker.tail()

        # --- it comes back: ready again, and deliveries resume ------------------------------
        kafka.start()
        _wait(
            lambda: _ready(worker) is True,
            180,
            "/readyz ready after the broker returned",
            worker.tail,
        )
        assert "kafka broker reachable again" in "\n".join(_lines(worker))
        publish_events(settings, [make_event("acme", "order.created", 1)])
        _wait(lambda: len(receiver.requests) >= 2, 120, "a delivery after the return", worker.tail)

        # --- gone again, SIGTERM: out within 10 s, no traceback -----------------------------
        kafka.stop()
        _wait(lambda: _ready(worker) is False, 60, "/readyz not ready (second loss)", worker.tail)
        stop_from = len(_lines(worker))
        assert worker.proc is not None
        began = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        code = worker.proc.wait(60)
        took = time.monotonic() - began
        after = "\n".join(_lines(worker)[stop_from:])
        assert took <= STOP_DEADLINE_S, f"stopped in {took:.1f}s:\n{after[-3000:]}"
        assert "Traceback" not in after, after[-3000:]
        assert code == 0, after[-3000:]
    finally:
        worker.stop(15)
