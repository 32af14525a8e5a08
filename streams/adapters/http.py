"""The HTTP transport that carries hookstream's deliveries (SPEC D5, §5; STYLE practice 4).

The delivery code depends only on `Transport`: it sends one `HttpRequest` and gets back an
`HttpResponse` with the status, a short excerpt of the body and the raw ``Retry-After``. Every
status, 3xx included, comes back as a response: redirects are never followed, because a signed
body must never travel to a host the subscription did not name. A failure below HTTP raises
`TransportError` whose ``kind`` is a `FailureKind` value; `classify` judges it.

Implementations:

- `streams.adapters.http1.H1Transport`, the delivery hot path (``HOOKSTREAM_HTTP_CLIENT=h1``);
- `AiohttpTransport`, the other delivery client (aiohttp is about ten times faster than httpx
  here, see ``bench/http_clients.py``), and the notifier's;
- `ScriptedTransport`, which plays back scripted results so unit tests need no network.

httpx's version of the contract, the reference the benchmark compares the clients with, lives
with the benchmark (``bench/httpx_transport.py``): nothing in a worker uses it. Each real client
converts its library's exceptions in exactly one function (`_from_aiohttp` here). Response
bodies are read as bytes up to a cap, never decoded: an endpoint that answers with gigabytes or
trickles one byte a second costs bounded memory and at most the request's timeout.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import NamedTuple, Protocol

import aiohttp
from aiohttp.abc import AbstractResolver

from streams import __version__
from streams.domain.models import FailureKind
from streams.errors import TransportError

DEFAULT_BODY_CAP = 65536
DEFAULT_EXCERPT_BYTES = 1024
USER_AGENT = f"hookstream/{__version__}"
# Excerpts are kept in the ledger as they arrived: ask for the body without content coding.
_DEFAULT_HEADERS = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
# getaddrinfo answers that mean "this name has no address", as opposed to "try again later".
_NO_SUCH_HOST = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)
_RESET_ERRORS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class HttpRequest(NamedTuple):
    """One delivery attempt: POST ``body`` to ``url``; ``timeout_s`` bounds the whole exchange."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    timeout_s: float


class HttpResponse(NamedTuple):
    """What the endpoint answered. ``body_excerpt`` is the start of what was read, undecoded."""

    status: int
    body_excerpt: bytes
    retry_after: str | None
    duration_ms: float


class Transport(Protocol):
    """Sends one delivery attempt. Raises `TransportError` for failures below HTTP."""

    async def send(self, request: HttpRequest) -> HttpResponse: ...

    async def aclose(self) -> None: ...


def check_body_caps(body_cap: int, excerpt_bytes: int) -> None:
    """Every transport reads at most ``body_cap`` bytes and keeps ``excerpt_bytes`` of them."""
    if body_cap < excerpt_bytes or excerpt_bytes < 0:
        raise ValueError("body_cap must be at least excerpt_bytes, and both non-negative")


def ip_literal(host: str) -> str | None:
    """``host`` as a normalised IP address when it is one (brackets allowed), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _os_kind(exc: BaseException) -> FailureKind | None:
    """The failure kind of a socket, DNS or TLS error found in ``exc``'s chain of causes."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chains the clients build are short; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, socket.gaierror):
            no_host = seen.errno in _NO_SUCH_HOST
            return FailureKind.DNS_NXDOMAIN if no_host else FailureKind.DNS_TEMPORARY
        if isinstance(seen, ssl.SSLError):
            return _tls_kind(seen)
        if isinstance(seen, ConnectionRefusedError):
            return FailureKind.CONNECT_REFUSED
        if isinstance(seen, _RESET_ERRORS):
            return FailureKind.CONNECTION_RESET
        if isinstance(seen, TimeoutError):
            return FailureKind.TIMEOUT
        seen = seen.__cause__ or seen.__context__
    return None


def _tls_kind(exc: ssl.SSLError) -> FailureKind:
    """D5 for TLS: a wrong certificate is permanent; a handshake cut short or refused otherwise
    is retryable (see `streams.domain.classify`)."""
    if isinstance(exc, ssl.SSLCertVerificationError):  # untrusted, expired, another host's
        return FailureKind.TLS_INVALID
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):  # closed mid-handshake
        return FailureKind.CONNECTION_RESET
    return FailureKind.TLS_ERROR  # an alert, plain HTTP on a TLS port, a broken record


def _failure(kind: FailureKind, exc: BaseException) -> TransportError:
    detail = str(exc) or "no detail"
    return TransportError(kind.value, f"{type(exc).__name__}: {detail}")


# --------------------------------------------------------------------------------------------
# aiohttp: the hot path
# --------------------------------------------------------------------------------------------

_AIOHTTP_FAILURES = (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError)


def _aiohttp_connect_kind(exc: aiohttp.ClientConnectorError) -> FailureKind:
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return FailureKind.TLS_INVALID
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return _os_kind(exc.os_error) or FailureKind.DNS_TEMPORARY
    kind = _os_kind(exc.os_error)
    if kind is not None:
        return kind
    if isinstance(exc, aiohttp.ClientSSLError):
        return FailureKind.TLS_ERROR  # a TLS failure that is not the certificate's
    return FailureKind.CONNECT_REFUSED  # unreachable network or host: no connection was made


