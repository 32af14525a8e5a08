"""H8 on the real broker: one circuit breaker per origin for a fleet of three workers.

Three `hookstream worker` processes share twelve subscriptions, one per partition, that all
point at one receiver origin. The origin answers 503, then recovers. The breakers topic is read
back in log order (the history every worker applied), and each receiver request is placed in it:

- after the trip, every worker stops within 1 s, and fewer than 50 attempts start once the trip
  has reached the whole fleet (at least 50 ms, or as long as the slowest worker took to read it,
  from the workers' own logs: under CI load that can be longer);
- each cooldown ends with exactly one half-open probe for the whole fleet, and no other
  request reaches the origin while it is open;
- a worker killed with ``kill -9`` and restarted while the origin is open sends it nothing
  outside a half-open probe (it reads the open breaker before its first delivery);
- the API and ``/metrics`` show the same breaker state on every worker (S4, O1);
- after recovery every delivery arrives and every worker delivers again.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.adapters import codec
from streams.adapters.kafka_clients import partition_of
from streams.adapters.topic_reader import scan
from streams.cli.main import cli
from streams.domain.breaker import BreakerState, origin_of
from streams.domain.fleet_breaker import BreakerRecord, FleetView
from streams.domain.models import Attempt, Subscription
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.health_env import HealthEnv
from tests.integration.workers import WorkerProcess, settings_env
from tests.receivers import Receiver, RecordedRequest, Respond

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
PARTITIONS = 12
EVENTS = 10
SETTINGS = {
    "retry_schedule": "1s,2s,3s,4s,5s",  # a failed probe is an attempt: room for a few
    "retry_window": "10m",
    "breaker_failures": 5,
    "breaker_min_attempts": 1000000,
    "breaker_cooldown": "2s",
    "breaker_max_cooldown": "4s",
    "recovery_probe_bound": "4s",
    "admin_token": ADMIN,
}
#: H8's bound on what reaches a dead origin after the trip, fleet-wide.
AFTER_TRIP_S = 1.0
AFTER_TRIP_ATTEMPTS = 50
#: How long a written breaker record takes to reach the other workers, with room to spare
#: (the reader waits at most 20 ms for new records, the writer lingers 1 ms).
PROPAGATION_MS = 50
#: Clock readings of the receiver and the workers (one machine) may differ by scheduling.
SLACK_S = 0.05


def _ids_per_partition(prefix: str) -> list[str]:
    found: dict[int, str] = {}
    for n in itertools.count():
        candidate = f"{prefix}{n}"
        found.setdefault(partition_of(candidate, PARTITIONS), candidate)
        if len(found) == PARTITIONS:
            return [found[p] for p in range(PARTITIONS)]
    raise AssertionError("unreachable")


def history(settings: Settings, origin: str) -> list[BreakerRecord]:
    """The records of ``origin`` every worker applied, in log order."""
    view = FleetView()
    applied: list[BreakerRecord] = []
    for msg in scan(settings, settings.topic("breakers")):
        record = codec.decode(BreakerRecord, msg.value() or b"")
        if record.origin == origin and view.apply(record):
            applied.append(record)
    return applied


def started_after(settings: Settings, since_ms: int, until_ms: int) -> list[int]:
    """When each attempt of the ledger (D7) started, for those started in (since, until)."""
    found = []
    for msg in scan(settings, settings.topic("attempts")):
        attempt = codec.decode(Attempt, msg.value() or b"")
        if since_ms < attempt.started_at < until_ms:
            found.append(attempt.started_at)
    return sorted(found)


def delivered_since(receiver: Receiver, since: float) -> set[str]:
    """The deliveries (webhook ids) that reached the receiver since ``since``."""
    return {r.headers["webhook-id"] for r in receiver.requests_to("/dead") if r.at > since}


def _metric(worker: WorkerProcess, name: str, **labels: str) -> float:
    text = worker.get("/metrics").text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _gauge_shows_one_open(worker: WorkerProcess) -> bool:
    """The fleet's one origin is open or half-open, and not closed (O1, H8)."""
    states = {s: _metric(worker, "hookstream_breakers", state=s) for s in BreakerState}
    return states[BreakerState.CLOSED] == 0 and sum(states.values()) == 1


def _cli_breakers(settings: Settings, worker: WorkerProcess) -> set[str]:
    """The breaker states `hookstream health --json`, asking ``worker``, shows (S4)."""
    url = f"http://127.0.0.1:{worker.port}"
    args = ["health", "--json", "--worker", url]
    result = CliRunner().invoke(cli, args, env=settings_env(settings))
    assert result.exit_code == 0, result.output
    return {view["breaker"] for view in json.loads(result.output)["subscriptions"]}


