"""The transport contract on httpx.AsyncClient: the reference that ``bench.http_clients`` compares
hookstream's delivery clients with (SPEC section 5: httpx's pool locking made it the slowest).

It is not part of the package because no worker uses it; the tests still hold it to the same
contract as the delivery clients (tests/integration/test_transport.py).
"""

from __future__ import annotations

import asyncio
import ssl
from time import perf_counter

import httpx

from streams.adapters.http import (  # the contract's shared pieces, private to the adapter
    _DEFAULT_HEADERS,
    DEFAULT_BODY_CAP,
    DEFAULT_EXCERPT_BYTES,
    HttpRequest,
    HttpResponse,
    _failure,
    _os_kind,
    check_body_caps,
)
from streams.domain.models import FailureKind
from streams.errors import TransportError

_HTTPX_FAILURES = (httpx.HTTPError, httpx.InvalidURL, OSError, TimeoutError, ssl.SSLError)


def _from_httpx(exc: BaseException) -> TransportError:
    """The one place where httpx, socket and ssl exceptions become `TransportError`."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        kind = FailureKind.TIMEOUT
    elif isinstance(exc, httpx.ConnectError):
        kind = _os_kind(exc) or FailureKind.CONNECT_REFUSED
    elif isinstance(exc, httpx.RemoteProtocolError):
        # httpcore reports a peer that hung up and a peer that spoke garbage with one class.
        text = str(exc)
        hung_up = "disconnected" in text or "peer closed" in text
        kind = FailureKind.CONNECTION_RESET if hung_up else FailureKind.PROTOCOL_ERROR
    elif isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL | httpx.DecodingError):
        kind = FailureKind.PROTOCOL_ERROR
    else:
        kind = _os_kind(exc) or FailureKind.CONNECTION_RESET
    return _failure(kind, exc)


class HttpxTransport:
    """The same contract on httpx.AsyncClient. Slower; kept off the delivery hot path."""

    def __init__(
        self,
        *,
        max_connections: int = 256,
        keepalive_s: float = 30.0,
        body_cap: int = DEFAULT_BODY_CAP,
        excerpt_bytes: int = DEFAULT_EXCERPT_BYTES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        check_body_caps(body_cap, excerpt_bytes)
        self._body_cap = body_cap
        self._excerpt_bytes = excerpt_bytes
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            headers=_DEFAULT_HEADERS,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_s,
            ),
            verify=ssl_context if ssl_context is not None else True,
            trust_env=False,  # proxies from the environment must not see signed bodies
        )

    async def send(self, request: HttpRequest) -> HttpResponse:
        if self._client.is_closed:
            raise RuntimeError("the transport is closed")
        started = perf_counter()
        try:
            # httpx times each phase apart; the outer deadline bounds the whole exchange.
            async with asyncio.timeout(request.timeout_s):
                outgoing = self._client.build_request(
                    "POST",
                    request.url,
                    content=request.body,
                    headers=request.headers,
                    timeout=request.timeout_s,
                )
                response = await self._client.send(outgoing, stream=True)
                try:
                    excerpt = await self._read_capped(response)
                finally:
                    await response.aclose()  # closes, not pools, a connection read half-way
        except _HTTPX_FAILURES as exc:
            raise _from_httpx(exc) from exc
        retry_after = response.headers.get("Retry-After")
        duration_ms = (perf_counter() - started) * 1000.0
        return HttpResponse(response.status_code, excerpt, retry_after, duration_ms)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        excerpt = b""
        read = 0
        async for chunk in response.aiter_raw():
            if len(excerpt) < self._excerpt_bytes:
                excerpt += chunk[: self._excerpt_bytes - len(excerpt)]
            read += len(chunk)
            if read >= self._body_cap:
                break
        return excerpt

    async def aclose(self) -> None:
        await self._client.aclose()
