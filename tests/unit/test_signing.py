"""D2, D3, S5: delivery ids, Standard Webhooks signatures, secrets and rotation.

hookstream's signatures are checked with the public ``standardwebhooks`` library, the verifier
endpoint owners use, so a drift from the specification fails here.
"""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from streams.domain.idempotency import DELIVERY_ID_PATTERN, delivery_id
from streams.domain.models import Secret
from streams.domain.signing import (
    decode_secret,
    generate_secret,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

OLD = "whsec_" + base64.b64encode(bytes(range(24))).decode()
NEW = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
BODY = b'{"id":"evt_1","type":"invoice.paid","attempt":1}'


def _headers(
    secrets: list[Secret], now_ms: int, msg_id: str, ts: int, body: bytes
) -> dict[str, str]:
    return webhook_headers(msg_id, ts, signature_header(secrets, now_ms, msg_id, ts, body))


# --- D2: the idempotency key -------------------------------------------------------------------


def test_D2_delivery_id_is_stable_and_header_safe() -> None:
    first = delivery_id("evt_1", "sub_1")
    assert first == delivery_id("evt_1", "sub_1")
    assert DELIVERY_ID_PATTERN.fullmatch(first)
    assert len(first) <= 64


def test_D2_delivery_id_never_changes_between_releases() -> None:
    """Keys already sent, stored in the ledger or in flight must stay valid after an upgrade."""
    assert delivery_id("evt_1", "sub_1") == "msg_5b5d1b1e3da2359edeb515d01f6656594f8a66b3"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("evt_1", "sub_1"), ("evt_1", "sub_2")),
        (("evt_1", "sub_1"), ("sub_1", "evt_1")),
        (("a.b", "c"), ("a", "b.c")),  # no ambiguous concatenation
        (("ab", ""), ("a", "b")),
    ],
)
def test_D2_different_pairs_get_different_ids(a: tuple[str, str], b: tuple[str, str]) -> None:
    assert delivery_id(*a) != delivery_id(*b)


@given(st.text(), st.text(), st.text(), st.text())
def test_D2_delivery_id_property(e1: str, s1: str, e2: str, s2: str) -> None:
    assert DELIVERY_ID_PATTERN.fullmatch(delivery_id(e1, s1))
    assert (delivery_id(e1, s1) == delivery_id(e2, s2)) == ((e1, s1) == (e2, s2))


def test_D2_webhook_id_and_idempotency_key_mirror_each_other() -> None:
    key = delivery_id("evt_1", "sub_1")
    headers = webhook_headers(key, 1_700_000_000, "v1,abc")
    assert headers == {
        "webhook-id": key,
        "webhook-timestamp": "1700000000",
        "webhook-signature": "v1,abc",
        "X-Idempotency-Key": key,
        "content-type": "application/json",
    }


# --- S5: secrets -------------------------------------------------------------------------------


def test_S5_generate_secret_uses_the_injected_random_source() -> None:
    asked: list[int] = []

    def source(n: int) -> bytes:
        asked.append(n)
        return bytes(range(n))

    secret = generate_secret(source)
    assert asked == [24]
    assert secret.startswith("whsec_")
    assert decode_secret(secret) == bytes(range(24))


def test_S5_generate_secret_refuses_a_short_random_source() -> None:
    with pytest.raises(ValueError, match="returned 3 bytes"):
        generate_secret(lambda n: b"abc")


