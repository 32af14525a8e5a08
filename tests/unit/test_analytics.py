"""O2: per-subscription and per-tenant analytics over hourly windows, pure."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.analytics import RetryBacklog, SubscriptionData, SubscriptionIndex
from streams.domain.analytics_report import stats_from_dict, summarise
from streams.domain.analytics_window import (
    DAY_MS,
    HOUR_MS,
    MAX_DUE_BUCKETS,
    RETENTION_MS,
    TOP_TYPES_KEPT,
    WindowAggregate,
    counts_as_delivery,
    merge_all,
    span_start,
)
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass, Subscription
from streams.errors import DecodeError, ValidationError
from streams.services import stats

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z, an hour boundary
_ids = itertools.count()

OK, RETRY, DEAD = DeliveryState.SUCCESS, DeliveryState.ERROR, DeliveryState.DEAD


def att(
    state: DeliveryState = OK,
    *,
    n: int = 1,
    at: int = T0,
    duration: float = 50.0,
    published: int | None = None,
    etype: str = "invoice.paid",
    lane: Lane | None = None,
    first: int | None = None,
    sub: str = "sub-1",
    next_retry_at: int | None = None,
) -> Attempt:
    outcome = OutcomeClass.SUCCESS if state is OK else OutcomeClass.RETRYABLE
    return Attempt(
        delivery_id=f"d{next(_ids)}",
        subscription_id=sub,
        tenant_id="acme",
        event_id="e",
        event_type=etype,
        attempt=n,
        lane=lane or (Lane.LIVE if n == 1 else Lane.RETRY),
        started_at=at,
        duration_ms=duration,
        outcome=outcome,
        reason="http_200" if state is OK else "http_500",
        state=state,
        published_at=at - 10 if published is None else published,
        first_attempt_at=first if first is not None else at,
        next_retry_at=next_retry_at if state is RETRY else None,
    )


def window_of(*attempts: Attempt) -> WindowAggregate:
    window = WindowAggregate(start=T0)
    for a in attempts:
        window.add(a)
    return window


def test_o2_retry_health_counts() -> None:
    """O2: first-attempt success, rescued by retry, average attempts, mean time to deliver."""
    report = summarise(
        [
            window_of(
                att(OK),  # first-attempt success
                att(RETRY, next_retry_at=T0 + 1000),
                att(OK, n=2, at=T0 + 1000, first=T0, duration=20),  # rescued after 1020 ms
                att(RETRY, etype="user.created", next_retry_at=T0 + 1000),
                att(DEAD, n=2, at=T0 + 1000, etype="user.created"),  # failed, 2 attempts
            )
        ],
        since=T0,
        until=T0 + 2000,
    )
    assert (report.attempts, report.successes, report.failures) == (5, 2, 3)
    assert (report.deliveries, report.delivered, report.failed) == (3, 2, 1)
    assert report.success_rate == pytest.approx(2 / 3)
    assert report.first_attempt_success_rate == pytest.approx(1 / 3)
    assert report.rescued_by_retry == 1
    assert report.average_attempts == pytest.approx((1 + 2 + 2) / 3)
    assert report.mean_time_to_deliver_ms == pytest.approx((50 + 1020) / 2)
    assert [(t.event_type, t.failures) for t in report.most_failed_types] == [
        ("user.created", 2),
        ("invoice.paid", 1),
    ]


def test_o2_latency_is_publish_to_receive_and_warning_at_80_percent_of_timeout() -> None:
    """O2: latency = attempt end - published_at; warn when p95 duration > 0.8 x timeout."""
    window = window_of(*(att(OK, duration=90.0, published=T0 - 100) for _ in range(20)))
    report = summarise([window], since=T0, until=T0, timeout_ms=100.0)
    assert report.latency_ms.p50 == pytest.approx(190.0, rel=0.01)
    assert report.attempt_duration_ms.p95 == pytest.approx(90.0, rel=0.01)
    assert report.latency_warning
    assert not summarise([window], since=T0, until=T0, timeout_ms=1000.0).latency_warning


def test_o2_backfills_leave_latency_alone_and_probes_are_not_deliveries() -> None:
    backfill = att(OK, lane=Lane.BACKFILL, published=T0 - DAY_MS)
    window = window_of(backfill)
    assert window.latency.count == 0 and window.delivered == 1
    index = SubscriptionIndex()
    assert not counts_as_delivery(att(OK, lane=Lane.PROBE))
    assert index.windows == set()


def test_o2_daily_success_rate_by_utc_day() -> None:
    day1 = window_of(att(OK), att(DEAD))
    day2 = WindowAggregate(start=T0 + DAY_MS)
    day2.add(att(OK, at=T0 + DAY_MS))
    report = summarise([day1, day2], since=T0, until=T0 + DAY_MS)
    assert [(d.day, d.delivered, d.deliveries, d.success_rate) for d in report.daily] == [
        ("2024-05-01", 1, 2, 0.5),
        ("2024-05-02", 1, 1, 1.0),
    ]


def test_o2_most_failed_types_use_bounded_memory() -> None:
    """O2: at most TOP_TYPES_KEPT types per window; the heavy hitters survive."""
    window = WindowAggregate(start=T0)
    for _ in range(50):
        window.add(att(DEAD, etype="hot.type"))
    for n in range(200):
        window.add(att(DEAD, etype=f"rare.{n}"))
    assert len(window.failed_types) <= TOP_TYPES_KEPT
    report = summarise([window], since=T0, until=T0)
    assert report.most_failed_types[0].event_type == "hot.type"


outcomes = st.lists(
    st.tuples(st.sampled_from([OK, RETRY, DEAD]), st.integers(1, 4), st.floats(1, 5000)),
    max_size=40,
)


@given(outcomes, outcomes)
def test_o2_merging_windows_equals_folding_all_attempts(
    a: list[tuple[DeliveryState, int, float]], b: list[tuple[DeliveryState, int, float]]
) -> None:
    """O2: merge(window(a), window(b)) == window(a + b) (types stay under the cap here)."""
    first = [att(s, n=n, duration=d, next_retry_at=T0) for s, n, d in a]
    second = [att(s, n=n, duration=d, next_retry_at=T0) for s, n, d in b]
    merged = window_of(*first).merge(window_of(*second))
    assert merged.to_dict() == window_of(*first, *second).to_dict()
    assert WindowAggregate.from_dict(merged.to_dict()) == merged


def test_o2_windows_expire_after_seven_days() -> None:
    """O2: memory bounded: a subscription keeps at most 7 days of hourly windows."""
    index = SubscriptionIndex()
    start, expired = index.observe(att(OK))
    assert (start, expired) == (T0, [])
    later = T0 + RETENTION_MS + HOUR_MS
    start, expired = index.observe(att(OK, at=later))
    assert start == later and expired == [T0]
    assert index.windows == {later}
    assert SubscriptionIndex.from_dict(index.to_dict()) == index


def test_o2_retry_backlog_counts_waiting_retries() -> None:
    """O2: an error schedules a retry, the retry attempt takes it off; long-overdue ones drop."""
    backlog = RetryBacklog()
    for n in range(3):
        backlog.observe(att(RETRY, at=T0 + n, next_retry_at=T0 + 60_000 + n))
    assert backlog.waiting(T0 + 1000) == 3
    backlog.observe(att(OK, n=2, at=T0 + 60_500))  # one fired and succeeded
    assert backlog.waiting(T0 + 61_000) == 2
    backlog.observe(att(RETRY, n=2, at=T0 + 60_600, next_retry_at=T0 + 360_600))
    assert backlog.waiting(T0 + 61_000) == 2  # fired, failed again, waits in the next tier
    assert backlog.waiting(T0 + DAY_MS) == 0  # nothing fires a day late: parked or deleted
    assert RetryBacklog.from_dict(backlog.to_dict()) == backlog


def test_o2_retry_backlog_is_bounded() -> None:
    backlog = RetryBacklog()
    for n in range(MAX_DUE_BUCKETS + 100):
        backlog.observe(att(RETRY, at=T0, next_retry_at=T0 + n * 60_000))
    assert len(backlog.due) <= MAX_DUE_BUCKETS
    assert backlog.waiting(T0) == MAX_DUE_BUCKETS + 100


def test_o2_span_covers_the_hourly_windows_overlapping_it() -> None:
    assert span_start(HOUR_MS, T0 + 20 * 60_000) == T0 - HOUR_MS
    assert stats.span_of(None) == ("24h", DAY_MS)
    with pytest.raises(ValidationError) as err:
        stats.span_of("2w")
    assert "window" in err.value.fields


def test_o2_bad_stored_records_are_decode_errors() -> None:
    with pytest.raises(DecodeError):
        WindowAggregate.from_dict({"start": 1})
    with pytest.raises(DecodeError):
        SubscriptionIndex.from_dict({"windows": "x"})
    assert merge_all([]).attempts == 0


class FakeSource:
    def __init__(self, data: dict[str, SubscriptionData]) -> None:
        self.data = data

    async def fetch(self, subscription_ids: list[str], since: int) -> dict[str, SubscriptionData]:
        return {k: v for k, v in self.data.items() if k in subscription_ids}


def _sub(sub_id: str, timeout_s: float) -> Subscription:
    return Subscription(sub_id, "acme", sub_id, "http://x", ("*",), (), timeout_s=timeout_s)


async def test_o2_tenant_view_merges_its_subscriptions() -> None:
    """O2: a tenant's report merges its subscriptions; warnings are judged per timeout."""
    fast = window_of(
        *(att(OK, duration=10, sub="fast") for _ in range(9)), att(DEAD, duration=10, sub="fast")
    )
    slow = window_of(*(att(OK, duration=900, sub="slow") for _ in range(10)))
    source = FakeSource(
        {
            "fast": SubscriptionData([fast], RetryBacklog({T0 + 60_000: 2})),
            "slow": SubscriptionData([slow], RetryBacklog()),
        }
    )
    subs = [_sub("fast", 10), _sub("slow", 1)]
    report = await stats.tenant_stats(source, "acme", subs, "1h", now_ms=T0 + 1000)
    assert report.stats.attempts == 20 and report.stats.delivered == 19
    assert report.stats.success_rate == pytest.approx(19 / 20)
    assert report.latency_warnings == ("slow",)
    assert report.stats.retry_backlog == 2
    # 10 attempts at 10 ms and 10 at 900 ms: rank floor(0.5 * 19) = 9 is the last 10 ms one
    assert report.stats.attempt_duration_ms.p50 == pytest.approx(10, rel=0.01)
    assert report.stats.attempt_duration_ms.p95 == pytest.approx(900, rel=0.01)
    one = await stats.subscription_stats(source, subs[1], "24h", now_ms=T0 + 1000)
    assert one.stats.latency_warning and one.stats.timeout_ms == 1000
    missing = await stats.subscription_stats(source, _sub("none", 5), None, now_ms=T0)
    assert missing.stats.attempts == 0 and missing.stats.success_rate is None


