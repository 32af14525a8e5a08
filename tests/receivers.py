"""Real local webhook receivers for hookstream's tests, well-behaved and hostile.

A `Receiver` is a small HTTP/1.1 server on plain asyncio streams, run on its own event loop in a
background thread and bound to an ephemeral port on 127.0.0.1. It works for async and sync
tests alike, and for tests that run a hookstream worker in another process. Each path gets a
behaviour (`Respond`, `Reset`, `Close`, `Silent`, `HugeBody`, `Trickle`, `Garbage`, `Http10`,
`Capacity`);
every request is recorded with its headers, body and the connection it came on.

Use the `receiver_factory` fixture (register this module with ``pytest_plugins`` or import the
fixture), or `Receiver` directly as a context manager::

    def test_x(receiver_factory):
        receiver = receiver_factory()
        url = receiver.route("/slow", Respond(200, delay_s=2))

``receiver_factory(tls=True)`` serves HTTPS with a self-signed certificate made for the test;
`TlsFiles.client_context` trusts it, for the cases where a test wants a valid chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType

import pytest

from tests.behaviours import (
    Behaviour,
    Capacity,
    Close,
    Garbage,
    Http10,
    HugeBody,
    PerId,
    Reset,
    Respond,
    Silent,
    Trickle,
)
from tests.tls_files import HOST, TlsFiles, make_self_signed

# re-exported: tests import the behaviours and the TLS files from here
__all__ = [
    "HOST",
    "Behaviour",
    "Capacity",
    "Close",
    "Garbage",
    "Http10",
    "HugeBody",
    "PerId",
    "Receiver",
    "RecordedRequest",
    "Reset",
    "Respond",
    "Silent",
    "TlsFiles",
    "Trickle",
    "closed_port",
    "make_self_signed",
    "receiver_factory",
]


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the receiver got it. Header names are lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # sequence number of the TCP connection it arrived on
    at: float = field(default_factory=time.time)


# --- the server ------------------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path, headers, body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers from the clients under test
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _status_line(status: int, version: str = "HTTP/1.1") -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Whatever"
    return f"{version} {status} {reason}\r\n".encode("latin-1")


async def _respond(behaviour: Respond, writer: asyncio.StreamWriter, keep: bool) -> bool:
    if behaviour.delay_s:
        await asyncio.sleep(behaviour.delay_s)
    head = [_status_line(behaviour.status)]
    head += [f"{name}: {value}\r\n".encode("latin-1") for name, value in behaviour.headers]
    if behaviour.status not in (204, 304):
        head.append(f"Content-Length: {len(behaviour.body)}\r\n".encode("latin-1"))
    if not keep:
        head.append(b"Connection: close\r\n")
    writer.write(b"".join(head) + b"\r\n" + behaviour.body)
    await writer.drain()
    return keep


async def _huge(behaviour: HugeBody, writer: asyncio.StreamWriter) -> bool:
    length = behaviour.content_length
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    writer.write(_status_line(200) + f"{framing}\r\n\r\n".encode("latin-1"))
    chunk = b"x" * behaviour.chunk_size
    if length is None:
        chunk = f"{len(chunk):x}\r\n".encode("latin-1") + chunk + b"\r\n"
    sent = 0
    while length is None or sent < length:
        writer.write(chunk)
        sent += behaviour.chunk_size
        await writer.drain()
        if behaviour.interval_s:
            await asyncio.sleep(behaviour.interval_s)
    return False


async def _trickle(behaviour: Trickle, writer: asyncio.StreamWriter) -> bool:
    writer.write(_status_line(200) + f"Content-Length: {behaviour.content_length}\r\n\r\n".encode())
    for _ in range(behaviour.content_length):
        await writer.drain()
        await asyncio.sleep(behaviour.interval_s)
        writer.write(b"x")
    return False


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _silent(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass  # hold the connection, answer nothing, until the client hangs up


async def _act(
    behaviour: Behaviour, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bool
) -> bool:
    """Carry out one behaviour; returns whether the connection stays open for another request."""
    if isinstance(behaviour, Respond):
        return await _respond(behaviour, writer, keep)
    if isinstance(behaviour, HugeBody):
        return await _huge(behaviour, writer)
    if isinstance(behaviour, Trickle):
        return await _trickle(behaviour, writer)
    if isinstance(behaviour, Reset):
        _reset(writer)
    elif isinstance(behaviour, Silent):
        await _silent(reader)
    elif isinstance(behaviour, Garbage):
        writer.write(behaviour.data)
    elif isinstance(behaviour, Http10):
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + behaviour.body)
    return False  # Close, and every behaviour above that ends the connection


def _quiet_about_hostility(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """Broken TLS handshakes and cut connections are what these receivers are for; anything
    else is a bug in the receiver and is reported as usual."""
    if isinstance(context.get("exception"), ssl.SSLError | ConnectionError):
        return
    loop.default_exception_handler(context)


class Receiver:
    """A local HTTP(S) receiver with per-path behaviours; see the module docstring."""

    def __init__(self, *, tls: TlsFiles | None = None, default: Behaviour | None = None) -> None:
        self.tls = tls
        self.default: Behaviour = default or Respond(200)
        self.port = 0
        self._routes: dict[str, Behaviour | PerId] = {}
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._connections = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._busy: dict[str, int] = {}  # Capacity paths: requests being handled
        self._overflows: dict[str, int] = {}  # Capacity paths: requests answered 503

    # -- configuration and inspection (any thread) --

    def url(self, path: str = "/") -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{HOST}:{self.port}{path}"

    def route(self, path: str, behaviour: Behaviour | PerId) -> str:
        """Give ``path`` a behaviour; returns the full URL of the path."""
        with self._lock:
            self._routes[path] = behaviour
        return self.url(path)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def overflows(self, path: str) -> int:
        """Requests to a `Capacity` path that found it full and got a 503."""
        with self._lock:
            return self._overflows.get(path, 0)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path == path]

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests have arrived; fail the test after a timeout."""
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"receiver got {len(self.requests)} requests, expected {count}")
            time.sleep(0.01)
        return self.requests

    # -- lifecycle --

    def start(self) -> Receiver:
        self._thread = threading.Thread(target=self._run, name="test-receiver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test receiver did not start within 10 s")
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop has already finished
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Receiver:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- the server's own thread --

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the starting thread, never lost
            self._startup_error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_quiet_about_hostility)
        self._stop = asyncio.Event()
        handlers: set[asyncio.Task[None]] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                await self._serve(reader, writer)
            finally:
                handlers.discard(task)

        ssl_context = self.tls.server_context() if self.tls else None
        server = await asyncio.start_server(handle, HOST, 0, ssl=ssl_context)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    def _pick(self, route: Behaviour | PerId, path: str, webhook_id: str) -> Behaviour:
        """The behaviour for this request (call with the lock held)."""
        if not isinstance(route, PerId):
            return route
        seen = sum(
            1
            for r in self._requests
            if r.path == path and r.headers.get("webhook-id", "") == webhook_id
        )
        return route.steps[min(seen - 1, len(route.steps) - 1)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = next(self._connections)
        try:
            keep = True
            while keep:
                method, path, headers, body = await _read_request(reader)
                with self._lock:
                    self._requests.append(RecordedRequest(method, path, headers, body, connection))
                    route = self._routes.get(path, self.default)
                    behaviour = self._pick(route, path, headers.get("webhook-id", ""))
                wants_more = headers.get("connection", "").lower() != "close"
                if isinstance(behaviour, Capacity):
                    keep = await self._capacity(behaviour, path, writer, wants_more)
                else:
                    keep = await _act(behaviour, reader, writer, wants_more)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
            ValueError,
        ):
            pass  # the exchange is over: finished, cut by the client, or unreadable
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _capacity(
        self, behaviour: Capacity, path: str, writer: asyncio.StreamWriter, keep: bool
    ) -> bool:
        with self._lock:
            busy = self._busy.get(path, 0)
            admitted = busy < behaviour.limit
            if admitted:
                self._busy[path] = busy + 1
            else:
                self._overflows[path] = self._overflows.get(path, 0) + 1
        if not admitted:
            return await _respond(Respond(503), writer, keep)
        try:
            return await _respond(Respond(200, delay_s=behaviour.delay_s), writer, keep)
        finally:
            with self._lock:
                self._busy[path] -= 1


def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released), for connection refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def receiver_factory(tmp_path: Path) -> Iterator[Callable[..., Receiver]]:
    """Start receivers on demand: ``receiver_factory(tls=False, default=None)``; all are stopped
    when the test ends."""
    started: list[Receiver] = []

    def make(*, tls: bool = False, default: Behaviour | None = None) -> Receiver:
        files = make_self_signed(tmp_path / f"tls{len(started)}") if tls else None
        receiver = Receiver(tls=files, default=default).start()
        started.append(receiver)
        return receiver

    yield make
    for receiver in started:
        receiver.stop()
