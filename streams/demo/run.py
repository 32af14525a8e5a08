"""The demo scenario: a local Kafka, the topics, a worker, four receivers, real deliveries.

Receivers: `healthy` (200), `flaky` (500 twice per delivery, then 200), `broken` (always 500)
and `gone` (always 404). The demo publishes events, waits until every delivery is settled, and
prints what happened: delivered, retried, dead-lettered, and signatures verified.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from streams.adapters.kafka_admin import apply_topics
from streams.adapters.local_kafka import LocalKafka
from streams.adapters.secretbox import KEY_FILE, local_key
from streams.demo.receivers import DemoReceivers, Endpoint
from streams.demo.state import (
    notable_log_lines,
    reset_demo_state,
    start_worker,
    stop_left_worker,
    stop_worker,
    worker_dir,
    worker_log,
)
from streams.domain.models import Event, SubscriptionStatus
from streams.services.audit import list_dead_letters
from streams.services.config import set_policy
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription, list_subscriptions
from streams.settings import Settings, load_settings

# name -> (behaviour, event-type filter, number of events of that type)
ENDPOINTS: dict[str, tuple[str, str, str]] = {
    "healthy": ("ok", "*", ""),
    "flaky": ("flaky", "order.*", "order.created"),
    "broken": ("fail", "invoice.*", "invoice.paid"),
    "gone": ("gone", "user.*", "user.signup"),
}
DEMO_OVERRIDES = {
    "topic_prefix": "demo.",
    "group_id": "hookstream-demo",
    "retry_schedule": "1s,2s,4s",
    "retry_window": "5m",
    "allow_private_destinations": True,
    "web_port": 6067,
    # The demo's receivers fail on purpose, many times a second; with the default breaker
    # (5 failures, 30 s cooldown) their retries would crawl for minutes. `broken` fails every
    # attempt (4 per delivery: 400 in a row with the default 100 events), so the breaker is
    # kept shut for the demo (the largest streak the setting allows) and it finishes in seconds.
    "breaker_failures": 100000,
    "breaker_min_attempts": 100000,
    # The owner's portal (U1): the operator signs in with this key, and the suspension notice
    # links to the suspended subscription's page with a link signed by a key derived from it.
    "admin_token": "demo-operator-key",
    "portal_url": "http://127.0.0.1:6067/portal",
}


# The demo's suspension policy: the 404 endpoint is suspended after 5 failed deliveries, with
# no minimum age, so it happens in seconds (the defaults are 5 failures over at least 1 hour).
DEMO_POLICY = {"suspend.permanent": "5,0s", "early_warning_at": "3"}


@dataclass
class Summary:
    published: int
    expected_deliveries: int
    delivered: int
    attempts: int
    retried_then_delivered: int
    dead_lettered: dict[str, int]
    verified: int
    bad_signatures: int
    suspended: dict[str, str]
    notices: list[str]
    seconds: float
    settled: bool
    portal_link: str | None = None  # the signed link of the suspension notice (U1)
    worker_log: str | None = None  # the worker's log file
    worker_exit: int | None = None  # the worker's exit code, when it ended during the demo
    # when the demo fell short: the worker log's warnings, errors and milestones, to say why
    worker_notes: list[str] = field(default_factory=list)

    def shortfalls(self) -> list[str]:
        """What the scenario promised and did not happen; empty when the demo worked."""
        missing = []
        if self.worker_exit is not None:
            missing.append(f"the worker exited with code {self.worker_exit} during the demo")
        if not self.settled:
            missing.append(
                f"deliveries did not settle: {self.delivered} delivered, "
                f"{sum(self.dead_lettered.values())} dead-lettered"
            )
        if self.bad_signatures:
            missing.append(f"{self.bad_signatures} bad signatures")
        if "sub_demo_gone" not in self.suspended:
            missing.append("sub_demo_gone was not suspended")
        if not any(line.startswith("endpoint.suspended") for line in self.notices):
            missing.append("no endpoint.suspended notice arrived")
        return missing


def demo_settings() -> Settings:
    """The demo's settings, with a secret key: HOOKSTREAM_SECRET_KEY, else one generated into
    the data dir (S5: secrets are never stored in the clear by default)."""
    return local_key(load_settings(**DEMO_OVERRIDES))


def _events(per_type: int, run_id: str) -> list[Event]:
    now = int(time.time() * 1000)
    types = [t for _, _, t in ENDPOINTS.values() if t]
    return [
        Event(
            id=f"evt_{run_id}_{etype}_{i}",
            tenant_id="demo",
            type=etype,
            timestamp=now,
            data_json=orjson.dumps({"n": i, "kind": etype}).decode(),
            published_at=now,
        )
        for etype in types
        for i in range(per_type)
    ]


async def _wait_settled(
    settings: Settings,
    receivers: DemoReceivers,
    per_type: int,
    since_ms: int,
    timeout_s: float,
    say: Callable[[str], None],
    worker: subprocess.Popen[bytes],
) -> tuple[dict[str, int], bool]:
    """Poll until every delivery is delivered or dead-lettered; the dead letters by reason, and
    whether everything settled before the timeout (or the worker's end: nothing would)."""
    total_types = sum(1 for _, _, t in ENDPOINTS.values() if t)
    want_delivered = {"healthy": per_type * total_types, "flaky": per_type}
    want_dead = per_type * 2  # broken (exhausted) and gone (404)
    start = time.monotonic()
    deadline = start + timeout_s
    dead: dict[str, int] = {}
    while time.monotonic() < deadline and worker.poll() is None:
        await asyncio.sleep(2)
        done = {n: len(receivers.endpoints[n].delivered) for n in want_delivered}
        letters = await asyncio.to_thread(list_dead_letters, settings, None, None, since_ms)
        dead = {}
        for letter in letters:
            key = letter.reason.split(":")[0]
            dead[key] = dead.get(key, 0) + 1
        say(
            f"  {time.monotonic() - start:3.0f}s  delivered {done}  "
            f"dead-lettered {sum(dead.values())}/{want_dead}"
        )
        if done == want_delivered and sum(dead.values()) >= want_dead:
            return dead, True
    return dead, False


async def _wait_suspension(
    settings: Settings,
    notices: Endpoint,
    say: Callable[[str], None],
    worker: subprocess.Popen[bytes],
    timeout_s: float = 60,
) -> dict[str, str]:
    """Wait until the 404 endpoint is suspended and its owner's notice has arrived (H3, H5)."""
    start = time.monotonic()
    deadline = start + timeout_s
    suspended: dict[str, str] = {}
    while time.monotonic() < deadline and worker.poll() is None:
        subs = await asyncio.to_thread(list_subscriptions, settings, "demo")
        suspended = {
            s.id: s.status_reason or "" for s in subs if s.status is SubscriptionStatus.SUSPENDED
        }
        if suspended and any(b"endpoint.suspended" in body for body in notices.bodies):
            break
        await asyncio.sleep(1)
    waited = time.monotonic() - start
    for sub_id, reason in suspended.items():
        say(f"  suspended {sub_id}: {reason} (seen {waited:.0f}s after the deliveries settled)")
    if not suspended and worker.poll() is None:
        say(f"  no subscription was suspended within {timeout_s:g}s")
    return suspended


def _portal_link(bodies: list[bytes]) -> str | None:
    """The signed portal link of the suspension notice, when it carries one (U1)."""
    for body in bodies:
        notice = orjson.loads(body)
        link = notice.get("data", {}).get("portal_link")
        if notice.get("type") == "endpoint.suspended" and isinstance(link, str):
            return link
    return None


#: What a notice's summary line shows; a warning's threshold says which policy counted it.
_NOTICE_FACTS = (
    "subscription_id",
    "failure_count",
    "last_status",
    "suspend_count",
    "suspend_after_s",
)


def _notice_line(body: bytes) -> str:
    notice = orjson.loads(body)
    data = notice.get("data", {})
    facts = [f"{k}={data[k]}" for k in _NOTICE_FACTS if data.get(k) is not None]
    return f"{notice.get('type')} " + " ".join(facts)


async def _subscribe(
    settings: Settings, receivers: DemoReceivers, notices: Endpoint, say: Callable[[str], None]
) -> None:
    """One subscription per receiver; the gone endpoint's owner also gets notices (H5)."""
    for name, (_, pattern, _) in ENDPOINTS.items():
        data = {
            "tenant_id": "demo",
            "name": name,
            "url": receivers.url(name),
            "filters": [pattern],
            "owner_emails": [f"{name}-owner@example.com"],
        }
        if name == "gone":  # its owner also gets notices as a signed webhook (H5)
            data["notify_url"] = receivers.url("notices")
        sub = await asyncio.to_thread(
            create_subscription, settings, data, subscription_id=f"sub_demo_{name}"
        )
        receivers.endpoints[name].secret = sub.secrets[0].value
        if name == "gone":
            notices.secret = sub.secrets[0].value  # notices are signed with its secret
        say(f"subscription {sub.id}: {pattern:<10} -> {sub.url}")


async def run_demo(
    per_type: int,
    say: Callable[[str], None],
    keep_running: bool,
    *,
    keep_worker: bool = False,
    show: Callable[[Summary], None] | None = None,
) -> Summary:
    """The demo. With ``keep_worker``, when the demo did all it shows, ``show`` prints the
    summary, then the gone endpoint is fixed and the worker and receivers stay up until Ctrl-C,
    so that the suspended subscription can be re-enabled from the portal link, behind its probe,
    with its backfill."""
    configured = load_settings(**DEMO_OVERRIDES).secret_key is not None
    settings = demo_settings()
    began = time.monotonic()
    where = "HOOKSTREAM_SECRET_KEY" if configured else str(settings.data_dir / KEY_FILE)
    say(f"endpoint secrets are encrypted at rest under the key in {where}")
    kafka = LocalKafka(settings, say=say)
    started = kafka.start()
    say(f"kafka ready at {started.bootstrap} ({started.seconds:.1f}s)")
    left = await asyncio.to_thread(stop_left_worker, settings)
    if left is not None:
        say(f"stopped the worker (pid {left}) that an earlier demo left running")
    reset_began = time.monotonic()
    await asyncio.to_thread(reset_demo_state, settings, worker_dir(settings))
    say(
        "the previous demo's topics, consumer groups and tables deleted "
        f"({time.monotonic() - reset_began:.1f}s)"
    )
    plan = apply_topics(settings)
    say(f"topics: {'created/updated' if plan.has_changes else 'up to date'} (prefix demo.)")
    receivers = DemoReceivers()
    await receivers.start()
    for name, (behaviour, _, _) in ENDPOINTS.items():
        await receivers.add(name, behaviour)
    notices = await receivers.add("notices", "notices")
    await asyncio.to_thread(set_policy, settings, DEMO_POLICY)
    say("suspension policy: " + " ".join(f"{k}={v}" for k, v in DEMO_POLICY.items()))
    say(
        f"demo settings, shortened so it ends in seconds: retries after "
        f"{DEMO_OVERRIDES['retry_schedule']} (the default is 1m,5m,30m,2h), the breaker off; "
        "the 404 endpoint is suspended after 5 failed deliveries with no minimum age "
        "(the default asks for 1 hour)"
    )
    await _subscribe(settings, receivers, notices, say)
    worker = start_worker(settings)
    log_path = worker_log(settings)
    say(f"worker started (pid {worker.pid}); log in {log_path}")
    try:
        run_id = uuid.uuid4().hex[:8]
        since_ms = int(time.time() * 1000)
        events = _events(per_type, run_id)
        await asyncio.to_thread(publish_events, settings, events)
        say(f"published {len(events)} events; waiting for every delivery to settle")
        dead, settled = await _wait_settled(
            settings, receivers, per_type, since_ms, 180, say, worker
        )
        suspended = await _wait_suspension(settings, notices, say, worker)
        if worker.poll() is not None:
            say(f"the worker exited (code {worker.returncode}); its log: {log_path}")
        eps = receivers.endpoints
        summary = Summary(
            published=len(events),
            expected_deliveries=len(events) + per_type * 3,
            delivered=sum(len(e.delivered) for n, e in eps.items() if n != "notices"),
            attempts=sum(e.requests for e in eps.values()),
            retried_then_delivered=len(eps["flaky"].delivered),
            dead_lettered=dead,
            verified=sum(e.verified for e in eps.values()),
            bad_signatures=sum(e.bad_signatures for e in eps.values()),
            suspended=suspended,
            notices=[_notice_line(body) for body in notices.bodies],
            seconds=time.monotonic() - began,
            settled=settled,
            portal_link=_portal_link(notices.bodies),
            worker_log=str(log_path),
            worker_exit=worker.poll(),
        )
        if summary.shortfalls():
            summary.worker_notes = await asyncio.to_thread(notable_log_lines, log_path)
        elif keep_worker:
            if show is not None:
                show(summary)
            await _hold_fixed(receivers, settings, say)
        return summary
    finally:
        stop_worker(settings, worker)
        await receivers.stop()
        if not keep_running and not keep_worker and not started.already_running:
            kafka.stop()
            say("kafka stopped (pass --keep-kafka to leave it running)")


async def _hold_fixed(
    receivers: DemoReceivers, settings: Settings, say: Callable[[str], None]
) -> None:
    """The gone endpoint's owner fixes it (it answers 200 from now on); keep the worker and
    the receivers up until Ctrl-C, so that a re-enable from the portal passes its probe."""
    receivers.endpoints["gone"].behaviour = "ok"
    say(
        f"the gone endpoint answers 200 again (its owner fixed it). Open the portal link above "
        f"(or {settings.portal_url}, operator key {DEMO_OVERRIDES['admin_token']}) and press "
        "Re-enable: the probe passes and the backfill sends what it missed. Ctrl-C stops the "
        "worker and the receivers; Kafka keeps running (hookstream kafka stop)."
    )
    # Ctrl-C cancels this task: the end the user asked for, so the demo returns normally
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
