"""H5, H6, R1, S5: what an endpoint's owner is told, and that it never carries a secret.

Every email is parsed back as a mail client would read it before anything is checked.
"""

from __future__ import annotations

import base64
import email
import email.policy
from dataclasses import replace
from email.message import EmailMessage
from email.utils import parsedate_to_datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.adapters.smtp import SmtpConfig, parse_smtp_url
from streams.domain.models import OutcomeClass, Secret, Subscription
from streams.domain.notice_email import render_email
from streams.domain.notices import (
    ERROR_EXCERPT_CHARS,
    EarlyWarningNotice,
    Notice,
    NoticeKind,
    ProbeFailedNotice,
    ReenabledNotice,
    SuspensionNotice,
    message_id,
    notice_from_notification,
    notice_from_payload,
    notice_id,
    notification_id,
    render_webhook,
    to_notification,
    to_payload,
)
from streams.errors import ConfigError, DecodeError

SECRET = "whsec_" + base64.b64encode(b"owner-secret-do-not-leak!").decode()
SUB = Subscription(
    id="sub_42",
    tenant_id="acme",
    name="Billing webhooks",
    url="https://hooks.example.com/billing",
    filters=("invoice.*",),
    secrets=(Secret(SECRET),),
    owner_emails=("ops@example.com",),
)
FIRST_FAILURE = 1_714_564_800_000  # 2024-05-01T12:00:00Z
SUSPENDED = FIRST_FAILURE + 13 * 3_600_000  # 2024-05-02T01:00:00Z
ERROR = "HTTP 503 from upstream: service unavailable, maintenance window"
WEEK = 7 * 86400.0


def _endpoint(sub: Subscription = SUB) -> dict[str, str]:
    return {
        "subscription_id": sub.id,
        "subscription_name": sub.name,
        "tenant_id": sub.tenant_id,
        "url": sub.url,
    }


def suspension(**changes: object) -> SuspensionNotice:
    notice = SuspensionNotice(
        **_endpoint(),
        outcome_class=OutcomeClass.RETRYABLE,
        failure_count=25,
        first_failure_at=FIRST_FAILURE,
        suspended_at=SUSPENDED,
        last_status=503,
        last_error=ERROR,
        events_waiting=1234,
        retention_s=WEEK,
    )
    return replace(notice, **changes)  # type: ignore[arg-type]  # test overrides by name


def warning() -> EarlyWarningNotice:
    return EarlyWarningNotice(
        **_endpoint(),
        outcome_class=OutcomeClass.PERMANENT,
        failure_count=3,
        first_failure_at=FIRST_FAILURE,
        warned_at=FIRST_FAILURE + 60_000,
        last_status=404,
        last_error="not found",
        suspend_count=5,
        suspend_after_s=3600.0,
    )


def probe_failed() -> ProbeFailedNotice:
    return ProbeFailedNotice(
        **_endpoint(),
        probed_at=SUSPENDED + 86_400_000,
        outcome_class=OutcomeClass.RETRYABLE,
        probe_status=None,
        probe_error="connection_refused: nobody listening",
        suspended_at=SUSPENDED,
        events_waiting=77,
        retention_s=WEEK,
    )


def reenabled() -> ReenabledNotice:
    return ReenabledNotice(
        **_endpoint(), reenabled_at=SUSPENDED + 90_000_000, suspended_at=SUSPENDED, backfill_total=9
    )


ALL: list[Notice] = [suspension(), warning(), probe_failed(), reenabled()]


