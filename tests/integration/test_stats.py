"""O2 end to end: real workers, real receivers with known latencies and outcomes, every figure.

`hookstream worker` processes (the default components, analytics agent included) deliver to
local receivers that answer after a known delay, fail once and then succeed, always 404, or never
answer. The figures come from the analytics tables through the admin API (O2, S2) and
``hookstream stats``, and are checked against what the receivers were told to do and against
the attempt ledger itself.

Timing noise: an attempt's duration is the receiver's delay plus the worker's and the receiver's
own scheduling, on a shared 2-core box. A receiver cannot answer early, so a percentile is at
least its delay less the sketch's 1%; above, the checks allow `NOISE_MS`. The sketch itself is
checked strictly against the exact percentiles of the durations the worker wrote to the ledger:
within its stated 1% (O2).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.adapters.kafka_clients import partition_of
from streams.adapters.topic_reader import scan
from streams.agents.analytics import PEER_PATH, _tallies
from streams.cli.stats import stats as stats_command
from streams.domain.models import Attempt, Event, Lane, Subscription
from streams.domain.sketch import RELATIVE_ACCURACY
from streams.services import keys
from streams.services.audit import all_attempts
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess, settings_env
from tests.receivers import PerId, Receiver, Respond, Silent

pytestmark = pytest.mark.integration

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


@pytest.fixture
def installation(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    receiver_factory: Callable[..., Receiver],
) -> Iterator[Installation]:
    with Installation(make_settings(**SETTINGS), tmp_path, receiver_factory) as env:
        yield env


@pytest.fixture
def chart_like_installation(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    receiver_factory: Callable[..., Receiver],
) -> Iterator[Installation]:
    """Workers bound to every interface, as the Helm chart and docker compose run them: each
    must advertise an address its peers can reach."""
    settings = make_settings(**SETTINGS, web_host="0.0.0.0")
    with Installation(settings, tmp_path, receiver_factory) as env:
        yield env


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


@pytest.mark.timeout(300)  # a worker can take a minute to start on a loaded 2-core box
def test_o2_every_figure_from_a_worker_with_known_latencies_and_outcomes(
    installation: Installation,
) -> None:
    """O2 through the admin API (S2) and ``hookstream stats``, from a real worker's tables."""
    env = installation
    worker = env.worker("w1")
    worker.wait_ready(120)
    env.subscribe(ROUTES_ONE_WORKER)
    _until(
        lambda: all(
            _get(worker, f"/v1/subscriptions/{s.id}").status_code == 200 for s in env.subs.values()
        ),
        30,
        "subscriptions visible",
    )
    env.publish(created=7, shipped=3)  # 10 events, every subscription gets each one
    attempts = {"fast": 10, "slow": 10, "flaky": 20, "gone": 10, "hung": 20}
    reports = _until(
        lambda: _reports_once(worker, env, attempts, {"hung": 10}),
        90,
        "every attempt counted",
        _counted(env, [worker]),
    )
    ledger = env.ledger()
    # One worker, no rebalance: each delivery was attempted exactly as the receivers scripted.
    assert {name: len(atts) for name, atts in ledger.items()} == attempts
    assert {name: r["attempts"] for name, r in reports.items()} == attempts
    # What the agent read: digests, each in the partition of every subscription it holds, and
    # together exactly the ledger's attempts (probe and test sends aside; none here).
    partitions = load_topology(env.settings).lane_partitions
    digested: dict[str, int] = {}
    for msg in scan(env.settings, env.settings.topic("attempt-digests")):
        for sub_id, tally in _tallies(msg.value() or b""):
            assert msg.partition() == partition_of(sub_id, partitions)
            digested[sub_id] = digested.get(sub_id, 0) + tally.attempts
    ids = {s.id: name for name, s in env.subs.items()}
    assert {ids[sub_id]: n for sub_id, n in digested.items()} == attempts

    # Latency: the sketch against the exact percentiles of the ledger's durations (within 1%),
    # and against the receivers' known delays.
    for name, delay in (("fast", 50), ("slow", 300)):
        report = reports[name]
        _within_sketch_error(report["attempt_duration_ms"], [a.duration_ms for a in ledger[name]])
        for key in ("p50", "p95", "p99"):
            assert _near(report["attempt_duration_ms"][key], delay), (name, key)
        # publish to receive: at least the receiver's delay, plus the pipeline's own time
        assert report["latency_ms"]["p50"] >= delay * (1 - ERR)
        assert report["latency_ms"]["p99"] >= report["latency_ms"]["p50"]
        assert not report["latency_warning"] and report["timeout_ms"] == 10000
        assert (report["success_rate"], report["first_attempt_success_rate"]) == (1.0, 1.0)
        assert (report["delivered"], report["failed"], report["average_attempts"]) == (10, 0, 1.0)
        assert _near(report["mean_time_to_deliver_ms"], delay)
        assert report["most_failed_types"] == [] and report["rescued_by_retry"] == 0
        assert sum(d["delivered"] for d in report["daily"]) == 10
        assert {d["success_rate"] for d in report["daily"]} == {1.0}

    flaky = reports["flaky"]  # 500 once, then 200 one retry (1 s, jitter 10%) later
    assert (flaky["successes"], flaky["failures"], flaky["delivered"]) == (10, 10, 10)
    assert flaky["rescued_by_retry"] == 10 and flaky["success_rate"] == 1.0
    assert flaky["first_attempt_success_rate"] == 0.0 and flaky["average_attempts"] == 2.0
    assert 900 <= flaky["mean_time_to_deliver_ms"] <= 1100 + NOISE_MS
    assert flaky["most_failed_types"] == _failed_types(7, 3)
    assert flaky["retry_backlog"] == 0

    gone = reports["gone"]  # 404: permanent, dead at once
    assert (gone["failed"], gone["delivered"], gone["success_rate"]) == (10, 0, 0.0)
    assert gone["average_attempts"] == 1.0 and gone["first_attempt_success_rate"] == 0.0
    assert gone["most_failed_types"] == _failed_types(7, 3)
    assert gone["latency_ms"]["p50"] is None and gone["retry_backlog"] == 0
    assert {d["success_rate"] for d in gone["daily"]} == {0.0}

    hung = reports["hung"]  # timed out twice: every delivery now waits in the 5m tier
    _within_sketch_error(hung["attempt_duration_ms"], [a.duration_ms for a in ledger["hung"]])
    assert hung["attempt_duration_ms"]["p95"] >= 500 * (1 - ERR)
    assert hung["latency_warning"] and hung["timeout_ms"] == 500
    assert hung["retry_backlog"] == 10
    assert (hung["deliveries"], hung["success_rate"], hung["average_attempts"]) == (0, None, None)
    assert hung["first_attempt_success_rate"] == 0.0 and hung["latency_ms"]["p50"] is None
    assert hung["most_failed_types"] == _failed_types(14, 6)
    # the ledger agrees: nothing ended, and 10 retries were made and scheduled again
    assert Counter(a.state.value for a in ledger["hung"]) == {"error": 20}
    assert sum(a.lane is Lane.RETRY for a in ledger["hung"]) == 10

    # The tenant: its subscriptions merged, one row each, the slow one named.
    tenant = _stats(worker, f"/v1/tenants/{env.tenant}/stats")
    assert tenant is not None
    assert tenant["attempts"] == sum(attempts.values())
    assert (tenant["delivered"], tenant["failed"]) == (30, 10)
    assert tenant["success_rate"] == 0.75
    assert tenant["retry_backlog"] == 10
    assert tenant["latency_warnings"] == [env.subs["hung"].id]
    assert tenant["most_failed_types"] == _failed_types(28, 12)
    every = [a.duration_ms for atts in ledger.values() for a in atts]
    _within_sketch_error(tenant["attempt_duration_ms"], every)
    rows = {row["name"]: row for row in tenant["subscriptions"]}
    assert set(rows) == set(env.subs)
    assert rows["hung"]["retry_backlog"] == 10 and rows["hung"]["latency_warning"]
    assert [name for name, row in rows.items() if row["latency_warning"]] == ["hung"]

    # `hookstream stats` asks the worker: the API's answer; with --ledger it folds the ledger
    # itself, with the same code: the same figures.
    url = f"http://127.0.0.1:{worker.port}"
    for name in ("fast", "hung"):
        path = f"/v1/subscriptions/{env.subs[name].id}/stats"
        api = _stats(worker, path)
        assert api is not None
        args = ["--subscription", env.subs[name].id, "--window", "1h", "--json"]
        asked = json.loads(_cli(env, *args, "--worker", url).stdout)
        folded = _cli(env, *args, "--ledger")
        assert _without(asked) == _without(api)
        assert _without(json.loads(folded.stdout)) == _without(api)
    text = _cli(env, "--tenant", env.tenant, "--window", "1h", "--worker", url)
    assert f"{env.subs['fast'].id}  attempts=10 ok=100.0%" in text.stdout
    assert "WARNING: slow" in text.stdout and "retry backlog      10" in text.stdout
    nobody = CliRunner().invoke(
        stats_command,
        ["--subscription", env.subs["gone"].id, "--json", "--worker", "http://127.0.0.1:9"],
        env=settings_env(env.settings),
    )  # nothing listens there: an error, never a topic scan behind the user's back (S6)
    assert nobody.exit_code == 1
    assert "no worker answered at http://127.0.0.1:9" in nobody.output
    assert "--ledger" in nobody.output

    # Tenant isolation (Q6) and input checks (S1).
    _, other_key = keys.create_key(env.settings, f"o{uuid.uuid4().hex[:6]}")
    _until(lambda: _get(worker, "/v1/subscriptions", key=other_key).status_code == 200, 30, "key")
    assert _get(worker, f"/v1/tenants/{env.tenant}/stats", key=other_key).status_code == 404
    fast_path = f"/v1/subscriptions/{env.subs['fast'].id}/stats"
    assert _get(worker, fast_path, key=other_key).status_code == 404
    assert _get(worker, fast_path, window="2w").status_code == 422


