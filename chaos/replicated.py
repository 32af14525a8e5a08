"""A whole hookstream installation on a three-broker cluster, and the faults a run inflicts.

`ReplicatedCluster` is `chaos.cluster.Cluster` with its one broker replaced by a
`LocalCluster` of three combined broker+controller nodes (replication 3,
``min.insync.replicas`` 2) and topics.yaml applied with the same override the Helm chart's
``topics.replicationFactor``/``minInsyncReplicas`` make. `Faults` runs the broker and worker
faults of a cluster chaos run one after another and records each (SPEC Q1, D1):

- ``leader_kill``: ``kill -9`` the leader of the busiest partition of a busy topic, time how
  long until another node leads it, start the node again and wait until it is back in sync;
- ``worker_kill_in_failover``: ``kill -9`` a node that leads partitions of ``routed`` but does
  not coordinate the router's group; while those partitions have no leader (records routed to
  them wait unacknowledged in the workers' producers, and commits still reach the
  coordinator), ``kill -9`` worker 0 (or every worker) and start it again. A worker that
  commits an event before Kafka acknowledged its routed record loses it here (D1);
  `tests/integration/test_cluster.py` shows that with such a worker;
- ``controller_restart``: a clean restart of the active controller (the metadata quorum's
  leader), then wait until every partition is in sync;
- ``broker_rolling``: restart every node, one after another, each once all partitions are in
  sync (the broker upgrade runbook of docs/deployment.md);
- ``worker_rolling``: SIGTERM and start every worker, one after another, each once the one
  before is ready again (a hookstream upgrade).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from chaos.cluster import Cluster, ClusterConfig
from streams.adapters.kafka_clients import make_consumer, watermarks
from streams.adapters.local_cluster import LocalCluster, write_replicated_topics
from streams.settings import load_settings

BROKERS = 3
#: Topics whose partition leaders a leader kill picks from, in turn: the ingest topic, the
#: delivery lane and the attempt ledger carry the most records.
BUSY_TOPICS = ("events", "routed", "attempts")
#: How long ``worker_kill_in_failover`` waits after the node's kill before it kills the worker:
#: well inside the 9 s the controller takes to fence the node (``broker.session.timeout.ms``).
HOLD_S = 3.0


class ReplicatedCluster(Cluster):
    """`Cluster` on three brokers; ``workers_lock`` is held while a fault restarts a worker."""

    def __init__(self, config: ClusterConfig, say: Callable[[str], None] = print) -> None:
        super().__init__(config, say)
        broker_settings = load_settings(
            kafka_bootstrap=f"127.0.0.1:{config.kafka_port}", data_dir=config.work_dir / "broker"
        )
        self.brokers = LocalCluster(
            broker_settings,
            BROKERS,
            jars_dir=config.jars_dir,
            say=say,
            ready_timeout=300.0,
            jvm_options=config.broker_jvm,
        )
        topics = write_replicated_topics(
            self.settings.topics_file, config.work_dir / "topics-replicated.yaml"
        )
        self.settings = self.settings.model_copy(
            update={"kafka_bootstrap": self.brokers.bootstrap, "topics_file": topics}
        )
        self.kafka = self.brokers  # type: ignore[assignment]  # start/stop are what Cluster uses
        self.workers_lock = threading.Lock()
        self.crash_logs: list[str] = []

    def __enter__(self) -> ReplicatedCluster:
        super().__enter__()
        return self

    def supervise(self, elapsed_s: float) -> None:
        if self.workers_lock.acquire(blocking=False):  # not while a fault restarts a worker
            try:
                for index, worker in enumerate(self.workers):
                    if worker.proc is not None and worker.proc.poll() is not None:
                        # the end of its log (with PYTHONFAULTHANDLER, every thread's stack)
                        self.crash_logs.append(f"worker{index}:\n{worker.tail(120)}")
                super().supervise(elapsed_s)
            finally:
                self.workers_lock.release()


def group_coordinator(bootstrap: str, group: str) -> int:
    """The node coordinating ``group`` now."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group], request_timeout=15)[group]
    return int(described.result(timeout=20).coordinator.id)


def busiest_partition(consumer: Consumer, topic: str) -> int:
    """The partition of ``topic`` holding the most records."""
    marks = watermarks(consumer, topic)
    return max(marks, key=lambda part: marks[part][1] - marks[part][0])


