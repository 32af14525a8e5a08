"""A hookstream worker's tables come back from their Kafka changelogs (SPEC §2, X4, D1).

The counting worker of `counter_app` runs as a real process against the real broker. The test
stops it with SIGTERM, deletes its local RocksDB state, restarts it and expects the same totals,
then produces more and expects them to add on top exactly once. Along the way it checks the
probes (/healthz, /readyz), the sized RocksDB options (SPEC §5, P6) and the JSON logs (O4).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.settings import Settings
from tests.conftest import REPO
from tests.integration.counter_app import INPUT_TOPIC, PARTITIONS

pytestmark = pytest.mark.integration

READY_DEADLINE = 30.0
STOP_DEADLINE = 20.0
KEYS = ("alpha", "beta", "gamma", "delta")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(port: int, path: str) -> tuple[int, Any]:
    """(status, decoded JSON body) of GET `path`; status 0 when nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def _produce(settings: Settings, first: int, count: int) -> dict[str, int]:
    """Produce `count` records and return the totals they add per key."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    totals: dict[str, int] = {}
    for number in range(first, first + count):
        key = KEYS[number % len(KEYS)]
        producer.produce(settings.topic(INPUT_TOPIC), key=key, value=json.dumps({"n": number}))
        totals[key] = totals.get(key, 0) + number
    assert producer.flush(10) == 0, "records still unsent after 10 s"
    return totals


def _add(*parts: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0) + value
    return total


@dataclass
class Worker:
    """One run of the counting worker as a child process."""

    settings: Settings
    log_dir: Path
    runs: int = 0
    process: subprocess.Popen[bytes] | None = None
    stderr_paths: list[Path] = field(default_factory=list)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
        env.update(
            HOOKSTREAM_KAFKA_BOOTSTRAP=self.settings.kafka_bootstrap,
            HOOKSTREAM_TOPIC_PREFIX=self.settings.topic_prefix,
            HOOKSTREAM_GROUP_ID=self.settings.group_id,
            HOOKSTREAM_DATA_DIR=str(self.settings.data_dir),
            HOOKSTREAM_WEB_PORT=str(self.settings.web_port),
            HOOKSTREAM_ROCKSDB_BLOCK_CACHE_MB=str(self.settings.rocksdb_block_cache_mb),
            HOOKSTREAM_ROCKSDB_WRITE_BUFFER_MB=str(self.settings.rocksdb_write_buffer_mb),
            HOOKSTREAM_LOG_LEVEL="INFO",
        )
        self.runs += 1
        stderr_path = self.log_dir / f"worker-{self.runs}.log"
        self.stderr_paths.append(stderr_path)
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.counter_app"],
                cwd=REPO,
                env=env,
                stdout=stderr,
                stderr=subprocess.STDOUT,
            )

    def log_tail(self) -> str:
        if not self.stderr_paths:
            return ""
        return self.stderr_paths[-1].read_text(errors="replace")[-4000:]

    def wait_ready(self) -> tuple[float, list[int]]:
        """Seconds from start until /readyz says 200, and every /readyz status seen on the way."""
        started = time.monotonic()
        seen: list[int] = []
        while time.monotonic() - started < READY_DEADLINE:
            assert self.process is not None and self.process.poll() is None, (
                f"worker exited early:\n{self.log_tail()}"
            )
            status, _ = _get(self.settings.web_port, "/readyz")
            if status:
                seen.append(status)
            if status == 200:
                return time.monotonic() - started, seen
            time.sleep(0.1)
        pytest.fail(f"worker not ready within {READY_DEADLINE} s:\n{self.log_tail()}")

    def wait_counts(self, expected: dict[str, int], deadline: float = 20.0) -> None:
        until = time.monotonic() + deadline
        counts: Any = None
        while time.monotonic() < until:
            _, counts = _get(self.settings.web_port, "/counts")
            if counts == expected:
                return
            time.sleep(0.2)
        pytest.fail(f"/counts is {counts}, expected {expected}:\n{self.log_tail()}")

    def stop(self) -> int:
        """SIGTERM, then the exit code; fails when the worker outlives STOP_DEADLINE."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still running {STOP_DEADLINE} s after SIGTERM:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _delete_topics(settings: Settings) -> None:
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    names = [
        name
        for name in admin.list_topics(timeout=10).topics
        if name.startswith((settings.topic_prefix, settings.group_id))
    ]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result()
    for future in admin.delete_consumer_groups([settings.group_id]).values():
        future.result()


