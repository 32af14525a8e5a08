"""The owner's email for each notice (H5, H6, R1): subject and plain text, wrapped and
specific, from the notice's facts. `streams.adapters.smtp` sends it."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from urllib.parse import urlsplit, urlunsplit

from streams.domain.envelope import iso_timestamp
from streams.domain.models import OutcomeClass
from streams.domain.notice_links import reenable_lines, warning_lines
from streams.domain.notices import (
    _CONTROL,
    _WIDTH,
    EarlyWarningNotice,
    Notice,
    ProbeFailedNotice,
    ReenabledNotice,
    SuspensionNotice,
    message_id,
    notice_id,
)

_CLASS_MEANING = {
    OutcomeClass.RETRYABLE: "timeouts, refused or reset connections, or 408/429/5xx answers",
    OutcomeClass.PERMANENT: "answers such as 4xx or 3xx, or an invalid TLS certificate",
    OutcomeClass.FATAL: "the endpoint's host name no longer exists",
    OutcomeClass.SUCCESS: "no failure",
}


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()


def _shown_url(url: str) -> str:
    """The URL without a password in its user info, should an owner have put one there."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = round(seconds / size, 1)
            text = f"{count:g} {unit}"
            return text if count == 1 else text + "s"
    return f"{seconds:g} seconds"


def _status(status: int | None) -> str:
    return "no HTTP response" if status is None else f"HTTP {status}"


def _facts(notice: Notice) -> list[str]:
    name = _one_line(notice.subscription_name)
    return [
        f"Endpoint:        {_shown_url(notice.url)}",
        f"Subscription:    {name} ({notice.subscription_id})",
        f"Tenant:          {notice.tenant_id}",
    ]


def _failures(notice: SuspensionNotice | EarlyWarningNotice) -> list[str]:
    cls = notice.outcome_class
    return [
        f"Failures:        {notice.failure_count} consecutive {cls.value} failures "
        f"({_CLASS_MEANING[cls]})",
        f"Failing since:   {iso_timestamp(notice.first_failure_at)}",
        f"Last status:     {_status(notice.last_status)}",
        f"Last error:      {_one_line(notice.last_error or 'none recorded')}",
    ]


def _para(*sentences: str) -> list[str]:
    """A blank line, then the sentences as one paragraph wrapped for a mail client."""
    return ["", textwrap.fill(" ".join(sentences), _WIDTH)]


def _how_to_reenable(notice: Notice) -> list[str]:
    return [
        *_para("How to re-enable it: fix the endpoint so that it answers with a 2xx status,"),
        "then re-enable the subscription with the hookstream CLI:",
        f"    {notice.reenable_command}",
        "or with the admin API:",
        f"    {notice.reenable_route}",
        *reenable_lines(notice.portal_link),
        *_para(
            "hookstream first sends one signed endpoint.probe delivery. If it succeeds, the",
            "subscription becomes active and the missed events are delivered again, paced.",
            "If it fails, the subscription stays suspended and you are told why.",
        ),
    ]


def _backlog(waiting: int, retention_s: float, suspended_at: int | None) -> list[str]:
    deadline = ""
    if suspended_at is not None:
        limit = iso_timestamp(suspended_at + round(retention_s * 1000))
        deadline = f"Re-enable before {limit} to receive every event it missed."
    return [
        "",
        f"Events waiting for backfill: {waiting}",
        *_para(
            f"hookstream keeps events for {_duration(retention_s)} (its retention window).",
            "Events that arrive while the subscription is suspended are kept too, and are",
            "delivered when you re-enable it. Events older than the retention window are no",
            f"longer backfilled. {deadline}",
        ),
    ]


def _suspended(n: SuspensionNotice) -> tuple[str, list[str]]:
    intro = _para(
        f'hookstream suspended the webhook subscription "{_one_line(n.subscription_name)}"',
        "because its endpoint kept failing. No new deliveries are attempted until you",
        "re-enable it. Nothing is lost.",
    )
    suspended = [f"Suspended at:    {iso_timestamp(n.suspended_at)}"]
    body = [*intro, "", *_facts(n), *_failures(n), *suspended]
    body += _backlog(n.events_waiting, n.retention_s, n.suspended_at) + _how_to_reenable(n)
    return "Endpoint suspended", body


