"""A three-node Apache Kafka cluster on one machine: `hookstream kafka start --brokers 3`.

The same Maven Central jars as the single development broker (`LocalKafka`), run as N combined
broker+controller KRaft nodes with a static quorum of N voters. Node ``i`` (1..N) listens for
clients on ``port + 2(i-1)`` and for the controller quorum on the port after that, where
``port`` is the first address of HOOKSTREAM_KAFKA_BOOTSTRAP; every node keeps its data, log and
pid under ``HOOKSTREAM_DATA_DIR/kafka-cluster/node<i>/kafka``, and all of them are formatted
with the one cluster id kept in ``kafka-cluster/cluster.id``. The jars are shared with the
single broker's cache.

Replication defaults to 3 (``min.insync.replicas`` 2, the offsets and transaction topics
replicated 3), as in production (`helm/values-production.yaml`). topics.yaml's own defaults
suit one broker; `write_replicated_topics` writes the override the Helm chart applies with
``topics.replicationFactor`` and ``topics.minInsyncReplicas``.

Besides start and stop, the cluster can kill one node with SIGKILL, restart one node, name the
leader of a partition and the active controller (from the nodes' ``quorum-state`` files, the
highest leader epoch wins), and wait until no partition is under-replicated: what a rolling
restart waits for between nodes (docs/deployment.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from streams.adapters.kafka_jars import require_tool
from streams.adapters.local_kafka import (
    _TOOL_HEAP,
    BROKER_HEAP,
    Endpoint,
    LocalKafka,
    StopResult,
    _escape,
    parse_bootstrap,
)
from streams.adapters.processes import process_alive, wait_exit
from streams.errors import ConfigError, LocalKafkaError
from streams.settings import Settings, load_settings

REPLICATION = 3
MIN_INSYNC = 2
SETTING = "HOOKSTREAM_KAFKA_BOOTSTRAP"


def node_endpoints(first: Endpoint, brokers: int) -> list[Endpoint]:
    """Client endpoints of nodes 1..brokers; each node's controller is on the next port."""
    if brokers < 1:
        raise ConfigError("--brokers", "must be at least 1")
    if first.port + 2 * brokers > 65535:
        raise ConfigError(SETTING, f"port {first.port} leaves no room for {brokers} nodes")
    return [Endpoint(first.host, first.port + 2 * index) for index in range(brokers)]


def cluster_endpoints(bootstrap: str, brokers: int) -> list[Endpoint]:
    """The nodes' endpoints from HOOKSTREAM_KAFKA_BOOTSTRAP: either the first node's address or
    the whole list, which must then be exactly the nodes' addresses in order."""
    addresses = [part.strip() for part in bootstrap.split(",") if part.strip()]
    if not addresses:
        raise ConfigError(SETTING, "is empty")
    endpoints = node_endpoints(parse_bootstrap(addresses[0]), brokers)
    if len(addresses) > 1 and addresses != [e.address() for e in endpoints]:
        expected = ",".join(e.address() for e in endpoints)
        raise ConfigError(SETTING, f"a local cluster of {brokers} listens on {expected}")
    return endpoints


def render_node_properties(
    node_id: int, endpoints: list[Endpoint], log_dir: Path, replication: int = REPLICATION
) -> str:
    """server.properties of node ``node_id`` (1-based) of a static-quorum KRaft cluster."""
    if "," in str(log_dir):
        raise ConfigError("HOOKSTREAM_DATA_DIR", "must not contain a comma (Kafka's log.dirs)")
    me = endpoints[node_id - 1]
    client, controller = me.address(), me.address(me.controller_port)
    voters = ",".join(
        f"{index}@{e.address(e.controller_port)}" for index, e in enumerate(endpoints, 1)
    )
    min_isr = str(min(MIN_INSYNC, replication))
    values = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{client},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{client}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": min_isr,
        "unclean.leader.election.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    header = "# Written by `hookstream kafka start --brokers N`; edit settings, not this file.\n"
    return header + "".join(f"{key}={_escape(value)}\n" for key, value in values.items())


