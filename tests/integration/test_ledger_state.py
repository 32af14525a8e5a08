"""S6 on the real broker: the ledger, dead letters and health read from worker state.

Two `hookstream worker` processes share one installation. Every read of the admin API (a
delivery by id, a subscription's deliveries in cursor pages, dead letters by subscription,
tenant and reason, the health view) is answered the same by either worker: the one that holds
the subscription's partition reads its state, the other forwards to it. Then the owner of one
subscription is killed with ``kill -9`` and the survivor answers the same after the rebalance
(503 with ``Retry-After`` meanwhile, never a wrong answer). A deleted subscription's state and
an entry past its topic's retention disappear; another tenant's objects are 404 on every read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from streams.adapters import codec
from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.adapters.kafka_clients import make_producer, produce
from streams.cli.main import cli as main_cli
from streams.domain.idempotency import delivery_id
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass, Subscription
from streams.services import keys
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess, settings_env
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
SETTINGS: dict[str, Any] = {
    "admin_token": ADMIN,
    "secret_key": "k-" + uuid.uuid4().hex,
    "retry_schedule": "500ms",
    "retry_window": "1m",
    "breaker_failures": 100000,
    "breaker_min_attempts": 1000000,
    "ledger_sweep_interval": 1.0,
}
REBALANCE_S = 150.0
DAY_MS = 86_400_000


def api(worker: WorkerProcess, path: str, key: str = ADMIN, **params: str) -> httpx.Response:
    return httpx.get(
        f"http://127.0.0.1:{worker.port}{path}",
        params=params,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def until(
    check: Callable[[], Any], timeout_s: float, what: str, workers: list[WorkerProcess]
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            logs = "\n".join(w.tail(20) for w in workers)
            raise AssertionError(f"{what}: not within {timeout_s}s\n{logs}")
        time.sleep(0.5)


def pages(worker: WorkerProcess, path: str, key: str = ADMIN, **params: str) -> list[Any] | None:
    """Every item of a cursor-paged list, or None while a partition moves (503)."""
    items: list[Any] = []
    cursor: str | None = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = api(worker, path, key, **query)
        if response.status_code == 503:
            assert response.headers.get("Retry-After"), response.text
            return None
        assert response.status_code == 200, response.text
        body = response.json()
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items


def without_breaker(body: dict[str, Any]) -> dict[str, Any]:
    """A health answer without the breaker states: each worker keeps its own (H8)."""
    return {**body, "subscriptions": [{**s, "breaker": None} for s in body["subscriptions"]]}


class Installation:
    def __init__(self, settings: Settings, root: Path, receivers: Callable[..., Receiver]):
        self.settings = settings
        self.root = root
        self.receivers = receivers
        self.workers: list[WorkerProcess] = []

    def __enter__(self) -> Installation:
        apply_topics(self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop(20)
        delete_topics(self.settings, [s.full_name for s in load_topology(self.settings).topics])

    def worker(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(self.settings, name, self.root).start()
        self.workers.append(worker)
        return worker

    def subscribe(self, tenant: str, status: int) -> Subscription:
        url = self.receivers().route("/hook", Respond(status, body=b"answer %d" % status))
        return create_subscription(self.settings, {"tenant_id": tenant, "url": url})


def old_attempt(sub: Subscription, key: str, started_at: int) -> bytes:
    return codec.encode(
        Attempt(
            delivery_id=key, subscription_id=sub.id, tenant_id=sub.tenant_id,
            event_id="evt_" + key, event_type="order.created", attempt=1, lane=Lane.LIVE,
            started_at=started_at, duration_ms=2.0, outcome=OutcomeClass.SUCCESS,
            reason="http_200", state=DeliveryState.SUCCESS, http_status=200,
        )
    )  # fmt: skip


@pytest.mark.timeout(900)
def test_s6_every_read_answered_the_same_by_either_worker_and_after_kill_9_of_the_owner(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    receiver_factory: Callable[..., Receiver],
) -> None:
    """S6, D7, D8, S4, S2: reads from tables, any worker answers, owner killed, isolation."""
    with Installation(make_settings(**SETTINGS), tmp_path, receiver_factory) as env:
        a, b = f"ta{uuid.uuid4().hex[:6]}", f"tb{uuid.uuid4().hex[:6]}"
        _, key_b = keys.create_key(env.settings, b)
        first, second = env.worker("w1"), env.worker("w2")
        for worker in (first, second):
            worker.wait_ready(120)
        ok, dead, other = env.subscribe(a, 200), env.subscribe(a, 404), env.subscribe(b, 200)
        time.sleep(2)  # the workers' registries see the new subscriptions
        events_a = [make_event(a, "order.created", n) for n in range(7)]
        events_b = [make_event(b, "order.created", n) for n in range(2)]
        publish_events(env.settings, events_a + events_b)
        workers = [first, second]

        def listed(worker: WorkerProcess, sub: Subscription) -> list[Any] | None:
            return pages(worker, f"/v1/subscriptions/{sub.id}/deliveries", limit="3")

        def all_materialised() -> bool:
            counts = [
                [None if (found := listed(w, sub)) is None else len(found) for w in workers]
                for sub in (ok, dead, other)
            ]
            letters = [pages(w, "/v1/dlq", subscription_id=dead.id, limit="2") for w in workers]
            counts.append([None if found is None else len(found) for found in letters])
            print("deliveries ok, dead, other; dead letters:", counts)  # shown on failure
            return counts == [[7, 7], [7, 7], [2, 2], [7, 7]]

        until(all_materialised, 120, "every delivery in the ledger of both workers", workers)

        # a subscription's deliveries, newest first, in cursor pages; by state
        one, two = listed(first, ok), listed(second, ok)
        assert one == two and one is not None
        firsts = [d["first_attempt_at"] for d in one]
        assert firsts == sorted(firsts, reverse=True)
        assert {d["delivery_id"] for d in one} == {delivery_id(e.id, ok.id) for e in events_a}
        assert {d["state"] for d in one} == {"success"}
        dead_listed = pages(first, f"/v1/subscriptions/{dead.id}/deliveries", status="dead")
        assert dead_listed is not None and len(dead_listed) == 7
        assert pages(second, f"/v1/subscriptions/{dead.id}/deliveries", status="success") == []

        # a delivery by id, with every attempt
        key = delivery_id(events_a[0].id, dead.id)
        by_id = [api(w, f"/v1/deliveries/{key}").json() for w in workers]
        assert by_id[0] == by_id[1]
        assert by_id[0]["summary"]["state"] == "dead"
        assert [t["http_status"] for t in by_id[0]["attempts"]] == [404]
        assert by_id[0]["attempts"][0]["response_excerpt"] == "answer 404"

        # dead letters: by subscription, by tenant, by reason and time; one global order
        by_sub = [pages(w, "/v1/dlq", subscription_id=dead.id, limit="2") for w in workers]
        assert by_sub[0] == by_sub[1]
        by_tenant = pages(second, "/v1/dlq", tenant_id=a, limit="3")
        assert by_tenant == by_sub[0]
        assert pages(first, "/v1/dlq", subscription_id=dead.id, reason="http_5") == []
        dead_at = [d["dead_at"] for d in by_sub[0] or []]
        assert dead_at == sorted(dead_at, reverse=True)
        since = pages(first, "/v1/dlq", subscription_id=dead.id, since=str(dead_at[2]))
        assert since is not None and len(since) >= 3

        # the health view: the health agent's records, the same from either worker
        health = [api(w, "/v1/health").json() for w in workers]
        assert without_breaker(health[0]) == without_breaker(health[1])
        record = [api(w, f"/v1/subscriptions/{dead.id}/health").json()["health"] for w in workers]
        assert record[0] == record[1] and record[0]["consecutive_failures"] == 7

        # tenant isolation: another tenant's objects are 404 on every read
        for worker in workers:
            assert api(worker, f"/v1/deliveries/{key}", key_b).status_code == 404
            for path in ("deliveries", "health"):
                got = api(worker, f"/v1/subscriptions/{dead.id}/{path}", key_b)
                assert got.status_code == 404
            assert api(worker, "/v1/dlq", key_b, subscription_id=dead.id).status_code == 404
            assert pages(worker, "/v1/dlq", key_b) == []
            assert pages(worker, "/v1/dlq", key_b, tenant_id=a) == []
            own = api(worker, "/v1/health", key_b).json()["subscriptions"]
            assert [s["subscription_id"] for s in own] == [other.id]
            mine = delivery_id(events_b[0].id, other.id)
            assert api(worker, f"/v1/deliveries/{mine}", key_b).status_code == 200

        # the CLI reads through a worker's API: the same answers (one code path)
        def cli(*args: str) -> Any:
            env_vars = settings_env(env.settings)
            done = CliRunner().invoke(
                main_cli, [*args, "--json", "--worker", f"http://127.0.0.1:{second.port}"],
                env=env_vars,
            )  # fmt: skip
            assert done.exit_code == 0, done.output
            return json.loads(done.output)

        assert cli("deliveries", "show", key) == by_id[0]
        listed_cli = cli("deliveries", "list", "--subscription", ok.id, "--limit", "50")
        assert listed_cli["items"] == one
        assert cli("dlq", "list", "--subscription", dead.id, "--limit", "50")["items"] == by_sub[0]
        assert without_breaker(cli("health", "--tenant", a))["subscriptions"] == [
            s for s in without_breaker(health[0])["subscriptions"] if s["tenant_id"] == a
        ]

        # an entry past its topic's retention disappears (attempts: 7 days)
        retention = int(load_topology(env.settings).get("attempts").config["retention.ms"])
        expiring = f"msg_{uuid.uuid4().hex}"
        producer = make_producer(env.settings)
        started = int(time.time() * 1000) - retention + 45_000
        produce(producer, env.settings.topic("attempts"), ok.id, old_attempt(ok, expiring, started))
        assert producer.flush(15) == 0
        until(
            lambda: api(first, f"/v1/deliveries/{expiring}").status_code == 200,
            40, "the old attempt read", workers,
        )  # fmt: skip
        until(
            lambda: all(api(w, f"/v1/deliveries/{expiring}").status_code == 404 for w in workers),
            120, "the attempt expired with the topic's retention", workers,
        )  # fmt: skip

        # kill -9 of the owner of `ok`'s partition: the other answers the same after the move
        path = f"/v1/subscriptions/{ok.id}/deliveries"
        owner = next(
            w for w in workers
            if api(w, "/internal/ledger", op="deliveries", id=ok.id).status_code == 200
        )  # fmt: skip
        survivor = second if owner is first else first
        before = listed(survivor, ok)
        owner.kill()

        def answered() -> list[Any] | None:
            response = api(survivor, path, limit="3")
            if response.status_code == 503:
                assert response.headers.get("Retry-After")
                return None
            assert response.status_code in (200, 503), response.text
            return listed(survivor, ok)

        after = until(answered, REBALANCE_S, "the survivor answers", [survivor])
        assert after == before
        assert api(survivor, f"/v1/deliveries/{key}").json() == by_id[0]
        assert pages(survivor, "/v1/dlq", subscription_id=dead.id, limit="2") == by_sub[0]

        # a deleted subscription's state disappears
        gone = httpx.delete(
            f"http://127.0.0.1:{survivor.port}/v1/subscriptions/{other.id}",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=30,
        )
        assert gone.status_code == 200, gone.text
        mine = delivery_id(events_b[0].id, other.id)
        until(
            lambda: api(survivor, f"/v1/deliveries/{mine}").status_code == 404,
            60, "the deleted subscription's deliveries gone", [survivor],
        )  # fmt: skip
