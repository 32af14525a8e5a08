"""Every TLS failure a delivery client can see gets the class D5 intends (SPEC Q3, D5).

Real local servers (`tests.tls_receivers`) fail the handshake each in its own way; the
certificates are minted for the test with ``cryptography``. A host that may come back (it reset
or cut the handshake short, sent an alert, or does not speak TLS on that port) is retryable; a
certificate that is wrong (self-signed, expired, issued for another host) is permanent.

The transport matrix holds all three clients to that table; the pipeline test sends one event
to each receiver through the router, the dispatcher and the ledger/DLQ on the real broker, with
the test CA trusted (``SSL_CERT_FILE``) so that a hostname mismatch and an expired certificate
are seen as such, not as an unknown issuer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.domain.classify import classify
from streams.domain.models import Attempt, DeliveryState, FailureKind, OutcomeClass
from streams.errors import TransportError
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.test_transport import CLIENTS, make_transport, post
from tests.tls_receivers import Handshake, Minted, TlsReceiver, mint_ca, mint_leaf, tls_receiver

pytestmark = pytest.mark.integration
__all__ = ["tls_receiver"]  # the fixture

_R, _P, _S = OutcomeClass.RETRYABLE, OutcomeClass.PERMANENT, OutcomeClass.SUCCESS
TERMINAL = {DeliveryState.SUCCESS, DeliveryState.DEAD, DeliveryState.EXHAUSTED}


@dataclass(frozen=True)
class Case:
    name: str
    behaviour: Handshake
    certificate: str | None  # which minted certificate `serve` presents
    kind: FailureKind | None  # None: delivered
    outcome: OutcomeClass


CASES = (
    Case("handshake_reset", "reset", None, FailureKind.CONNECTION_RESET, _R),
    Case("handshake_eof", "eof", None, FailureKind.CONNECTION_RESET, _R),
    Case("not_tls", "plaintext", None, FailureKind.TLS_ERROR, _R),
    Case("handshake_alert", "alert", None, FailureKind.TLS_ERROR, _R),
    Case("self_signed", "serve", "self_signed", FailureKind.TLS_INVALID, _P),
    Case("hostname_mismatch", "serve", "other_host", FailureKind.TLS_INVALID, _P),
    Case("expired", "serve", "expired", FailureKind.TLS_INVALID, _P),
    Case("valid", "serve", "valid", None, _S),  # the control: the CA chain itself is fine
)


def _certificates(directory: Path) -> tuple[Minted, dict[str, Minted]]:
    ca = mint_ca(directory)
    return ca, {
        "self_signed": mint_leaf(directory, None, label="self_signed"),
        "other_host": mint_leaf(directory, ca, names=("other.example",), label="other_host"),
        "expired": mint_leaf(directory, ca, expired=True, label="expired"),
        "valid": mint_leaf(directory, ca, label="valid"),
    }


def _receivers(
    factory: type[TlsReceiver], certificates: dict[str, Minted]
) -> dict[str, TlsReceiver]:
    return {
        case.name: factory(
            case.behaviour, None if case.certificate is None else certificates[case.certificate]
        )
        for case in CASES
    }


@pytest.mark.parametrize("client", CLIENTS)
async def test_Q3_D5_each_tls_failure_is_classified_by_every_client(
    client: str, tmp_path: Path, tls_receiver: type[TlsReceiver]
) -> None:
    """D5: reset/EOF/alert/not-TLS are retryable; self-signed/mismatch/expired are permanent."""
    ca, certificates = _certificates(tmp_path)
    receivers = _receivers(tls_receiver, certificates)
    transport = make_transport(client, ssl_context=ca.trusting_client())
    seen: dict[str, tuple[FailureKind | None, OutcomeClass]] = {}
    try:
        for case in CASES:
            try:
                response = await transport.send(post(receivers[case.name].url(), timeout_s=10))
            except TransportError as exc:
                kind = FailureKind(exc.kind)
                seen[case.name] = (kind, classify(None, kind).outcome)
            else:
                seen[case.name] = (None, classify(response.status, None).outcome)
    finally:
        await transport.aclose()
    expected = {case.name: (case.kind, case.outcome) for case in CASES}
    assert seen == expected
    assert receivers["valid"].requests == 1
    for name in ("self_signed", "hostname_mismatch", "expired"):
        assert receivers[name].requests == 0, f"{name}: a request went over a bad certificate"


async def test_Q3_D5_tls_failures_through_the_pipeline(
    make_settings: Callable[..., Settings],
    tls_receiver: type[TlsReceiver],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Q3, D5, D8: each TLS receiver behind a subscription; the ledger and the DLQ agree."""
    ca, certificates = _certificates(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))  # the delivery client trusts the test CA
    receivers = _receivers(tls_receiver, certificates)
    # Retryable failures retry every 300 ms within a 1 s window, then end as exhausted; the
    # breaker stays out of the way so every attempt reaches its receiver.
    settings = make_settings(
        retry_schedule="300ms",
        retry_window="1s",
        breaker_failures=100000,
        breaker_min_attempts=1000000,
    )
    async with PipelineHarness(settings) as harness:
        subs = {}
        for case in CASES:
            url = receivers[case.name].url(f"/{case.name}")
            sub = await harness.subscribe(url, [f"tls.{case.name}"], timeout_s=5.0)
            subs[sub.id] = case
        await harness.publish(
            [make_event("acme", f"tls.{case.name}", i) for i, case in enumerate(CASES)]
        )
        by_sub: dict[str, list[Attempt]] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            by_sub = {}
            for att in await harness.attempts():
                by_sub.setdefault(att.subscription_id, []).append(att)
            if all(any(a.state in TERMINAL for a in by_sub.get(s, [])) for s in subs):
                break
            await asyncio.sleep(0.5)
        letters = await harness.dead_letters()

    problems = {
        case.name: found
        for sub_id, case in subs.items()
        if (
            found := _mismatches(
                case,
                by_sub.get(sub_id, []),
                [d.reason for d in letters if d.subscription_id == sub_id],
            )
        )
    }
    assert not problems, problems


def _mismatches(case: Case, attempts: list[Attempt], dead: list[str]) -> list[str]:
    reason = "http_200" if case.kind is None else case.kind.value
    expected_dead = {_S: [], _R: [f"exhausted:{reason}"], _P: [reason]}[case.outcome]
    problems = []
    got = {(a.outcome, a.reason) for a in attempts}
    if got != {(case.outcome, reason)}:
        problems.append(f"attempts classified {got}, expected {(case.outcome, reason)}")
    if dead != expected_dead:
        problems.append(f"dead letters {dead}, expected {expected_dead}")
    if case.outcome is _R and len(attempts) < 2:
        problems.append(f"retryable, yet attempted {len(attempts)} time(s)")
    if case.outcome is _P and len(attempts) != 1:
        problems.append(f"permanent, yet attempted {len(attempts)} times")
    return problems
