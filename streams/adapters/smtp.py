"""Sending owner notifications: email over SMTP and the notification webhook (SPEC H5, R1).

``HOOKSTREAM_SMTP_URL`` names the mail server; `parse_smtp_url` reads it into an `SmtpConfig`:

- ``smtp://host[:25]``: plain SMTP (a local relay or a test server);
- ``smtp+starttls://host[:587]``: submission, upgraded with STARTTLS before anything is sent;
- ``smtps://host[:465]``: TLS from the first byte;
- ``user:password@`` (percent-encoded) to log in, ``?from=alerts@example.com`` for the sender
  (default: the user name when it is an address, else ``hookstream@<host>``), and
  ``?timeout=30`` for the seconds each SMTP exchange may take.

The password never appears in a repr, a log line or an error message.

`SmtpSender` sends with the standard library's smtplib in a worker thread. Every failure becomes
a `NotifyError` in one place (`_from_smtp`), and ``retryable`` tells the notifier what to do: a
4xx reply, a dropped or refused connection or a timeout may pass, so the notification is tried
again; a 5xx reply (a rejected sender or recipient, a failed login) will not pass by itself.

`send_notification_webhook` POSTs the same facts to a subscription's notification webhook,
signed the Standard Webhooks way with the subscription's secrets and the notification id as
``webhook-id``, through the same injectable `Transport` deliveries use.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

from streams.adapters.http import HttpRequest, Transport
from streams.domain.classify import FAILURE_RULES, classify
from streams.domain.models import FailureKind, OutcomeClass, Secret
from streams.domain.notices import Notice, notice_id, render_webhook
from streams.domain.signing import signature_header, webhook_headers
from streams.errors import ConfigError, HookstreamError, TransportError

__all__ = [
    "NotifyError",
    "SmtpConfig",
    "SmtpSender",
    "parse_smtp_url",
    "send_notification_webhook",
]

log = logging.getLogger(__name__)

SETTING = "HOOKSTREAM_SMTP_URL"
_DEFAULT_PORTS = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}
_QUERY_KEYS = frozenset({"from", "timeout"})


class NotifyError(HookstreamError):
    """A notification could not be sent. ``retryable`` says whether trying again may help.

    ``smtp_code`` is the mail server's reply code and ``http_status`` the notification
    webhook's status, when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        smtp_code: int | None = None,
        http_status: int | None = None,
    ) -> None:
        self.retryable = retryable
        self.smtp_code = smtp_code
        self.http_status = http_status
        super().__init__(message)


# --- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    """Where and how hookstream sends email. ``password`` is kept out of every repr."""

    host: str
    port: int
    sender: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = False
    ssl: bool = False
    timeout_s: float = 30.0

    def describe(self) -> str:
        """The server as a URL without the password, for logs and error messages."""
        scheme = "smtps" if self.ssl else "smtp+starttls" if self.starttls else "smtp"
        user = f"{self.username}@" if self.username else ""
        return f"{scheme}://{user}{self.host}:{self.port}"


def _bad(message: str) -> ConfigError:
    return ConfigError(SETTING, message)


def _sender(query: dict[str, list[str]], username: str | None, host: str) -> str:
    values = query.get("from", [])
    if len(values) > 1:
        raise _bad("give ?from= once")
    sender = values[0] if values else None
    if sender is None:
        return username if username and "@" in username else f"hookstream@{host}"
    if "@" not in sender or any(c.isspace() or c in "<>,;" for c in sender):
        raise _bad("?from= must be one plain address such as alerts@example.com")
    return sender


def _timeout(query: dict[str, list[str]]) -> float:
    values = query.get("timeout", ["30"])
    try:
        timeout = float(values[-1])
    except ValueError:
        raise _bad("?timeout= must be a number of seconds") from None
    if not 0 < timeout <= 300:
        raise _bad("?timeout= must be more than 0 and at most 300 seconds")
    return timeout


def _credentials(username: str | None, password: str | None) -> tuple[str | None, str | None]:
    user = unquote(username) if username else None
    secret = unquote(password) if password is not None else None
    if secret is not None and not user:
        raise _bad("a password needs a user name (user:password@host)")
    return user, secret


