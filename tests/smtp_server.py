"""A real SMTP server for hookstream's notification tests (aiosmtpd).

`SmtpServer` listens on an ephemeral port on 127.0.0.1, in a background thread with its own
event loop, and keeps every message it accepts. It serves sync and async tests alike, and tests
that run a hookstream worker in another process: give the worker ``server.url`` as
``HOOKSTREAM_SMTP_URL`` and wait here for what it sent::

    def test_x(smtp_server):
        server = smtp_server()
        ...  # send through server.url
        [mail] = server.wait_for(1)
        assert mail.message()["Subject"].startswith("[hookstream]")

Options: ``tls`` serves STARTTLS (``smtp+starttls://``) or, with ``implicit_tls=True``, TLS from
the first byte (``smtps://``); ``credentials`` requires a login (only over TLS); ``rcpt_reply``
and ``data_reply`` answer RCPT TO or DATA with a scripted reply such as ``"550 5.7.1 no"``,
and can be changed while the server runs.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.receivers import HOST, TlsFiles, make_self_signed


@dataclass(frozen=True)
class ReceivedMail:
    """One message the server accepted, with its envelope and how it arrived."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes
    tls: bool
    login: str | None

    def message(self) -> EmailMessage:
        """The message parsed back, as a mail client would read it."""
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self._server = server

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        reply = self._server.rcpt_reply
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        reply = self._server.data_reply
        if reply is not None:
            return reply
        content = envelope.original_content or b""
        login = session.auth_data if session.authenticated else None
        transport = server.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        self._server._record(
            ReceivedMail(
                mail_from=str(envelope.mail_from),
                rcpt_tos=tuple(envelope.rcpt_tos),
                data=content,
                tls=session.ssl is not None or ssl_object is not None,
                login=login.decode() if isinstance(login, bytes) else None,
            )
        )
        return "250 Message accepted"


class _Controller(Controller):
    """aiosmtpd's threaded controller, bound to an ephemeral port chosen by the kernel."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]  # aiosmtpd leaves it untyped


class SmtpServer:
    """A real SMTP server on 127.0.0.1 that records what it accepts."""

    def __init__(
        self,
        *,
        tls: TlsFiles | None = None,
        implicit_tls: bool = False,
        credentials: tuple[str, str] | None = None,
        rcpt_reply: str | None = None,
        data_reply: str | None = None,
    ) -> None:
        if (implicit_tls or credentials) and tls is None:
            raise ValueError("implicit TLS and logins need tls=TlsFiles")
        self.tls = tls
        self.implicit_tls = implicit_tls
        self.credentials = credentials
        self.rcpt_reply = rcpt_reply
        self.data_reply = data_reply
        self._mails: list[ReceivedMail] = []
        self._changed = threading.Condition()
        self._controller: _Controller | None = None

    # --- what arrived ----------------------------------------------------------------------

    def _record(self, mail: ReceivedMail) -> None:
        with self._changed:
            self._mails.append(mail)
            self._changed.notify_all()

    @property
    def mails(self) -> list[ReceivedMail]:
        with self._changed:
            return list(self._mails)

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[ReceivedMail]:
        """Block until at least ``count`` messages arrived; fail the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self._mails) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"SMTP server got {len(self._mails)} messages, not {count}")
                self._changed.wait(left)
            return list(self._mails)

    async def wait_for_async(self, count: int, timeout_s: float = 5.0) -> list[ReceivedMail]:
        """`wait_for` without blocking the test's event loop."""
        return await asyncio.to_thread(self.wait_for, count, timeout_s)

    # --- where it listens -------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._controller is None:
            raise RuntimeError("the SMTP server is not running")
        return int(self._controller.port)

    def url(self, *, userinfo: str = "", query: str = "") -> str:
        """An ``HOOKSTREAM_SMTP_URL`` for this server (``userinfo`` like ``"u:p@"``)."""
        scheme = "smtps" if self.implicit_tls else "smtp+starttls" if self.tls else "smtp"
        suffix = f"?{query}" if query else ""
        return f"{scheme}://{userinfo}{HOST}:{self.port}{suffix}"

    # --- lifecycle --------------------------------------------------------------------------

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if not isinstance(data, LoginPassword) or self.credentials is None:
            return AuthResult(success=False, handled=False)
        user, password = self.credentials
        ok = data.login == user.encode() and data.password == password.encode()
        return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)

    def start(self) -> SmtpServer:
        kwargs: dict[str, Any] = {}
        if self.tls is not None and not self.implicit_tls:
            kwargs.update(tls_context=self.tls.server_context(), require_starttls=False)
        if self.implicit_tls and self.tls is not None:
            kwargs["ssl_context"] = self.tls.server_context()
        if self.credentials is not None:
            kwargs.update(authenticator=self._authenticate, auth_require_tls=True)
        self._controller = _Controller(_Handler(self), hostname=HOST, port=0, **kwargs)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[Callable[..., SmtpServer]]:
    """Factory of started SMTP servers, stopped after the test. ``tls=True`` makes a cert."""
    servers: list[SmtpServer] = []
    tls_files: list[TlsFiles] = []

    def make(*, tls: bool = False, **options: Any) -> SmtpServer:
        files = None
        if tls:
            if not tls_files:
                tls_files.append(make_self_signed(tmp_path / "smtp-tls"))
            files = tls_files[0]
        server = SmtpServer(tls=files, **options).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
