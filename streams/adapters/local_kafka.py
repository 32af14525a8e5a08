"""The local development Kafka broker behind `hookstream kafka start|stop|status` (SPEC X2).

hookstream runs a real single-node Apache Kafka (KRaft, combined broker and controller) without
Docker: Maven resolves the broker's jars from Maven Central once, into a cache under the data
dir (`streams.adapters.kafka_jars`), and Java 17 runs ``kafka.Kafka`` from them. Everything the
broker owns lives in ``settings.kafka_dir``::

    jars/              the resolved jars; a marker holds the pom's hash, so a pom change re-resolves
    data/              log.dirs, formatted once (meta.properties)
    server.properties  regenerated on every start from HOOKSTREAM_KAFKA_BOOTSTRAP
    kafka.pid          the broker's process id while it runs
    kafka.log          the broker's console (WARN and above), kafka.log.1 is the previous run's

The controller listens on the bootstrap port + 1. `hookstream demo` and the test harness use
`LocalKafka` directly; every failure is a `LocalKafkaError` (or a `ConfigError` naming the
setting) with one line of explanation.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from streams.adapters import kafka_cds, kafka_jars
from streams.adapters.processes import process_alive, runs_with, wait_exit
from streams.errors import ConfigError, LocalKafkaError
from streams.settings import Settings

BROKER_HEAP = ("-Xms256m", "-Xmx512m")
_TOOL_HEAP = ("-Xmx256m",)
# Starts the broker in the background of a short-lived shell, so that the broker is not a child
# of the hookstream process: it outlives the CLI and never becomes our zombie.
_LAUNCHER = 'log="$1"; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!'


@dataclass(frozen=True)
class Endpoint:
    """Where the local broker listens: clients on ``port``, the controller on ``port + 1``."""

    host: str
    port: int

    @property
    def controller_port(self) -> int:
        return self.port + 1

    def address(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port if port is None else port}"


@dataclass(frozen=True)
class StartResult:
    seconds: float
    pid: int
    bootstrap: str
    already_running: bool


@dataclass(frozen=True)
class StopResult:
    was_running: bool
    pid: int | None
    seconds: float
    killed: bool  # the broker ignored SIGTERM until the deadline and got SIGKILL


@dataclass(frozen=True)
class KafkaStatus:
    running: bool  # a broker started by hookstream from this kafka_dir is alive
    pid: int | None
    bootstrap: str
    answering: bool  # a broker at the bootstrap address answers a metadata request
    log_path: Path


def parse_bootstrap(bootstrap: str) -> Endpoint:
    """The single ``host:port`` (``[v6]:port`` too) the local broker listens on."""
    setting = "HOOKSTREAM_KAFKA_BOOTSTRAP"
    text = bootstrap.strip()
    if not text or "," in text:
        raise ConfigError(setting, "the local broker needs exactly one host:port")
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(setting, f"expected host:port, got {bootstrap!r}")
    port = int(port_text)
    if not 1 <= port <= 65534:
        raise ConfigError(setting, f"port {port} is out of range (the controller uses port+1)")
    return Endpoint(host, port)


def _escape(value: str) -> str:
    # Kafka reads server.properties as ISO-8859-1: escape backslashes and anything non-ASCII.
    out = value.replace("\\", "\\\\")
    return "".join(ch if ord(ch) < 128 else f"\\u{ord(ch):04x}" for ch in out)


def render_server_properties(endpoint: Endpoint, log_dir: Path) -> str:
    """server.properties of a single combined broker+controller node with replication 1."""
    if "," in str(log_dir):
        raise ConfigError("HOOKSTREAM_DATA_DIR", "must not contain a comma (Kafka's log.dirs)")
    client, controller = endpoint.address(), endpoint.address(endpoint.controller_port)
    values = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": controller,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{client},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{client}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    header = "# Written by `hookstream kafka start` on each start; edit settings, not this file.\n"
    return header + "".join(f"{key}={_escape(value)}\n" for key, value in values.items())


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (False when something else does)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise LocalKafkaError(f"cannot listen on {host}:{port}: {exc}") from exc
    return True


def accepts_connections(endpoint: Endpoint, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout):
            return True
    except OSError:
        return False


def metadata_answers(bootstrap: str, timeout: float) -> bool:
    """Whether a broker at ``bootstrap`` answers a metadata request within ``timeout`` seconds."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    ms = max(int(timeout * 1000), 100)
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": ms, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no output)"
    kept = [line.strip()[:300] for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


class LocalKafka:
    """Starts, stops and inspects the single-node development broker of one data dir."""

    def __init__(
        self,
        settings: Settings,
        *,
        pom_path: Path | None = None,
        jars_dir: Path | None = None,
        say: Callable[[str], None] | None = None,
        ready_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        jvm_options: tuple[str, ...] = BROKER_HEAP,
        class_archive: bool = True,
    ) -> None:
        """``class_archive``: start on the class archive of `streams.adapters.kafka_cds`."""
        self.endpoint = parse_bootstrap(settings.kafka_bootstrap)
        self.bootstrap = self.endpoint.address()
        self.pom_path = (pom_path or kafka_jars.default_pom_path()).resolve()
        if not self.pom_path.is_file():
            raise LocalKafkaError(
                f"the local Kafka pom is missing at {self.pom_path}; run hookstream from its "
                "source checkout (pip install -e .) or pass the pom's path"
            )
        self.log4j_config = self.pom_path.parent / "log4j2.properties"
        self.kafka_dir = settings.kafka_dir.resolve()
        self.jars_dir = (jars_dir or self.kafka_dir / "jars").resolve()
        self.log_dirs = self.kafka_dir / "data"
        self.properties_path = self.kafka_dir / "server.properties"
        self.pid_path = self.kafka_dir / "kafka.pid"
        self.log_path = self.kafka_dir / "kafka.log"
        self._say = say or (lambda _message: None)
        self._ready_timeout = ready_timeout
        self._stop_timeout = stop_timeout
        self._jvm_options = jvm_options  # the broker's heap and GC flags
        self._class_archive = class_archive

    # --- public API ----------------------------------------------------------------------------
    def start(self) -> StartResult:
        """Start the broker (or find it already running) and wait until it answers metadata."""
        began = time.monotonic()
        java = kafka_jars.require_tool("java")
        with self._lock():
            pid = self.running_pid()
            already = pid is not None
            launched = began
            if pid is None:
                self._check_ports()
                self.resolve_jars()
                self.properties_path.write_text(self.render_properties())
                self._format_storage(java)
                pid = self._launch(java)
                launched = time.monotonic()  # the wait for an answer starts with the JVM
            self._wait_ready(pid, launched)
        return StartResult(time.monotonic() - began, pid, self.bootstrap, already)

    def stop(self) -> StopResult:
        """SIGTERM the broker, wait for it (SIGKILL after the stop timeout); harmless if none."""
        began = time.monotonic()
        with self._lock():
            pid = self.running_pid()
            if pid is None:
                return StopResult(False, None, 0.0, False)
            self._say(f"stopping kafka (pid {pid}), waiting up to {self._stop_timeout:.0f}s")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            killed = not wait_exit(pid, self._stop_timeout)
            if killed:
                self._say(f"kafka did not exit within {self._stop_timeout:.0f}s; sending SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_exit(pid, 10.0)
            self.pid_path.unlink(missing_ok=True)
            if kafka_cds.promote(self.kafka_dir, clean_exit=not killed) is not None:
                self._say("kept the broker's class archive: later starts map it")
        return StopResult(True, pid, time.monotonic() - began, killed)

    def status(self) -> KafkaStatus:
        pid = self.running_pid()
        answering = accepts_connections(self.endpoint) and metadata_answers(self.bootstrap, 5.0)
        return KafkaStatus(pid is not None, pid, self.bootstrap, answering, self.log_path)

    @property
    def jvm_options(self) -> tuple[str, ...]:
        """The broker's heap and JIT/GC flags (its class archive's flags come on top)."""
        return self._jvm_options

    def running_pid(self) -> int | None:
        """The pid of this data dir's broker if it is alive; a stale pid file is removed."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except FileNotFoundError:
            return None
        except ValueError:
            pid = 0
        if pid > 0 and process_alive(pid) and runs_with(pid, str(self.properties_path)):
            return pid
        self.pid_path.unlink(missing_ok=True)
        return None

    def resolve_jars(self) -> bool:
        """Copy the broker's jars from Maven into the cache unless done; True if it ran Maven."""
        return kafka_jars.resolve_jars(self.pom_path, self.jars_dir, self._say)

    def render_properties(self) -> str:
        """This node's server.properties (a node of `LocalCluster` renders its own)."""
        return render_server_properties(self.endpoint, self.log_dirs)

    # --- steps of start/stop -------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.kafka_dir.mkdir(parents=True, exist_ok=True)
        with (self.kafka_dir / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _check_ports(self) -> None:
        for port in (self.endpoint.port, self.endpoint.controller_port):
            if not port_is_free(self.endpoint.host, port):
                raise LocalKafkaError(
                    f"port {port} on {self.endpoint.host} is already in use by another process "
                    f"(the local Kafka needs ports {self.endpoint.port} and "
                    f"{self.endpoint.controller_port}; set HOOKSTREAM_KAFKA_BOOTSTRAP)"
                )

    def _java_command(self, java: str, heap: tuple[str, ...], *args: str) -> list[str]:
        if not self.log4j_config.is_file():
            raise LocalKafkaError(f"the broker's log config is missing at {self.log4j_config}")
        classpath = str(self.jars_dir / "*")
        log_config = f"-Dlog4j2.configurationFile={self.log4j_config}"
        return [java, *heap, "-cp", classpath, log_config, *args]

    def _run(self, command: list[str], what: str, timeout: float) -> str:
        return kafka_jars.run_tool(command, what, timeout)

    def _format_storage(self, java: str) -> None:
        if (self.log_dirs / "meta.properties").exists():
            return
        tool = "kafka.tools.StorageTool"
        output = self._run(self._java_command(java, _TOOL_HEAP, tool, "random-uuid"), tool, 120)
        cluster_id = output.strip().splitlines()[-1].strip()
        props = str(self.properties_path)
        format_args = ("format", "--standalone", "-t", cluster_id, "-c", props)
        self._run(self._java_command(java, _TOOL_HEAP, tool, *format_args), f"{tool} format", 120)

    def _launch(self, java: str) -> int:
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
        options = self._jvm_options
        if self._class_archive:
            options += kafka_cds.jvm_flags(self.jars_dir, java, self.kafka_dir)
        argv = self._java_command(java, options, "kafka.Kafka", str(self.properties_path))
        launcher = ["/bin/sh", "-c", _LAUNCHER, "hookstream-kafka", str(self.log_path), *argv]
        output = self._run(launcher, "starting kafka", timeout=30.0)
        try:
            pid = int(output.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise LocalKafkaError(f"starting kafka printed no pid: {output!r}") from exc
        self.pid_path.write_text(f"{pid}\n")
        return pid

    def _wait_ready(self, pid: int, began: float) -> None:
        deadline = began + self._ready_timeout
        while True:
            if not process_alive(pid):
                self.pid_path.unlink(missing_ok=True)
                raise LocalKafkaError(
                    f"kafka exited during startup; last lines of {self.log_path}: "
                    + _log_tail(self.log_path)
                )
            if accepts_connections(self.endpoint) and metadata_answers(self.bootstrap, 2.0):
                return
            if time.monotonic() > deadline:
                raise LocalKafkaError(
                    f"kafka (pid {pid}) did not answer at {self.bootstrap} within "
                    f"{self._ready_timeout:.0f}s; see {self.log_path} "
                    "(`hookstream kafka stop` stops it)"
                )
            time.sleep(0.2)
