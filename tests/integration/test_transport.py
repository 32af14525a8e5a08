"""The HTTP transports against real local receivers on loopback (SPEC D5, Q3, §5).

No broker is involved. Every D5 row that the transport is responsible for goes through
`H1Transport` (the hot path), `AiohttpTransport` and `HttpxTransport` (the reference), which
must keep one contract: statuses come back as responses (3xx never followed), everything below
HTTP is a `TransportError` with the right `FailureKind`, and hostile receivers cost bounded time
and memory.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from bench.httpx_transport import HttpxTransport
from streams.adapters.http import (
    DEFAULT_BODY_CAP,
    AiohttpTransport,
    HttpRequest,
    HttpResponse,
    Transport,
)
from streams.adapters.http1 import H1Transport
from streams.domain.models import FailureKind
from streams.errors import TransportError
from tests.receivers import (
    Close,
    Garbage,
    Http10,
    HugeBody,
    Receiver,
    Reset,
    Respond,
    Silent,
    Trickle,
    closed_port,
    receiver_factory,
)

__all__ = ["receiver_factory"]  # the fixture, imported so pytest finds it here

MakeReceiver = Callable[..., Receiver]
BODY = b'{"id":"evt_1","type":"invoice.paid","data":{"amount":42},"attempt":1}'
TIMEOUT_S = 0.5
SLACK_S = 1.0  # scheduling slack on a busy two-core machine; far below any unbounded wait


def post(url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None) -> HttpRequest:
    return HttpRequest(
        url=url,
        body=BODY,
        headers=headers or {"Content-Type": "application/json"},
        timeout_s=timeout_s,
    )


CLIENTS = ["h1", "aiohttp", "httpx"]


def make_transport(client: str, **options: Any) -> Transport:
    if client == "h1":
        return H1Transport(**options)
    if client == "aiohttp":
        return AiohttpTransport(**options)
    return HttpxTransport(**options)


@pytest.fixture(params=CLIENTS)
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    chosen = make_transport(request.param)
    yield chosen
    await chosen.aclose()


async def failure_of(transport: Transport, request: HttpRequest) -> tuple[str, float]:
    started = time.perf_counter()
    with pytest.raises(TransportError) as caught:
        await transport.send(request)
    return caught.value.kind, time.perf_counter() - started


# --- statuses: returned as they are --------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 204])
async def test_D5_2xx_returned_with_body_and_headers_delivered(
    transport: Transport, receiver_factory: MakeReceiver, status: int
) -> None:
    receiver = receiver_factory()
    answer = b"" if status == 204 else b'{"received":true}'
    url = receiver.route("/hook", Respond(status, body=answer))

    response = await transport.send(post(url, headers={"webhook-id": "msg_1", "X-Custom": "v"}))

    assert response.status == status
    assert response.body_excerpt == answer
    assert response.retry_after is None
    assert response.duration_ms > 0
    (got,) = receiver.requests_to("/hook")
    assert got.method == "POST"
    assert got.body == BODY
    assert got.headers["webhook-id"] == "msg_1"
    assert got.headers["x-custom"] == "v"
    assert got.headers["user-agent"].startswith("hookstream/")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_D5_3xx_returned_never_followed(
    transport: Transport, receiver_factory: MakeReceiver, status: int
) -> None:
    source, third_host = receiver_factory(), receiver_factory()
    target = third_host.url("/stolen")
    url = source.route("/hook", Respond(status, headers=(("Location", target),)))

    response = await transport.send(post(url))

    assert response.status == status
    assert len(source.requests_to("/hook")) == 1
    assert third_host.requests == []  # the signed body never reached the Location


async def test_Q3_redirect_loop_is_one_request(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/loop", Respond(302, headers=(("Location", "/loop"),)))

    response = await transport.send(post(url))

    assert response.status == 302
    assert len(receiver.requests_to("/loop")) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
async def test_D5_other_4xx_returned_with_excerpt(
    transport: Transport, receiver_factory: MakeReceiver, status: int
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(status, body=b'{"error":"nope"}'))

    response = await transport.send(post(url))

    assert response.status == status
    assert response.body_excerpt == b'{"error":"nope"}'


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
@pytest.mark.parametrize("retry_after", ["120", "Wed, 21 Oct 2037 07:28:00 GMT"])
async def test_D5_F2_retryable_statuses_surface_retry_after(
    transport: Transport, receiver_factory: MakeReceiver, status: int, retry_after: str
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(status, headers=(("Retry-After", retry_after),)))

    response = await transport.send(post(url))

    assert response.status == status
    assert response.retry_after == retry_after


async def test_D5_excerpt_is_first_kib_and_connection_is_reused(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    body = bytes(range(256)) * 20  # 5 KiB, under the cap: read whole, connection kept
    url = receiver.route("/hook", Respond(200, body=body))

    first = await transport.send(post(url))
    second = await transport.send(post(url))

    assert first.body_excerpt == body[:1024]
    assert second.body_excerpt == body[:1024]
    one, two = receiver.requests_to("/hook")
    assert one.connection == two.connection


async def test_D5_http10_body_without_length(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/old", Http10(b"fine, thanks"))

    response = await transport.send(post(url))

    assert (response.status, response.body_excerpt) == (200, b"fine, thanks")


# --- hostile receivers: bounded time and memory (Q3) ---------------------------------------


@pytest.mark.parametrize(
    "huge",
    [HugeBody(content_length=2 * 1024**3), HugeBody(content_length=None)],
    ids=["2GiB-content-length", "endless-chunked"],
)
async def test_Q3_D5_huge_body_read_up_to_cap_then_connection_dropped(
    transport: Transport, receiver_factory: MakeReceiver, huge: HugeBody
) -> None:
    receiver = receiver_factory()
    huge_url = receiver.route("/huge", huge)
    ok_url = receiver.route("/ok", Respond(200, body=b"ok"))

    # Reading it all would end in a timeout (2 GiB at loopback speed under load) or never
    # (endless): a 200 back means the transport stopped at the cap.
    response = await transport.send(post(huge_url, timeout_s=2.0))

    assert response.status == 200
    assert response.body_excerpt == b"x" * 1024
    # The half-read connection was not handed back to the pool: the next request works and
    # arrives on a new connection.
    assert (await transport.send(post(ok_url))).body_excerpt == b"ok"
    (huge_request,) = receiver.requests_to("/huge")
    (ok_request,) = receiver.requests_to("/ok")
    assert ok_request.connection != huge_request.connection


async def test_Q3_body_just_over_cap_still_returns(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/big", Respond(200, body=b"y" * (DEFAULT_BODY_CAP + 10)))

    response = await transport.send(post(url))

    assert (response.status, response.body_excerpt) == (200, b"y" * 1024)


async def test_Q3_slowloris_body_bounded_by_total_timeout(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/slow", Trickle(interval_s=0.05))

    kind, elapsed = await failure_of(transport, post(url, timeout_s=TIMEOUT_S))

    assert kind == FailureKind.TIMEOUT.value
    assert TIMEOUT_S * 0.9 <= elapsed < TIMEOUT_S + SLACK_S


async def test_D5_answer_later_than_timeout_is_timeout(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/late", Respond(200, delay_s=TIMEOUT_S * 4))

    kind, elapsed = await failure_of(transport, post(url, timeout_s=TIMEOUT_S))

    assert kind == FailureKind.TIMEOUT.value
    assert TIMEOUT_S * 0.9 <= elapsed < TIMEOUT_S + SLACK_S


async def test_Q3_never_answers_is_timeout(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/mute", Silent())

    kind, elapsed = await failure_of(transport, post(url, timeout_s=TIMEOUT_S))

    assert kind == FailureKind.TIMEOUT.value
    assert elapsed < TIMEOUT_S + SLACK_S
    assert len(receiver.requests_to("/mute")) == 1


async def test_D5_connection_refused(transport: Transport) -> None:
    kind, _ = await failure_of(transport, post(f"http://127.0.0.1:{closed_port()}/hook"))

    assert kind == FailureKind.CONNECT_REFUSED.value


async def test_Q3_D5_reset_after_request(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/rst", Reset())

    kind, _ = await failure_of(transport, post(url))

    assert kind == FailureKind.CONNECTION_RESET.value
    assert len(receiver.requests_to("/rst")) == 1


async def test_D5_closed_without_answer_is_reset(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/bye", Close())

    kind, _ = await failure_of(transport, post(url))

    assert kind == FailureKind.CONNECTION_RESET.value


async def test_D5_garbage_status_line_is_protocol_error(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/spam", Garbage())

    kind, _ = await failure_of(transport, post(url))

    assert kind == FailureKind.PROTOCOL_ERROR.value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", FailureKind.CONNECTION_RESET),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            FailureKind.CONNECTION_RESET,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            FailureKind.PROTOCOL_ERROR,
        ),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", FailureKind.PROTOCOL_ERROR),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", FailureKind.PROTOCOL_ERROR),
    ],
    ids=["body-cut-short", "chunks-cut-short", "bad-chunk-size", "bad-status", "bad-header"],
)
async def test_D5_broken_responses(
    transport: Transport, receiver_factory: MakeReceiver, raw: bytes, expected: FailureKind
) -> None:
    """A body the peer cut short is a broken connection; a malformed message is a protocol
    error."""
    receiver = receiver_factory()
    url = receiver.route("/broken", Garbage(raw))

    kind, _ = await failure_of(transport, post(url))

    assert kind == expected.value


# --- DNS and TLS -----------------------------------------------------------------------------


async def test_D5_nxdomain_is_reported_as_such(transport: Transport) -> None:
    # .invalid is reserved (RFC 2606): resolvers answer NXDOMAIN, which getaddrinfo reports as
    # EAI_NONAME. This sandbox's resolver does exactly that (checked when this test was written).
    kind, _ = await failure_of(transport, post("http://no-such-endpoint.hookstream.invalid/hook"))

    assert kind == FailureKind.DNS_NXDOMAIN.value


class _DnsDown(AbstractResolver):
    """A resolver whose DNS server cannot be reached: every lookup is a temporary failure."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("client", ["h1", "aiohttp"])
