"""The notifier agent: the `notifications` outbox to email and notification webhooks (H5, H6).

Each notification carries a deterministic id, one per (kind, subscription, failure episode).
The `notices_sent` table remembers the ids already sent, so a redelivered or repeated
notification is dropped: a fleet of workers sends one notice per suspension. The one window
left is a crash after the mail server accepted the message and before the table write; the
resend then carries the same Message-ID, which mail systems use to drop the copy.

A retryable failure (a busy or unreachable mail server, a 5xx from the notification webhook) is
tried again a few times with a growing pause; a permanent one is logged and counted. Either way
the agent moves on: one bad address must not stop every other owner's notices.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from streams import metrics
from streams.adapters.http import Transport
from streams.adapters.kafka_admin import load_topology
from streams.adapters.smtp import NotifyError, SmtpSender, parse_smtp_url, send_notification_webhook
from streams.adapters.ssrf import guarded_transport
from streams.agents.health import RAW, consume_each, pipeline_of
from streams.domain.models import Notification, Subscription
from streams.domain.notice_email import render_email
from streams.domain.notices import Notice, notice_from_notification
from streams.settings import Settings

log = logging.getLogger(__name__)

RETRY_PAUSES_S = (1.0, 5.0, 25.0)


async def _with_retries(what: str, subscription_id: str, action: Any) -> bool:
    """Run ``action`` until it succeeds or fails for good; True when it succeeded."""
    for pause in (*RETRY_PAUSES_S, None):
        try:
            await action()
            return True
        except NotifyError as exc:
            if not exc.retryable or pause is None:
                log.error(
                    "notification not sent",
                    extra={"subscription_id": subscription_id, "channel": what, "error": str(exc)},
                )
                metrics.record_notification(what, "failed")
                return False
            await asyncio.sleep(pause)
    return False


class Notifier:
    def __init__(self, settings: Settings, transport: Transport | None = None) -> None:
        self._settings = settings
        config = parse_smtp_url(settings.smtp_url) if settings.smtp_url else None
        self._smtp = SmtpSender(config) if config is not None else None
        self._sender = config.sender if config is not None else "hookstream@localhost"
        self._transport = transport

    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = guarded_transport(self._settings, max_connections=16)
        return self._transport

    async def deliver(self, note: Notification, notice: Notice, sub: Subscription | None) -> None:
        if self._smtp is not None and note.recipients:
            message = render_email(notice, sender=self._sender, recipients=note.recipients)
            smtp = self._smtp
            if await _with_retries("email", note.subscription_id, lambda: smtp.send(message)):
                metrics.record_notification("email", "sent")
        elif note.recipients:
            log.warning(
                "no SMTP server configured (HOOKSTREAM_SMTP_URL); notice logged only",
                extra={"subscription_id": note.subscription_id, "kind": note.kind},
            )
        if sub is not None and sub.notify_url:
            url, secrets = sub.notify_url, sub.secrets

            async def post() -> None:
                now = int(time.time() * 1000)
                await send_notification_webhook(self.transport(), url, secrets, notice, now)

            if await _with_retries("webhook", note.subscription_id, post):
                metrics.record_notification("webhook", "sent")


def notifier_component(app: Any, settings: Settings) -> None:
    """Register the notifier agent and its de-duplication table."""
    notify_topic = app.topic(settings.topic("notifications"), **RAW)
    partitions = load_topology(settings).lane_partitions
    sent = app.Table(
        "notices_sent", default=None, partitions=partitions, help="notification ids sent (H5)"
    )
    notifier = Notifier(settings)

    @app.agent(notify_topic, name="hookstream-notifier", concurrency=1)  # type: ignore[untyped-decorator]
    async def notifier_agent(stream: Any) -> None:
        registry = pipeline_of(app).registry

        async def handle(note: Notification) -> None:
            if sent.get(note.notification_id) is not None:
                return  # already sent: a redelivery, or a second worker's copy
            notice = notice_from_notification(note)
            await notifier.deliver(note, notice, registry.get(note.subscription_id))
            sent[note.notification_id] = int(time.time() * 1000)

        await consume_each(stream, Notification, handle, registry.ready)
