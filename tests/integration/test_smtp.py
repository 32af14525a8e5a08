"""H5, R1: owner notifications through a real SMTP server and a real HTTP receiver.

The SMTP server is aiosmtpd, started by the test on an ephemeral 127.0.0.1 port
(`tests.smtp_server`); no Kafka is needed. Every check reads the message as the server received
it, parsed back from the bytes on the wire.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from email.utils import getaddresses, parsedate_to_datetime

import orjson
import pytest
from standardwebhooks.webhooks import Webhook

from streams.adapters.http import AiohttpTransport
from streams.adapters.smtp import NotifyError, SmtpSender, parse_smtp_url, send_notification_webhook
from streams.domain.models import Secret
from streams.domain.notice_email import render_email
from streams.domain.notices import notice_id
from tests.receivers import Receiver, Respond, closed_port
from tests.smtp_server import SmtpServer
from tests.unit.test_notices import ERROR, SECRET, SUB, SUSPENDED, suspension, warning

SENDER = "alerts@hookstream.test"
ServerFactory = Callable[..., SmtpServer]


def _suspension_mail(sender: str = SENDER) -> tuple[str, bytes]:
    message = render_email(suspension(), sender=sender, recipients=SUB.owner_emails)
    return str(message["Message-ID"]), message.as_bytes()


async def test_H5_suspension_email_arrives_with_every_fact(smtp_server: ServerFactory) -> None:
    server = smtp_server()
    sender = SmtpSender(parse_smtp_url(server.url(query=f"from={SENDER}")))
    await sender.send(render_email(suspension(), sender=SENDER, recipients=SUB.owner_emails))

    [mail] = await server.wait_for_async(1)
    assert mail.mail_from == SENDER
    assert not mail.tls
    assert mail.rcpt_tos == ("ops@example.com",)
    message = mail.message()
    assert message["Subject"] == (
        "[hookstream] Endpoint suspended: Billing webhooks (https://hooks.example.com/billing)"
    )
    assert getaddresses([message["To"]]) == [("", "ops@example.com")]
    assert message["Message-ID"] == f"<{notice_id(suspension())}@hookstream.local>"
    assert message["X-Hookstream-Notification-Id"] == notice_id(suspension())
    assert message["X-Hookstream-Subscription"] == "sub_42"
    assert parsedate_to_datetime(message["Date"]).timestamp() * 1000 == SUSPENDED
    body = " ".join(message.get_content().split())
    for fact in (
        "https://hooks.example.com/billing",
        "Billing webhooks (sub_42)",
        "25 consecutive retryable failures",
        "Failing since: 2024-05-01T12:00:00.000Z",
        "Last status: HTTP 503",
        ERROR,
        "Events waiting for backfill: 1234",
        "7 days",
        "hookstream subs reenable sub_42",
        "POST /v1/subscriptions/sub_42/reenable",
    ):
        assert fact in body, fact
    assert SECRET.encode() not in mail.data


async def test_H5_a_resend_carries_the_same_message_id(smtp_server: ServerFactory) -> None:
    server = smtp_server()
    sender = SmtpSender(parse_smtp_url(server.url()))
    for _ in range(2):  # as after a crash between sending and recording it
        await sender.send(render_email(suspension(), sender=SENDER, recipients=SUB.owner_emails))
    first, second = await server.wait_for_async(2)
    assert first.message()["Message-ID"] == second.message()["Message-ID"]


async def test_H5_starttls_with_login(smtp_server: ServerFactory) -> None:
    server = smtp_server(tls=True, credentials=("bot", "s3cret pass"))
    assert server.tls is not None
    config = parse_smtp_url(server.url(userinfo="bot:s3cret%20pass@"))
    assert config.starttls
    sender = SmtpSender(config, ssl_context=server.tls.client_context())
    await sender.send(render_email(suspension(), sender=SENDER, recipients=SUB.owner_emails))
    [mail] = await server.wait_for_async(1)
    assert mail.tls
    assert mail.login == "bot"


async def test_H5_implicit_tls(smtp_server: ServerFactory) -> None:
    server = smtp_server(tls=True, implicit_tls=True)
    assert server.tls is not None
    config = parse_smtp_url(server.url())
    assert config.ssl
    sender = SmtpSender(config, ssl_context=server.tls.client_context())
    await sender.send(render_email(suspension(), sender=SENDER, recipients=SUB.owner_emails))
    [mail] = await server.wait_for_async(1)
    assert mail.tls


async def test_H5_a_wrong_password_is_permanent_and_not_echoed(
    smtp_server: ServerFactory,
) -> None:
    server = smtp_server(tls=True, credentials=("bot", "right"))
    assert server.tls is not None
    config = parse_smtp_url(server.url(userinfo="bot:wrongpassword@"))
    sender = SmtpSender(config, ssl_context=server.tls.client_context())
    with pytest.raises(NotifyError) as caught:
        await sender.send(render_email(suspension(), sender=SENDER, recipients=["a@b.test"]))
    assert not caught.value.retryable
    assert caught.value.smtp_code == 535
    assert "wrongpassword" not in str(caught.value)
    assert server.mails == []


async def test_H5_an_untrusted_certificate_is_permanent(smtp_server: ServerFactory) -> None:
    server = smtp_server(tls=True)
    sender = SmtpSender(parse_smtp_url(server.url()))  # the system trust store: self-signed fails
    with pytest.raises(NotifyError, match="certificate") as caught:
        await sender.send(render_email(suspension(), sender=SENDER, recipients=["a@b.test"]))
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("stage", "reply", "retryable"),
    [
        ("rcpt_reply", "550 5.1.1 no such mailbox", False),
        ("data_reply", "554 5.7.1 message rejected", False),
        ("rcpt_reply", "450 4.2.1 mailbox busy, try later", True),
        ("data_reply", "451 4.3.0 temporary local problem", True),
    ],
)
async def test_H5_server_replies_decide_retryable(
    smtp_server: ServerFactory, stage: str, reply: str, retryable: bool
) -> None:
    server = smtp_server(**{stage: reply})
    sender = SmtpSender(parse_smtp_url(server.url()))
    with pytest.raises(NotifyError) as caught:
        await sender.send(render_email(suspension(), sender=SENDER, recipients=["a@b.test"]))
    assert caught.value.retryable is retryable
    assert caught.value.smtp_code == int(reply[:3])
    assert server.mails == []


async def test_H5_a_closed_port_is_retryable() -> None:
    sender = SmtpSender(parse_smtp_url(f"smtp://127.0.0.1:{closed_port()}?timeout=2"))
    with pytest.raises(NotifyError, match="cannot reach") as caught:
        await sender.send(render_email(suspension(), sender=SENDER, recipients=["a@b.test"]))
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


def test_H5_the_server_serves_sync_callers_too(smtp_server: ServerFactory) -> None:
    import smtplib

    server = smtp_server()
    message = render_email(suspension(), sender=SENDER, recipients=["x@y.test"])
    with smtplib.SMTP("127.0.0.1", server.port, timeout=5) as client:
        client.send_message(message)
    [mail] = server.wait_for(1)
    assert mail.message()["X-Hookstream-Subscription"] == "sub_42"


# --- the notification webhook ------------------------------------------------------------------


async def test_H5_notification_webhook_is_signed_with_the_notification_id(
    receiver_factory: Callable[..., Receiver],
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/notify", Respond(204))
    transport = AiohttpTransport()
    try:
        now_ms = int(time.time() * 1000)
        status = await send_notification_webhook(
            transport, url, (Secret(SECRET),), suspension(), now_ms
        )
    finally:
        await transport.aclose()
    assert status == 204
    [request] = receiver.wait_for(1)
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["webhook-id"] == notice_id(suspension())
    payload = Webhook(SECRET).verify(request.body, headers)  # what the owner's code does
    assert payload["type"] == "endpoint.suspended"
    assert orjson.loads(request.body)["data"]["events_waiting"] == 1234
    assert SECRET.encode() not in request.body


@pytest.mark.parametrize(("status", "retryable"), [(503, True), (429, True), (404, False)])
async def test_H5_notification_webhook_failures(
    receiver_factory: Callable[..., Receiver], status: int, retryable: bool
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/notify", Respond(status))
    transport = AiohttpTransport()
    try:
        with pytest.raises(NotifyError) as caught:
            await send_notification_webhook(transport, url, (Secret(SECRET),), suspension(), 1)
    finally:
        await transport.aclose()
    assert caught.value.retryable is retryable
    assert caught.value.http_status == status


async def test_H5_notification_webhook_to_a_closed_port_is_retryable() -> None:
    transport = AiohttpTransport()
    try:
        with pytest.raises(NotifyError) as caught:
            await send_notification_webhook(
                transport,
                f"http://127.0.0.1:{closed_port()}/notify",
                (Secret(SECRET),),
                suspension(),
                1,
            )
    finally:
        await transport.aclose()
    assert caught.value.retryable


async def test_S5_no_valid_secret_means_no_webhook() -> None:
    transport = AiohttpTransport()
    try:
        with pytest.raises(NotifyError, match="no signing secret") as caught:
            await send_notification_webhook(
                transport, "http://127.0.0.1:1/x", (Secret(SECRET, not_after=0),), suspension(), 5
            )
    finally:
        await transport.aclose()
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("n", "http://h.example/" + "p" * 24),  # the stdlib folded this one after "Subject:"
        ("orders", "http://127.0.0.1:38211/hooks/orders-endpoint-for-tenant-acme"),
        ("Billing webhooks", "https://hooks.example.com/a/long/path/for/the/billing/webhook/v2"),
    ],
)
async def test_H6_the_subject_is_one_plain_line_on_the_wire(
    smtp_server: ServerFactory, name: str, url: str
) -> None:
    """H6: the warning's Subject arrives on one line, neither folded after its colon nor
    encoded, so every mail client shows the same text."""
    server = smtp_server()
    sender = SmtpSender(parse_smtp_url(server.url(query=f"from={SENDER}")))
    notice = replace(warning(), subscription_name=name, url=url)
    await sender.send(render_email(notice, sender=SENDER, recipients=SUB.owner_emails))
    [mail] = await server.wait_for_async(1)
    head = mail.data.split(b"\r\n\r\n", 1)[0].decode("ascii")
    [subject] = [line for line in head.splitlines() if line.startswith("Subject:")]
    assert subject == f"Subject: [hookstream] Endpoint failing: {name} ({url})"
    lines = head.splitlines()
    after = lines[lines.index(subject) + 1]
    assert not after.startswith((" ", "\t")), "the Subject was folded"
