"""S6: key encoding, cursors and the ledger store's reads, without a broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.adapters import codec
from streams.adapters.ledger_codec import attempt_fields
from streams.adapters.ledger_store import LedgerStore, open_store
from streams.domain import ledger_keys as k
from streams.domain.ledger_keys import DeliveryMeta, LetterPosition
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    DeliveryState,
    Event,
    Lane,
    OutcomeClass,
)
from streams.errors import DecodeError, ValidationError

TEXT = st.text(max_size=40)


def attempt(
    delivery_id: str,
    number: int,
    at: int,
    state: DeliveryState = DeliveryState.SUCCESS,
    sub: str = "sub_a",
    tenant: str = "t1",
) -> Attempt:
    return Attempt(
        delivery_id=delivery_id,
        subscription_id=sub,
        tenant_id=tenant,
        event_id="evt_" + delivery_id,
        event_type="invoice.paid",
        attempt=number,
        lane=Lane.LIVE,
        started_at=at,
        duration_ms=1.5,
        outcome=OutcomeClass.SUCCESS,
        reason="http_200",
        state=state,
        http_status=200,
    )


def letter(delivery_id: str, at: int, reason: str, sub: str = "sub_a", tenant: str = "t1") -> bytes:
    event = Event("evt_" + delivery_id, tenant, "invoice.paid", at, "{}", at)
    delivery = Delivery(
        delivery_id=delivery_id, subscription_id=sub, tenant_id=tenant, event=event, attempt=3
    )
    return codec.encode(
        DeadLetter(
            reason=reason,
            dead_at=at,
            tenant_id=tenant,
            subscription_id=sub,
            delivery=delivery,
            attempts=3,
        )
    )


@pytest.fixture
def store(tmp_path: Path) -> LedgerStore:
    return LedgerStore(open_store(tmp_path / "ledger", 8, 4), tmp_path / "ledger")


@given(TEXT, TEXT, TEXT, st.integers(0, 2**31), st.integers(0, 2**45))
def test_s6_index_fields_read_without_decoding_match_the_codec(
    delivery_id: str, sub: str, tenant: str, number: int, at: int
) -> None:
    raw = codec.encode(attempt(delivery_id, number, at, DeliveryState.ERROR, sub, tenant))
    fields = attempt_fields(raw)
    assert fields == (delivery_id, sub, tenant, number, at, "error")


def test_s6_an_unreadable_attempt_is_a_decode_error() -> None:
    raw = codec.encode(attempt("msg_1", 1, 5))
    with pytest.raises(DecodeError):
        attempt_fields(raw[:20])
    with pytest.raises(DecodeError):
        attempt_fields(b"not avro at all")


@given(st.lists(st.integers(0, 2**50), min_size=2, max_size=20))
def test_s6_newest_first_keys_sort_by_descending_time(times: list[int]) -> None:
    keys = sorted(k.state_key(3, "sub_a", "success", t, "msg_x") for t in times)
    decoded = [k.delivery_of_index(key, len(k.text("sub_a")) + 1)[0] for key in keys]
    assert decoded == sorted(times, reverse=True)


def test_s6_meta_round_trips_with_its_attempts() -> None:
    meta = DeliveryMeta("sub_a", "t1", "error", 10, 20)
    value = k.encode_meta(meta, [b"one", b"", b"three"])
    assert k.decode_meta(value) == (meta, [b"one", b"", b"three"])


def test_s6_cursors_round_trip_and_bad_ones_name_the_field() -> None:
    text = k.encode_cursor([5, "msg_1"])
    assert k.decode_cursor(text, (int, str)) == [5, "msg_1"]
    for bad in ("", "!!!", k.encode_cursor(["x", 1]), k.encode_cursor([-1, "a"])):
        with pytest.raises(ValidationError) as raised:
            k.decode_cursor(bad, (int, str))
        assert "cursor" in raised.value.fields


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3), st.integers(0, 50))))
def test_s6_a_letter_scan_resumes_exactly_after_its_cursor(
    entries: list[tuple[int, int, int]],
) -> None:
    """Merged over partitions, resuming each partition at `start_in` skips exactly what came
    before the cursor and nothing after it."""
    positions = sorted({LetterPosition(n, p, o) for n, p, o in entries})
    for cursor in positions:
        resumed = sorted(
            pos for pos in positions if (pos.newest, pos.offset) >= cursor.start_in(pos.partition)
        )
        assert resumed == [pos for pos in positions if pos > cursor]


def test_s6_a_delivery_is_read_by_id_with_every_attempt_and_its_latest_state(
    store: LedgerStore,
) -> None:
    first = codec.encode(attempt("msg_1", 1, 1_000, DeliveryState.ERROR))
    second = codec.encode(attempt("msg_1", 2, 2_000, DeliveryState.SUCCESS))
    store.apply(4, [(0, first)], [])
    store.apply(4, [(1, second)], [])
    found = store.delivery({1, 4}, "msg_1")
    assert found is not None and found.partition == 4
    assert found.attempts == [first, second]
    assert found.meta.state == "success" and found.meta.last_at == 2_000
    assert store.next_offset(4, k.ATTEMPTS_TOPIC) == 2
    assert store.delivery({1, 2}, "msg_1") is None  # not a partition asked about


def test_s6_a_subscriptions_deliveries_page_newest_first_by_state(store: LedgerStore) -> None:
    records = [
        (n, codec.encode(attempt(f"msg_{n}", 1, 1_000 + n, DeliveryState.SUCCESS)))
        for n in range(7)
    ]
    records.append((7, codec.encode(attempt("msg_3", 2, 5_000, DeliveryState.DEAD))))
    store.apply(0, records, [])
    page, after = store.deliveries(0, "sub_a", None, None, 3)
    assert [d.attempts and d.meta.first_at for d in page] == [1_006, 1_005, 1_004]
    assert after is not None
    page2, after2 = store.deliveries(0, "sub_a", None, after, 3)
    assert [d.meta.first_at for d in page2] == [1_003, 1_002, 1_001]
    page3, after3 = store.deliveries(0, "sub_a", None, after2, 3)
    assert [d.meta.first_at for d in page3] == [1_000] and after3 is None
    dead, _ = store.deliveries(0, "sub_a", "dead", None, 10)
    assert [d.meta.first_at for d in dead] == [1_003]
    ok, _ = store.deliveries(0, "sub_a", "success", None, 10)
    assert len(ok) == 6
    assert store.deliveries(0, "sub_b", None, None, 10) == ([], None)


def test_s6_dead_letters_page_by_subscription_tenant_reason_and_time(store: LedgerStore) -> None:
    store.apply(
        0, [], [(0, letter("msg_1", 100, "http_404")), (1, letter("msg_2", 300, "exhausted"))]
    )
    store.apply(1, [], [(0, letter("msg_3", 200, "http_410", "sub_b", "t2"))])
    every = store.letters(
        {0, 1}, subscription_id=None, tenant_id=None, reason=None, since_ms=None,
        until_ms=None, after=None, limit=10,
    )  # fmt: skip
    assert [s.position.newest for s in every] == [k.NEWEST - t for t in (300, 200, 100)]
    first = store.letters(
        {0, 1}, subscription_id=None, tenant_id=None, reason=None, since_ms=None,
        until_ms=None, after=None, limit=2,
    )  # fmt: skip
    rest = store.letters(
        {0, 1}, subscription_id=None, tenant_id=None, reason=None, since_ms=None,
        until_ms=None, after=first[-1].position, limit=2,
    )  # fmt: skip
    assert [s.record for s in first + rest] == [s.record for s in every]
    t1 = store.letters(
        {0, 1}, subscription_id=None, tenant_id="t1", reason="http_", since_ms=None,
        until_ms=None, after=None, limit=10,
    )  # fmt: skip
    assert [s.reason for s in t1] == ["http_404"]
    window = store.letters(
        {0}, subscription_id="sub_a", tenant_id=None, reason=None, since_ms=100,
        until_ms=300, after=None, limit=10,
    )  # fmt: skip
    assert [s.reason for s in window] == ["http_404"]
    assert len(store.letters_of_delivery(0, "msg_2")) == 1


def test_s6_entries_expire_with_their_latest_time_and_a_deleted_subscription_is_dropped(
    store: LedgerStore,
) -> None:
    store.apply(
        0,
        [
            (0, codec.encode(attempt("msg_old", 1, 1_000))),
            (1, codec.encode(attempt("msg_retried", 1, 1_000, DeliveryState.ERROR))),
            (2, codec.encode(attempt("msg_retried", 2, 9_000))),
            (3, codec.encode(attempt("msg_b", 1, 20_000, sub="sub_b"))),
        ],
        [(0, letter("msg_old", 1_000, "http_404")), (1, letter("msg_new", 9_000, "http_404"))],
    )
    assert store.subscriptions(0) == {"sub_a", "sub_b"}
    store.expire(0, attempts_before=5_000, letters_before=5_000, budget=100)
    assert store.delivery({0}, "msg_old") is None
    assert store.delivery({0}, "msg_retried") is not None
    assert store.letters_of_delivery(0, "msg_old") == []
    assert len(store.letters_of_delivery(0, "msg_new")) == 1
    store.expire(0, attempts_before=10_000, letters_before=0, budget=100)
    assert store.delivery({0}, "msg_retried") is None
    store.drop_subscription(0, "sub_a")
    assert store.subscriptions(0) == {"sub_b"}
    assert store.letters_of_delivery(0, "msg_new") == []
    keys = [key for key in store.db.keys() if isinstance(key, bytes)]  # noqa: SIM118
    left = [key for key in keys if not key.startswith(k.offset_key(0, b""))]
    assert left and all(b"sub_a" not in key for key in left)


def test_s6_the_store_reports_its_compaction_and_it_settles(store: LedgerStore) -> None:
    for n in range(4):  # several flushed files of overlapping keys: something to compact
        records = [
            (n * 500 + i, codec.encode(attempt(f"d{i}", n + 1, 1_000 + n))) for i in range(500)
        ]
        store.apply(0, records, [])
        store.db.flush()
    pending, running = store.compaction()
    assert pending >= 0 and running >= 0
    store.db.compact_range(None, None)
    # a background compaction the flushes started may still be finishing on a busy machine
    deadline = time.monotonic() + 30
    while store.compaction() != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.compaction() == (0, 0), "nothing left to compact after a full compaction"
