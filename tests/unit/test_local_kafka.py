"""The local development broker's plumbing without a JVM (SPEC X2, section 5).

Java and Maven are replaced by small scripts on PATH, so these tests run in well under a second
and exercise the same start/stop code that drives the real broker.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.adapters.kafka_jars import JARS_MARKER, default_pom_path, jars_complete, pom_digest
from streams.adapters.local_kafka import (
    Endpoint,
    LocalKafka,
    parse_bootstrap,
    port_is_free,
    render_server_properties,
)
from streams.cli.main import cli
from streams.errors import ConfigError, LocalKafkaError
from streams.settings import Settings, load_settings

REPO_POM = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "pom.xml"


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port < 65535 and port_is_free("127.0.0.1", port + 1):
            return port
    raise AssertionError("no free port pair on 127.0.0.1")


def _settings(tmp_path: Path, port: int | None = None) -> Settings:
    bootstrap = f"127.0.0.1:{port or _free_port_pair()}"
    return load_settings(kafka_bootstrap=bootstrap, data_dir=tmp_path / "data")


def _script(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _complete_jars(jars_dir: Path) -> None:
    jars_dir.mkdir(parents=True)
    (jars_dir / JARS_MARKER).write_text(pom_digest(REPO_POM))


# --- X2: bootstrap parsing ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bootstrap", "host", "port"),
    [
        ("127.0.0.1:9092", "127.0.0.1", 9092),
        (" localhost:19092 ", "localhost", 19092),
        ("[::1]:9092", "::1", 9092),
    ],
)
def test_X2_parse_bootstrap(bootstrap: str, host: str, port: int) -> None:
    endpoint = parse_bootstrap(bootstrap)
    assert endpoint == Endpoint(host, port)
    assert endpoint.controller_port == port + 1


@pytest.mark.parametrize(
    "bootstrap", ["", "localhost", "host:abc", ":9092", "h:0", "h:65535", "a:9092,b:9092"]
)
def test_X2_parse_bootstrap_rejects_what_one_local_node_cannot_serve(bootstrap: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_bootstrap(bootstrap)
    assert caught.value.setting == "HOOKSTREAM_KAFKA_BOOTSTRAP"


# --- X2 / section 5: server.properties ------------------------------------------------------------
def test_X2_properties_describe_one_combined_kraft_node(tmp_path: Path) -> None:
    props = _properties(render_server_properties(Endpoint("127.0.0.1", 19092), tmp_path / "d"))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "d")
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "default.replication.factor",
    ):
        assert props[key] == "1", key


def test_X2_properties_bracket_ipv6_and_escape_paths() -> None:
    text = render_server_properties(Endpoint("::1", 9092), Path("/tmp/dätä\\x"))
    props = _properties(text)
    assert props["listeners"] == "PLAINTEXT://[::1]:9092,CONTROLLER://[::1]:9093"
    assert props["log.dirs"] == "/tmp/d\\u00e4t\\u00e4\\\\x"
    assert text.isascii()  # Kafka reads the file as ISO-8859-1


def test_X2_properties_refuse_a_data_dir_with_a_comma() -> None:
    with pytest.raises(ConfigError) as caught:
        render_server_properties(Endpoint("127.0.0.1", 9092), Path("/tmp/a,b"))
    assert caught.value.setting == "HOOKSTREAM_DATA_DIR"


# --- X2: the jar cache --------------------------------------------------------------------------
def test_X2_jar_cache_is_complete_only_for_the_same_pom(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project>one</project>")
    jars = tmp_path / "jars"
    assert not jars_complete(jars, pom)
    jars.mkdir()
    (jars / JARS_MARKER).write_text(pom_digest(pom) + "\n")
    assert jars_complete(jars, pom)
    pom.write_text("<project>two</project>")
    assert not jars_complete(jars, pom)


def test_X2_default_pom_is_the_checkouts_and_a_missing_one_is_one_clear_error(
    tmp_path: Path,
) -> None:
    assert default_pom_path() == REPO_POM
    with pytest.raises(LocalKafkaError, match="pom is missing"):
        LocalKafka(_settings(tmp_path), pom_path=tmp_path / "nope.xml")


def test_X2_maven_failure_is_one_line_naming_mavens_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _script(
        bin_dir, "mvn", 'echo "[INFO] x"; echo "[ERROR] Could not resolve kafka_2.13"; exit 1\n'
    )
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(LocalKafkaError) as caught:
        LocalKafka(_settings(tmp_path)).resolve_jars()
    assert "[ERROR] Could not resolve kafka_2.13" in str(caught.value)
    assert "\n" not in str(caught.value)


# --- X2: preconditions of start -----------------------------------------------------------------
@pytest.mark.parametrize("tool", ["java", "mvn"])
def test_X2_missing_tool_is_named(
    tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    other = "mvn" if tool == "java" else "java"
    _script(bin_dir, other, "exit 0\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(LocalKafkaError, match=f"`{tool}` is not on PATH"):
        LocalKafka(_settings(tmp_path)).start()


def test_X2_port_is_free_sees_a_listener() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        assert not port_is_free("127.0.0.1", port)
    assert port_is_free("127.0.0.1", port)


def test_X2_broker_that_dies_at_startup_reports_its_last_log_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _script(
        bin_dir,
        "java",
        'case "$*" in\n'
        "  *random-uuid*) echo AAAAAAAAAAAAAAAAAAAAAA ;;\n"
        "  *kafka.Kafka*) echo 'ERROR fatal: boom in broker startup'; exit 1 ;;\n"
        "esac\n",
    )
    monkeypatch.setenv("PATH", str(bin_dir))
    settings = _settings(tmp_path)
    _complete_jars(settings.kafka_dir / "jars")
    local = LocalKafka(settings, ready_timeout=20)
    with pytest.raises(LocalKafkaError, match=r"exited during startup.*boom in broker startup"):
        local.start()
    assert not local.pid_path.exists()
    assert local.running_pid() is None


def test_X2_storage_is_formatted_only_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    _script(
        bin_dir,
        "java",
        'case "$*" in\n'
        "  *StorageTool*) echo 'formatting again'; exit 7 ;;\n"
        "  *kafka.Kafka*) echo 'broker ran'; exit 1 ;;\n"
        "esac\n",
    )
    monkeypatch.setenv("PATH", str(bin_dir))
    settings = _settings(tmp_path)
    _complete_jars(settings.kafka_dir / "jars")
    local = LocalKafka(settings, ready_timeout=20)
    local.log_dirs.mkdir(parents=True)
    (local.log_dirs / "meta.properties").write_text("cluster.id=kept\n")
    with pytest.raises(LocalKafkaError, match=r"exited during startup.*broker ran"):
        local.start()
    (local.log_dirs / "meta.properties").unlink()
    with pytest.raises(LocalKafkaError, match="StorageTool failed \\(exit 7\\)"):
        local.start()


# --- X2: pid file and stop ----------------------------------------------------------------------
def test_X2_stale_or_foreign_pid_file_is_not_our_broker(tmp_path: Path) -> None:
    local = LocalKafka(_settings(tmp_path))
    local.kafka_dir.mkdir(parents=True)
    local.pid_path.write_text("999999999\n")  # above any pid_max: no such process
    assert local.running_pid() is None
    assert not local.pid_path.exists()
    local.pid_path.write_text("1\n")  # alive, but not a broker of this data dir
    assert local.running_pid() is None
    assert local.stop().was_running is False


def _fake_broker(local: LocalKafka, ignore_term: bool) -> subprocess.Popen[str]:
    handler = "signal.SIG_IGN" if ignore_term else "signal.SIG_DFL"
    code = f"import signal,time; signal.signal(signal.SIGTERM, {handler}); print('up', flush=True)"
    code += "; time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "kafka.Kafka", str(local.properties_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "up"
    local.pid_path.write_text(f"{proc.pid}\n")
    return proc


@pytest.mark.parametrize("ignore_term", [False, True])
def test_X2_stop_terms_then_kills_after_the_deadline(tmp_path: Path, ignore_term: bool) -> None:
    said: list[str] = []
    local = LocalKafka(_settings(tmp_path), stop_timeout=1.0, say=said.append)
    local.kafka_dir.mkdir(parents=True)
    proc = _fake_broker(local, ignore_term)
    try:
        assert local.running_pid() == proc.pid
        result = local.stop()
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert result.was_running
    assert result.pid == proc.pid
    assert result.killed is ignore_term
    assert proc.returncode == (-9 if ignore_term else -15)
    assert any("SIGKILL" in line for line in said) is ignore_term
    assert not local.pid_path.exists()


# --- X2: the command surface --------------------------------------------------------------------
def test_X2_kafka_commands_have_help() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["kafka", "--help"])
    assert result.exit_code == 0
    for command in ("start", "stop", "status"):
        assert command in result.output
        sub = runner.invoke(cli, ["kafka", command, "--help"])
        assert sub.exit_code == 0, sub.output
        assert "Usage: cli kafka " + command in sub.output


def test_X2_status_and_stop_when_nothing_runs(tmp_path: Path) -> None:
    env = {
        "HOOKSTREAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{_free_port_pair()}",
        "HOOKSTREAM_DATA_DIR": str(tmp_path / "data"),
    }
    runner = CliRunner()
    status = runner.invoke(cli, ["kafka", "status"], env=env)
    assert status.exit_code == 3, status.output
    assert "kafka: not running" in status.output
    assert "metadata answers: no" in status.output
    stop = runner.invoke(cli, ["kafka", "stop"], env=env)
    assert stop.exit_code == 0, stop.output
    assert "not running; nothing to stop" in stop.output