def parse_smtp_url(url: str) -> SmtpConfig:
    """Read ``HOOKSTREAM_SMTP_URL``. Raises ConfigError naming the setting and the problem.

    Error messages never repeat the URL, because it may hold a password.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise _bad("not a valid URL, or its port is not a number from 1 to 65535") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise _bad("the scheme must be smtp://, smtp+starttls:// or smtps://")
    if not parts.hostname:
        raise _bad("the URL names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise _bad("the URL must not have a path or a fragment")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - _QUERY_KEYS)
    if unknown:
        raise _bad(f"unknown query parameter {unknown[0]!r} (known: from, timeout)")
    username, password = _credentials(parts.username, parts.password)
    return SmtpConfig(
        host=parts.hostname,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        sender=_sender(query, username, parts.hostname),
        username=username,
        password=password,
        starttls=scheme == "smtp+starttls",
        ssl=scheme == "smtps",
        timeout_s=_timeout(query),
    )


# --- email ------------------------------------------------------------------------------------


def _reply(code: int, text: bytes | str) -> str:
    detail = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return f"{code} {detail}".strip()


def _refused(exc: smtplib.SMTPRecipientsRefused) -> NotifyError:
    codes = [code for code, _ in exc.recipients.values()]
    # One recipient refused for now is reason enough to try the message again later.
    temporary = [code for code in codes if 400 <= code < 500]
    code = temporary[0] if temporary else (codes[0] if codes else None)
    return NotifyError(
        f"the mail server refused every recipient ({len(codes)}), reply codes {sorted(codes)}",
        retryable=bool(temporary),
        smtp_code=code,
    )


def _from_smtp(exc: BaseException, server: str) -> NotifyError:
    """The one place where smtplib, socket and ssl exceptions become `NotifyError`."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return _refused(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        reply = _reply(exc.smtp_code, exc.smtp_error)
        return NotifyError(
            f"{server} answered {reply}",
            retryable=400 <= exc.smtp_code < 500,
            smtp_code=exc.smtp_code,
        )
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return NotifyError(f"{server} closed the connection: {exc}", retryable=True)
    if isinstance(exc, smtplib.SMTPException):
        # What the server cannot do (no STARTTLS, no AUTH method in common): a setup problem.
        return NotifyError(f"{server} cannot take the message: {exc}", retryable=False)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return NotifyError(f"{server} has an invalid TLS certificate: {exc}", retryable=False)
    kind = type(exc).__name__
    return NotifyError(f"cannot reach {server}: {kind}: {exc or 'no detail'}", retryable=True)


class SmtpSender:
    """Sends notification emails through the server of an `SmtpConfig`.

    One connection per message: notifications are rare, and a fresh connection never finds a
    server that silently dropped an idle one. ``ssl_context`` replaces the system's trust
    store, for a server with a private certificate authority.
    """

    def __init__(self, config: SmtpConfig, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._config = config
        self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()

    @property
    def config(self) -> SmtpConfig:
        return self._config

    async def send(self, message: EmailMessage) -> None:
        """Send ``message`` to the recipients in its headers. Raises NotifyError."""
        await asyncio.to_thread(self._send_blocking, message)

    def _connect(self) -> smtplib.SMTP:
        cfg = self._config
        if cfg.ssl:
            return smtplib.SMTP_SSL(cfg.host, cfg.port, timeout=cfg.timeout_s, context=self._ssl)
        return smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout_s)

    def _send_blocking(self, message: EmailMessage) -> None:
        cfg = self._config
        try:
            with self._connect() as smtp:
                if cfg.starttls:
                    smtp.starttls(context=self._ssl)
                if cfg.username is not None and cfg.password is not None:
                    smtp.login(cfg.username, cfg.password)
                refused = smtp.send_message(_for_the_wire(message), from_addr=cfg.sender)
        except (smtplib.SMTPException, OSError) as exc:  # ssl.SSLError and timeouts included
            raise _from_smtp(exc, cfg.describe()) from exc
        if refused:
            # Some owners got it; sending again would repeat it to them, so report and go on.
            log.warning(
                "the mail server refused some recipients of a notification",
                extra={"refused": len(refused), "message_id": message["Message-ID"]},
            )


#: RFC 5322's hard limit on a line. The stdlib folds at 78 and, for some lengths, breaks the
#: Subject right after "Subject:" or quoted-printable-encodes a long URL in it; a notice's
#: headers are far shorter than this, so on the wire they stay on one line each.
_WIRE_LINE_LENGTH = 998


def _for_the_wire(message: EmailMessage) -> EmailMessage:
    """``message`` as sent: the same headers and body, with headers folded only past 998."""
    wire = copy.copy(message)
    wire.policy = message.policy.clone(max_line_length=_WIRE_LINE_LENGTH)
    return wire


# --- the notification webhook -------------------------------------------------------------------


def _retryable_failure(exc: TransportError) -> bool:
    try:
        kind = FailureKind(exc.kind)
    except ValueError:
        return True
    return FAILURE_RULES[kind] is OutcomeClass.RETRYABLE


async def send_notification_webhook(
    transport: Transport,
    url: str,
    secrets: Sequence[Secret],
    notice: Notice,
    now_ms: int,
    *,
    timeout_s: float = 10.0,
) -> int:
    """POST ``notice`` to ``url``, signed with ``secrets``; return the 2xx status.

    The ``webhook-id`` is the notification id, so a receiver drops a resend as it drops a
    repeated delivery. Raises NotifyError for any other status or a failure below HTTP; it is
    retryable exactly when a delivery attempt with the same outcome would be (D5).
    """
    body = render_webhook(notice)
    msg_id = notice_id(notice)
    timestamp_s = now_ms // 1000
    try:
        signature = signature_header(secrets, now_ms, msg_id, timestamp_s, body)
    except ValueError as exc:
        raise NotifyError(str(exc), retryable=False) from exc
    headers = webhook_headers(msg_id, timestamp_s, signature)
    try:
        response = await transport.send(HttpRequest(url, body, headers, timeout_s))
    except TransportError as exc:
        retryable = _retryable_failure(exc)
        raise NotifyError(f"notification webhook failed: {exc}", retryable=retryable) from exc
    verdict = classify(response.status, None)
    if verdict.outcome is not OutcomeClass.SUCCESS:
        raise NotifyError(
            f"notification webhook answered HTTP {response.status}",
            retryable=verdict.outcome is OutcomeClass.RETRYABLE,
            http_status=response.status,
        )
    return response.status
