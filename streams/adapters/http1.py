"""`H1Transport`: a lean HTTP/1.1 client for the delivery hot path (SPEC D5, P1, §5).

A delivery is one POST of a small body to an origin reused many times a second, so hookstream
needs a small part of an HTTP client: keep-alive connections pooled per origin, a request head
written in one call, and a response parsed by llhttp (``httptools``, as in uvicorn), on plain
asyncio protocols. It keeps the `Transport` contract of `streams.adapters.http` to the letter:

- every status comes back as a response; redirects are never followed;
- a failure below HTTP raises `TransportError` with a `FailureKind` (mapped in `_failure_of`);
- the body is read up to ``body_cap`` bytes and never decoded; a longer body, or one cut short,
  never goes back to the pool; ``timeout_s`` bounds the whole exchange (pool wait, DNS,
  connection, TLS handshake, request and response);
- addresses come from an aiohttp-style resolver, which the SSRF guard vetoes (as for aiohttp).

One behaviour differs from aiohttp: a request sent on a pooled connection the peer had already
closed (it hangs up or resets before one byte of the answer) is sent once more on a new
connection, the race every keep-alive client meets when a receiver drops idle connections; the
receiver saw no complete request, or at worst a copy its webhook-id lets it drop (D2). A fresh
connection is never retried. ``python -m bench.http_clients`` measures it against aiohttp
(docs/benchmarks.md, "HTTP/1.1 client").
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Mapping
from time import monotonic, perf_counter
from typing import cast
from urllib.parse import quote, urlsplit

import httptools
from aiohttp.abc import AbstractResolver

from streams.adapters.http import (
    _RESET_ERRORS,
    DEFAULT_BODY_CAP,
    DEFAULT_EXCERPT_BYTES,
    USER_AGENT,
    HttpRequest,
    HttpResponse,
    _failure,
    _os_kind,
    check_body_caps,
    ip_literal,
)
from streams.domain.models import FailureKind
from streams.errors import TransportError

#: Headers hookstream writes itself; a caller's copy of one of them is an error, not a header.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_DEFAULTS = (
    ("user-agent", f"User-Agent: {USER_AGENT}"),
    ("accept-encoding", "Accept-Encoding: identity"),
)
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\0")
_URL_CACHE_SIZE = 4096
# Characters a request target keeps as they are; anything else (spaces, controls, non-ASCII) is
# percent-encoded, and existing escapes are left alone.
_PATH_SAFE = "!#$%&'()*+,/:;=?@[]~"

Origin = tuple[str, str, int]  # scheme, host, port


class _ProtocolError(Exception):
    """The peer broke HTTP: a response llhttp cannot parse, or an upgrade nobody asked for."""


class _ClosedEarlyError(ConnectionResetError):
    """The connection ended before the response did."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; it carries one exchange at a time."""

    def __init__(self, body_cap: int, excerpt_bytes: int) -> None:
        self._body_cap = body_cap
        self._excerpt_bytes = excerpt_bytes
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self.status = 0
        self.retry_after: str | None = None
        self.excerpt = b""
        self.read = 0
        self.answered = False  # a byte of the current response arrived
        self.complete = False
        self.reusable = False
        self._headers_done = False
        self._length_known = False

    # --- the exchange -----------------------------------------------------------------------

    def start(self, head: bytes, body: bytes) -> asyncio.Future[None]:
        """Write one request; the future resolves when its response is complete."""
        assert self.transport is not None
        self.status = 0
        self.retry_after = None
        self.excerpt = b""
        self.read = 0
        self.answered = self.complete = self.reusable = False
        self._headers_done = self._length_known = False
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        return waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()  # never a graceful close: nothing more is owed either way

    def _finish(self, error: BaseException | None = None) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._finish(_ProtocolError("the endpoint switched protocols unasked"))
            self.close()
        except httptools.HttpParserError as exc:
            self._finish(_ProtocolError(f"unparseable response: {exc}"))
            self.close()

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost settles the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None:
            return
        if self._headers_done and not self._length_known and exc is None:
            self.complete = True  # a body delimited by the end of the connection (HTTP/1.0)
            self._finish()
            return
        if self._headers_done:
            error = _ClosedEarlyError("the connection ended before the response body did")
        else:
            error = _ClosedEarlyError("the endpoint closed the connection before answering")
        error.__cause__ = exc  # whatever broke it, the exchange was cut short
        self._finish(error)

    # --- llhttp callbacks -------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"retry-after":
            if self.retry_after is None:
                self.retry_after = value.decode("latin-1")
        elif lowered in (b"content-length", b"transfer-encoding"):
            self._length_known = True

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._headers_done = self.status >= 200  # a 1xx is followed by the real answer

    def on_body(self, body: bytes) -> None:
        if len(self.excerpt) < self._excerpt_bytes:
            self.excerpt += body[: self._excerpt_bytes - len(self.excerpt)]
        self.read += len(body)
        if self.read >= self._body_cap:
            self.complete = True  # enough: the rest is never read, the connection is dropped
            self._finish()
            self.close()

    def on_message_complete(self) -> None:
        if self.status < 200:
            self.retry_after = None
            self._length_known = False
            return
        self.complete = True
        self.reusable = self._parser.should_keep_alive()
        self._finish()


