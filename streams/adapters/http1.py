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


class _Slots:
    """A count of free slots that is taken without a coroutine while one is free.

    `asyncio.Semaphore.acquire` is a coroutine even when it need not wait, and every exchange
    takes two slots (the transport's and its origin's); with this and a timer in place of
    `asyncio.timeout`, the event loop's CPU per attempt fell about 10% (``python -m
    bench.attempt``, docs/benchmarks.md, "The transport's fast path"). Waiters are served in
    order, and a slot is handed straight to the next one.
    """

    __slots__ = ("_waiters", "free")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot and cancelled at once: hand it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class _Pool:
    """The connections to one origin: idle ones (newest last) and a cap on those in use."""

    __slots__ = ("busy", "idle", "slots")

    def __init__(self, limit: int) -> None:
        self.idle: deque[H1Connection] = deque()
        self.slots = _Slots(limit)
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
        self._slots = _Slots(max_connections)
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
            pool = self._pool(origin)
            if pool.idle and self._slots.try_take():
                if pool.slots.try_take():
                    return await self._on_idle(pool, origin, head, request, started)
                self._slots.give()
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

    async def _on_idle(
        self, pool: _Pool, origin: Origin, head: bytes, request: HttpRequest, started: float
    ) -> HttpResponse:
        """The common case: both slots were free and an idle connection is at hand. A timer on
        the connection bounds the exchange: `asyncio.timeout` costs about 7 µs per use."""
        pool.busy += 1
        connection = self._idle(pool)
        timer: asyncio.TimerHandle | None = None
        try:
            if connection is None:  # every idle one had expired: connect, as `_exchange` does
                async with asyncio.timeout(request.timeout_s):
                    connection = await self._connect(origin)
                    await connection.start(head, request.body)
            else:
                loop = asyncio.get_running_loop()
                timer = loop.call_at(loop.time() + request.timeout_s, connection.expire)
                try:
                    await connection.start(head, request.body)
                except _RESET_ERRORS:
                    if connection.answered:
                        raise
                    # The peer dropped it while it sat idle: once more, on a new connection.
                    connection.close()
                    left = request.timeout_s - (perf_counter() - started)
                    async with asyncio.timeout(left):
                        connection = await self._connect(origin)
                        await connection.start(head, request.body)
        finally:
            if timer is not None:
                timer.cancel()
            pool.busy -= 1
            if connection is not None:
                self._release(pool, connection)
            pool.slots.give()
            self._slots.give()
        return _response(connection, started)

    async def _exchange(
        self, origin: Origin, head: bytes, body: bytes, started: float
    ) -> HttpResponse:
        await self._slots.take()
        try:
            pool = self._pool(origin)  # again: an unused one may have been swept meanwhile
            pool.busy += 1  # waiting counts: the sweep keeps the pool
            connection: H1Connection | None = None
            try:
                await pool.slots.take()
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
                    pool.slots.give()
            finally:
                pool.busy -= 1
                if connection is not None:
                    self._release(pool, connection)
        finally:
            self._slots.give()
        return _response(connection, started)

    def _release(self, pool: _Pool, connection: H1Connection) -> None:
        """Pool a connection whose exchange ended cleanly; close any other."""
        if connection.reusable and not connection.closed and not self._closed:
            connection.reused = True
            connection.idle_since = monotonic()
            pool.idle.append(connection)
        elif not connection.closed:
            connection.close()  # cancelled, timed out, cut short or over the cap

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


def _response(connection: H1Connection, started: float) -> HttpResponse:
    return HttpResponse(
        connection.status,
        connection.excerpt,
        connection.retry_after,
        (perf_counter() - started) * 1000.0,
    )


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