def test_S5_decode_secret_accepts_missing_padding() -> None:
    padded = "whsec_" + base64.b64encode(bytes(range(25))).decode()
    assert padded.endswith("=")
    assert decode_secret(padded.rstrip("=")) == bytes(range(25))


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "whsec_",
        base64.b64encode(bytes(24)).decode(),  # no prefix
        "whsec_" + base64.b64encode(bytes(8)).decode(),  # too short
        "whsec_" + base64.b64encode(bytes(65)).decode(),  # too long
        "whsec_not*base64!" + "A" * 30,
        "whsec_" + base64.urlsafe_b64encode(b"\xfb\xff" * 12).decode(),  # url-safe alphabet
    ],
)
def test_S5_malformed_secret_is_refused_without_echoing_it(secret: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_secret(secret)
    body = secret.removeprefix("whsec_")
    assert not body or body not in str(info.value)


# --- D3: signatures ----------------------------------------------------------------------------


def test_D3_matches_the_standard_webhooks_published_vector() -> None:
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_D3_receiver_library_verifies_a_delivery() -> None:
    msg_id = delivery_id("evt_1", "sub_1")
    now_s = int(time.time())
    headers = _headers([Secret(NEW)], now_s * 1000, msg_id, now_s, BODY)
    assert Webhook(NEW).verify(BODY, headers) == {
        "id": "evt_1",
        "type": "invoice.paid",
        "attempt": 1,
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(NEW).verify(BODY + b" ", headers)


def test_D3_rotation_sends_both_signatures_newest_first() -> None:
    now_s = int(time.time())
    now_ms = now_s * 1000
    msg_id = delivery_id("evt_1", "sub_1")
    grace_end = now_ms + 24 * 3600 * 1000
    secrets = [Secret(OLD, not_after=grace_end), Secret(NEW)]
    headers = _headers(secrets, now_ms, msg_id, now_s, BODY)
    signatures = headers["webhook-signature"].split(" ")
    assert signatures == [sign(NEW, msg_id, now_s, BODY), sign(OLD, msg_id, now_s, BODY)]
    for receiver_secret in (OLD, NEW):  # a receiver holding either secret verifies
        Webhook(receiver_secret).verify(BODY, headers, json_parse=False)


def test_D3_newest_first_orders_retiring_secrets_by_their_end() -> None:
    third = "whsec_" + base64.b64encode(bytes(range(50, 74))).decode()
    secrets = [Secret(OLD, not_after=2_000), Secret(third, not_after=3_000), Secret(NEW)]
    header = signature_header(secrets, 1_000, "msg_x", 1, BODY)
    assert header.split(" ") == [sign(s, "msg_x", 1, BODY) for s in (NEW, third, OLD)]


def test_D3_a_secret_past_its_grace_period_no_longer_signs() -> None:
    now_s = int(time.time())
    now_ms = now_s * 1000
    secrets = [Secret(OLD, not_after=now_ms), Secret(NEW)]
    headers = _headers(secrets, now_ms, "msg_x", now_s, BODY)
    assert headers["webhook-signature"] == sign(NEW, "msg_x", now_s, BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD).verify(BODY, headers)


def test_D3_no_valid_secret_means_no_delivery() -> None:
    with pytest.raises(ValueError, match="no signing secret"):
        signature_header([Secret(OLD, not_after=5)], 5, "msg_x", 1, BODY)
    with pytest.raises(ValueError, match="no signing secret"):
        signature_header([], 5, "msg_x", 1, BODY)


def test_D3_a_repeated_secret_signs_once() -> None:
    header = signature_header([Secret(NEW), Secret(NEW, not_after=10)], 0, "msg_x", 1, BODY)
    assert header == sign(NEW, "msg_x", 1, BODY)


def test_D3_verify_checks_the_tolerance_window() -> None:
    header = sign(NEW, "msg_x", 1_000, BODY)
    assert verify(NEW, "msg_x", 1_000, BODY, header, now_s=1_300)
    assert verify(NEW, "msg_x", 1_000, BODY, header, now_s=700)
    assert not verify(NEW, "msg_x", 1_000, BODY, header, now_s=1_301)
    assert not verify(NEW, "msg_x", 1_000, BODY, header, now_s=699)
    assert verify(NEW, "msg_x", 1_000, BODY, header, now_s=1_301, tolerance_s=301)


@pytest.mark.parametrize(
    "header",
    ["", "garbage", "v1,", "v2," + sign(NEW, "msg_x", 1, BODY)[3:], "v1,AAAA v1 ,,"],
)
def test_D3_verify_refuses_bad_headers(header: str) -> None:
    assert not verify(NEW, "msg_x", 1, BODY, header, now_s=1)


def test_D3_verify_refuses_tampering() -> None:
    header = sign(NEW, "msg_x", 1, BODY)
    assert verify(NEW, "msg_x", 1, BODY, "v2,xyz " + header, now_s=1)
    assert not verify(NEW, "msg_y", 1, BODY, header, now_s=1)
    assert not verify(NEW, "msg_x", 2, BODY, header, now_s=1)
    assert not verify(NEW, "msg_x", 1, BODY[:-1], header, now_s=1)
    assert not verify(OLD, "msg_x", 1, BODY, header, now_s=1)


@given(body=st.text(), msg_id=st.text(min_size=1))
def test_D3_Q5_receiver_library_verifies_any_body_and_id(body: str, msg_id: str) -> None:
    now_s = int(time.time())
    raw = body.encode()
    headers = _headers(
        [Secret(OLD, not_after=now_s * 1000 + 1), Secret(NEW)], now_s * 1000, msg_id, now_s, raw
    )
    Webhook(NEW).verify(raw, headers, json_parse=False)
    Webhook(OLD).verify(raw, headers, json_parse=False)


@given(body=st.binary(), msg_id=st.text(), timestamp_s=st.integers(0, 2**40))
def test_D3_Q5_sign_verify_round_trip_for_any_bytes(
    body: bytes, msg_id: str, timestamp_s: int
) -> None:
    header = signature_header([Secret(NEW)], 0, msg_id, timestamp_s, body)
    assert verify(NEW, msg_id, timestamp_s, body, header, now_s=timestamp_s)
    assert not verify(OLD, msg_id, timestamp_s, body, header, now_s=timestamp_s)
    assert not verify(NEW, msg_id, timestamp_s, body + b"x", header, now_s=timestamp_s)
