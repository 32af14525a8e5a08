"""The O2 statistics tests' installation: topics, workers, receivers and subscriptions of one
test, and the helpers that read its figures (tests/integration/test_stats.py)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.cli.stats import stats as stats_command
from streams.domain.models import Attempt, Event, Subscription
from streams.domain.sketch import RELATIVE_ACCURACY
from streams.services.audit import all_attempts
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess, settings_env
from tests.receivers import PerId, Receiver, Respond, Silent

ADMIN = "op-" + uuid.uuid4().hex
NOISE_MS = 5000.0
# float rounding at a bucket's edge may add a few ulps to the 1% bound
ERR = RELATIVE_ACCURACY * (1 + 1e-9)
SETTINGS: dict[str, Any] = {
    "admin_token": ADMIN,
    "secret_key": "k-" + uuid.uuid4().hex,
    # one quick retry, then a tier long enough that nothing leaves it during a test
    "retry_schedule": "1s,5m",
    "retry_window": "10m",
    "retry_jitter": 0.1,
    "breaker_failures": 100000,  # one receiver origin per route: never trip a breaker
    "breaker_min_attempts": 1000000,
}
# Per-answer fields that depend on the moment of the request, not on the data.
MOMENT = ("since", "until")


class Installation:
    """Topics, workers and subscriptions of one test; everything is deleted afterwards."""

    def __init__(self, settings: Settings, root: Path, receivers: Callable[..., Receiver]):
        self.settings = settings
        self.root = root
        self.receivers = receivers
        self.workers: list[WorkerProcess] = []
        self.tenant = f"t{uuid.uuid4().hex[:6]}"
        self.subs: dict[str, Subscription] = {}

    def __enter__(self) -> Installation:
        apply_topics(self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop(20)
        names = [spec.full_name for spec in load_topology(self.settings).topics]
        # the workers' table changelogs are named after the group id
        admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
        group = self.settings.group_id
        names += [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{group}-")]
        delete_topics(self.settings, names)

    def worker(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(self.settings, name, self.root).start()
        self.workers.append(worker)
        return worker

    def subscribe(self, routes: dict[str, tuple[Any, dict[str, Any]]]) -> None:
        """One subscription per route, each with a receiver of its own (its own origin and
        event loop, so one route's slow answers never queue another's)."""
        for name, (how, extra) in routes.items():
            url = self.receivers().route(f"/{name}", how)
            data = {"tenant_id": self.tenant, "url": url, "name": name, **extra}
            self.subs[name] = create_subscription(self.settings, data)

    def publish(self, created: int, shipped: int) -> None:
        run = uuid.uuid4().hex[:6]
        events: list[Event] = [
            make_event(self.tenant, "order.created", n, run) for n in range(created)
        ]
        events += [
            make_event(self.tenant, "order.shipped", n, run)
            for n in range(created, created + shipped)
        ]
        publish_events(self.settings, events)

    def ledger(self) -> dict[str, list[Attempt]]:
        by_name = {sub.id: name for name, sub in self.subs.items()}
        found: dict[str, list[Attempt]] = {name: [] for name in self.subs}
        for att in all_attempts(self.settings):
            if att.subscription_id in by_name:
                found[by_name[att.subscription_id]].append(att)
        return found


def _get(worker: WorkerProcess, path: str, key: str = ADMIN, **params: str) -> Any:
    return worker.get(path, params=params, headers={"Authorization": f"Bearer {key}"})


def _stats(worker: WorkerProcess, path: str) -> dict[str, Any] | None:
    """A 1h report, or None while the worker's partitions move (503)."""
    response = _get(worker, path, window="1h")
    if response.status_code == 503:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _until(
    check: Callable[[], Any],
    timeout_s: float,
    what: str,
    explain: Callable[[], str] = lambda: "",
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s}s {explain()}"
        time.sleep(0.3)