ROUTES_TWO_WORKERS: dict[str, tuple[Any, dict[str, Any]]] = {
    "ok": (Respond(200, delay_s=0.02), {}),
    "flaky": (PerId((Respond(500), Respond(200))), {}),
    "down": (Respond(503), {}),
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


@pytest.mark.timeout(600)  # three worker starts, and a group that must settle on a loaded box
def test_o2_s2_the_same_stats_from_either_of_two_workers_after_a_rebalance_and_a_full_reread(
    chart_like_installation: Installation,
) -> None:
    """Issue #6 with O2: a subscription's analytics live with its partition's owner; either of
    two workers answers the same, by asking the owner. Issue #8's retry backlog stays exact
    when a worker restores the tables and reads every digest of the ledger again."""
    env = chart_like_installation
    first = env.worker("w1")
    first.wait_ready(120)
    env.subscribe(ROUTES_TWO_WORKERS)
    env.publish(created=6, shipped=2)
    attempts = {"ok": 8, "flaky": 16, "down": 16}
    before = _until(
        lambda: _reports_once(first, env, attempts, {"down": 8}),
        90,
        "every attempt counted",
        _counted(env, [first]),
    )
    tenant_path = f"/v1/tenants/{env.tenant}/stats"
    tenant_before = _stats(first, tenant_path)
    assert tenant_before is not None and tenant_before["retry_backlog"] == 8

    # Stop the only worker, rewind its group on `attempt-digests` to the start, then start it
    # again next to a second one: partitions move to the new worker, which restores their
    # tables from the changelogs, and both read every digest again.
    first.stop(30)
    _reset_digest_offsets(env.settings)
    first.start()
    second = env.worker("w2")
    for worker in (first, second):
        worker.wait_ready(120)
    # generous: on a loaded 2-core box two Faust workers can take a while to settle their group
    _until(
        lambda: _read_again(env.settings),
        150,
        "the ledger read again",
        _counted(env, [first, second]),
    )

    paths = {name: f"/v1/subscriptions/{sub.id}/stats" for name, sub in env.subs.items()}
    paths["tenant"] = tenant_path
    expected = {**before, "tenant": tenant_before}

    def agreed() -> bool:
        for name, path in paths.items():
            one, two = _stats(first, path), _stats(second, path)
            if one is None or two is None or _without(one) != _without(two):
                return False
            assert _without(one) == _without(expected[name]), name  # nothing counted twice
        return True

    _until(agreed, 90, "both workers answer", _counted(env, [first, second]))
    assert _stats(second, paths["down"])["retry_backlog"] == 8  # type: ignore[index]

    # Exactly one worker holds each subscription; the other asked it.
    for sub in env.subs.values():
        held = [_get(w, PEER_PATH, ids=sub.id, since="0").status_code for w in (first, second)]
        assert sorted(held) == [200, 503], (sub.id, held)
    # The tables are co-partitioned with `attempts`: every value is in its subscription's
    # partition of the changelog, where the owner restores it from.
    partitions = load_topology(env.settings).lane_partitions
    for table in ("analytics-index", "analytics-windows"):
        for msg in scan(env.settings, f"{env.settings.group_id}-{table}-changelog"):
            sub_id = (msg.key() or b"").decode().split("|")[0]
            assert msg.partition() == partition_of(sub_id, partitions), (table, sub_id)
