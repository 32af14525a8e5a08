"""The stored form of the delivery analytics (SPEC O2): two mappings of serialised values, pure.

`streams.domain.analytics` folds ledger records into one subscription's `SubscriptionIndex` and
its `WindowAggregate` windows. This module keeps that state where the analytics agent keeps it:
each index as JSON under the subscription's id in one mapping, each window as JSON under
`window_key` in another (the agent's tables, or plain dicts in tests). `fold_into` reads the
values a batch touches, folds the batch with `fold`, and writes back only what changed;
`read_stored` answers a query from the same values. A stored value that cannot be read is
started afresh (`fold_into` returns its key for the caller to log) and reads as none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

import orjson

from streams.domain.analytics import SubscriptionData, SubscriptionIndex, Tally, fold
from streams.domain.analytics_window import Position, WindowAggregate
from streams.errors import DecodeError


def window_key(subscription_id: str, start: int) -> bytes:
    """The key of a subscription's window in the windows mapping."""
    return f"{subscription_id}|{start}".encode()


def _decoded(
    read: Callable[[Any], Any], value: bytes | None, unreadable: list[bytes], key: bytes
) -> Any:
    if value is None:
        return None
    try:
        return read(orjson.loads(value))
    except (DecodeError, orjson.JSONDecodeError):
        unreadable.append(key)  # started afresh: the caller logs it
        return None


def fold_into(
    indexes: MutableMapping[bytes, bytes],
    windows: MutableMapping[bytes, bytes],
    subscription_id: str,
    records: Iterable[tuple[Position, Tally]],
) -> list[bytes]:
    """`fold` one subscription's records into stored values: its index under its id in
    ``indexes``, its windows under `window_key` in ``windows``. Writes the windows before the
    index; returns the keys of values that could not be read and were started afresh."""
    unreadable: list[bytes] = []
    key = subscription_id.encode()
    index = _decoded(SubscriptionIndex.from_dict, indexes.get(key), unreadable, key)

    def load(start: int) -> WindowAggregate | None:
        at = window_key(subscription_id, start)
        found: WindowAggregate | None = _decoded(
            WindowAggregate.from_dict, windows.get(at), unreadable, at
        )
        return found

    result = fold(index or SubscriptionIndex(), load, records)
    for start, window in result.windows.items():
        windows[window_key(subscription_id, start)] = orjson.dumps(window.to_dict())
    for start in result.expired:
        old = window_key(subscription_id, start)
        if old in windows:
            del windows[old]
    if result.index_changed:
        indexes[key] = orjson.dumps(result.index.to_dict())
    return unreadable


def read_stored(
    indexes: Mapping[bytes, bytes],
    windows: Mapping[bytes, bytes],
    subscription_id: str,
    since: int,
) -> SubscriptionData | None:
    """A subscription's windows starting at or after ``since``, and its backlog, from stored
    values; None if it has none (an unreadable value reads as none)."""
    ignored: list[bytes] = []
    key = subscription_id.encode()
    index = _decoded(SubscriptionIndex.from_dict, indexes.get(key), ignored, key)
    if index is None:
        return None
    chosen = []
    for start in sorted(w for w in index.windows if w >= since):
        at = window_key(subscription_id, start)
        window = _decoded(WindowAggregate.from_dict, windows.get(at), ignored, at)
        if window is not None:
            chosen.append(window)
    return SubscriptionData(chosen, index.backlog)