@pytest.fixture
def counter_settings(make_settings: Callable[..., Settings]) -> Iterator[Settings]:
    """Settings of the counting worker; its topics and group are deleted afterwards."""
    settings = make_settings(
        web_port=_free_port(), rocksdb_block_cache_mb=3, rocksdb_write_buffer_mb=2
    )
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    topic = NewTopic(settings.topic(INPUT_TOPIC), num_partitions=PARTITIONS, replication_factor=1)
    for future in admin.create_topics([topic], operation_timeout=30).values():
        future.result()
    try:
        yield settings
    finally:
        _delete_topics(settings)


def _assert_json_logs(path: Path) -> None:
    """O4: every line the worker wrote is one JSON object with ts, level, logger and msg."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines, f"{path.name} is empty"
    for line in lines:
        record = json.loads(line)
        assert {"ts", "level", "logger", "msg"} <= record.keys(), line


def _assert_sized_rocksdb(tables_dir: Path) -> None:
    """§5/P6: each table partition opened with the sized caches, not the 2 GiB defaults."""
    partitions = sorted(tables_dir.glob("counts-*.db"))
    assert len(partitions) == PARTITIONS, sorted(tables_dir.iterdir())
    for partition in partitions:
        options = "".join(path.read_text() for path in partition.glob("OPTIONS-*"))
        assert f"write_buffer_size={2 * 1024 * 1024}\n" in options, partition
        assert "max_write_buffer_number=2\n" in options, partition
        assert "max_open_files=64\n" in options, partition
        assert f"capacity : {3 * 1024 * 1024}\n" in (partition / "LOG").read_text(), partition


def test_tables_recover_from_changelog_after_local_state_is_deleted(
    counter_settings: Settings,
) -> None:
    """X4/D1: SIGTERM exits 0, state comes back from Kafka alone, nothing is counted twice."""
    settings = counter_settings
    worker = Worker(settings, log_dir=settings.data_dir.parent)
    try:
        first = _produce(settings, 0, 200)

        worker.start()
        startup, statuses = worker.wait_ready()
        print(f"cold start to ready: {startup:.1f} s; /readyz statuses {statuses}")
        # the web server answers seconds before the group is joined: not ready until then
        assert set(statuses) <= {200, 503} and 503 in statuses, statuses
        assert _get(settings.web_port, "/healthz") == (200, {"status": "ok"})
        status, body = _get(settings.web_port, "/readyz")
        assert (status, body["status"], body["assigned"]) == (200, "ready", True)
        worker.wait_counts(first)
        assert worker.stop() == 0, worker.log_tail()
        _assert_json_logs(worker.stderr_paths[-1])

        _assert_sized_rocksdb(settings.tables_dir)
        shutil.rmtree(settings.tables_dir)

        worker.start()
        recovery, _ = worker.wait_ready()
        print(f"start with empty local state to ready: {recovery:.1f} s")
        worker.wait_counts(first, deadline=5.0)

        second = _produce(settings, 200, 100)
        worker.wait_counts(_add(first, second))
        time.sleep(2.0)  # a record counted twice would show up by now
        assert _get(settings.web_port, "/counts") == (200, _add(first, second))
        assert worker.stop() == 0, worker.log_tail()
        _assert_json_logs(worker.stderr_paths[-1])
    finally:
        worker.kill()
