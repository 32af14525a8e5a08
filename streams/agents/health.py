"""Endpoint health: the health and control agents (H1-H6, D10).

Both are Faust agents with changelog-backed tables, keyed by subscription id and co-partitioned
with the dispatch lanes.

- **health** reads `health` (one terminal outcome per delivery, D10), moves the subscription's
  `HealthRecord` with the pure policy (`streams.domain.health`), and asks `control` to suspend
  it when a class's count and minimum age are both reached (H2), or queues an early warning (H6).
  A decision is sent, and acknowledged by Kafka, before the record that remembers it is written,
  so a crash can repeat a decision but never lose one.
- **control** applies state transitions. A suspension is a guarded transition (H3): only an
  active subscription becomes suspended, once per failure episode (the `transitions` table
  remembers the episode key), whatever the number of workers or redeliveries. It writes the new
  version of the subscription (status, status_reason, suspended_at: R6, nothing is deleted), an
  audit record on `control`, the owner's notice on `notifications`, and counts it.

Faust acknowledges a message even when the agent body raises, so every failure is handled
inside the body: an undecodable record is logged and skipped, never retried in a loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import orjson

from streams import metrics
from streams.adapters import codec
from streams.adapters.kafka_admin import load_topology
from streams.adapters.registry import publish_subscription
from streams.domain.health import (
    HealthRecord,
    SuspendDecision,
    WarningDecision,
    apply_outcome,
    reset,
)
from streams.domain.models import (
    ControlEvent,
    HealthOutcome,
    OutcomeClass,
    Subscription,
    SubscriptionStatus,
)
from streams.domain.notices import EarlyWarningNotice, SuspensionNotice, to_notification
from streams.domain.policy import SuspensionPolicy
from streams.domain.recovery import ControlKind
from streams.errors import DecodeError
from streams.lanes.pipeline import Pipeline
from streams.services.archive import count_waiting
from streams.services.portal_links import subscription_link
from streams.settings import Settings

log = logging.getLogger(__name__)
R = TypeVar("R")

SUSPEND_REQUESTED = "suspend_requested"
SUSPENDED = "suspended"
RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}


def _now_ms() -> int:
    return int(time.time() * 1000)


def pipeline_of(app: Any) -> Pipeline:
    pipeline: Pipeline = app.hookstream_pipeline
    return pipeline


def current_policy(pipeline: Pipeline) -> SuspensionPolicy:
    """The suspension policy in force: the live config record, or the defaults."""
    return pipeline.config.policy


def _suspend_request(decision: SuspendDecision, record: HealthRecord) -> ControlEvent:
    payload = {
        "key": decision.key,
        "outcome": decision.outcome_class.value,
        "count": decision.count,
        "episode": decision.episode,
        "first_failure_at": decision.first_failure_at,
        "last_status": record.last_status,
        "last_error": record.last_error,
    }
    return ControlEvent(
        subscription_id=decision.subscription_id,
        kind=SUSPEND_REQUESTED,
        at=decision.at,
        reason=decision.status_reason,
        payload_json=orjson.dumps(payload).decode(),
    )


def _warning_notice(
    decision: WarningDecision,
    record: HealthRecord,
    sub: Subscription,
    policy: SuspensionPolicy,
    settings: Settings,
) -> EarlyWarningNotice:
    worst = record.last_outcome or OutcomeClass.RETRYABLE
    threshold = policy.threshold(worst)
    return EarlyWarningNotice(
        subscription_id=sub.id,
        subscription_name=sub.name,
        tenant_id=sub.tenant_id,
        url=sub.url,
        outcome_class=worst,
        failure_count=decision.consecutive_failures,
        first_failure_at=decision.first_failure_at,
        warned_at=decision.at,
        last_status=record.last_status,
        last_error=record.last_error,
        suspend_count=threshold.count,
        suspend_after_s=threshold.min_age_s,
        portal_link=subscription_link(settings, sub.id, decision.at / 1000),
    )


class HealthAgents:
    """The bodies of the health and control agents; tables and topics come from the app."""

    def __init__(self, app: Any, settings: Settings) -> None:
        partitions = load_topology(settings).lane_partitions
        self.app = app
        self.settings = settings
        self.health_topic = app.topic(settings.topic("health"), **RAW)
        self.control_topic = app.topic(settings.topic("control"), **RAW)
        self.notify_topic = app.topic(settings.topic("notifications"), **RAW)
        self.health = app.Table(
            "health", default=None, partitions=partitions, help="HealthRecord per subscription"
        )
        self.transitions = app.Table(
            "transitions", default=None, partitions=partitions, help="last applied episode"
        )

    @property
    def pipeline(self) -> Pipeline:
        return pipeline_of(self.app)

    async def send(self, topic: Any, key: str, value: bytes) -> None:
        """Send and wait for Kafka's acknowledgement."""
        pending = await topic.send(key=key.encode(), value=value)
        await pending

    async def on_outcome(self, outcome: HealthOutcome) -> None:
        """H1-H3, H6: move the record; ask for a suspension or warn, then remember it."""
        registry = self.pipeline.registry
        policy = current_policy(self.pipeline)
        stored = self.health.get(outcome.subscription_id)
        record = HealthRecord.from_dict(stored) if stored is not None else None
        step = apply_outcome(record, outcome, policy, _now_ms())
        if step.ignored is not None:
            return
        if step.suspend is not None:
            request = _suspend_request(step.suspend, step.record)
            await self.send(self.control_topic, outcome.subscription_id, codec.encode(request))
        sub = registry.get(outcome.subscription_id)
        if step.warn is not None and sub is not None:
            notice = _warning_notice(step.warn, step.record, sub, policy, self.settings)
            note = to_notification(notice, sub.owner_emails)
            await self.send(self.notify_topic, sub.id, codec.encode(note))
        self.health[outcome.subscription_id] = step.record.to_dict()

    async def on_control(self, event: ControlEvent) -> None:
        if event.kind == SUSPEND_REQUESTED:
            await self.suspend(event)
        elif event.kind == ControlKind.REENABLED.value:
            # R1: a re-enabled subscription starts a new life: counters cleared, and failures
            # of deliveries still in flight from before do not open a new episode
            stored = self.health.get(event.subscription_id)
            if stored is not None:
                record = reset(HealthRecord.from_dict(stored), event.at)
                self.health[event.subscription_id] = record.to_dict()

    async def suspend(self, event: ControlEvent) -> None:
        """H3: the guarded active -> suspended transition, once per episode."""
        payload = orjson.loads(event.payload_json)
        key = str(payload["key"])
        if self.transitions.get(event.subscription_id) == key:
            return  # this episode's suspension was already applied (redelivery)
        pipeline = self.pipeline
        sub = pipeline.registry.get(event.subscription_id)
        if sub is None or sub.status is not SubscriptionStatus.ACTIVE:
            self.transitions[event.subscription_id] = key
            return
        suspended = replace(
            sub,
            status=SubscriptionStatus.SUSPENDED,
            status_reason=event.reason,
            suspended_at=event.at,
            updated_at=event.at,
        )
        publish_subscription(pipeline.producer, self.settings, suspended)
        await asyncio.get_running_loop().run_in_executor(None, pipeline.producer.flush, 15)
        await self.send(self.control_topic, sub.id, codec.encode(replace(event, kind=SUSPENDED)))
        waiting = await asyncio.to_thread(count_waiting, self.settings, sub, event.at)
        notice = _suspension_notice(sub, event, payload, waiting, self.settings)
        note = to_notification(notice, sub.owner_emails)
        await self.send(self.notify_topic, sub.id, codec.encode(note))
        metrics.record_suspension(str(payload["outcome"]))
        log.warning(
            "subscription suspended",
            extra={"subscription_id": sub.id, "status_reason": event.reason, "audit": key},
        )
        self.transitions[event.subscription_id] = key


