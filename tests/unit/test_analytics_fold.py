"""O2: every ledger record counts once in the stored analytics, across restarts and rebalances.

The analytics agent folds batches of `attempt-digests` records (each the attempts of one
dispatcher commit in one partition, folded ahead into one tally per subscription, all at the
digest's position) into two tables with `fold_into`. A worker that restarts, or takes a
partition over, restores the tables from their changelogs and reads again every record after
the last committed offset. Faust commits an offset only once the
table writes before it are acknowledged, but writes after it may or may not have survived, each
stored value on its own (an index write can survive while a window write is lost, or the
reverse). Whatever survived, reading the rest again must give the state of one clean pass:
retry backlog and windows alike.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import orjson
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.analytics import MemoryAnalytics, RetryBacklog, SubscriptionData, Tally
from streams.domain.analytics_store import fold_into, read_stored, window_key
from streams.domain.analytics_window import HOUR_MS, RETENTION_MS, Position, counts_as_delivery
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass

T0 = 1_714_564_800_000  # an hour boundary
SUBS = ("sub-a", "sub-b")
PARTITION = 5
_ids = itertools.count()

Stored = dict[bytes, bytes]


def attempt(sub: str, kind: str, at: int) -> Attempt:
    """One ledger record: a success, a failure scheduled for a retry, a dead one, a probe."""
    failed = kind in ("retry", "dead")
    number = 2 if kind == "retried_ok" else 1
    return Attempt(
        delivery_id=f"d{next(_ids)}",
        subscription_id=sub,
        tenant_id="acme",
        event_id="e",
        event_type="order.created" if at % 2 else "order.shipped",
        attempt=number,
        lane=Lane.PROBE if kind == "probe" else (Lane.RETRY if number > 1 else Lane.LIVE),
        started_at=at,
        duration_ms=float(at % 997 + 1),
        outcome=OutcomeClass.RETRYABLE if failed else OutcomeClass.SUCCESS,
        reason="http_503" if failed else "http_200",
        state={"retry": DeliveryState.ERROR, "dead": DeliveryState.DEAD}.get(
            kind, DeliveryState.SUCCESS
        ),
        next_retry_at=at + 600_000 if kind == "retry" else None,
        published_at=at - 20,
        first_attempt_at=at - 60_000 if number > 1 else at,
    )


ledgers = st.lists(
    st.tuples(
        st.sampled_from(SUBS),
        st.sampled_from(["ok", "retry", "retried_ok", "dead", "probe"]),
        st.integers(0, 3 * HOUR_MS),  # minutes apart, across hourly windows
    ),
    min_size=1,
    max_size=60,
)


def records_of(rows: list[tuple[str, str, int]]) -> list[tuple[Position, Attempt]]:
    """Ledger order is offset order; attempt times only grow, as the dispatcher writes them."""
    at = T0
    out = []
    for offset, (sub, kind, gap) in enumerate(rows):
        at += gap // 60
        out.append(((PARTITION, offset), attempt(sub, kind, at)))
    return out


def fold_batch(indexes: Stored, windows: Stored, batch: Sequence[tuple[Position, Attempt]]) -> None:
    """What the agent does with one batch: each subscription's tallies, in topic order. The
    attempts at one position (one digest) are one tally per subscription, folded in order and
    without probes, as the dispatcher's outbox writes them."""
    by_sub: dict[str, dict[Position, Tally]] = {}
    for at, att in batch:
        if counts_as_delivery(att):
            by_sub.setdefault(att.subscription_id, {}).setdefault(at, Tally()).add(att)
    for sub, mine in by_sub.items():
        assert fold_into(indexes, windows, sub, list(mine.items())) == []


def truth(records: list[tuple[Position, Attempt]]) -> dict[str, SubscriptionData | None]:
    memory = MemoryAnalytics()
    for at, att in records:
        memory.add(at, att)
    return {sub: memory.data(sub, 0) for sub in SUBS}


def stored(indexes: Stored, windows: Stored) -> dict[str, SubscriptionData | None]:
    return {sub: read_stored(indexes, windows, sub, 0) for sub in SUBS}


def same(a: dict[str, SubscriptionData | None], b: dict[str, SubscriptionData | None]) -> bool:
    """Equal counts, sketches and backlogs (positions aside: a scan and the agent see the same
    records at the same positions, so they are equal too, but that is not the point)."""

    def plain(data: SubscriptionData | None) -> object:
        if data is None:
            return None
        windows = [{**w.to_dict(), "digest_position": None} for w in data.windows]
        return windows, data.backlog.to_dict()

    return all(plain(a[sub]) == plain(b[sub]) for sub in SUBS)


