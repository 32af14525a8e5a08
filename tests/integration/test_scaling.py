"""Horizontal scale on the real broker: workers split the partitions, state survives (X4, H1, H3).

Two `hookstream worker` processes share one group. Each should hold part of the partitions in
both of hookstream's groups: the Faust group (``<group_id>``: the health and control agents and
their tables) and the dispatcher's group (``<group_id>-dispatch``: the delivery lanes). Who holds
what is read from the broker with the admin API. Workers are told apart by the order in which
they join: a member keeps its member id across rebalances.

Health state is then built up for one subscription whose endpoint answers 404 (4 of the 6
permanent failures that suspend it), and the worker that holds that subscription's health
partition is killed with ``kill -9``. The survivor must take over every partition and recover
the record from the table's changelog. The proof is the count: 2 more failures after the kill
suspend the subscription with exactly ``auto_suspend:permanent:6``. A record reset by the kill
would need 6 more failures, and a redelivered outcome counted twice would suspend it one
failure early. Every event must reach every healthy receiver (D1). This counts distinct
``webhook-id`` values, because a kill can cause a redelivery. Last, a third worker joins and the
group rebalances cleanly.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.domain.idempotency import delivery_id
from streams.domain.models import Event, Subscription, SubscriptionStatus
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.health_env import FAST, HealthEnv
from tests.integration.workers import WorkerProcess
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

SUSPEND_AT = 6  # the policy's permanent count for this test
BEFORE_KILL = 4  # failures of the dead endpoint built up before the kill
REBALANCE_S = 150.0  # a dead Faust member leaves the group after its 60 s session timeout

Assignment = dict[str, set[int]]  # member id -> partitions of one topic


def _ids_perpartition_of(prefix: str, partitions: int) -> list[str]:
    """One subscription id for each partition, so every partition carries deliveries."""
    found: dict[int, str] = {}
    for n in itertools.count():
        candidate = f"{prefix}{n}"
        found.setdefault(partition_of(candidate, partitions), candidate)
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise AssertionError("unreachable")


class Groups:
    """Which member of a consumer group holds which partitions of a topic, from the broker."""

    def __init__(self, settings: Settings) -> None:
        self.admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})

    def assignment(self, group: str, topic: str) -> tuple[str, Assignment]:
        described = self.admin.describe_consumer_groups([group])[group].result(timeout=15)
        owned = {
            member.member_id: {
                tp.partition for tp in member.assignment.topic_partitions if tp.topic == topic
            }
            for member in described.members
        }
        return str(described.state.name), owned

    def wait_split(
        self, group: str, topic: str, members: int, partitions: int, timeout_s: float
    ) -> Assignment:
        """Wait until `members` members hold every partition of `topic`, each at least one."""
        deadline = time.monotonic() + timeout_s
        seen: tuple[str, Assignment] = ("", {})
        while time.monotonic() < deadline:
            seen = self.assignment(group, topic)
            state, owned = seen
            held = [p for parts in owned.values() for p in parts]
            if (
                state == "STABLE"
                and len(owned) == members
                and all(owned.values())
                and sorted(held) == list(range(partitions))
            ):
                return owned
            time.sleep(0.5)
        raise AssertionError(f"{group}: not split over {members} members of {topic}: {seen}")


def _newcomer(before: Iterable[str], now: Assignment) -> str:
    (member,) = set(now) - set(before)
    return member


class HealthChangelog:
    """Reads a subscription's latest health record straight from the table's changelog."""

    def __init__(self, settings: Settings, partitions: int) -> None:
        self.settings = settings
        self.topic = f"{settings.group_id}-health-changelog"
        self.partitions = partitions

    def latest(self, subscription_id: str) -> dict[str, Any] | None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        try:
            partition = partition_of(subscription_id, self.partitions)
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), 10)
            consumer.assign([TopicPartition(self.topic, partition, 0)])
            latest: dict[str, Any] | None = None
            position = 0
            while position < high:
                message = consumer.poll(5)
                if message is None or message.error() is not None:
                    break
                position = (message.offset() or 0) + 1
                key, value = message.key(), message.value()
                if key is not None and json.loads(key) == subscription_id and value:
                    latest = json.loads(value)
            return latest
        finally:
            consumer.close()


def _received(receiver: Receiver, path: str) -> set[str]:
    return {r.headers["webhook-id"] for r in receiver.requests_to(path)}


def _expected(events: list[Event], sub: Subscription) -> set[str]:
    return {delivery_id(event.id, sub.id) for event in events}


def _live_successes(worker: WorkerProcess) -> float:
    """The worker's own count of successful live deliveries, from its /metrics (O1)."""
    wanted = 'hookstream_deliveries_total{lane="live",outcome="success"} '
    for line in worker.get("/metrics").text.splitlines():
        if line.startswith(wanted):
            return float(line.removeprefix(wanted))
    return 0.0


