"""How hookstream judges one delivery attempt (SPEC D5).

An attempt ends either with an HTTP status or with a `FailureKind` the transport reported below
HTTP. `classify` turns that into an `OutcomeClass` and a short, stable snake-case ``reason``. The
reason is the DLQ reason and a metric label, so its set of values is bounded: the exact status
is kept only for codes within 100..599, and every other code shares one reason.

The rules are the tables `STATUS_RULES` and `FAILURE_RULES` below; the first status rule whose
range holds the status wins. Choices the SPEC leaves open:

- A final 1xx response or a code outside 100..599 (``600``, ``0``, ``999``) is a broken HTTP
  exchange, the same family as `FailureKind.PROTOCOL_ERROR`, so it is **retryable**: a
  misbehaving proxy in front of an endpoint is usually transient, and the retry schedule and the
  health policy bound how long hookstream keeps trying. Reasons ``http_1xx`` and
  ``http_invalid_status``.
- A 410 Gone is permanent with reason ``http_410``; the health policy recognises that reason.
- TLS: only a certificate that is wrong (untrusted or self-signed, expired, issued for another
  host) is ``tls_invalid``, permanent: no retry mends it. A handshake the host resets or cuts
  short (``connection_reset``), or one that fails otherwise (``tls_error``: a handshake alert,
  a port that does not speak TLS, a broken record) is **retryable**: the host may come back or
  be fixed, and the retry schedule and the health policy bound how long hookstream keeps trying.

`parse_retry_after` reads a ``Retry-After`` header (integer seconds or an HTTP-date); the backoff
decides how to honour it (D6, F2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

from streams.domain.models import FailureKind, OutcomeClass

__all__ = [
    "FAILURE_RULES",
    "STATUS_RULES",
    "Classification",
    "StatusRule",
    "classify",
    "parse_retry_after",
]


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one attempt: its class and a bounded, stable reason code."""

    outcome: OutcomeClass
    reason: str


@dataclass(frozen=True, slots=True)
class StatusRule:
    """Statuses ``low..high`` (inclusive) get ``outcome``; ``reason`` may use ``{status}``."""

    low: int
    high: int
    outcome: OutcomeClass
    reason: str


_S = OutcomeClass.SUCCESS
_R = OutcomeClass.RETRYABLE
_P = OutcomeClass.PERMANENT
_F = OutcomeClass.FATAL

#: The status table, most specific first. Codes no rule holds are `_INVALID_STATUS`.
STATUS_RULES: tuple[StatusRule, ...] = (
    StatusRule(408, 408, _R, "http_408"),  # request timeout: the receiver asks to try again
    StatusRule(429, 429, _R, "http_429"),  # too many requests: honour Retry-After (D6)
    StatusRule(410, 410, _P, "http_410"),  # gone: also counted toward suspension (H2)
    StatusRule(100, 199, _R, "http_1xx"),  # a final 1xx is a broken exchange
    StatusRule(200, 299, _S, "http_{status}"),
    StatusRule(300, 399, _P, "redirect_{status}"),  # never followed: the body is signed
    StatusRule(400, 499, _P, "http_{status}"),
    StatusRule(500, 599, _R, "http_{status}"),
)

#: What a status outside every rule gets (outside 100..599).
_INVALID_STATUS = Classification(_R, "http_invalid_status")

#: The table of failures below HTTP. The reason is the failure kind's own stable value.
FAILURE_RULES: dict[FailureKind, OutcomeClass] = {
    FailureKind.TIMEOUT: _R,
    FailureKind.CONNECT_REFUSED: _R,
    FailureKind.CONNECTION_RESET: _R,
    FailureKind.DNS_TEMPORARY: _R,
    FailureKind.PROTOCOL_ERROR: _R,
    FailureKind.TLS_ERROR: _R,  # a handshake alert or no TLS spoken: the host may be fixed
    FailureKind.TLS_INVALID: _P,  # a wrong certificate: no retry mends it
    FailureKind.BLOCKED_DESTINATION: _P,  # refused by the SSRF guard (Q4)
    FailureKind.DNS_NXDOMAIN: _F,  # the host no longer exists
}


def _judge_status(status: int) -> Classification:
    for rule in STATUS_RULES:
        if rule.low <= status <= rule.high:
            return Classification(rule.outcome, rule.reason.format(status=status))
    return _INVALID_STATUS


# The tables, expanded once so the hot path is one dict lookup and allocates nothing.
_BY_STATUS: dict[int, Classification] = {s: _judge_status(s) for s in range(100, 600)}
_BY_FAILURE: dict[FailureKind, Classification] = {
    kind: Classification(outcome, kind.value) for kind, outcome in FAILURE_RULES.items()
}


def classify(status: int | None, failure: FailureKind | None) -> Classification:
    """Judge an attempt from its HTTP ``status`` or its ``failure``; exactly one must be given."""
    if failure is not None and status is None:
        return _BY_FAILURE[failure]
    if status is not None and failure is None:
        return _BY_STATUS.get(status, _INVALID_STATUS)
    raise ValueError("classify needs exactly one of status and failure")


# delay-seconds is 1*DIGIT; ten digits (about 300 years) is more than any receiver means.
_DELAY_SECONDS = re.compile(r"[0-9]{1,10}")


def parse_retry_after(value: str | None, now_ms: int) -> float | None:
    """Seconds to wait from ``now_ms`` as the receiver's ``Retry-After`` asks, or None.

    Integer seconds and HTTP-dates are understood. A date already past means "no wait" (0.0).
    Anything else (negative numbers, fractions, garbage, an absent header) is None, and the
    ordinary schedule applies.
    """
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's own zone
        when = when.replace(tzinfo=UTC)
    seconds = when.timestamp()
    return max(0.0, seconds - now_ms / 1000.0)
