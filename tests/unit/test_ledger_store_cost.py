"""The ledger state's key design (S6): what a new delivery writes, the list of every state read
as the merge of the by-state lists, expiry without an index of its own, and the store's format."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.adapters import codec
from streams.adapters.ledger_store import LedgerStore, open_store
from streams.domain import ledger_keys as k
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass

STATES = list(DeliveryState)


def attempt(delivery_id: str, number: int, at: int, state: DeliveryState) -> bytes:
    return codec.encode(
        Attempt(
            delivery_id=delivery_id, subscription_id="sub_a", tenant_id="t1",
            event_id="evt_" + delivery_id, event_type="invoice.paid", attempt=number,
            lane=Lane.LIVE, started_at=at, duration_ms=1.5, outcome=OutcomeClass.SUCCESS,
            reason="http_200", state=state, http_status=200,
        )
    )  # fmt: skip


def fresh(path: Path) -> LedgerStore:
    return LedgerStore(open_store(path, 8, 4), path)


def test_s6_a_new_delivery_writes_its_record_and_one_list_entry_only(tmp_path: Path) -> None:
    """S6 (P1's cost): no all-states list and no expiry index: two entries per delivery."""
    store = fresh(tmp_path / "ledger")
    store.apply(
        0, [(n, attempt(f"msg_{n}", 1, 1_000 + n, DeliveryState.SUCCESS)) for n in range(5)], []
    )
    keys = [key for key in store.db.keys() if isinstance(key, bytes)]  # noqa: SIM118
    by_kind = {kind: sum(1 for key in keys if key[2:3] == kind) for kind in (k.META, k.BY_STATE)}
    assert by_kind == {k.META: 5, k.BY_STATE: 5}
    assert len(keys) == 5 + 5 + 1 + 1  # and the next offset, and the format


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.sampled_from(STATES)), min_size=1, max_size=40),
    st.integers(1, 7),
)
def test_s6_the_list_of_every_state_merges_the_by_state_lists_in_one_order(
    tmp_path_factory: pytest.TempPathFactory,
    deliveries: list[tuple[int, DeliveryState]],
    page: int,
) -> None:
    """Newest first by first attempt, ties by delivery id as the old all-states index ordered
    them (length, then bytes); pages resume exactly after their cursor."""
    store = fresh(tmp_path_factory.mktemp("ledger"))
    records = []
    expected = []
    for n, (at, state) in enumerate(deliveries):
        delivery_id = f"msg_{'x' * (n % 3)}{n}"
        records.append((n, attempt(delivery_id, 1, at, state)))
        expected.append((at, delivery_id))
    store.apply(0, records, [])
    expected.sort(key=lambda e: (-e[0], len(e[1]), e[1]))
    seen: list[tuple[int, str]] = []
    after = None
    while True:
        found, after = store.deliveries(0, "sub_a", None, after, page)
        assert len(found) <= page
        for d in found:
            view = codec.decode(Attempt, d.attempts[0])
            seen.append((d.meta.first_at, view.delivery_id))
        if after is None:
            break
        assert after == seen[-1]
    assert seen == expected
    for state in STATES:
        only, _ = store.deliveries(0, "sub_a", state.value, None, 100)
        assert [d.meta.state for d in only] == [state.value] * len(only)
        assert len(only) == sum(1 for _, s in deliveries if s == state)


def test_s6_a_delivery_that_changes_state_between_pages_keeps_its_place(tmp_path: Path) -> None:
    store = fresh(tmp_path / "ledger")
    store.apply(
        0, [(n, attempt(f"msg_{n}", 1, 1_000 + n, DeliveryState.ERROR)) for n in range(6)], []
    )
    first, after = store.deliveries(0, "sub_a", None, None, 3)
    assert [d.meta.first_at for d in first] == [1_005, 1_004, 1_003]
    # the next page's first delivery moves to another state's list: same place in the merge
    store.apply(0, [(6, attempt("msg_2", 2, 9_000, DeliveryState.SUCCESS))], [])
    rest, end = store.deliveries(0, "sub_a", None, after, 3)
    assert [d.meta.first_at for d in rest] == [1_002, 1_001, 1_000] and end is None
    assert rest[0].meta.state == "success"


def test_s6_expiry_walks_each_list_from_its_oldest_end_within_its_budget(tmp_path: Path) -> None:
    store = fresh(tmp_path / "ledger")
    records = [(n, attempt(f"old_{n}", 1, 1_000 + n, STATES[n % len(STATES)])) for n in range(6)]
    records.append((6, attempt("long", 1, 500, DeliveryState.ERROR)))
    records.append((7, attempt("long", 2, 8_000, DeliveryState.ERROR)))  # retried since
    records.append((8, attempt("new", 1, 7_000, DeliveryState.SUCCESS)))
    store.apply(0, records, [])
    removed = []
    while done := store.expire(0, attempts_before=5_000, letters_before=0, budget=4):
        removed.append(done)
    assert all(n <= 4 for n in removed) and sum(removed) == 6 and len(removed) >= 2
    left, _ = store.deliveries(0, "sub_a", None, None, 100)
    assert sorted(d.meta.first_at for d in left) == [500, 7_000]  # "long" expires with attempt 2
    assert store.expire(0, attempts_before=9_000, letters_before=0, budget=100) == 2
    assert store.deliveries(0, "sub_a", None, None, 100) == ([], None)
    assert store.subscriptions(0) == set()


def test_s6_a_store_of_another_format_is_rebuilt_from_the_topics(tmp_path: Path) -> None:
    """A store written by an older version (format 1 had two more indexes) is emptied on open,
    so the reader restores it from the beginning of the topics like a new worker's."""
    path = tmp_path / "ledger"
    store = fresh(path)
    store.apply(2, [(0, attempt("msg_1", 1, 1_000, DeliveryState.SUCCESS))], [])
    store.close()
    store = fresh(path)  # the same format: kept
    assert store.next_offset(2, k.ATTEMPTS_TOPIC) == 1
    assert store.delivery({2}, "msg_1") is not None
    store.db.put(k.FORMAT_KEY, b"1")
    store.close()
    store = fresh(path)
    assert store.next_offset(2, k.ATTEMPTS_TOPIC) is None, "restored from the beginning"
    assert store.delivery({2}, "msg_1") is None
    assert store.db.get(k.FORMAT_KEY) == k.FORMAT
    store.close()