class _Pool:
    """The connections to one origin: idle ones (newest last) and a cap on those in use."""

    __slots__ = ("busy", "idle", "slots")

    def __init__(self, limit: int) -> None:
        self.idle: deque[_Connection] = deque()
        self.slots = asyncio.Semaphore(limit)
        self.busy = 0


class H1Transport:
    """The hot-path transport: keep-alive HTTP/1.1 over asyncio protocols, parsed by llhttp.

    The options mean what they mean for `AiohttpTransport`: ``max_connections`` caps the
    requests in flight across origins, ``per_host_limit`` those to one origin (and so its open
    connections), ``keepalive_s`` how long an idle connection is kept, ``dns_ttl_s`` how long
    an answer is reused, ``resolver`` may veto any lookup. Create it inside its event loop.
    """

    def __init__(
        self,
        *,
        max_connections: int = 256,
        per_host_limit: int = 64,
        keepalive_s: float = 30.0,
        dns_ttl_s: int = 10,
        body_cap: int = DEFAULT_BODY_CAP,
        excerpt_bytes: int = DEFAULT_EXCERPT_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        check_body_caps(body_cap, excerpt_bytes)
        if max_connections < 1 or per_host_limit < 1:
            raise ValueError("max_connections and per_host_limit must be at least 1")
        self._per_host_limit = per_host_limit
        self._keepalive_s = keepalive_s
        self._dns_ttl_s = dns_ttl_s
        self._body_cap = body_cap
        self._excerpt_bytes = excerpt_bytes
        self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._resolver = resolver
        self._slots: asyncio.Semaphore | None = None
        self._max_connections = max_connections
        self._pools: dict[Origin, _Pool] = {}
        self._urls: dict[str, tuple[Origin, bytes]] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._next_sweep = 0.0
        self._closed = False

    # --- the contract -----------------------------------------------------------------------

    async def send(self, request: HttpRequest) -> HttpResponse:
        if self._closed:
            raise RuntimeError("the transport is closed")
        started = perf_counter()
        try:
            origin, head = self._head(request)
            async with asyncio.timeout(request.timeout_s):
                return await self._exchange(origin, head, request.body, started)
        except TransportError:
            raise
        except (OSError, TimeoutError, ssl.SSLError, _ProtocolError, ValueError) as exc:
            raise _failure_of(exc) from exc

    async def aclose(self) -> None:
        self._closed = True
        for pool in self._pools.values():
            while pool.idle:
                pool.idle.pop().close()
        self._pools.clear()
        if self._resolver is not None:
            await self._resolver.close()

    # --- one exchange -----------------------------------------------------------------------

    async def _exchange(
        self, origin: Origin, head: bytes, body: bytes, started: float
    ) -> HttpResponse:
        async with self._slots or self._open_slots():
            pool = self._pool(origin)
            async with pool.slots:
                pool.busy += 1
                connection: _Connection | None = None
                try:
                    connection = self._idle(pool) or await self._connect(origin)
                    try:
                        await connection.start(head, body)
                    except _RESET_ERRORS:
                        if not connection.reused or connection.answered:
                            raise
                        # The peer dropped it while it sat idle: once more, on a new connection.
                        connection.close()
                        connection = await self._connect(origin)
                        await connection.start(head, body)
                finally:
                    pool.busy -= 1
                    if connection is not None:
                        self._release(pool, connection)
        return HttpResponse(
            connection.status,
            connection.excerpt,
            connection.retry_after,
            (perf_counter() - started) * 1000.0,
        )

    def _release(self, pool: _Pool, connection: _Connection) -> None:
        """Pool a connection whose exchange ended cleanly; close any other."""
        if connection.reusable and not connection.closed and not self._closed:
            connection.reused = True
            connection.idle_since = monotonic()
            pool.idle.append(connection)
        elif not connection.closed:
            connection.close()  # cancelled, timed out, cut short or over the cap

    def _open_slots(self) -> asyncio.Semaphore:
        self._slots = asyncio.Semaphore(self._max_connections)
        return self._slots

    def _pool(self, origin: Origin) -> _Pool:
        now = monotonic()
        if now >= self._next_sweep:
            self._sweep(now)
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = _Pool(self._per_host_limit)
        return pool

    def _idle(self, pool: _Pool) -> _Connection | None:
        expired = monotonic() - self._keepalive_s
        while pool.idle:
            connection = pool.idle.pop()
            if not connection.closed and connection.idle_since > expired:
                return connection
            connection.close()
        return None

    def _sweep(self, now: float) -> None:
        """Close connections idle past keep-alive; forget origins with nothing open."""
        self._next_sweep = now + max(1.0, self._keepalive_s / 2)
        expired = now - self._keepalive_s
        for origin, pool in list(self._pools.items()):
            while pool.idle and (pool.idle[0].closed or pool.idle[0].idle_since <= expired):
                pool.idle.popleft().close()
            if not pool.idle and pool.busy == 0:
                del self._pools[origin]

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        tls = scheme == "https"
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for address in await self._addresses(host, port):
            try:
                _, connection = await loop.create_connection(
                    lambda: _Connection(self._body_cap, self._excerpt_bytes),
                    address,
                    port,
                    ssl=self._ssl if tls else None,
                    server_hostname=host if tls else None,
                )
            except ssl.SSLError:
                raise
            except OSError as exc:
                last = exc
                continue
            return connection  # asyncio and uvloop set TCP_NODELAY on every TCP transport
        raise last or OSError(f"no address to connect to for {host}")

    async def _addresses(self, host: str, port: int) -> list[str]:
        literal = ip_literal(host)
        if literal is not None:
            return [literal]
        key = (host, port)
        cached = self._dns.get(key)
        now = monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        if self._resolver is not None:
            found = [r["host"] for r in await self._resolver.resolve(host, port, socket.AF_UNSPEC)]
        else:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
            found = [str(info[4][0]) for info in infos]
        if len(self._dns) > _URL_CACHE_SIZE:
            self._dns.clear()
        self._dns[key] = (now + self._dns_ttl_s, found)
        return found

    # --- the request head -------------------------------------------------------------------

    def _head(self, request: HttpRequest) -> tuple[Origin, bytes]:
        target = self._urls.get(request.url)
        if target is None:
            target = _target(request.url)
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()
            self._urls[request.url] = target
        origin, start = target
        return origin, start + _header_block(request.headers, len(request.body))


def _target(url: str) -> tuple[Origin, bytes]:
    """The origin of ``url`` and the start of its request head, up to the Host line."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    port = parts.port or (443 if scheme == "https" else 80)
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_PATH_SAFE)
    shown = f"[{host}]" if ":" in host else host
    default_port = port == (443 if scheme == "https" else 80)
    host_header = shown if default_port else f"{shown}:{port}"
    start = f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\n".encode("ascii")
    return (scheme, host, port), start


def _header_block(headers: Mapping[str, str], length: int) -> bytes:
    names = set()
    lines = []
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in _OWN_HEADERS:
            raise ValueError(f"header {name!r} is set by the transport")
        if any(c in name or c in value for c in _FORBIDDEN_IN_HEADERS) or ":" in name:
            raise ValueError(f"header {name!r} has a line break, a NUL or a colon in it")
        names.add(lowered)
        lines.append(f"{name}: {value}\r\n")
    for lowered, line in _DEFAULTS:
        if lowered not in names:
            lines.append(line + "\r\n")
    lines.append(f"Content-Length: {length}\r\n\r\n")
    return "".join(lines).encode("latin-1")


def _failure_of(exc: BaseException) -> TransportError:
    """The one place where socket, ssl, parser and timeout exceptions become `TransportError`."""
    if isinstance(exc, TimeoutError):
        kind = FailureKind.TIMEOUT
    elif isinstance(exc, ssl.SSLError):  # before ValueError: a failed verification is both
        kind = _os_kind(exc) or FailureKind.TLS_ERROR  # D5: only a wrong certificate is final
    elif isinstance(exc, _ProtocolError | ValueError | UnicodeError):
        kind = FailureKind.PROTOCOL_ERROR
    else:
        kind = _os_kind(exc) or FailureKind.CONNECT_REFUSED
    return _failure(kind, exc)