async def test_D5_temporary_dns_failure_through_resolver_hook(client: str) -> None:
    transport = make_transport(client, resolver=_DnsDown())
    try:
        kind, _ = await failure_of(transport, post("http://endpoint.example.com/hook"))
    finally:
        await transport.aclose()

    assert kind == FailureKind.DNS_TEMPORARY.value


@pytest.mark.parametrize("client", CLIENTS)
async def test_D5_self_signed_certificate_is_tls_invalid(
    receiver_factory: MakeReceiver, client: str
) -> None:
    receiver = receiver_factory(tls=True)
    url = receiver.route("/hook", Respond(200))
    assert receiver.tls is not None
    trusting = receiver.tls.client_context()
    strict = make_transport(client)
    trusted = make_transport(client, ssl_context=trusting)
    try:
        kind, _ = await failure_of(strict, post(url))
        # The same server with its certificate trusted works: the failure above is the chain.
        response: HttpResponse = await trusted.send(post(url))
    finally:
        await strict.aclose()
        await trusted.aclose()

    assert kind == FailureKind.TLS_INVALID.value
    assert response.status == 200
    assert len(receiver.requests_to("/hook")) == 1  # only the trusted request got through


async def test_closed_transport_refuses_to_send(
    transport: Transport, receiver_factory: MakeReceiver
) -> None:
    url = receiver_factory().url("/hook")
    await transport.send(post(url))
    await transport.aclose()

    with pytest.raises(RuntimeError, match="closed"):
        await transport.send(post(url))