def _mail(notice: Notice) -> tuple[EmailMessage, str]:
    """Render, serialise and parse back: what the owner's mail client shows, and its text."""
    rendered = render_email(notice, sender="alerts@hookstream.test", recipients=SUB.owner_emails)
    parsed = email.message_from_bytes(rendered.as_bytes(), policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    body = parsed.get_content()
    assert isinstance(body, str)
    assert all(len(line) <= 78 for line in body.splitlines() if ":  " not in line)  # wrapped
    return parsed, " ".join(body.split())  # prose is wrapped: compare words, not lines


# --- H5: the suspension email names every fact ---------------------------------------------------


def test_H5_suspension_email_states_every_required_fact() -> None:
    message, body = _mail(suspension())
    subject = message["Subject"]
    assert (
        subject
        == "[hookstream] Endpoint suspended: Billing webhooks (https://hooks.example.com/billing)"
    )
    for fact in (
        "https://hooks.example.com/billing",  # the endpoint URL
        "sub_42",  # the subscription id
        "Billing webhooks",  # and name
        "25 consecutive retryable failures",  # the failure count and class
        "2024-05-01T12:00:00.000Z",  # the first failure, ISO-8601 UTC
        "2024-05-02T01:00:00.000Z",  # when it was suspended
        "HTTP 503",  # the last status
        ERROR,  # the last error excerpt
        "Events waiting for backfill: 1234",
        "7 days",  # the retention window
        "Re-enable before 2024-05-09T01:00:00.000Z",  # what happens if they wait longer
        "hookstream subs reenable sub_42",
        "POST /v1/subscriptions/sub_42/reenable",
    ):
        assert fact in body, fact


def test_H5_email_headers_are_deterministic_and_name_the_subscription() -> None:
    notice = suspension()
    message, _ = _mail(notice)
    ntf = notification_id("endpoint.suspended", "sub_42", FIRST_FAILURE)
    assert message["Message-ID"] == f"<{ntf}@hookstream.local>"
    assert message["X-Hookstream-Notification-Id"] == ntf
    assert message["X-Hookstream-Subscription"] == "sub_42"
    assert message["From"] == "alerts@hookstream.test"
    assert message["To"] == "ops@example.com"
    assert message["Auto-Submitted"] == "auto-generated"
    assert parsedate_to_datetime(message["Date"]).timestamp() * 1000 == SUSPENDED
    again, _ = _mail(notice)  # a resend after a crash is the same message
    assert again.as_bytes() == message.as_bytes()


def test_H5_error_excerpt_is_capped_at_500_chars() -> None:
    notice = suspension(last_error="x" * 5000)
    assert notice.last_error is not None
    assert len(notice.last_error) == ERROR_EXCERPT_CHARS
    _, body = _mail(notice)
    assert "x" * 5000 not in body


def test_H5_no_status_and_no_error_read_plainly() -> None:
    _, body = _mail(suspension(last_status=None, last_error=None))
    assert "no HTTP response" in body
    assert "none recorded" in body


def test_H5_hostile_names_cannot_inject_headers() -> None:
    _, body = _mail(suspension(subscription_name="Evil\r\nBcc: everyone@example.com"))
    message, _ = _mail(suspension(subscription_name="Evil\r\nBcc: everyone@example.com"))
    assert message["Bcc"] is None
    assert "Evil Bcc: everyone@example.com" in message["Subject"]
    assert "Evil" in body


def test_H5_a_password_in_the_endpoint_url_is_masked() -> None:
    _, body = _mail(suspension(url="https://user:hunter2@hooks.example.com/x"))
    assert "hunter2" not in body
    assert "https://user:***@hooks.example.com/x" in body


def test_H5_email_needs_a_recipient() -> None:
    with pytest.raises(ValueError, match="recipient"):
        render_email(suspension(), sender="a@b.c", recipients=())


# --- H6, R1: the other notices -------------------------------------------------------------------


def test_H6_early_warning_says_still_active_and_when_suspension_comes() -> None:
    message, body = _mail(warning())
    assert message["Subject"].startswith("[hookstream] Endpoint failing: Billing webhooks")
    for fact in (
        "still active",
        "3 consecutive permanent failures",
        "2024-05-01T12:00:00.000Z",
        "HTTP 404",
        "not found",
        "after 5 consecutive permanent failures spanning at least 1 hour",
        "https://hooks.example.com/billing",
        "sub_42",
    ):
        assert fact in body, fact


def test_R1_probe_failure_gives_status_error_and_how_to_retry() -> None:
    message, body = _mail(probe_failed())
    assert message["Subject"].startswith("[hookstream] Re-enable failed: Billing webhooks")
    for fact in (
        "reenable_probe_failed",
        "no HTTP response",
        "connection_refused: nobody listening",
        "Events waiting for backfill: 77",
        "7 days",
        "hookstream subs reenable sub_42",
        "POST /v1/subscriptions/sub_42/reenable",
    ):
        assert fact in body, fact


def test_R1_reenabled_notice_reports_the_backfill() -> None:
    message, body = _mail(reenabled())
    assert message["Subject"].startswith("[hookstream] Endpoint re-enabled")
    assert "9 missed events" in body


# --- S5: no secret anywhere ----------------------------------------------------------------------


@pytest.mark.parametrize("notice", ALL, ids=lambda n: n.KIND.value)
def test_S5_no_secret_in_any_rendering(notice: Notice) -> None:
    assert not any("secret" in name for name in notice.__dataclass_fields__)
    rendered = render_email(notice, sender="a@example.com", recipients=["b@example.com"])
    texts = [
        rendered.as_bytes(),
        render_webhook(notice),
        to_payload(notice).encode(),
        repr(notice).encode(),
    ]
    key = SECRET.removeprefix("whsec_").encode()
    for text in texts:
        assert SECRET.encode() not in text
        assert key not in text


# --- H5: one notification per episode ------------------------------------------------------------


def test_H5_notification_id_is_deterministic_per_kind_subscription_and_episode() -> None:
    one = notification_id("endpoint.suspended", "sub_42", FIRST_FAILURE)
    assert one == notification_id("endpoint.suspended", "sub_42", str(FIRST_FAILURE))
    assert one.startswith("ntf_") and len(one) == 44
    others = {
        notification_id("endpoint.warning", "sub_42", FIRST_FAILURE),
        notification_id("endpoint.suspended", "sub_43", FIRST_FAILURE),
        notification_id("endpoint.suspended", "sub_42", FIRST_FAILURE + 1),
        notification_id("endpoint.suspended", "sub_4", "2" + str(FIRST_FAILURE)),
    }
    assert one not in others and len(others) == 4
    assert notice_id(suspension()) == one
    assert notice_id(suspension(suspended_at=SUSPENDED + 5)) == one  # same failure episode


def test_H5_message_id_is_deterministic_and_well_formed() -> None:
    ntf = notice_id(suspension())
    assert message_id(ntf) == message_id(ntf) == f"<{ntf}@hookstream.local>"
    assert message_id(ntf, "mail.example.com") == f"<{ntf}@mail.example.com>"
    with pytest.raises(ValueError):
        message_id("bad id", "x")


@given(st.text(), st.text(), st.integers())
def test_H5_notification_ids_never_collide_across_field_boundaries(
    kind: str, sub: str, episode: int
) -> None:
    left = notification_id(kind, sub, episode)
    assert left == notification_id(kind, sub, episode)
    assert left != notification_id(kind + "x", sub, episode)
    assert left != notification_id(kind, sub + "x", episode)


# --- the outbox payload and the webhook body ------------------------------------------------------


@pytest.mark.parametrize("notice", ALL, ids=lambda n: n.KIND.value)
def test_H5_payload_round_trips_through_the_outbox(notice: Notice) -> None:
    assert notice_from_payload(notice.KIND.value, to_payload(notice)) == notice
    record = to_notification(notice, SUB.owner_emails)
    assert record.notification_id == notice_id(notice)
    assert record.kind == notice.KIND.value
    assert record.at == notice.at
    assert record.recipients == ("ops@example.com",)
    assert notice_from_notification(record) == notice


@pytest.mark.parametrize(
    ("kind", "payload", "problem"),
    [
        ("endpoint.exploded", "{}", "unknown notification kind"),
        ("endpoint.suspended", "not json", "not JSON"),
        ("endpoint.suspended", "[1]", "not a JSON object"),
        ("endpoint.reenabled", '{"subscription_id": "s"}', "lacks 'subscription_name'"),
    ],
)
def test_H5_bad_payloads_are_decode_errors(kind: str, payload: str, problem: str) -> None:
    with pytest.raises(DecodeError, match=problem) as caught:
        notice_from_payload(kind, payload)
    assert caught.value.reason == "bad_notification"


@pytest.mark.parametrize(
    ("field", "value"),
    [("failure_count", "25"), ("failure_count", True), ("outcome_class", "exploded"), ("url", 3)],
)
def test_H5_payload_fields_are_type_checked(field: str, value: object) -> None:
    data = orjson.loads(to_payload(suspension()))
    data[field] = value
    with pytest.raises(DecodeError, match=field):
        notice_from_payload("endpoint.suspended", orjson.dumps(data).decode())


def test_H5_webhook_body_is_a_standard_webhooks_envelope() -> None:
    body = orjson.loads(render_webhook(suspension()))
    assert set(body) == {"id", "type", "timestamp", "data"}
    assert body["id"] == notice_id(suspension())
    assert body["type"] == "endpoint.suspended"
    assert body["timestamp"] == "2024-05-02T01:00:00.000Z"
    data = body["data"]
    assert data["subscription_id"] == "sub_42"
    assert data["subscription_name"] == "Billing webhooks"
    assert data["tenant_id"] == "acme"
    assert data["url"] == "https://hooks.example.com/billing"
    assert data["outcome_class"] == "retryable"
    assert data["failure_count"] == 25
    assert data["first_failure_at"] == "2024-05-01T12:00:00.000Z"
    assert data["last_status"] == 503
    assert data["last_error"] == ERROR
    assert data["events_waiting"] == 1234
    assert data["retention_s"] == WEEK
    assert data["reenable"] == {
        "command": "hookstream subs reenable sub_42",
        "api": "POST /v1/subscriptions/sub_42/reenable",
    }
    assert b" " not in render_webhook(reenabled()).split(b'"data"')[0]  # compact


@pytest.mark.parametrize("notice", ALL, ids=lambda n: n.KIND.value)
def test_H6_R1_webhook_types(notice: Notice) -> None:
    assert orjson.loads(render_webhook(notice))["type"] == notice.KIND.value
    assert notice.KIND in set(NoticeKind)


# --- H5: HOOKSTREAM_SMTP_URL ---------------------------------------------------------------------

GOOD_URLS = [
    ("smtp://127.0.0.1:1025", SmtpConfig("127.0.0.1", 1025, "hookstream@127.0.0.1")),
    ("smtp://mail.example.com", SmtpConfig("mail.example.com", 25, "hookstream@mail.example.com")),
    (
        "smtps://u%40x.com:p%3Ass@mail.example.com",
        SmtpConfig("mail.example.com", 465, "u@x.com", "u@x.com", "p:ss", ssl=True),
    ),
    (
        "smtp+starttls://bot:pw@mail.example.com?from=alerts@example.com&timeout=5",
        SmtpConfig("mail.example.com", 587, "alerts@example.com", "bot", "pw", True, False, 5.0),
    ),
    ("SMTP://[::1]:2525/", SmtpConfig("::1", 2525, "hookstream@::1")),
]


@pytest.mark.parametrize(("url", "expected"), GOOD_URLS)
def test_H5_parse_smtp_url_good(url: str, expected: SmtpConfig) -> None:
    assert parse_smtp_url(url) == expected


BAD_URLS = [
    ("http://mail.example.com", "scheme"),
    ("smtp://", "no host"),
    ("smtp://mail.example.com:notaport", "port"),
    ("smtp://mail.example.com:70000", "port"),
    ("smtp://u:topsecret@mail.example.com/path", "path"),
    ("smtp://u:topsecret@mail.example.com?from=nobody", "from"),
    ("smtp://u:topsecret@mail.example.com?from=a@b.c&from=d@e.f", "once"),
    ("smtp://u:topsecret@mail.example.com?fromm=a@b.c", "unknown query parameter 'fromm'"),
    ("smtp://u:topsecret@mail.example.com?timeout=soon", "timeout"),
    ("smtp://u:topsecret@mail.example.com?timeout=0", "timeout"),
    ("smtp://:topsecret@mail.example.com", "user name"),
    ("smtp://u:topsecret@[::1", "not a valid URL"),
]


@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_H5_parse_smtp_url_bad_names_the_setting_never_the_password(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        parse_smtp_url(url)
    assert caught.value.setting == "HOOKSTREAM_SMTP_URL"
    assert "HOOKSTREAM_SMTP_URL" in str(caught.value)
    assert "topsecret" not in str(caught.value)


def test_S5_smtp_password_is_never_in_a_repr() -> None:
    config = parse_smtp_url("smtp+starttls://bot:topsecret@mail.example.com")
    assert config.password == "topsecret"
    assert "topsecret" not in repr(config)
    assert "topsecret" not in config.describe()
    assert config.describe() == "smtp+starttls://bot@mail.example.com:587"