def test_o2_records_read_again_are_not_counted_twice() -> None:
    """O2: after a rebalance or restart the agent reads some records again; they are skipped."""
    index = SubscriptionIndex(position=(3, 41))
    assert index.holds((3, 41)) and index.holds((3, 7))
    assert not index.holds((3, 42))
    assert not index.holds((4, 0))  # another partition: the topic was re-partitioned
    assert not SubscriptionIndex().holds((0, 0))
    assert SubscriptionIndex.from_dict(index.to_dict()).position == (3, 41)


async def test_o2_a_report_reads_back_from_its_json_answer() -> None:
    """`hookstream stats` prints a worker's JSON answer with the same code as a local report."""
    window = window_of(att(OK), att(RETRY, next_retry_at=T0 + 60_000), att(DEAD, etype="a.b"))
    source = FakeSource({"fast": SubscriptionData([window], RetryBacklog({T0 + 60_000: 1}))})
    sub = _sub("fast", 10)
    one = await stats.subscription_stats(source, sub, "1h", now_ms=T0 + 1000)
    answer = stats.subscription_answer(one)
    assert answer["subscription_id"] == "fast" and answer["window"] == "1h"
    assert stats_from_dict(orjson.loads(orjson.dumps(answer))) == one.stats
    tenant = await stats.tenant_stats(source, "acme", [sub], "1h", now_ms=T0 + 1000)
    wire = orjson.loads(orjson.dumps(stats.tenant_answer(tenant)))
    assert stats_from_dict(wire) == tenant.stats
    assert tuple(stats.rows_from_answer(wire)) == tenant.subscriptions
    with pytest.raises(DecodeError):
        stats_from_dict({"attempts": 1})
    with pytest.raises(DecodeError):
        stats.rows_from_answer({"subscriptions": [{"nope": 1}]})


async def test_o2_a_tenant_report_keeps_its_days_apart() -> None:
    """O2: the tenant's daily success rate is per UTC day, as a subscription's is."""
    day1 = window_of(att(OK, sub="a"), att(DEAD, sub="a"))
    day2 = WindowAggregate(start=T0 + DAY_MS)
    day2.add(att(OK, at=T0 + DAY_MS, sub="b"))
    source = FakeSource(
        {
            "a": SubscriptionData([day1], RetryBacklog()),
            "b": SubscriptionData([day2], RetryBacklog()),
        }
    )
    report = await stats.tenant_stats(
        source, "acme", [_sub("a", 10), _sub("b", 10)], "7d", now_ms=T0 + DAY_MS + 1000
    )
    assert [(d.day, d.delivered, d.deliveries) for d in report.stats.daily] == [
        ("2024-05-01", 1, 2),
        ("2024-05-02", 1, 1),
    ]
