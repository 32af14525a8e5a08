"""hookstream's Prometheus metrics and the lag arithmetic, without a broker (SPEC O1)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams import metrics
from streams.adapters import gc_pauses, lag_metrics, loop_lag
from streams.adapters.lag_report import LagReport, PartitionLag, hookstream_groups
from streams.api import metrics_page
from streams.metrics import families
from streams.metrics.families import REGISTRY


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def no_allow_list() -> Iterator[None]:
    yield
    metrics.allow_subscription_labels(())


def test_o1_attempts_count_by_outcome_and_lane_and_time_the_histogram() -> None:
    before = value("hookstream_deliveries_total", outcome="retryable", lane="retry")
    slow = value("hookstream_attempt_duration_seconds_bucket", lane="retry", le="0.25")
    total = value("hookstream_attempt_duration_seconds_count", lane="retry")
    metrics.record_attempt("retryable", "retry", 0.2)
    metrics.record_attempt("retryable", "retry", 12.0)
    assert value("hookstream_deliveries_total", outcome="retryable", lane="retry") == before + 2
    assert value("hookstream_attempt_duration_seconds_bucket", lane="retry", le="0.25") == slow + 1
    assert value("hookstream_attempt_duration_seconds_count", lane="retry") == total + 2


def test_o1_attempt_buckets_span_5ms_to_30s() -> None:
    assert families.ATTEMPT_BUCKETS[0] == 0.005
    assert families.ATTEMPT_BUCKETS[-1] == 30.0
    assert list(families.ATTEMPT_BUCKETS) == sorted(families.ATTEMPT_BUCKETS)


def test_o1_labels_outside_the_fixed_sets_become_unknown() -> None:
    before = value("hookstream_deliveries_total", outcome="unknown", lane="unknown")
    metrics.record_attempt("weird", "sideways", 0.01)
    assert value("hookstream_deliveries_total", outcome="unknown", lane="unknown") == before + 1
    metrics.record_retry("not a tier")
    assert value("hookstream_retries_scheduled_total", tier="unknown") >= 1
    metrics.record_suspension("bogus")
    assert value("hookstream_subscription_suspensions_total", outcome="unknown") >= 1


def test_o1_dlq_reasons_are_kept_while_bounded_then_share_other() -> None:
    metrics.record_dead_letter("exhausted:http_500")
    assert value("hookstream_dlq_total", reason="exhausted:http_500") >= 1
    metrics.record_dead_letter("Not A Reason Code!")
    assert value("hookstream_dlq_total", reason="other") >= 1
    guard = metrics._Reasons()
    labels = {guard.label(f"http_{n}") for n in range(families.MAX_REASONS + 50)}
    assert len(labels) == families.MAX_REASONS + 1  # every kept reason, plus "other"
    assert "other" in labels


def test_o1_no_subscription_label_unless_allow_listed() -> None:
    assert metrics.subscription_label("sub_1") == "other"
    metrics.allow_subscription_labels(["sub_1"])
    assert metrics.subscription_label("sub_1") == "sub_1"
    assert metrics.subscription_label("sub_2") == "other"


def test_r2_backfill_progress_sums_per_label_and_disappears_when_done() -> None:
    metrics.allow_subscription_labels(["vip"])
    metrics.set_backfill_progress("vip", 3, 10)
    metrics.set_backfill_progress("a", 1, 4)
    metrics.set_backfill_progress("b", 2, 6)
    assert value("hookstream_backfill_progress", state="done", subscription="vip") == 3
    assert value("hookstream_backfill_progress", state="total", subscription="other") == 10
    assert value("hookstream_backfills_running") == 3
    for sub in ("vip", "a", "b"):
        metrics.backfill_finished(sub)
    assert (
        REGISTRY.get_sample_value(
            "hookstream_backfill_progress", {"state": "done", "subscription": "vip"}
        )
        is None
    )
    assert value("hookstream_backfill_progress", state="total", subscription="other") == 0
    assert value("hookstream_backfills_running") == 0


def test_o1_in_flight_counts_attempts_under_way_by_lane() -> None:
    assert REGISTRY.get_sample_value("hookstream_in_flight", {"lane": "backfill"}) is not None
    live = value("hookstream_in_flight", lane="live")
    metrics.add_in_flight("live", 1)
    metrics.add_in_flight("live", 1)
    assert value("hookstream_in_flight", lane="live") == live + 2
    metrics.add_in_flight("live", -1)
    assert value("hookstream_in_flight", lane="live") == live + 1
    unknown = value("hookstream_in_flight", lane="unknown")
    metrics.add_in_flight("sideways", 1)
    assert value("hookstream_in_flight", lane="unknown") == unknown + 1
    metrics.add_in_flight("sideways", -1)
    metrics.add_in_flight("live", -1)
    assert value("hookstream_in_flight", lane="live") == live


def test_h7_breaker_gauge_covers_every_state() -> None:
    metrics.set_breakers({"open": 2})
    assert value("hookstream_breakers", state="open") == 2
    assert REGISTRY.get_sample_value("hookstream_breakers", {"state": "half_open"}) == 0
    metrics.record_breaker_transition("half_open")
    assert value("hookstream_breaker_transitions_total", to="half_open") >= 1


def test_o1_lag_snapshot_replaces_the_previous_one() -> None:
    lag_metrics.publish_lag(
        [("g-dispatch", "p.routed", 0, 7), ("g-dispatch", "p.routed", 1, 0)],
        [("g-dispatch", "p.routed", 4.5)],
        [("p.retry.1m", "1m", 60.0)],
        1000.0,
    )
    lag = {"group": "g-dispatch", "topic": "p.routed", "partition": "0"}
    assert REGISTRY.get_sample_value("hookstream_consumer_lag", lag) == 7
    assert value("hookstream_consumer_lag_seconds", group="g-dispatch", topic="p.routed") == 4.5
    assert value("hookstream_retry_tier_delay_seconds", topic="p.retry.1m", tier="1m") == 60
    lag_metrics.publish_lag([("g-router", "p.events", 0, 1)], [], [], 1001.0)
    assert REGISTRY.get_sample_value("hookstream_consumer_lag", lag) is None
    assert value("hookstream_consumer_lag_updated_timestamp_seconds") == 1001.0


def test_o1_exposition_parses_and_every_name_is_prefixed() -> None:
    metrics.record_attempt("success", "live", 0.01)
    families = list(text_string_to_metric_families(metrics.render().decode()))
    ours = [f.name for f in families if f.name.startswith("hookstream_")]
    assert "hookstream_deliveries" in ours  # the parser strips the counter's _total
    allowed_foreign = ("process_", "python_")
    assert all(f.name.startswith(("hookstream_", *allowed_foreign)) for f in families)
    assert not any(s.name.endswith("_created") for f in families for s in f.samples)


def part(committed: int | None, low: int, high: int, stamp: int | None = None) -> PartitionLag:
    return PartitionLag("g", "t", 0, committed, low, high, stamp)


def test_o1_lag_is_end_minus_commit_clamped_into_the_log() -> None:
    assert part(5, 0, 9).lag == 4
    assert part(None, 3, 9).lag == 6, "never committed: counts from the log start"
    assert part(1, 3, 9).lag == 6, "commit below the log start: those records are gone"
    assert part(12, 0, 9).lag == 0


def test_o1_time_lag_is_the_oldest_uncommitted_record_age_per_topic() -> None:
    report = LagReport(
        taken_at=100.0,
        partitions=(
            PartitionLag("g", "t", 0, 5, 0, 9, 90_000),
            PartitionLag("g", "t", 1, 5, 0, 9, 97_000),
            PartitionLag("g", "u", 0, 9, 0, 9),
            PartitionLag("g", "v", 0, 1, 0, 9),  # lagging, not read this round
        ),
    )
    by_topic = {t.topic: t for t in report.topics()}
    assert by_topic["t"].lag == 8 and by_topic["t"].age_s == 10.0
    assert by_topic["u"].lag == 0 and by_topic["u"].age_s == 0.0
    assert by_topic["v"].age_s is None


def test_o1_only_this_pipelines_groups_are_measured() -> None:
    names = ["hs", "hs-router", "hs-dispatch", "hs-replay", "hsx-router", "other", "hs.lag-probe"]
    assert hookstream_groups("hs", names) == ["hs", "hs-dispatch", "hs-replay", "hs-router"]


def test_o1_every_collector_pass_is_timed_by_generation_once() -> None:
    """A worker's cycle-collector passes stop its event loop: each one is counted and timed in
    ``hookstream_gc_pause_seconds`` under its generation, by one callback however often the
    watch is installed."""
    before = list(gc.callbacks)
    try:
        gc_pauses.watch_gc_pauses()
        gc_pauses.watch_gc_pauses()
        assert len(gc.callbacks) - len(before) <= 1  # none if an earlier test installed it
        full = value("hookstream_gc_pause_seconds_count", generation="2")
        full_time = value("hookstream_gc_pause_seconds_sum", generation="2")
        young = value("hookstream_gc_pause_seconds_count", generation="0")
        gc.collect()
        gc.collect(0)
        assert value("hookstream_gc_pause_seconds_count", generation="2") == full + 1
        assert value("hookstream_gc_pause_seconds_sum", generation="2") > full_time
        assert value("hookstream_gc_pause_seconds_count", generation="0") == young + 1
    finally:
        gc.callbacks[:] = before


def test_o1_the_metrics_page_adds_the_build_and_the_readiness_checks() -> None:
    """The worker's /metrics page exports its build and every readiness check, 1 or 0."""
    metrics_page.set_readiness({"joined": True, "ledger": False, "ready": False})
    ours = [f.name for f in text_string_to_metric_families(metrics.render().decode())]
    assert "hookstream_build_info" in ours
    assert value("hookstream_worker_readiness", check="joined") == 1
    assert value("hookstream_worker_readiness", check="ledger") == 0