def as_digests(
    records: list[tuple[Position, Attempt]], ends: set[int]
) -> list[tuple[Position, Attempt]]:
    """The same attempts as the agent reads them: cut into digests after each index in ``ends``,
    every attempt of a digest at the digest's own position."""
    out = []
    digest = 0
    for i, (_, att) in enumerate(records):
        out.append(((PARTITION, digest), att))
        if i + 1 in ends:
            digest += 1
    return out


@given(ledgers, st.data(), st.booleans())
def test_o2_a_replay_after_a_crash_counts_every_record_once(
    rows: list[tuple[str, str, int]], data: st.DataObject, digested: bool
) -> None:
    """O2 (and the issue of a retry backlog counted twice after a rebalance): fold in batches,
    crash with any mix of the writes after the committed offset lost, read again from the
    committed offset: the same state as one clean pass of the ledger. With ``digested`` the
    agent reads digests (several attempts at one position), as a worker does; without, one
    attempt per position, as a scan of the ledger does."""
    ledger = records_of(rows)
    records = ledger
    size = len(records)
    if digested:
        ends = data.draw(st.sets(st.integers(1, size), max_size=8)) | {size}
        records = as_digests(ledger, ends)
        # a batch holds whole digests: Faust hands the agent records, never parts of one
        cuts = sorted(data.draw(st.sets(st.sampled_from(sorted(ends)), max_size=6)) | {size})
    else:
        cuts = sorted(data.draw(st.sets(st.integers(1, size), max_size=6)) | {size})
    indexes: Stored = {}
    windows: Stored = {}
    history: list[tuple[Stored, Stored]] = [({}, {})]  # the stored values after each batch
    begin = 0
    for end in cuts:
        fold_batch(indexes, windows, records[begin:end])
        history.append((dict(indexes), dict(windows)))
        begin = end
    # The crash: the offset committed is the end of some batch; what was written after it
    # survived or not, each value on its own (any of its states since the commit).
    committed = data.draw(st.integers(0, len(cuts) - 1))
    start = ([0, *cuts])[committed]
    since_commit = history[committed:]
    survived_indexes: Stored = {}
    survived_windows: Stored = {}
    for target, part in ((survived_indexes, 0), (survived_windows, 1)):
        keys = set().union(*(h[part] for h in since_commit))
        for key in sorted(keys):
            state = data.draw(st.sampled_from(since_commit))[part]
            if key in state:
                target[key] = state[key]
    # The new owner reads everything from the committed offset again, in other batches.
    fold_batch(survived_indexes, survived_windows, records[start:])
    assert same(stored(survived_indexes, survived_windows), truth(ledger))
    assert same(stored(indexes, windows), truth(ledger))


def test_o2_every_attempt_of_a_digest_counts_once() -> None:
    """A digest's attempts share its position: all are counted the first time, none again."""
    digest = [
        ((PARTITION, 7), attempt("sub-a", kind, T0 + i))
        for i, kind in enumerate(["ok", "retry", "ok", "dead"])
    ]
    indexes: Stored = {}
    windows: Stored = {}
    fold_batch(indexes, windows, digest)
    fold_batch(indexes, windows, digest)  # read again after a restart
    data = read_stored(indexes, windows, "sub-a", 0)
    assert data is not None
    assert (data.windows[0].attempts, data.windows[0].failures) == (4, 2)
    assert data.backlog.waiting(T0) == 1
    assert same(
        stored(indexes, windows), truth([((PARTITION, i), a) for i, (_, a) in enumerate(digest)])
    )


def test_o2_values_from_before_digests_count_the_first_digest() -> None:
    """Values written when the agent read the ledger hold a ledger position (under
    ``position``), which says nothing about digests: the first digest after the upgrade counts
    even at a lower offset."""
    legacy_window = {
        **read_or_fail(((PARTITION, 900), attempt("sub-a", "ok", T0))).windows[0].to_dict(),
        "position": [PARTITION, 900],
    }
    del legacy_window["digest_position"]
    indexes: Stored = {
        b"sub-a": orjson.dumps({"windows": [T0], "backlog": {}, "position": [PARTITION, 900]})
    }
    windows: Stored = {window_key("sub-a", T0): orjson.dumps(legacy_window)}
    fold_batch(indexes, windows, [((PARTITION, 3), attempt("sub-a", "ok", T0 + 5))])
    data = read_stored(indexes, windows, "sub-a", 0)
    assert data is not None and data.windows[0].attempts == 2