def _from_aiohttp(exc: BaseException) -> TransportError:
    """The one place where aiohttp, socket and ssl exceptions become `TransportError`."""
    if isinstance(exc, TimeoutError):  # total, connect and socket-read timeouts alike
        kind = FailureKind.TIMEOUT
    elif isinstance(exc, aiohttp.ClientConnectorError):
        kind = _aiohttp_connect_kind(exc)
    elif isinstance(exc, aiohttp.ClientResponseError | aiohttp.InvalidURL):
        # Raised only for an unparseable response (hookstream never calls raise_for_status),
        # or for a URL no HTTP client could send to.
        kind = FailureKind.PROTOCOL_ERROR
    elif isinstance(exc, aiohttp.ClientPayloadError):
        kind = _payload_kind(exc)
    elif isinstance(exc, aiohttp.ClientConnectionError):
        kind = FailureKind.CONNECTION_RESET  # disconnected or reset mid exchange
    else:
        kind = _os_kind(exc) or FailureKind.CONNECTION_RESET
    return _failure(kind, exc)


def _payload_kind(exc: aiohttp.ClientPayloadError) -> FailureKind:
    """A body that broke: cut short by the peer, or malformed by it."""
    if _os_kind(exc) is FailureKind.CONNECTION_RESET or "not completed" in str(exc):
        return FailureKind.CONNECTION_RESET
    return FailureKind.PROTOCOL_ERROR


class AiohttpTransport:
    """The hot-path transport: one aiohttp session and connection pool for the whole worker.

    ``max_connections`` caps the pool (size it from the worker's dispatch concurrency) and
    ``per_host_limit`` the connections to one host. Bodies are read up to ``body_cap`` bytes; a
    longer body is abandoned and its connection closed rather than returned half-read to the
    pool. ``resolver`` lets a destination guard see and veto every address lookup. Create it
    inside the event loop that will use it; the session opens on the first `send`.
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
        self._max_connections = max_connections
        self._per_host_limit = per_host_limit
        self._keepalive_s = keepalive_s
        self._dns_ttl_s = dns_ttl_s
        self._body_cap = body_cap
        self._excerpt_bytes = excerpt_bytes
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the transport is closed")
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=self._per_host_limit,
            keepalive_timeout=self._keepalive_s,
            ttl_dns_cache=self._dns_ttl_s,
            ssl=self._ssl,
            resolver=self._resolver,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=_DEFAULT_HEADERS,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # endpoints must not see each other's cookies
            raise_for_status=False,
        )
        return self._session

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            if len(self._timeouts) > 64:  # subscriptions use a handful of distinct timeouts
                self._timeouts.clear()
            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    async def send(self, request: HttpRequest) -> HttpResponse:
        session = self._session or self._open()
        started = perf_counter()
        try:
            async with session.post(
                request.url,
                data=request.body,
                headers=request.headers,
                timeout=self._timeout(request.timeout_s),
                allow_redirects=False,
            ) as response:
                excerpt = await self._read_capped(response)
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except _AIOHTTP_FAILURES as exc:
            raise _from_aiohttp(exc) from exc
        return HttpResponse(status, excerpt, retry_after, (perf_counter() - started) * 1000.0)

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        content = response.content
        excerpt = b""
        read = 0
        while read < self._body_cap:
            chunk = await content.read(self._body_cap - read)
            if not chunk:
                return excerpt
            if len(excerpt) < self._excerpt_bytes:
                excerpt += chunk[: self._excerpt_bytes - len(excerpt)]
            read += len(chunk)
        if not content.at_eof():
            response.close()  # more is coming: drop the connection, never pool it half-read
        return excerpt

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None


# --------------------------------------------------------------------------------------------
# Scripted: for unit tests
# --------------------------------------------------------------------------------------------

ScriptedResult = HttpResponse | TransportError


class ScriptedTransport:
    """Plays back scripted results, in order, and records every request it was given.

    ``script`` is either a sequence of results, one per request, or a function that answers a
    request. A `TransportError` result is raised, as a real transport would raise it. Running
    past the end of a sequence is an `AssertionError`: the test scripted fewer attempts than
    the code made.
    """

    def __init__(
        self, script: Sequence[ScriptedResult] | Callable[[HttpRequest], ScriptedResult]
    ) -> None:
        self._script = script
        self.requests: list[HttpRequest] = []
        self.closed = False

    async def send(self, request: HttpRequest) -> HttpResponse:
        if self.closed:
            raise RuntimeError("the transport is closed")
        self.requests.append(request)
        if callable(self._script):
            result = self._script(request)
        elif len(self.requests) <= len(self._script):
            result = self._script[len(self.requests) - 1]
        else:
            raise AssertionError(
                f"ScriptedTransport got request {len(self.requests)} ({request.url}) "
                f"but only {len(self._script)} results were scripted"
            )
        if isinstance(result, TransportError):
            raise result
        return result

    async def aclose(self) -> None:
        self.closed = True


def scripted_response(
    status: int, *, body: bytes = b"", retry_after: str | None = None, duration_ms: float = 1.0
) -> HttpResponse:
    """A response for a `ScriptedTransport` script."""
    return HttpResponse(status, body[:DEFAULT_EXCERPT_BYTES], retry_after, duration_ms)


def scripted_failure(kind: FailureKind, message: str = "scripted") -> TransportError:
    """A transport failure for a `ScriptedTransport` script."""
    return TransportError(kind.value, message)
