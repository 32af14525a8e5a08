"""A whole hookstream installation of its own for a chaos run or a soak.

`Cluster` starts a broker on its own port pair and data dir (`LocalKafka`, so it can be
stopped and restarted without touching anyone else's broker), applies topics.yaml under a
unique prefix with short retry tiers, turns the suspension thresholds and the breaker up so
that the run measures delivery and not quarantine, creates the subscriptions and starts the
workers as real ``hookstream worker`` processes (``kill()`` is ``kill -9``).
"""

from __future__ import annotations

import random
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.adapters.kafka_admin import apply_topics
from streams.adapters.kafka_clients import KafkaIOError
from streams.adapters.local_kafka import BROKER_HEAP, LocalKafka
from streams.adapters.secretbox import local_key
from streams.domain.models import Subscription
from streams.services.config import set_policy
from streams.services.subscriptions import create_subscription
from streams.settings import load_settings
from tests.integration.workers import WorkerProcess

REPO = Path(__file__).resolve().parents[1]

# Nothing is suspended during a run: every count and duration at its maximum (H2 bounds).
NO_SUSPENSION = {
    "suspend.retryable": "10000,30d",
    "suspend.permanent": "10000,30d",
    "suspend.fatal": "10000,30d",
}


@dataclass(frozen=True)
class ClusterConfig:
    work_dir: Path
    jars_dir: Path
    kafka_port: int = 29192  # the controller takes the next port
    workers: int = 2
    retry_schedule: str = "1s,2s,4s"
    retry_window: str = "2m"
    extra: dict[str, Any] = field(default_factory=dict)
    #: the broker's (or, in `chaos.replicated`, every node's) heap and JIT/GC flags
    broker_jvm: tuple[str, ...] = BROKER_HEAP


#: Broker ports come from below Linux's ephemeral range (32768-60999 by default): a port the
#: kernel hands to some outgoing connection while the broker is stopped would keep it from
#: binding again on restart ("kafka exited during startup ... bind").
_PORT_RANGE = (20000, 32000)


def free_port_pair() -> int:
    """A port p outside the ephemeral range such that p and p+1 are both free on loopback."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(*_PORT_RANGE)
        if port_free(port) and port_free(port + 1):
            return port
    raise RuntimeError("no free pair of loopback ports")


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on loopback now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _patiently(action: Callable[[], object], attempts: int = 10) -> None:
    """Retry ``action`` while fresh topics have no partition leader yet (a busy broker)."""
    for attempt in range(attempts):
        try:
            action()
            return
        except KafkaIOError:
            if attempt == attempts - 1:
                raise
            time.sleep(3)


def default_jars_dir() -> Path:
    """The jar cache of the default local broker (`make kafka`), shared to avoid Maven."""
    return load_settings().kafka_dir / "jars"


class Cluster:
    """Broker, topics, policy, subscriptions and workers; a context manager."""

    def __init__(self, config: ClusterConfig, say: Callable[[str], None] = print) -> None:
        self.config = config
        self._say = say
        run = uuid.uuid4().hex[:8]
        # S5: endpoint secrets encrypted at rest under a key generated into the runner's dir
        self.settings = local_key(
            load_settings(
                kafka_bootstrap=f"127.0.0.1:{config.kafka_port}",
                topic_prefix=f"chaos{run}.",
                group_id=f"chaos{run}",
                data_dir=config.work_dir / "runner",
                topics_file=REPO / "topics.yaml",
                allow_private_destinations=True,
                retry_schedule=config.retry_schedule,
                retry_window=config.retry_window,
                breaker_failures=100000,
                breaker_min_attempts=1000000,
                **config.extra,
            )
        )
        broker_settings = load_settings(
            kafka_bootstrap=self.settings.kafka_bootstrap, data_dir=config.work_dir / "broker"
        )
        self.kafka = LocalKafka(
            broker_settings,
            jars_dir=config.jars_dir,
            say=say,
            ready_timeout=240.0,
            jvm_options=config.broker_jvm,
        )
        self.workers: list[WorkerProcess] = []
        self.subscriptions: list[Subscription] = []
        self.unexpected_exits: list[dict[str, Any]] = []

    def __enter__(self) -> Cluster:
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        started = self.kafka.start()
        self._say(f"broker up at {started.bootstrap} in {started.seconds:.1f}s")
        try:
            began = time.monotonic()
            apply_topics(self.settings)
            _patiently(lambda: set_policy(self.settings, NO_SUSPENSION))
            self._say(f"topics and policy in {time.monotonic() - began:.1f}s")
        except BaseException:
            self.kafka.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop(20)
        self.kafka.stop()

    def remove_data(self) -> None:
        shutil.rmtree(self.config.work_dir, ignore_errors=True)

    def subscribe(self, tenant: str, url: str, filters: list[str], name: str) -> Subscription:
        data = {"tenant_id": tenant, "url": url, "filters": filters, "name": name}
        sub = create_subscription(self.settings, data)
        self.subscriptions.append(sub)
        return sub

    def start_workers(self, ready_timeout_s: float = 180.0) -> None:
        log_dir = self.config.work_dir / "workers"
        log_dir.mkdir(parents=True, exist_ok=True)
        for index in range(self.config.workers):
            self.workers.append(WorkerProcess(self.settings, f"worker{index}", log_dir).start())
        for worker in self.workers:
            worker.wait_ready(ready_timeout_s)

    def kill_and_restart(self, index: int) -> int:
        """kill -9 worker ``index`` and start it again at once; returns the killed pid."""
        worker = self.workers[index]
        assert worker.proc is not None
        pid = worker.proc.pid
        worker.kill()
        worker.start()
        return pid

    def supervise(self, elapsed_s: float) -> None:
        """Restart any worker that exited on its own, and remember that it did."""
        for index, worker in enumerate(self.workers):
            if worker.proc is not None and worker.proc.poll() is not None:
                self.unexpected_exits.append(
                    {"at_s": round(elapsed_s, 1), "worker": index, "code": worker.proc.returncode}
                )
                self._say(f"worker{index} exited by itself ({worker.proc.returncode}); restarting")
                worker.start()

    def restart_broker(self) -> dict[str, float | bool]:
        stopped = self.kafka.stop()
        began = time.monotonic()
        self.kafka.start()
        return {
            "stop_s": round(stopped.seconds, 1),
            "sigkill": stopped.killed,
            "start_s": round(time.monotonic() - began, 1),
        }

    def all_ready(self) -> bool:
        for worker in self.workers:
            try:
                if worker.get("/readyz").status_code != 200:
                    return False
            except Exception:  # not answering yet: not ready
                return False
        return True

    def worker_pids(self) -> list[int | None]:
        return [w.proc.pid if w.proc is not None else None for w in self.workers]