def test_o1_a_blocked_event_loop_is_seen_as_lag() -> None:
    """While something computes on the worker's event loop, everything else on it waits: the
    watch's timer fires late by about as long, and ``hookstream_event_loop_lag_seconds`` says
    so. A loop left free shows no such lag."""

    def over(seconds: float) -> float:
        below = value("hookstream_event_loop_lag_seconds_bucket", le=str(seconds))
        return value("hookstream_event_loop_lag_seconds_count") - below

    async def run(block_s: float) -> None:
        stop = asyncio.Event()
        watch = asyncio.create_task(loop_lag.watch_loop_lag(stop, period_s=0.01))
        await asyncio.sleep(0.05)
        busy_until = time.monotonic() + block_s
        while time.monotonic() < busy_until:  # the loop computes: nothing else on it runs
            pass
        await asyncio.sleep(0.05)
        stop.set()
        await watch

    count = value("hookstream_event_loop_lag_seconds_count")
    slow = over(0.25)
    asyncio.run(run(0.0))
    assert value("hookstream_event_loop_lag_seconds_count") > count  # it observes
    assert over(0.25) == slow  # a free loop: no timer a quarter of a second late
    asyncio.run(run(0.4))
    assert over(0.25) == slow + 1  # one late timer, at least 0.4 s less one 10 ms period
