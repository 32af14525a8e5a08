"""F4 and H7 on the real broker: a recovered endpoint is neither kept waiting nor flattened.

A backlog of 2,000 deliveries queues for one endpoint (no ``rate_limit``) behind an outage; the
endpoint recovers right after a failed half-open probe, so the backlog waits one full probe
interval, the worst case. The ramp has its defaults (5/s, tripled every second); the outage
is 16-24 s instead of 60 s, with the probe bound at 8 s instead of 60 s (CI time), which makes
the drain-time ratio harder to meet, not easier: a longer wait counts on both sides. The same
scenario runs twice on one worker, with the slow start and without it:

- with ``HOOKSTREAM_BREAKER_MAX_COOLDOWN`` at its 10 min default, the cooldown stops growing at
  the probe bound (8 s) while deliveries wait, and the first backlog delivery arrives within
  the bound plus 5 s of recovery;
- with the ramp, the receiver sees at most the start rate in the first second after the
  breaker closes, and no 100 ms window above the ramp's rate (plus the one token a bucket
  starts a new rate with);
- without it, the backlog lands at once (the storm the ramp prevents);
- with it, the whole backlog still drains within twice the time it takes without it, counted
  from recovery.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.breaker import BreakerState, origin_of
from streams.domain.models import Attempt, DeadLetter, OutcomeClass
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.health_env import HealthEnv
from tests.integration.test_fleet_breaker import history
from tests.integration.workers import WorkerProcess
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
BACKLOG = 2000
START_RATE = 5.0  # HOOKSTREAM_RECOVERY_START_RATE's default
GROWTH = 3.0  # HOOKSTREAM_RECOVERY_GROWTH's default
MAX_RATE = 10000.0  # HOOKSTREAM_RECOVERY_MAX_RATE's default
BOUND_S = 8.0
SETTINGS = {
    "retry_schedule": "1s,2s,3s,4s,5s",  # a failed probe is an attempt: room for a few
    "retry_window": "10m",
    "breaker_failures": 5,
    "breaker_min_attempts": 1000000,
    "breaker_cooldown": "8s",
    "recovery_probe_bound": "8s",
    "recovery_start_rate": START_RATE,
    "recovery_step": "1s",
    "admin_token": ADMIN,
}


@dataclass
class Drain:
    recovered_at: float  # when the receiver started answering 2xx
    closed_at: float  # when the shared breaker closed (its record)
    times: list[float]  # each backlog request's arrival at the receiver, after recovery
    sent: list[float]  # when the worker started each successful attempt (the ledger, D7)

    @property
    def first_s(self) -> float:
        return self.times[0] - self.recovered_at

    @property
    def drain_s(self) -> float:
        return self.times[-1] - self.recovered_at

    def most_in(self, window_s: float) -> int:
        most, lo = 0, 0
        for hi, at in enumerate(self.sent):
            while at - self.sent[lo] >= window_s:
                lo += 1
            most = max(most, hi - lo + 1)
        return most


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s")
        time.sleep(0.2)


def _outage(env: HealthEnv, settings: Settings, receiver: Receiver, name: str) -> Drain:
    url = receiver.route("/hook", Respond(503))
    origin = origin_of(url)
    worker = WorkerProcess(settings, name, env.log_dir).start()
    env.workers.append(worker)
    worker.wait_ready(120)
    sub = create_subscription(settings, {"tenant_id": "acme", "url": url, "filters": ["*"]})
    auth = {"Authorization": f"Bearer {ADMIN}"}
    _wait(
        lambda: worker.get(f"/v1/subscriptions/{sub.id}", headers=auth).status_code == 200,
        60,
        "sub",
    )
    env.publish(BACKLOG)

    def failed_probes() -> int:
        return sum(r.state is BreakerState.OPEN for r in history(settings, origin))

    _wait(lambda: failed_probes() >= 2, 120, "the breaker trips and a probe fails")
    # right after a failed probe (the breaker is open: nothing is in flight): the longest wait
    receiver.route("/hook", Respond(200))
    recovered_at = time.time()

    def delivered() -> set[str]:
        return {
            r.headers["webhook-id"] for r in receiver.requests_to("/hook") if r.at > recovered_at
        }

    try:
        _wait(lambda: len(delivered()) >= BACKLOG, 120, "the backlog drains")
    except AssertionError:
        seen = {r.headers["webhook-id"] for r in receiver.requests_to("/hook")}
        missing = seen - delivered()
        ledger = [
            (a.delivery_id, a.attempt, a.lane.value, a.reason, a.started_at - recovered_at * 1000)
            for msg in scan(settings, settings.topic("attempts"))
            if (a := codec.decode(Attempt, msg.value() or b"")).delivery_id in missing
        ]
        dead = [
            codec.decode(DeadLetter, m.value() or b"").reason
            for m in scan(settings, settings.topic("dlq"))
        ]
        raise AssertionError(f"missing {sorted(missing)}: {ledger}; dlq {dead}") from None
    closed = [r for r in history(settings, origin) if r.state is BreakerState.CLOSED]
    times = sorted(r.at for r in receiver.requests_to("/hook") if r.at > recovered_at)
    sent = sorted(
        a.started_at / 1000
        for msg in scan(settings, settings.topic("attempts"))
        if (a := codec.decode(Attempt, msg.value() or b"")).subscription_id == sub.id
        and a.outcome is OutcomeClass.SUCCESS
    )
    worker.stop(30)
    return Drain(recovered_at, closed[0].changed_at / 1000, times, sent)


@pytest.mark.timeout(600)
def test_f4_h7_a_backlog_after_an_outage_ramps_up_from_the_start_rate_and_waits_boundedly(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    ramped_settings = make_settings(**SETTINGS)
    with HealthEnv(ramped_settings, tmp_path) as env:
        env.policy(suspend__retryable="10000,0s", early_warning_at="10000")
        ramped = _outage(env, ramped_settings, receiver_factory(), "ramped")
        flat = _outage(
            env, make_settings(**SETTINGS, recovery_ramp=False), receiver_factory(), "flat"
        )

    # H7/F4: a bounded wait, and the first successful probe lets delivery resume at once
    for drain in (ramped, flat):
        assert drain.first_s <= BOUND_S + 5, drain.first_s
    # F4: the slow start, judged on when the worker sent each request (the ledger): arrival
    # times at a receiver in the test's own busy process bunch up when its thread is late.
    # The first second carries at most the start rate ...
    first_second = [t for t in ramped.sent if ramped.closed_at <= t < ramped.closed_at + 1.0]
    assert len(first_second) <= START_RATE, first_second
    # ... and no 100 ms window goes above the ramp's rate at that time
    for at in ramped.sent:
        if at < ramped.closed_at:
            continue  # the probe
        steps = math.floor(at + 0.1 - ramped.closed_at)  # the rate at the window's end
        if START_RATE * GROWTH**steps >= MAX_RATE:
            break  # the ramp is over: only the per-origin in-flight cap applies
        allowed = math.ceil(START_RATE * GROWTH**steps * 0.1) + 1
        window = [t for t in ramped.sent if at <= t < at + 0.1]
        assert len(window) <= allowed, (at - ramped.closed_at, len(window), allowed)
    # without the ramp the backlog lands at once: what the ramp prevents
    flat_first = [t for t in flat.sent if flat.closed_at <= t < flat.closed_at + 1.0]
    assert len(flat_first) > 20 * START_RATE, (len(flat_first), len(first_second))
    # and the ramp costs at most twice the drain time, counted from recovery
    assert ramped.drain_s <= 2 * flat.drain_s, (ramped.drain_s, flat.drain_s)
