"""Endpoint health end to end: real workers, real receivers, real SMTP (H1-H8, D10, R6)."""

from __future__ import annotations

import email
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.domain.models import SubscriptionStatus
from streams.settings import Settings
from tests.integration.health_env import FAST, HealthEnv
from tests.receivers import PerId, Receiver, Respond
from tests.smtp_server import SmtpServer

pytestmark = pytest.mark.integration

ADMIN = "health-test-operator-key"


def _requests(receiver: Receiver, path: str) -> int:
    return len(receiver.requests_to(path))


def test_h1_h2_counter_resets_after_4_failures_and_1_success(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(404))
    with HealthEnv(make_settings(**FAST), tmp_path) as env:
        env.policy(suspend__permanent="5,0s", early_warning_at="100")
        env.start_workers()
        sub = env.subscribe(url)
        env.publish(4)
        env.wait(lambda: _requests(receiver, "/hook") >= 4, 30, "4 failures")
        receiver.route("/hook", Respond(200))
        env.publish(1)
        env.wait(lambda: _requests(receiver, "/hook") >= 5, 30, "1 success")
        receiver.route("/hook", Respond(404))
        env.publish(4)
        env.wait(lambda: _requests(receiver, "/hook") >= 9, 30, "4 more failures")
        time.sleep(3)  # give health time to act: 4 + 4 failures with a reset between
        assert env.status(sub).status is SubscriptionStatus.ACTIVE, "the success reset the count"
        env.publish(1)  # the 5th consecutive failure of the new episode
        suspended = env.wait_suspended(sub)
    assert suspended.status_reason == "auto_suspend:permanent:5"


