"""The real local development broker: start, status, a harmless second start, stop (SPEC X2).

Each test runs its own broker on a free port pair with its own data dir, never the shared
development broker. The jar cache is shared by the session, so Maven resolves the jars once.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.adapters.local_kafka import LocalKafka, port_is_free
from streams.cli.main import cli, main
from streams.errors import LocalKafkaError
from streams.settings import Settings, load_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def jar_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("local-kafka") / "jars"


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port < 65535 and port_is_free("127.0.0.1", port + 1):
            return port
    raise AssertionError("no free port pair on 127.0.0.1")


def _settings(tmp_path: Path, port: int) -> Settings:
    return load_settings(kafka_bootstrap=f"127.0.0.1:{port}", data_dir=tmp_path / "data")


def _cli_status(settings: Settings) -> tuple[int, str]:
    env = {
        "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "HOOKSTREAM_DATA_DIR": str(settings.data_dir),
    }
    result = CliRunner().invoke(cli, ["kafka", "status"], env=env)
    return result.exit_code, result.output


def _create_and_list(bootstrap: str, topic: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    futures[topic].result(timeout=30)
    # KRaft answers CreateTopics once the controller has the topic; the broker's metadata
    # cache learns it a moment later, so a list right away may not show it yet.
    deadline = time.monotonic() + 15
    while True:
        topics = set(admin.list_topics(timeout=10).topics)
        if topic in topics or time.monotonic() > deadline:
            return topics
        time.sleep(0.2)


def test_X2_broker_lifecycle(tmp_path: Path, jar_cache: Path) -> None:
    settings = _settings(tmp_path, _free_port_pair())
    local = LocalKafka(settings, jars_dir=jar_cache)
    try:
        first = local.start()
        assert not first.already_running
        assert first.bootstrap == settings.kafka_bootstrap
        state = local.status()
        assert (state.running, state.answering, state.pid) == (True, True, first.pid)
        assert _cli_status(settings)[0] == 0
        assert "hookstream.x2" in _create_and_list(first.bootstrap, "hookstream.x2")

        second = local.start()  # harmless: finds the running broker
        assert second.already_running
        assert second.pid == first.pid

        stopped = local.stop()
        assert stopped.was_running and not stopped.killed
        assert local.running_pid() is None
        assert not local.status().answering
        code, output = _cli_status(settings)
        assert code == 3, output
        assert local.stop().was_running is False
        assert (local.log_dirs / "meta.properties").is_file()  # formatted, kept for next start
    finally:
        local.stop()
    assert local.running_pid() is None


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_X2_the_first_clean_stop_keeps_a_class_archive_that_later_starts_map(
    tmp_path: Path, jar_cache: Path
) -> None:
    """`streams.adapters.kafka_cds`: a real broker writes the archive as it exits, and the next
    start maps it and serves as before; the broker's log stays free of the JVM's CDS lines."""
    settings = _settings(tmp_path, _free_port_pair())
    local = LocalKafka(settings, jars_dir=jar_cache)
    local.resolve_jars()
    for old in jar_cache.glob("classes-*.jsa"):  # another test's broker may have made it
        old.unlink()
    try:
        first = local.start()
        dumping = [a for a in _cmdline(first.pid) if a.startswith("-XX:ArchiveClassesAtExit=")]
        assert len(dumping) == 1, _cmdline(first.pid)
        assert not local.stop().killed
        archives = list(jar_cache.glob("classes-*.jsa"))
        assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000
        assert list(jar_cache.glob("*.part")) == []

        second = local.start()
        assert f"-XX:SharedArchiveFile={archives[0]}" in _cmdline(second.pid)
        assert "hookstream.x2cds" in _create_and_list(second.bootstrap, "hookstream.x2cds")
        assert not local.stop().killed
    finally:
        local.stop()
    logs = local.log_path.read_text() + local.log_path.with_name("kafka.log.1").read_text()
    assert "[cds]" not in logs
    assert "Kafka Server started" in logs


@pytest.mark.parametrize("taken", ["client", "controller"])
def test_X2_taken_port_is_one_clear_error(
    tmp_path: Path,
    jar_cache: Path,
    taken: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = _free_port_pair()
    busy = port if taken == "client" else port + 1
    settings = _settings(tmp_path, port)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", busy))
        squatter.listen()
        with pytest.raises(LocalKafkaError, match=f"port {busy} on 127.0.0.1 is already in use"):
            LocalKafka(settings, jars_dir=jar_cache).start()

        monkeypatch.setenv("HOOKSTREAM_KAFKA_BOOTSTRAP", settings.kafka_bootstrap)
        monkeypatch.setenv("HOOKSTREAM_DATA_DIR", str(settings.data_dir))
        monkeypatch.setattr(sys, "argv", ["hookstream", "kafka", "start"])
        with pytest.raises(SystemExit) as exited:
            main()
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: port {busy} on 127.0.0.1 is already in use")
    assert "\n" not in err
