"""What `H1Transport` does beyond the shared contract (SPEC D5, Q3, §5).

tests/integration/test_transport.py holds all three clients to one contract; these tests cover
the choices only hookstream's own HTTP/1.1 client makes: one resend when a pooled connection
turns out to be dead, the request head it writes (no header injection, a well-formed target),
and its pool (keep-alive expiry, the per-origin cap). Real receivers on loopback, no broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from streams.adapters.http import HttpRequest
from streams.adapters.http1 import H1Transport
from streams.domain.models import FailureKind
from streams.errors import TransportError
from tests.receivers import (
    Close,
    Garbage,
    PerId,
    Receiver,
    Respond,
    Silent,
    receiver_factory,
)

__all__ = ["receiver_factory"]

MakeReceiver = Callable[..., Receiver]
BODY = b'{"id":"evt_1","type":"invoice.paid","data":{"amount":42},"attempt":1}'


def post(url: str, **headers: str) -> HttpRequest:
    return HttpRequest(url, BODY, {"Content-Type": "application/json", **headers}, 5.0)


@pytest.fixture
async def h1() -> AsyncIterator[H1Transport]:
    transport = H1Transport()
    yield transport
    await transport.aclose()


async def test_D5_a_pooled_connection_found_dead_is_resent_once_on_a_new_one(
    h1: H1Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    warm = receiver.route("/warm", Respond(200))
    # The first copy arrives on the pooled connection, which the endpoint closes unanswered
    # (what a keep-alive timeout racing the request looks like); the second copy is answered.
    url = receiver.route("/hook", PerId((Close(), Respond(200))))
    await h1.send(post(warm))

    response = await h1.send(post(url, **{"webhook-id": "msg_1"}))

    assert response.status == 200
    (pooled,) = receiver.requests_to("/warm")
    first, second = receiver.requests_to("/hook")
    assert first.connection == pooled.connection
    assert second.connection != first.connection
    assert first.body == second.body == BODY


async def test_D5_a_new_connection_is_never_resent(
    h1: H1Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/bye", Close())

    with pytest.raises(TransportError) as caught:
        await h1.send(post(url))

    assert caught.value.kind == FailureKind.CONNECTION_RESET.value
    assert len(receiver.requests_to("/bye")) == 1


async def test_D5_an_answer_cut_short_on_a_pooled_connection_is_not_resent(
    h1: H1Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    warm = receiver.route("/warm", Respond(200))
    url = receiver.route("/cut", Garbage(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"))
    await h1.send(post(warm))

    with pytest.raises(TransportError) as caught:
        await h1.send(post(url))

    # The endpoint had started to answer: it saw the request, so no second copy goes out.
    assert caught.value.kind == FailureKind.CONNECTION_RESET.value
    assert len(receiver.requests_to("/cut")) == 1


@pytest.mark.parametrize(
    "headers",
    [{"X-Evil": "a\r\nInjected: yes"}, {"X-Evil": "a\nb"}, {"Bad\r\nName": "v"}, {"X": "\0"}],
    ids=["crlf-in-value", "lf-in-value", "crlf-in-name", "nul"],
)
async def test_Q4_header_injection_is_refused_and_nothing_is_sent(
    h1: H1Transport, receiver_factory: MakeReceiver, headers: dict[str, str]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))

    with pytest.raises(TransportError) as caught:
        await h1.send(HttpRequest(url, BODY, headers, 5.0))

    assert caught.value.kind == FailureKind.PROTOCOL_ERROR.value
    assert receiver.requests == []


@pytest.mark.parametrize("name", ["Host", "content-length", "Transfer-Encoding", "Connection"])
async def test_D5_headers_the_transport_writes_cannot_be_overridden(
    h1: H1Transport, receiver_factory: MakeReceiver, name: str
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))

    with pytest.raises(TransportError) as caught:
        await h1.send(HttpRequest(url, BODY, {name: "1"}, 5.0))

    assert caught.value.kind == FailureKind.PROTOCOL_ERROR.value
    assert receiver.requests == []


async def test_D4_the_request_head_is_well_formed(
    h1: H1Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    receiver.route("/hooks/caf%C3%A9%20bar?x=1", Respond(202))

    response = await h1.send(
        post(f"http://127.0.0.1:{receiver.port}/hooks/café bar?x=1", **{"User-Agent": "mine"})
    )

    assert response.status == 202  # the route's status: the target arrived percent-encoded
    (seen,) = receiver.requests
    assert (seen.method, seen.path) == ("POST", "/hooks/caf%C3%A9%20bar?x=1")
    assert seen.body == BODY
    assert seen.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert seen.headers["content-length"] == str(len(BODY))
    assert seen.headers["user-agent"] == "mine"  # the caller's value, not a second header
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["content-type"] == "application/json"


async def test_D5_a_1xx_before_the_answer_is_skipped(
    h1: H1Transport, receiver_factory: MakeReceiver
) -> None:
    receiver = receiver_factory()
    url = receiver.route(
        "/slowpoke",
        Garbage(
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
        ),
    )

    response = await h1.send(post(url))

    assert (response.status, response.retry_after, response.body_excerpt) == (503, "7", b"busy")


async def test_D5_idle_connections_expire_after_keepalive(receiver_factory: MakeReceiver) -> None:
    receiver = receiver_factory()
    url = receiver.route("/hook", Respond(200))
    transport = H1Transport(keepalive_s=0.2)
    try:
        await transport.send(post(url))
        await transport.send(post(url))
        await asyncio.sleep(0.4)
        await transport.send(post(url))
    finally:
        await transport.aclose()

    one, two, three = receiver.requests_to("/hook")
    assert one.connection == two.connection
    assert three.connection != two.connection


async def test_F3_requests_to_one_origin_stay_within_its_connection_cap(
    receiver_factory: MakeReceiver,
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/slow", Respond(200, delay_s=0.1))
    transport = H1Transport(per_host_limit=2)
    try:
        responses = await asyncio.gather(*(transport.send(post(url)) for _ in range(8)))
    finally:
        await transport.aclose()

    assert [r.status for r in responses] == [200] * 8
    assert len({r.connection for r in receiver.requests_to("/slow")}) == 2


async def test_Q3_a_pooled_connection_that_never_answers_times_out_and_frees_its_slots(
    receiver_factory: MakeReceiver,
) -> None:
    # A pooled connection takes the fast path (a timer on the connection, no asyncio.timeout):
    # its timeout is the same TIMEOUT, the silent connection is dropped, and both slots (one
    # connection per origin here) come back, so the next request goes out on a new connection.
    receiver = receiver_factory()
    warm = receiver.route("/warm", Respond(200))
    silent = receiver.route("/silent", Silent())
    transport = H1Transport(max_connections=1, per_host_limit=1)
    try:
        await transport.send(post(warm))
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(TransportError) as caught:
            await asyncio.wait_for(transport.send(HttpRequest(silent, BODY, {}, 0.3)), 5)
        waited = loop.time() - began
        after = await asyncio.wait_for(transport.send(post(warm)), 5)
    finally:
        await transport.aclose()

    assert caught.value.kind == FailureKind.TIMEOUT.value
    assert 0.25 < waited < 2.0
    assert after.status == 200
    first, second = receiver.requests_to("/warm")
    (hung,) = receiver.requests_to("/silent")
    assert hung.connection == first.connection
    assert second.connection != hung.connection
