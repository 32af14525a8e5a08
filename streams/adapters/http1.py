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

This module decides which connection an exchange uses (pools, keep-alive, DNS, that one retry,
the timeout, the mapping of failures); the bytes on a connection, the request head written and
the llhttp protocol reading the answer, are in `streams.adapters.http1_wire`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from time import monotonic, perf_counter

from aiohttp.abc import AbstractResolver

from streams.adapters.http import (
    _RESET_ERRORS,
    DEFAULT_BODY_CAP,
    DEFAULT_EXCERPT_BYTES,
    HttpRequest,
    HttpResponse,
    _failure,
    _os_kind,
    check_body_caps,
    ip_literal,
)
from streams.adapters.http1_wire import (
    H1Connection,
    Origin,
    _ProtocolError,
    head_start,
    header_block,
)
from streams.domain.models import FailureKind
from streams.errors import TransportError

_URL_CACHE_SIZE = 4096


class _Pool:
    """The connections to one origin: idle ones (newest last) and a cap on those in use."""

    __slots__ = ("busy", "idle", "slots")

    def __init__(self, limit: int) -> None:
        self.idle: deque[H1Connection] = deque()
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
                connection: H1Connection | None = None
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

    def _release(self, pool: _Pool, connection: H1Connection) -> None:
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

    def _idle(self, pool: _Pool) -> H1Connection | None:
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

    async def _connect(self, origin: Origin) -> H1Connection:
        scheme, host, port = origin
        tls = scheme == "https"
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for address in await self._addresses(host, port):
            try:
                _, connection = await loop.create_connection(
                    lambda: H1Connection(self._body_cap, self._excerpt_bytes),
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
            target = head_start(request.url)
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()
            self._urls[request.url] = target
        origin, start = target
        return origin, start + header_block(request.headers, len(request.body))


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