def _suspension_notice(
    sub: Subscription,
    event: ControlEvent,
    payload: dict[str, Any],
    waiting: int,
    settings: Settings,
) -> SuspensionNotice:
    return SuspensionNotice(
        subscription_id=sub.id,
        subscription_name=sub.name,
        tenant_id=sub.tenant_id,
        url=sub.url,
        outcome_class=OutcomeClass(payload["outcome"]),
        failure_count=int(payload["count"]),
        first_failure_at=int(payload["first_failure_at"]),
        suspended_at=event.at,
        events_waiting=waiting,
        retention_s=settings.archive_retention,
        last_status=payload.get("last_status"),
        last_error=payload.get("last_error"),
        portal_link=subscription_link(settings, sub.id, event.at / 1000),
    )


async def consume_each(
    stream: Any,
    record_type: type[R],
    handle: Callable[[R], Awaitable[None]],
    ready: asyncio.Event,
) -> None:
    """The body of a hookstream Faust agent: one record at a time, every failure handled here.

    Faust acknowledges a record even when the body raises, so an undecodable record is logged
    and skipped, and a failing one is logged: no agent crash-loops on one record (Q2).
    """
    await ready.wait()
    async for value in stream:
        try:
            record = codec.decode(record_type, value)
        except DecodeError as exc:
            log.error("undecodable %s skipped: %s", record_type.__name__, exc)
            continue
        try:
            await handle(record)
        except Exception:
            log.exception(
                "%s not applied",
                record_type.__name__,
                extra={"subscription_id": getattr(record, "subscription_id", None)},
            )


def health_component(app: Any, settings: Settings) -> None:
    """Register the health and control agents and their tables on the worker's app."""
    agents = HealthAgents(app, settings)
    app.hookstream_health = agents  # its table answers the health view (S4, S6)
    ready = agents.pipeline.registry.ready

    @app.agent(agents.health_topic, name="hookstream-health", concurrency=1)  # type: ignore[untyped-decorator]
    async def health_agent(stream: Any) -> None:
        await consume_each(stream, HealthOutcome, agents.on_outcome, ready)

    @app.agent(agents.control_topic, name="hookstream-control", concurrency=1)  # type: ignore[untyped-decorator]
    async def control_agent(stream: Any) -> None:
        await consume_each(stream, ControlEvent, agents.on_control, ready)