def _ready_state(worker: WorkerProcess) -> dict[str, Any]:
    state: dict[str, Any] = worker.get("/readyz").json()
    return state


def _wait_ready(worker: WorkerProcess, timeout_s: float = 60) -> dict[str, Any]:
    """Wait until `worker` says ready (X4). Readiness may lag a rebalance by the time the worker
    takes to read up the ledger partitions it gained (S6); a failure shows the last /readyz."""
    deadline = time.monotonic() + timeout_s
    state = _ready_state(worker)
    while state.get("ready") is not True:
        assert time.monotonic() < deadline, (
            f"not ready within {timeout_s}s: {state}\n{worker.tail(30)}"
        )
        time.sleep(0.3)
        state = _ready_state(worker)
    return state


def _failures(env: HealthEnv, changelog: HealthChangelog, sub: Subscription, count: int) -> None:
    """Wait until the changelog says `count` consecutive failures for `sub`."""

    def reached() -> bool:
        record = changelog.latest(sub.id)
        return record is not None and record["consecutive_failures"] >= count

    env.wait(reached, REBALANCE_S, f"{count} failures in the health changelog")
    record = changelog.latest(sub.id)
    assert record is not None and record["consecutive_failures"] == count, record


@pytest.mark.timeout(600)
def test_x4_two_workers_split_partitions_and_health_survives_kill_9(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    settings = make_settings(**FAST)
    partitions = load_topology(settings).lane_partitions
    faust_group, dispatch_group = settings.group_id, f"{settings.group_id}-dispatch"
    health_topic, routed_topic = settings.topic("health"), settings.topic("routed")
    groups = Groups(settings)
    changelog = HealthChangelog(settings, partitions)
    receiver = receiver_factory()
    published: list[Event] = []

    def publish_and_deliver(count: int, subs: list[Subscription], timeout_s: float) -> None:
        published.extend(env.publish(count))
        for sub in subs:
            wanted, path = _expected(published, sub), sub.url.removeprefix(receiver.url(""))
            env.wait(
                lambda: wanted <= _received(receiver, path),  # noqa: B023  # used at once
                timeout_s,
                f"every event delivered to {sub.id}",
            )

    with HealthEnv(settings, tmp_path) as env:
        env.policy(suspend__permanent=f"{SUSPEND_AT},0s", early_warning_at="100")

        # --- two workers split the partitions of both groups ------------------------------
        env.start_workers(1)
        first_health = groups.wait_split(faust_group, health_topic, 1, partitions, 60)
        first_dispatch = groups.wait_split(dispatch_group, routed_topic, 1, partitions, 60)
        env.start_workers(1)
        health_split = groups.wait_split(faust_group, health_topic, 2, partitions, 120)
        dispatch_split = groups.wait_split(dispatch_group, routed_topic, 2, partitions, 120)
        # who is who: worker0 joined first and kept its member id through the rebalance
        health_of = [next(iter(first_health)), _newcomer(first_health, health_split)]
        dispatch_of = [next(iter(first_dispatch)), _newcomer(first_dispatch, dispatch_split)]
        for worker in env.workers:
            assert _ready_state(worker)["assigned"] is True

        # The victim holds the dead endpoint's health partition, and its dispatch partition
        # too when one worker holds both for some partition.
        both = [health_split[health_of[i]] & dispatch_split[dispatch_of[i]] for i in (0, 1)]
        victim = next((i for i in (0, 1) if both[i]), 0)
        doomed = both[victim] or health_split[health_of[victim]]
        gone_id = next(
            f"sub_gone_{n}"
            for n in itertools.count()
            if partition_of(f"sub_gone_{n}", partitions) in doomed
        )

        healthy = [
            _subscribe(env, receiver, f"/ok/{i}", sub_id, 200)
            for i, sub_id in enumerate(_ids_perpartition_of("sub_ok_", partitions))
        ]
        gone = _subscribe(env, receiver, "/gone", gone_id, 404)
        time.sleep(2)  # the registry of every worker picks up the new subscriptions

        # --- health state builds up while deliveries flow through both workers -------------
        for _ in range(BEFORE_KILL):
            publish_and_deliver(1, [*healthy, gone], 60)
        _failures(env, changelog, gone, BEFORE_KILL)
        before = changelog.latest(gone.id)
        assert before is not None
        assert env.status(gone).status is SubscriptionStatus.ACTIVE
        for worker in env.workers:  # each worker dispatches its own half of the partitions
            assert _live_successes(worker) >= BEFORE_KILL, worker.tail()

        # --- kill -9 the worker holding the dead endpoint's health record -------------------
        env.workers[victim].kill()
        survivor = env.workers[1 - victim]
        publish_and_deliver(1, [gone], REBALANCE_S)  # failure 5, handled by the survivor
        after_kill = groups.wait_split(faust_group, health_topic, 1, partitions, REBALANCE_S)
        assert set(after_kill) == {health_of[1 - victim]}, "the survivor holds every partition"
        groups.wait_split(dispatch_group, routed_topic, 1, partitions, REBALANCE_S)
        _failures(env, changelog, gone, BEFORE_KILL + 1)
        assert env.status(gone).status is SubscriptionStatus.ACTIVE, "5 < 6: not yet"
        publish_and_deliver(1, [gone], 60)  # failure 6: the count continued across the kill
        suspended = env.wait_suspended(gone, 60)
        assert suspended.status_reason == f"auto_suspend:permanent:{SUSPEND_AT}"
        record = changelog.latest(gone.id)
        assert record is not None
        assert record["episode"] == before["episode"], "the same failure episode"
        assert record["first_failure_at"] == before["first_failure_at"]
        assert record["suspended_episode"] == before["episode"]
        assert _received(receiver, "/gone") == _expected(published, gone), "6 failures, no more"
        publish_and_deliver(0, healthy, 60)  # nothing lost on the healthy endpoints (D1)
        _wait_ready(survivor)

        # --- a third worker joins; the group rebalances and deliveries continue ------------
        third = WorkerProcess(settings, "worker2", tmp_path)
        env.workers.append(third.start())
        third.wait_ready(120)
        health_three = groups.wait_split(faust_group, health_topic, 2, partitions, 120)
        groups.wait_split(dispatch_group, routed_topic, 2, partitions, 120)
        assert health_of[1 - victim] in health_three, "the survivor keeps a share"
        publish_and_deliver(3, healthy, 90)
        for worker in (survivor, third):
            state = _wait_ready(worker)
            assert state["assigned"] is True, state
        assert _received(receiver, "/gone") == _expected(published[:SUSPEND_AT], gone), (
            "a suspended subscription gets no new deliveries (H4)"
        )


def _subscribe(
    env: HealthEnv, receiver: Receiver, path: str, sub_id: str, status: int
) -> Subscription:
    url = receiver.route(path, Respond(status))
    data = {"tenant_id": "acme", "url": url, "filters": ["*"], "name": sub_id}
    return create_subscription(env.settings, data, subscription_id=sub_id)
