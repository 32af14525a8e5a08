"""The one delivery path (STYLE practice 6).

Live deliveries, retries, backfills, replays, probes and test sends all call `attempt`: it builds
the envelope (D4), signs it with every current secret (D3), sends it with the subscription's
timeout and headers through the injected transport, and reports what happened. It never raises
for a delivery failure: failures are data, classified later by `streams.domain.settle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streams.adapters.http import HttpRequest, Transport
from streams.domain.envelope import build_body
from streams.domain.models import Delivery, FailureKind, Subscription
from streams.domain.settle import AttemptResult
from streams.domain.signing import signature_header, webhook_headers
from streams.errors import TransportError


async def attempt(
    transport: Transport,
    sub: Subscription,
    delivery: Delivery,
    clock: Callable[[], float] = time.time,
) -> AttemptResult:
    """Make one signed HTTP attempt of ``delivery`` to ``sub``'s URL."""
    now = clock()
    now_ms = int(now * 1000)
    body = build_body(delivery.event, delivery.attempt)
    timestamp_s = int(now)  # fresh on every attempt (D3)
    signature = signature_header(sub.secrets, now_ms, delivery.delivery_id, timestamp_s, body)
    headers = dict(sub.headers)
    headers.update(webhook_headers(delivery.delivery_id, timestamp_s, signature))
    request = HttpRequest(url=sub.url, body=body, headers=headers, timeout_s=sub.timeout_s)
    started = time.perf_counter()
    try:
        response = await transport.send(request)
    except TransportError as exc:
        return AttemptResult(
            started_at=now_ms,
            duration_ms=(time.perf_counter() - started) * 1000,
            failure=FailureKind(exc.kind),
            error=str(exc),
        )
    return AttemptResult(
        started_at=now_ms,
        duration_ms=response.duration_ms,
        status=response.status,
        response_excerpt=response.body_excerpt,
        retry_after=response.retry_after,
    )