def read_or_fail(record: tuple[Position, Attempt]) -> SubscriptionData:
    indexes: Stored = {}
    windows: Stored = {}
    fold_batch(indexes, windows, [record])
    data = read_stored(indexes, windows, record[1].subscription_id, 0)
    assert data is not None
    return data


def test_o2_a_lost_index_write_does_not_count_a_window_twice() -> None:
    """The window write survived, the index write did not: the record read again goes into the
    index (the backlog) only."""
    first = ((PARTITION, 0), attempt("sub-a", "retry", T0))
    second = ((PARTITION, 1), attempt("sub-a", "ok", T0 + 1000))
    indexes: Stored = {}
    windows: Stored = {}
    fold_batch(indexes, windows, [first])
    before = dict(indexes)
    fold_batch(indexes, windows, [second])
    lost_index = dict(before)  # the second batch's index write was lost; its window write was not
    fold_batch(lost_index, windows, [second])  # read again
    assert same(stored(lost_index, windows), truth([first, second]))
    data = read_stored(lost_index, windows, "sub-a", 0)
    assert data is not None and data.windows[0].attempts == 2
    assert data.backlog.waiting(T0 + 1000) == 1


def test_o2_windows_past_the_retention_are_deleted_from_the_store() -> None:
    old = ((PARTITION, 0), attempt("sub-a", "ok", T0))
    new = ((PARTITION, 1), attempt("sub-a", "ok", T0 + RETENTION_MS + HOUR_MS))
    indexes: Stored = {}
    windows: Stored = {}
    fold_batch(indexes, windows, [old])
    assert window_key("sub-a", T0) in windows
    fold_batch(indexes, windows, [new])
    assert window_key("sub-a", T0) not in windows
    assert len(windows) == 1


def test_o2_an_unreadable_stored_value_is_started_afresh() -> None:
    indexes: Stored = {b"sub-a": b"not json"}
    windows: Stored = {window_key("sub-a", T0): orjson.dumps({"start": "x"})}
    unreadable = fold_into(
        indexes, windows, "sub-a", [((PARTITION, 0), Tally.of(attempt("sub-a", "ok", T0)))]
    )
    assert unreadable == [b"sub-a", window_key("sub-a", T0)]
    data = read_stored(indexes, windows, "sub-a", 0)
    assert data is not None and data.windows[0].attempts == 1
    assert read_stored({b"sub-b": b"[]"}, {}, "sub-b", 0) is None


@given(ledgers, st.randoms(use_true_random=False))
def test_o2_a_tally_moves_the_backlog_as_its_attempts_one_by_one(
    rows: list[tuple[str, str, int]], order: random.Random
) -> None:
    """A tally keeps only the attempts that moved the retry backlog, each with the latest start
    of the quiet ones before it: replaying it leaves exactly the backlog of observing every
    attempt in order, and its windows count what adding the attempts one by one counts. Its
    JSON form reads back equal."""
    attempts = [att for _, att in records_of(rows) if counts_as_delivery(att)]
    order.shuffle(attempts)  # concurrent attempts settle in any order of their starts
    one_by_one = RetryBacklog({T0 + 60_000 * n: 1 for n in range(3)})  # some retries waiting
    replayed = RetryBacklog(dict(one_by_one.due))
    tally = Tally()
    for att in attempts:
        one_by_one.observe(att)
        tally.add(att)
    replayed.replay(tally)
    assert replayed == one_by_one
    assert tally.attempts == len(attempts) == sum(w.attempts for w in tally.windows.values())
    assert Tally.from_dict(orjson.loads(orjson.dumps(tally.to_dict()))) == tally


def test_o2_a_tally_expires_retries_before_a_later_step_as_the_attempts_did() -> None:
    """An attempt that moved no retry still expired the stale ones before the next step: a
    retry firing after it must not take one of those."""
    waiting = {T0: 1, T0 + 30 * 60_000: 1}
    quiet = attempt("sub-a", "ok", T0 + 20 * 60_000)  # T0's retry is stale by then
    fired = attempt("sub-a", "retried_ok", T0 + 10 * 60_000)  # started earlier, settled later
    one_by_one = RetryBacklog(dict(waiting))
    replayed = RetryBacklog(dict(waiting))
    tally = Tally()
    for att in (quiet, fired):
        one_by_one.observe(att)
        tally.add(att)
    replayed.replay(tally)
    assert one_by_one.due == {} and replayed == one_by_one