def _warning(n: EarlyWarningNotice) -> tuple[str, list[str]]:
    intro = _para(
        "Deliveries to your webhook endpoint keep failing. The subscription is still active",
        "and hookstream keeps retrying; the next successful delivery ends this warning.",
    )
    body = [*intro, "", *_facts(n), *_failures(n)]
    body += warning_lines(n.portal_link)
    if n.suspend_count is not None:
        after = f"{n.suspend_count} consecutive {n.outcome_class.value} failures"
        if n.suspend_after_s is not None:
            after += f" spanning at least {_duration(n.suspend_after_s)}"
        body += _para(f"If the failures go on, hookstream suspends the subscription after {after}.")
    return "Endpoint failing", body


def _probe_failed(n: ProbeFailedNotice) -> tuple[str, list[str]]:
    intro = _para(
        "hookstream tried to re-enable your webhook subscription, but the probe delivery",
        "(one signed endpoint.probe event) failed. The subscription stays suspended",
        "(reason reenable_probe_failed).",
    )
    probe = [
        f"Probe sent at:   {iso_timestamp(n.probed_at)}",
        f"Probe result:    {n.outcome_class.value} ({_CLASS_MEANING[n.outcome_class]})",
        f"Probe status:    {_status(n.probe_status)}",
        f"Probe error:     {_one_line(n.probe_error or 'none recorded')}",
    ]
    body = [*intro, "", *_facts(n), *probe]
    body += _backlog(n.events_waiting, n.retention_s, n.suspended_at) + _how_to_reenable(n)
    return "Re-enable failed", body


def _reenabled(n: ReenabledNotice) -> tuple[str, list[str]]:
    intro = _para("Your webhook subscription answered hookstream's probe and is active again.")
    body = [
        *intro,
        "",
        *_facts(n),
        f"Re-enabled at:   {iso_timestamp(n.reenabled_at)}",
        f"Backfill:        {n.backfill_total} missed events are being delivered, paced.",
    ]
    return "Endpoint re-enabled", body


def _compose(notice: Notice) -> tuple[str, list[str]]:
    if isinstance(notice, SuspensionNotice):
        return _suspended(notice)
    if isinstance(notice, EarlyWarningNotice):
        return _warning(notice)
    if isinstance(notice, ProbeFailedNotice):
        return _probe_failed(notice)
    return _reenabled(notice)


def render_email(
    notice: Notice,
    *,
    sender: str,
    recipients: Sequence[str],
    message_domain: str = "hookstream.local",
) -> EmailMessage:
    """The plain-text email telling ``recipients`` about ``notice``.

    Message-ID and Date come from the notice alone, so a resend is byte-for-byte the same
    message. ``Auto-Submitted`` keeps vacation responders from answering it.
    """
    if not recipients:
        raise ValueError("an email needs at least one recipient")
    ntf_id = notice_id(notice)
    headline, lines = _compose(notice)
    name = _one_line(notice.subscription_name)
    lines = [*lines[1:], "", "-- ", f"hookstream notification {ntf_id}"]
    message = EmailMessage()
    message["Subject"] = f"[hookstream] {headline}: {name} ({_one_line(_shown_url(notice.url))})"
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Date"] = format_datetime(datetime.fromtimestamp(notice.at / 1000, tz=UTC))
    message["Message-ID"] = message_id(ntf_id, message_domain)
    message["Auto-Submitted"] = "auto-generated"
    message["X-Hookstream-Subscription"] = _one_line(notice.subscription_id)
    message["X-Hookstream-Notification-Id"] = ntf_id
    message["X-Hookstream-Notice"] = notice.KIND.value
    message.set_content("\n".join(lines) + "\n")
    return message
