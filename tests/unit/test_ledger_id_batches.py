"""S6: the ids one request to a peer names fit the peer's request line (aiohttp: 8,190 bytes)."""

from __future__ import annotations

from urllib.parse import urlencode

from hypothesis import given
from hypothesis import strategies as st

from streams.agents.ledger import IDS_PER_ASK_BYTES, PEER_PATH, id_batches

ids = st.lists(st.text(min_size=1, max_size=300), max_size=400)


@given(ids, st.integers(1, 9_000))
def test_s6_batches_keep_every_id_in_order_within_the_budget(
    wanted: list[str], budget: int
) -> None:
    batches = list(id_batches(wanted, budget))
    assert [one for batch in batches for one in batch] == wanted
    for batch in batches:
        assert batch
        encoded = urlencode({"ids": ",".join(batch)})[len("ids=") :]
        assert len(encoded) <= budget or len(batch) == 1


def test_s6_a_request_for_1000_delivery_ids_stays_under_aiohttps_request_line() -> None:
    """The chaos run's case: delivery ids of 44 characters, a subscription id, the op."""
    delivery_ids = [f"msg_{n:040x}" for n in range(1000)]
    batches = list(id_batches(delivery_ids))
    assert len(batches) > 1
    for batch in batches:
        query = urlencode({"op": "counts", "subscription_id": "s" * 64, "ids": ",".join(batch)})
        line = f"GET {PEER_PATH}?{query} HTTP/1.1\r\n"
        assert len(line) < 8_190
    assert IDS_PER_ASK_BYTES <= 8_190 - 500