class Faults:
    """Runs a list of fault steps on a thread; `records` says what each did and when."""

    def __init__(
        self,
        cluster: ReplicatedCluster,
        steps: list[str],
        gap_s: float,
        say: Callable[[str], None],
        failover_kills_all: bool = False,
        restore: bool = True,
    ) -> None:
        """``failover_kills_all``: ``worker_kill_in_failover`` kills every worker, not worker 0;
        without ``restore`` it leaves the killed node down (the run goes on with two of three,
        as `min.insync.replicas` 2 allows) instead of starting it and waiting until it is back
        in sync, which takes 45 s or more of a loaded box."""
        self.cluster = cluster
        self.failover_kills_all = failover_kills_all
        self.restore = restore
        self.steps = steps
        self.gap_s = gap_s
        self.say = say
        self.records: list[dict[str, Any]] = []
        self.error: str | None = None
        self.began = 0.0
        self._thread = threading.Thread(target=self._run, name="cluster-faults", daemon=True)
        self._kills = 0

    def start(self, began: float) -> None:
        self.began = began
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        try:
            for step in self.steps:
                time.sleep(self.gap_s)
                at = round(time.monotonic() - self.began, 1)
                self.say(f"fault {step} at {at}s")
                record = {"step": step, "at_s": at, **getattr(self, step)()}
                record["took_s"] = round(time.monotonic() - self.began - at, 1)
                self.records.append(record)
                self.say(f"fault done: {record}")
        except Exception as exc:  # reported, and the run fails on it
            self.error = f"{type(exc).__name__}: {exc}"
            self.say(f"fault step failed: {self.error}")

    def leader_kill(self) -> dict[str, Any]:
        brokers = self.cluster.brokers
        topic = self.cluster.settings.topic(BUSY_TOPICS[self._kills % len(BUSY_TOPICS)])
        self._kills += 1
        consumer = make_consumer(self.cluster.settings, "chaos-faults")
        try:
            partition = busiest_partition(consumer, topic)
        finally:
            consumer.close()
        victim = brokers.leader_of(topic, partition)
        killed = time.monotonic()
        pid = brokers.kill(victim)
        while brokers.leader_of(topic, partition) in (victim, -1):
            time.sleep(0.2)
        failover_s = time.monotonic() - killed
        time.sleep(min(self.gap_s, 10.0))  # run on two brokers for a while
        began = time.monotonic()
        brokers.start_node(victim)
        brokers.wait_in_sync(None, brokers.ready_timeout)
        return {
            "topic": topic,
            "partition": partition,
            "node": victim,
            "pid": pid,
            "failover_s": round(failover_s, 1),
            "back_in_sync_s": round(time.monotonic() - began, 1),
        }

    def worker_kill_in_failover(self) -> dict[str, Any]:
        brokers = self.cluster.brokers
        settings = self.cluster.settings
        routed = settings.topic("routed")
        coordinator = group_coordinator(brokers.bootstrap, f"{settings.group_id}-router")
        consumer = make_consumer(settings, "chaos-faults")
        try:
            parts = sorted(watermarks(consumer, routed))
        finally:
            consumer.close()
        leaders = {p: brokers.leader_of(routed, p) for p in parts}
        candidates = [n for n in sorted(set(leaders.values())) if n != coordinator]
        victim = max(candidates, key=lambda n: sum(1 for x in leaders.values() if x == n))
        led = [p for p, n in leaders.items() if n == victim]
        killed = time.monotonic()
        pid = brokers.kill(victim)
        time.sleep(HOLD_S)
        # worker 0 alone may hold no busy ingest partition with a live leader, and then has
        # nothing waiting for the dead node; with every worker killed, no router's records
        # survive (docs/reliability.md, "Can it fail?")
        workers = self.cluster.workers if self.failover_kills_all else self.cluster.workers[:1]
        with self.cluster.workers_lock:
            worker_pids = self.cluster.worker_pids()[: len(workers)]  # workers is a prefix
            for worker in workers:
                worker.kill()
            while any(brokers.leader_of(routed, p) in (victim, -1) for p in led):
                time.sleep(0.2)
            failover_s = time.monotonic() - killed
            # started once the node is fenced: a worker that starts while the first broker of
            # its metadata is down and not yet fenced exits at start-up (Faust asks only that
            # broker for the controller; docs/deployment.md), and its supervisor restarts it
            for worker in workers:
                worker.start()
        for worker in workers:
            worker.wait_ready(300)
        began = time.monotonic()
        if self.restore:
            brokers.start_node(victim)
            brokers.wait_in_sync(None, brokers.ready_timeout)
        return {
            "node": victim,
            "pid": pid,
            "router_coordinator": coordinator,
            "routed_partitions_led": led,
            "worker_pids": worker_pids,
            "worker_killed_after_s": HOLD_S,
            "failover_s": round(failover_s, 1),
            "back_in_sync_s": round(time.monotonic() - began, 1) if self.restore else None,
        }

    def controller_restart(self) -> dict[str, Any]:
        brokers = self.cluster.brokers
        controller = brokers.active_controller()
        step = brokers.restart_node(controller)
        brokers.wait_in_sync(None, brokers.ready_timeout)
        return {**step, "new_controller": brokers.active_controller()}

    def broker_rolling(self) -> dict[str, Any]:
        return {"nodes": self.cluster.brokers.rolling_restart()}

    def worker_rolling(self) -> dict[str, Any]:
        steps = []
        for index, worker in enumerate(self.cluster.workers):
            began = time.monotonic()
            with self.cluster.workers_lock:
                code = worker.stop(60)
                # a SIGTERM should end in exit 0; anything else keeps the log's end as evidence
                # (one worker aborted, -6, in chaos-cluster-20261202T0928)
                tail = worker.tail(60) if code != 0 else None
                worker.start()
            worker.wait_ready(300)
            step = {"worker": index, "exit": code, "ready_s": round(time.monotonic() - began, 1)}
            steps.append(step if tail is None else {**step, "log_tail": tail})
        return {"workers": steps}
