"""The transport contract without a network (STYLE practice 4; SPEC D5).

`ScriptedTransport` is what delivery unit tests script 200/500/429/timeouts with, so its own
behaviour is pinned here. The exception conversion functions of the real clients are checked with
real exception objects for the cases a loopback server cannot produce (a DNS server that is down,
a name with no address, an unreachable network).
"""

from __future__ import annotations

import socket
import ssl

import aiohttp
import httpx
import pytest

from bench.httpx_transport import HttpxTransport, _from_httpx
from streams.adapters.http import (
    AiohttpTransport,
    HttpRequest,
    HttpResponse,
    ScriptedTransport,
    Transport,
    _from_aiohttp,
    scripted_failure,
    scripted_response,
)
from streams.domain.models import FailureKind
from streams.errors import TransportError


def request(n: int = 1) -> HttpRequest:
    return HttpRequest(f"https://endpoint.example/{n}", b"{}", {"webhook-id": f"msg_{n}"}, 10.0)


async def test_D5_scripted_results_play_in_order_and_requests_are_recorded() -> None:
    transport: Transport = ScriptedTransport(
        [
            scripted_response(503, retry_after="30"),
            scripted_failure(FailureKind.TIMEOUT),
            scripted_response(200, body=b"ok"),
        ]
    )
    assert isinstance(transport, ScriptedTransport)

    first = await transport.send(request(1))
    with pytest.raises(TransportError) as failed:
        await transport.send(request(2))
    third = await transport.send(request(3))

    assert (first.status, first.retry_after) == (503, "30")
    assert failed.value.kind == FailureKind.TIMEOUT.value
    assert (third.status, third.body_excerpt) == (200, b"ok")
    assert [r.url for r in transport.requests] == [request(n).url for n in (1, 2, 3)]
    assert transport.requests[1].headers["webhook-id"] == "msg_2"


async def test_scripted_transport_fails_the_test_when_the_script_runs_out() -> None:
    transport = ScriptedTransport([scripted_response(200)])
    await transport.send(request(1))

    with pytest.raises(AssertionError, match="only 1 results were scripted"):
        await transport.send(request(2))


async def test_scripted_transport_answers_with_a_function() -> None:
    def answer(sent: HttpRequest) -> HttpResponse | TransportError:
        if sent.url.endswith("/gone"):
            return scripted_response(410)
        return scripted_failure(FailureKind.CONNECT_REFUSED, "nobody home")

    transport = ScriptedTransport(answer)

    gone = await transport.send(HttpRequest("https://a.example/gone", b"", {}, 1.0))
    with pytest.raises(TransportError, match="nobody home") as refused:
        await transport.send(request())

    assert gone.status == 410
    assert refused.value.kind == FailureKind.CONNECT_REFUSED.value
    assert len(transport.requests) == 2


async def test_scripted_transport_refuses_after_close() -> None:
    transport = ScriptedTransport([scripted_response(200)])
    await transport.aclose()

    with pytest.raises(RuntimeError, match="closed"):
        await transport.send(request())
    assert transport.requests == []


def test_D5_scripted_response_keeps_only_the_excerpt() -> None:
    assert scripted_response(500, body=b"e" * 5000).body_excerpt == b"e" * 1024


@pytest.mark.parametrize("make", [AiohttpTransport, HttpxTransport])
def test_cap_smaller_than_excerpt_is_refused(make: type[AiohttpTransport | HttpxTransport]) -> None:
    with pytest.raises(ValueError, match="body_cap"):
        make(body_cap=100, excerpt_bytes=1024)


# --- conversion of the clients' exceptions ------------------------------------------------------

DNS_CASES = [
    (socket.EAI_NONAME, FailureKind.DNS_NXDOMAIN),
    (socket.EAI_AGAIN, FailureKind.DNS_TEMPORARY),
    (socket.EAI_FAIL, FailureKind.DNS_TEMPORARY),
]
if hasattr(socket, "EAI_NODATA"):  # glibc: the name exists but has no address
    DNS_CASES.append((socket.EAI_NODATA, FailureKind.DNS_NXDOMAIN))


def _raised_from(outer: BaseException, cause: BaseException) -> BaseException:
    """``outer`` as it is seen after ``raise outer from cause``."""
    try:
        raise outer from cause
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(("code", "expected"), DNS_CASES)
def test_D5_httpx_dns_errors_by_getaddrinfo_code(code: int, expected: FailureKind) -> None:
    gai = socket.gaierror(code, "resolution failed")
    exc = _raised_from(httpx.ConnectError("[Errno] resolution failed"), gai)

    assert _from_httpx(exc).kind == expected.value


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (ConnectionRefusedError(111, "refused"), FailureKind.CONNECT_REFUSED),
        (ssl.SSLCertVerificationError("certificate verify failed"), FailureKind.TLS_INVALID),
        (ssl.SSLError(1, "[SSL: SSLV3_ALERT_HANDSHAKE_FAILURE]"), FailureKind.TLS_ERROR),
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), FailureKind.CONNECTION_RESET),
        (OSError(101, "Network is unreachable"), FailureKind.CONNECT_REFUSED),
    ],
)
def test_D5_httpx_connect_errors_by_cause(cause: OSError, expected: FailureKind) -> None:
    exc = _raised_from(httpx.ConnectError(str(cause)), cause)

    assert _from_httpx(exc).kind == expected.value


def test_D5_httpx_read_error_is_reset() -> None:
    exc = _raised_from(httpx.ReadError("read failed"), ConnectionResetError(104, "reset"))

    assert _from_httpx(exc).kind == FailureKind.CONNECTION_RESET.value


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (aiohttp.ServerDisconnectedError(), FailureKind.CONNECTION_RESET),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), FailureKind.CONNECTION_RESET),
        (aiohttp.ConnectionTimeoutError("connect timed out"), FailureKind.TIMEOUT),
        (aiohttp.SocketTimeoutError("read timed out"), FailureKind.TIMEOUT),
        (TimeoutError(), FailureKind.TIMEOUT),
        (aiohttp.InvalidURL("not a url"), FailureKind.PROTOCOL_ERROR),
    ],
)
def test_D5_aiohttp_errors(exc: BaseException, expected: FailureKind) -> None:
    converted = _from_aiohttp(exc)

    assert converted.kind == expected.value
    assert type(exc).__name__ in str(converted)