def _counted(env: Installation, workers: list[WorkerProcess]) -> Callable[[], str]:
    """What the ledger holds and what each worker reports, for a failure message."""

    def report(worker: WorkerProcess, sub: Subscription) -> object:
        try:
            found = _stats(worker, f"/v1/subscriptions/{sub.id}/stats")
        except (AssertionError, httpx.HTTPError) as exc:
            return repr(exc)[:200]
        return None if found is None else (found["attempts"], found["retry_backlog"])

    def explain() -> str:
        ledger = {name: len(atts) for name, atts in env.ledger().items()}
        seen = {(w.port, name): report(w, sub) for w in workers for name, sub in env.subs.items()}
        logs = "\n".join(worker.tail(15) for worker in workers)
        return f"\nledger: {ledger}\nreported: {seen}\n{logs}"

    return explain


def _reports_once(
    worker: WorkerProcess, env: Installation, attempts: dict[str, int], backlog: dict[str, int]
) -> dict[str, dict[str, Any]] | None:
    """Every subscription's report, once each shows its expected attempts and backlog."""
    reports = {}
    for name, sub in env.subs.items():
        report = _stats(worker, f"/v1/subscriptions/{sub.id}/stats")
        if report is None or report["attempts"] < attempts[name]:
            return None
        if report["retry_backlog"] != backlog.get(name, 0):
            return None
        reports[name] = report
    return reports


def _exact(values: list[float], q: float) -> float:
    """The documented rank definition: rank floor(q * (n - 1)) of the sorted values."""
    return sorted(values)[math.floor(q * (len(values) - 1))]


def _within_sketch_error(report: dict[str, Any], durations: list[float]) -> None:
    for q, key in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        exact = _exact(durations, q)
        assert abs(report[key] - exact) <= ERR * exact, (key, report[key], exact)


def _near(value: float | None, delay_ms: float) -> bool:
    """At least the receiver's delay (less the sketch's 1%), at most that plus the noise."""
    return value is not None and delay_ms * (1 - ERR) <= value <= delay_ms + NOISE_MS


def _failed_types(created: int, shipped: int) -> list[dict[str, Any]]:
    return [
        {"event_type": "order.created", "failures": created},
        {"event_type": "order.shipped", "failures": shipped},
    ]


def _cli(env: Installation, *args: str) -> Any:
    result = CliRunner().invoke(
        stats_command, list(args), env=settings_env(env.settings), catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result


def _without(answer: dict[str, Any], fields: tuple[str, ...] = MOMENT) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in fields}


ROUTES_ONE_WORKER: dict[str, tuple[Any, dict[str, Any]]] = {
    "fast": (Respond(200, delay_s=0.05), {}),
    "slow": (Respond(200, delay_s=0.3), {}),
    "flaky": (PerId((Respond(500), Respond(200))), {}),
    "gone": (Respond(404), {}),
    # never answers: every attempt lasts its whole 0.5 s timeout (however loaded the box is),
    # so p95 is above 80% of the timeout; retried once, then waits in the 5m tier
    "hung": (Silent(), {"timeout_s": 0.5}),
}


def _reset_digest_offsets(settings: Settings) -> None:
    """Make the (stopped) workers' group read the whole `attempt-digests` topic again."""
    topic = settings.topic("attempt-digests")
    partitions = load_topology(settings).lane_partitions
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    request = ConsumerGroupTopicPartitions(
        settings.group_id, [TopicPartition(topic, p, 0) for p in range(partitions)]
    )

    def reset() -> bool:
        try:
            admin.alter_consumer_group_offsets([request])[settings.group_id].result(10)
        except Exception:  # the group still has a member until the broker sees it leave
            return False
        return True

    _until(reset, 30, "offsets of attempt-digests reset")


def _read_again(settings: Settings) -> bool:
    """Whether the group has committed every `attempt-digests` record again."""
    topic = settings.topic("attempt-digests")
    partitions = load_topology(settings).lane_partitions
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": settings.group_id}
    )
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = consumer.committed(wanted, timeout=10)
        return all(
            tp.offset >= consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in committed
        )
    finally:
        consumer.close()
