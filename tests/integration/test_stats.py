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
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.adapters.topic_reader import scan
from streams.agents.analytics import PEER_PATH, _tallies
from streams.cli.stats import stats as stats_command
from streams.domain.models import Lane
from streams.services import keys
from streams.settings import Settings
from tests.integration.stats_env import (
    ERR,
    NOISE_MS,
    ROUTES_ONE_WORKER,
    SETTINGS,
    Installation,
    _cli,
    _counted,
    _failed_types,
    _get,
    _near,
    _read_again,
    _reports_once,
    _reset_digest_offsets,
    _stats,
    _until,
    _within_sketch_error,
    _without,
)
from tests.integration.workers import settings_env
from tests.receivers import PerId, Receiver, Respond

pytestmark = pytest.mark.integration


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