def test_h2_duration_gate_needs_count_and_minimum_age(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/down", Respond(503))
    with HealthEnv(make_settings(**FAST), tmp_path) as env:
        env.policy(suspend__retryable="25,12s", early_warning_at="1000")
        env.start_workers()
        sub = env.subscribe(url)
        started = time.monotonic()
        env.publish(30)
        # every delivery ends after 2 attempts (one 500 ms retry): 30 exhausted deliveries
        env.wait(lambda: _requests(receiver, "/down") >= 60, 40, "60 attempts")
        elapsed = time.monotonic() - started
        assert elapsed < 12, "the test needs the 30 failures inside the 12 s minimum age"
        assert env.status(sub).status is SubscriptionStatus.ACTIVE, "count reached, age not yet"
        time.sleep(max(0.0, 12.5 - (time.monotonic() - started)))
        env.publish(1)  # the next failure after the minimum age suspends
        suspended = env.wait_suspended(sub)
    assert suspended.status_reason == "auto_suspend:retryable:31"


def test_h3_h5_two_workers_one_suspension_one_email_with_every_field(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    smtp_server: Callable[..., SmtpServer],
    tmp_path: Path,
) -> None:
    mail = smtp_server()
    receiver = receiver_factory()
    url = receiver.route("/gone", Respond(404, body=b"no such webhook handler"))
    settings = make_settings(
        **FAST, smtp_url=mail.url(query="from=alerts@hookstream.test"), admin_token=ADMIN
    )
    with HealthEnv(settings, tmp_path) as env:
        env.policy(suspend__permanent="3,0s", early_warning_at="2")
        env.start_workers(2)
        sub = env.subscribe(url, name="billing hook", owner_emails=["owner@example.com"])
        env.publish(6)
        suspended = env.wait_suspended(sub)
        time.sleep(8)  # time for any duplicate notice to show up
        mails = mail.mails
        # S4 from either worker, whichever owns the subscription's partition: the same record
        auth = {"Authorization": f"Bearer {ADMIN}"}
        views = [w.get(f"/v1/subscriptions/{sub.id}/health", headers=auth) for w in env.workers]
        summaries = [w.get("/v1/health", headers=auth).json() for w in env.workers]
    assert [v.status_code for v in views] == [200, 200]
    records = [v.json() for v in views]
    assert records[0]["health"] == records[1]["health"]
    assert records[0]["status"] == "suspended"
    assert records[0]["health"]["consecutive_failures"] >= 3
    assert all(s["suspended"] == 1 and s["total"] == 1 for s in summaries)
    subjects = [email.message_from_bytes(m.data)["Subject"] for m in mails]
    assert len(mails) == 2, subjects  # one early warning (at 2) and one suspension notice
    parsed = [email.message_from_bytes(m.data) for m in mails]
    notice = next(msg for msg in parsed if "suspended" in msg["Subject"].lower())
    payload = notice.get_payload(decode=True)
    assert isinstance(payload, bytes)
    body = payload.decode()
    needed = (
        url,
        sub.id,
        "billing hook",
        "3 consecutive permanent failures",
        "Failing since:",
        "404",
        "no such webhook handler",
        "Events waiting for backfill:",
        "7 days",
        f"hookstream subs reenable {sub.id}",
        f"/v1/subscriptions/{sub.id}/reenable",
    )
    for text in needed:
        assert text in body, f"{text!r} missing from the suspension email:\n{body}"
    assert all(m.rcpt_tos == ("owner@example.com",) for m in mails)
    # R6: suspension is never deletion: id, secret and filters survive
    assert suspended.id == sub.id
    assert suspended.secrets == sub.secrets
    assert suspended.filters == sub.filters
    assert suspended.suspended_at is not None


def test_h4_suspended_subscription_gets_no_new_deliveries(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/gone", Respond(410))
    with HealthEnv(make_settings(**FAST), tmp_path) as env:
        env.policy(suspend__permanent="2,0s")
        env.start_workers()
        sub = env.subscribe(url)
        env.publish(2)
        env.wait_suspended(sub)
        seen = _requests(receiver, "/gone")
        env.publish(10)
        time.sleep(5)
        assert _requests(receiver, "/gone") == seen, "no delivery after suspension (H4)"


def test_h2_policy_change_takes_effect_without_restart(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/gone", Respond(404))
    with HealthEnv(make_settings(**FAST), tmp_path) as env:
        env.start_workers()  # default policy: 5 permanent failures and 1 h
        sub = env.subscribe(url)
        env.publish(3)
        env.wait(lambda: _requests(receiver, "/gone") >= 3, 30, "3 failures")
        time.sleep(2)
        assert env.status(sub).status is SubscriptionStatus.ACTIVE
        env.policy(suspend__permanent="2,0s")  # published while the worker runs
        time.sleep(3)
        env.publish(1)
        suspended = env.wait_suspended(sub)
    assert suspended.status_reason == "auto_suspend:permanent:4"


def test_d10_threshold_counts_deliveries_not_attempts(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/down", Respond(500))
    settings = make_settings(**{**FAST, "retry_schedule": "200ms,300ms,400ms,500ms"})
    with HealthEnv(settings, tmp_path) as env:
        env.policy(suspend__retryable="3,0s", early_warning_at="1000")
        env.start_workers()
        sub = env.subscribe(url)
        env.publish(2)  # 2 deliveries x 5 attempts = 10 failed attempts, 2 failed deliveries
        env.wait(lambda: _requests(receiver, "/down") >= 10, 30, "10 attempts")
        time.sleep(3)
        assert env.status(sub).status is SubscriptionStatus.ACTIVE, "10 attempts < 3 deliveries"
        env.publish(1)
        suspended = env.wait_suspended(sub)
    assert suspended.status_reason == "auto_suspend:retryable:3"
    assert _requests(receiver, "/down") == 15


def test_h7_breaker_defers_then_delivers_after_recovery_and_flapping_is_not_suspended(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    tmp_path: Path,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(503))
    settings = make_settings(
        retry_schedule="1s,2s",
        retry_window="2m",
        breaker_failures=3,
        breaker_cooldown="2s",
        breaker_max_cooldown="4s",
    )
    with HealthEnv(settings, tmp_path) as env:
        env.policy(suspend__retryable="3,0s", early_warning_at="1000")
        env.start_workers()
        sub = env.subscribe(url, max_in_flight=1)  # one attempt at a time: the trip is seen
        events = env.publish(20)
        time.sleep(4)
        attempts_while_down = _requests(receiver, "/hook")
        assert attempts_while_down < 20, "the open breaker deferred most first attempts"
        receiver.route("/hook", Respond(200))
        env.wait(
            lambda: (
                len(
                    {
                        r.headers["webhook-id"]
                        for r in receiver.requests
                        if r.at and r.path == "/hook"
                    }
                )
                >= 20
            ),
            60,
            "every deferred delivery arrives after recovery",
        )
        assert env.status(sub).status is SubscriptionStatus.ACTIVE, "deferrals never count"
        # a flapping endpoint: every delivery fails once then succeeds: never suspended
        receiver.route("/flap", PerId((Respond(503), Respond(200))))
        flap = env.subscribe(receiver.url("/flap"))
        env.publish(10)
        env.wait(lambda: _requests(receiver, "/flap") >= 20, 60, "flapping deliveries done")
        assert env.status(flap).status is SubscriptionStatus.ACTIVE
    assert len(events) == 20