def write_replicated_topics(
    source: Path, target: Path, replication: int = REPLICATION, min_insync: int = MIN_INSYNC
) -> Path:
    """topics.yaml with ``defaults.replication_factor`` and ``min.insync.replicas`` raised, as
    the Helm chart's ``topics.replicationFactor``/``minInsyncReplicas`` do; returns ``target``."""
    document = yaml.safe_load(source.read_text())
    defaults = document.setdefault("defaults", {})
    defaults["replication_factor"] = replication
    defaults.setdefault("config", {})["min.insync.replicas"] = min_insync
    for body in document.get("topics", {}).values():  # a topic's own value would win
        if isinstance(body, dict):
            body.pop("replication_factor", None)
            if isinstance(body.get("config"), dict):
                body["config"].pop("min.insync.replicas", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


class ClusterNode(LocalKafka):
    """One combined broker+controller node of a `LocalCluster`."""

    def __init__(self, cluster: LocalCluster, node_id: int, settings: Settings) -> None:
        super().__init__(
            settings,
            pom_path=cluster.pom_path,
            jars_dir=cluster.jars_dir,
            say=cluster.say,
            ready_timeout=cluster.ready_timeout,
            stop_timeout=cluster.stop_timeout,
            jvm_options=cluster.jvm_options,
        )
        self.cluster = cluster
        self.node_id = node_id

    def render_properties(self) -> str:
        return render_node_properties(
            self.node_id, self.cluster.endpoints, self.log_dirs, self.cluster.replication
        )

    def _format_storage(self, java: str) -> None:
        if (self.log_dirs / "meta.properties").exists():
            return
        tool = "kafka.tools.StorageTool"
        args = ("format", "-t", self.cluster.cluster_id(java), "-c", str(self.properties_path))
        self._run(self._java_command(java, _TOOL_HEAP, tool, *args), f"{tool} format", 120)

    def launch(self) -> int:
        """Start the node's JVM unless it runs; do not wait (a lone voter elects no leader)."""
        java = require_tool("java")
        with self._lock():
            pid = self.running_pid()
            if pid is not None:
                return pid
            self._check_ports()
            self.properties_path.write_text(self.render_properties())
            self._format_storage(java)
            return self._launch(java)

    def wait_ready(self, pid: int) -> None:
        self._wait_ready(pid, time.monotonic())

    def kill(self) -> int | None:
        """SIGKILL the node (no controlled shutdown); its pid, or None if it was not running."""
        pid = self.running_pid()
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_exit(pid, 30.0)
        self.pid_path.unlink(missing_ok=True)
        return pid

    def quorum_state(self) -> tuple[int, int] | None:
        """(leader epoch, leader id) this node last recorded for the metadata quorum."""
        path = self.log_dirs / "__cluster_metadata-0" / "quorum-state"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        leader = int(data.get("leaderId", -1))
        return (int(data.get("leaderEpoch", -1)), leader) if leader > 0 else None


@dataclass(frozen=True)
class ClusterStart:
    seconds: float
    pids: dict[int, int]
    bootstrap: str
    already_running: bool


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    pid: int | None
    address: str
    log_path: Path


class LocalCluster:
    """Starts, stops, breaks and inspects the N-node local cluster of one data dir."""

    def __init__(
        self,
        settings: Settings,
        brokers: int = 3,
        *,
        pom_path: Path | None = None,
        jars_dir: Path | None = None,
        say: Callable[[str], None] | None = None,
        ready_timeout: float = 240.0,
        stop_timeout: float = 60.0,
        jvm_options: tuple[str, ...] = BROKER_HEAP,
    ) -> None:
        """``jvm_options``: every node's heap and JIT/GC flags (`LocalKafka`'s)."""
        self.endpoints = cluster_endpoints(settings.kafka_bootstrap, brokers)
        self.bootstrap = ",".join(e.address() for e in self.endpoints)
        self.replication = min(REPLICATION, brokers)
        self.root = (settings.data_dir / "kafka-cluster").resolve()
        self.jars_dir = (jars_dir or settings.kafka_dir / "jars").resolve()
        self.pom_path = pom_path
        self.say = say or (lambda _message: None)
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.jvm_options = jvm_options
        self.nodes = {
            index: ClusterNode(
                self,
                index,
                load_settings(
                    kafka_bootstrap=endpoint.address(), data_dir=self.root / f"node{index}"
                ),
            )
            for index, endpoint in enumerate(self.endpoints, 1)
        }
        self.pom_path = next(iter(self.nodes.values())).pom_path

    # --- the whole cluster ---------------------------------------------------------------------
    def start(self) -> ClusterStart:
        """Start every node that is not running and wait until all N serve as brokers."""
        began = time.monotonic()
        first = next(iter(self.nodes.values()))
        already = all(node.running_pid() is not None for node in self.nodes.values())
        first.resolve_jars()
        try:
            pids = {node_id: node.launch() for node_id, node in self.nodes.items()}
            self.wait_brokers(len(self.nodes), self.ready_timeout, pids)
        except BaseException:
            if not already:
                self.stop()  # no half-started cluster left behind
            raise
        return ClusterStart(time.monotonic() - began, pids, self.bootstrap, already)

    def stop(self) -> dict[int, StopResult]:
        """Stop every node at once (SIGTERM, SIGKILL after the stop timeout)."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            results = pool.map(lambda node: (node.node_id, node.stop()), self.nodes.values())
            return dict(results)

    def status(self) -> list[NodeStatus]:
        return [
            NodeStatus(n.node_id, n.running_pid(), n.bootstrap, n.log_path)
            for n in self.nodes.values()
        ]

    def cluster_id(self, java: str) -> str:
        """The cluster id every node is formatted with, made once."""
        path = self.root / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        tool = "kafka.tools.StorageTool"
        node = next(iter(self.nodes.values()))
        output = node._run(node._java_command(java, _TOOL_HEAP, tool, "random-uuid"), tool, 120)
        cluster_id = output.strip().splitlines()[-1].strip()
        self.root.mkdir(parents=True, exist_ok=True)
        path.write_text(cluster_id + "\n")
        return cluster_id

    # --- one node ------------------------------------------------------------------------------
    def kill(self, node_id: int) -> int | None:
        """``kill -9`` one node: what a crashed machine looks like to the rest."""
        return self.nodes[node_id].kill()

    def stop_node(self, node_id: int) -> StopResult:
        """A clean stop: the node hands its leaderships over first (controlled shutdown)."""
        return self.nodes[node_id].stop()

    def start_node(self, node_id: int) -> int:
        node = self.nodes[node_id]
        pid = node.launch()
        node.wait_ready(pid)
        return pid

    def restart_node(self, node_id: int) -> dict[str, Any]:
        stopped = self.stop_node(node_id)
        began = time.monotonic()
        self.start_node(node_id)
        return {
            "node": node_id,
            "stop_s": round(stopped.seconds, 1),
            "sigkill": stopped.killed,
            "start_s": round(time.monotonic() - began, 1),
        }

    def rolling_restart(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Restart the nodes one after another, each once every partition is back in sync
        (the broker upgrade runbook of docs/deployment.md); the active controller goes last."""
        wanted = list(topics) if topics is not None else None
        controller = self.active_controller()
        order = sorted(self.nodes, key=lambda node_id: node_id == controller)
        steps = []
        for node_id in order:
            self.wait_in_sync(wanted, self.ready_timeout)
            step = self.restart_node(node_id)
            began = time.monotonic()
            self.wait_in_sync(wanted, self.ready_timeout)
            step["in_sync_s"] = round(time.monotonic() - began, 1)
            steps.append(step)
        return steps

    # --- what the cluster looks like -----------------------------------------------------------
    def _metadata(self, timeout: float = 10.0) -> Any:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return admin.list_topics(timeout=timeout)

    def live_brokers(self) -> set[int]:
        try:
            return set(self._metadata(5.0).brokers)
        except Exception:  # no node answers: none is live
            return set()

    def wait_brokers(self, count: int, timeout: float, pids: dict[int, int] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while len(self.live_brokers()) < count:
            for node_id, pid in (pids or {}).items():
                if not process_alive(pid):
                    node = self.nodes[node_id]
                    node.pid_path.unlink(missing_ok=True)
                    raise LocalKafkaError(f"kafka node {node_id} exited; see {node.log_path}")
            if time.monotonic() > deadline:
                raise LocalKafkaError(f"fewer than {count} brokers answer after {timeout:.0f}s")
            time.sleep(1.0)

    def leader_of(self, topic: str, partition: int) -> int:
        """The node leading ``topic``'s ``partition`` now (-1 when it has none)."""
        meta = self._metadata().topics.get(topic)
        if meta is None or partition not in meta.partitions:
            raise LocalKafkaError(f"no partition {partition} of {topic} in the metadata")
        return int(meta.partitions[partition].leader)

    def active_controller(self) -> int:
        """The metadata quorum's leader, by the highest epoch any running node recorded."""
        states = [
            state
            for node in self.nodes.values()
            if node.running_pid() is not None and (state := node.quorum_state()) is not None
        ]
        if not states:
            raise LocalKafkaError("no running node has recorded a quorum leader")
        return max(states)[1]

    def under_replicated(self, topics: Iterable[str] | None = None) -> list[tuple[str, int]]:
        """(topic, partition) whose in-sync replicas are fewer than its replicas."""
        wanted = set(topics) if topics is not None else None
        found = []
        for name, meta in self._metadata().topics.items():
            if wanted is not None and name not in wanted:
                continue
            for number, part in meta.partitions.items():
                if len(part.isrs) < len(part.replicas) or part.leader < 0:
                    found.append((name, number))
        return sorted(found)

    def wait_in_sync(self, topics: Iterable[str] | None, timeout: float) -> None:
        wanted = list(topics) if topics is not None else None
        deadline = time.monotonic() + timeout
        while True:
            try:
                behind = self.under_replicated(wanted)
            except Exception as exc:  # metadata unavailable for a moment: ask again
                behind = [(str(exc), -1)]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise LocalKafkaError(f"still under-replicated after {timeout:.0f}s: {behind[:5]}")
            time.sleep(1.0)