def _api_breaker(worker: WorkerProcess, sub: Subscription) -> str:
    reply = worker.get(
        f"/v1/subscriptions/{sub.id}/health", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert reply.status_code == 200, reply.text
    state: str = reply.json()["breaker"]
    return state


def _outside_windows(times: list[float], applied: list[BreakerRecord], slack: float) -> list[float]:
    """The times that fall in no half-open period of ``applied`` (the probe's window runs from
    its claim to the record that ended it), widened by ``slack`` seconds each side."""
    windows = [
        (rec.changed_at / 1000 - slack, nxt.changed_at / 1000 + slack)
        for rec, nxt in itertools.pairwise(applied)
        if rec.state is BreakerState.HALF_OPEN
    ]
    if applied and applied[-1].state is BreakerState.HALF_OPEN:  # a probe still out
        windows.append((applied[-1].changed_at / 1000 - slack, math.inf))
    return [t for t in times if not any(lo <= t <= hi for lo, hi in windows)]


def _outside_probes(requests: list[RecordedRequest], applied: list[BreakerRecord]) -> list[float]:
    """Receiver log times of `requests` that fall in no half-open period of ``applied``."""
    return _outside_windows([r.at for r in requests], applied, SLACK_S)


def _trip_read_at(worker: WorkerProcess, origin: str) -> int | None:
    """When ``worker`` read the fleet's trip of ``origin`` (ms), from its log: the line it
    writes once the record is in its view (`FleetBreakers._applied`)."""
    for line in worker.log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("origin") == origin and str(entry.get("msg", "")).startswith(
            "breaker open (version 1,"
        ):
            return int(datetime.fromisoformat(entry["ts"]).timestamp() * 1000)
    return None


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s")
        time.sleep(0.3)


@pytest.mark.timeout(600)
def test_h8_three_workers_share_one_breaker_per_origin_across_kill_9_and_recovery(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/dead", Respond(503))
    origin = origin_of(url)
    settings = make_settings(**SETTINGS)
    with HealthEnv(settings, tmp_path) as env:
        env.policy(suspend__retryable="10000,0s", early_warning_at="10000")
        env.start_workers(3)
        subs = [
            create_subscription(
                settings, {"tenant_id": "acme", "url": url, "filters": ["*"]}, subscription_id=sid
            )
            for sid in _ids_per_partition("fleet-")
        ]
        _wait(
            lambda: all(
                w.get(
                    f"/v1/subscriptions/{s.id}", headers={"Authorization": f"Bearer {ADMIN}"}
                ).status_code
                == 200
                for w in env.workers
                for s in subs
            ),
            60,
            "every worker knows every subscription",
        )
        env.publish(EVENTS)
        total = EVENTS * len(subs)

        # --- the trip ------------------------------------------------------------------------
        _wait(lambda: len(history(settings, origin)) >= 1, 90, "the breaker trips")
        trip = history(settings, origin)[0]
        assert trip.state is BreakerState.OPEN and trip.version == 1
        trip_at = trip.changed_at / 1000
        _wait(
            lambda: all(_trip_read_at(w, origin) is not None for w in env.workers),
            10,
            "every worker reads the trip",
        )
        read_at = {w.log_path.name: _trip_read_at(w, origin) for w in env.workers}
        propagation_ms = max(
            [PROPAGATION_MS] + [t - trip.changed_at for t in read_at.values() if t is not None]
        )
        print(f"H8: trip at {trip.changed_at}, read by the workers at {read_at}")

        # the breaker view is the fleet's: every worker answers open (or half-open) at once,
        # and so does the CLI, whichever worker it asks
        for worker in env.workers:
            assert _cli_breakers(settings, worker) <= {"open", "half_open"}
            assert _api_breaker(worker, subs[0]) in ("open", "half_open")
            _wait(
                functools.partial(_gauge_shows_one_open, worker), 10, "the gauge: one open origin"
            )

        # --- kill -9 one worker while the origin is open, start it again -------------------------
        _wait(
            lambda: sum(r.state is BreakerState.HALF_OPEN for r in history(settings, origin)) >= 2,
            60,
            "two probes",
        )
        victim = env.workers[1]
        victim.kill()
        reborn = WorkerProcess(settings, "worker1-reborn", tmp_path).start()
        env.workers[1] = reborn
        reborn.wait_ready(120)
        restarted_at = time.time()
        assert _api_breaker(reborn, subs[0]) in ("open", "half_open"), "it read the open breaker"
        _wait(
            lambda: any(
                r.state is BreakerState.HALF_OPEN and r.changed_at / 1000 > restarted_at + 10
                for r in history(settings, origin)
            ),
            90,
            "probes go on after the restarted worker took its partitions",
        )

        # --- recovery ------------------------------------------------------------------------
        cut = time.time()  # what happened before it is judged, with every record it caused
        cut_ms = int(cut * 1000)
        time.sleep(1.0)
        applied = history(settings, origin)
        down = [r for r in receiver.requests_to("/dead") if r.at < cut]
        receiver.route("/dead", Respond(200))
        recovered = time.time()
        _wait(
            lambda: len(delivered_since(receiver, recovered)) >= total,
            180,
            "every delivery arrives after recovery",
        )
        final = history(settings, origin)
        assert final[-1].state is BreakerState.CLOSED
        # F4: one ramp for the fleet, not one per worker: the first second after the close
        # carries at most the start rate (5/s by default), three workers together
        closed_at = final[-1].changed_at / 1000
        first_second = [
            r.at for r in receiver.requests_to("/dead") if closed_at <= r.at < closed_at + 1.0
        ]
        assert len(first_second) <= settings.recovery_start_rate, first_second

        # H8: what reached the dead origin after the trip, and one probe per cooldown
        after_trip = [r for r in down if r.at > trip_at + SLACK_S]
        # Whether a request was sent outside a probe window is judged on when the worker started
        # it (the ledger, on the workers' clock, the one the breaker records use), not on when
        # the test's receiver thread logged it: under CI load that thread falls behind and logs
        # a backlog of requests in one millisecond. That is the likely cause of the one burst
        # of three requests "in the same millisecond", seconds after the trip, seen in CI once:
        # this check on send times would have told.
        stray_sent = [
            t / 1000
            for t in started_after(settings, trip.changed_at + int(AFTER_TRIP_S * 1000), cut_ms)
        ]
        stray = _outside_windows(stray_sent, applied, 0.0)
        assert stray == [], f"attempts sent to the open origin outside probe windows: {stray}"
        # the receiver's clock only for the record: CI once logged 13 requests in one
        # millisecond outside the windows while the ledger above showed every one of them sent
        # inside a window, so a bound on these would test the test's own receiver thread
        logged = [t for t in _outside_probes(after_trip, applied) if t > trip_at + AFTER_TRIP_S]
        print(f"H8: {len(logged)} requests logged outside probe windows after the trip: {logged}")
        # attempts started after the trip, from the ledger (those already in flight when it
        # tripped arrive after it too, but were sent before it)
        first_claim = next(r for r in applied if r.state is BreakerState.HALF_OPEN)
        further = [
            t - trip.changed_at
            for t in started_after(settings, trip.changed_at, first_claim.changed_at)
        ]
        print(f"H8: {len(further)} attempts started after the trip, at +ms {further}")
        assert all(offset <= AFTER_TRIP_S * 1000 for offset in further), further
        # a worker cannot stop before it has read the trip: attempts it started within the
        # topic's propagation time (its first burst to a host it has not heard from yet) are
        # in flight at the trip; the bound counts those started once every worker read it
        # (CI once counted 52 started after a fixed 50 ms, on a box too busy for that figure)
        late = [offset for offset in further if offset > propagation_ms]
        assert len(late) < AFTER_TRIP_ATTEMPTS, further
        burst = [t for t in _outside_probes(after_trip, applied) if t <= trip_at + AFTER_TRIP_S]
        probes = 0
        for claim, ended in itertools.pairwise(applied):
            if claim.state is not BreakerState.HALF_OPEN or ended.changed_at / 1000 >= cut:
                continue
            probes += 1
            inside = [
                r
                for r in down
                if claim.changed_at / 1000 - SLACK_S <= r.at <= ended.changed_at / 1000 + SLACK_S
            ]
            assert len(inside) == 1, f"one probe per cooldown, fleet-wide: {claim}, {ended}"
        assert probes >= 3
        assert len(after_trip) == probes + len(burst) + len(logged), "every other one was a probe"

        # every worker delivers again, and all show the closed breaker, as does the CLI
        for worker in env.workers:
            assert _cli_breakers(settings, worker) == {"closed"}
            assert _api_breaker(worker, subs[0]) == "closed"
            assert _metric(worker, "hookstream_breakers", state="closed") == 1
            delivered = _metric(
                worker, "hookstream_deliveries_total", outcome="success", lane="retry"
            ) + _metric(worker, "hookstream_deliveries_total", outcome="success", lane="live")
            assert delivered > 0, f"{worker.log_path.name} delivers again"
