"""The consumer-lag metrics (SPEC O1), set by `streams.adapters.lag`'s exporter.

A custom collector serves the last snapshot whole, rather than one gauge child per partition,
so a scrape never sees half of an update and partitions that went away disappear.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streams.metrics.families import REGISTRY


class _LagCollector(Collector):
    """Serves the last lag snapshot as a whole, so a scrape never sees half of an update and
    partitions or groups that went away disappear with the next snapshot."""

    def __init__(self) -> None:
        self._families: list[Metric] = []

    def publish(
        self,
        partitions: Iterable[tuple[str, str, int, int]],
        ages: Iterable[tuple[str, str, float]],
        tiers: Iterable[tuple[str, str, float]],
        taken_at: float,
    ) -> None:
        lag = GaugeMetricFamily(
            "hookstream_consumer_lag",
            "Records not yet committed by a hookstream consumer group, per partition.",
            labels=["group", "topic", "partition"],
        )
        for group, topic, partition, records in partitions:
            lag.add_metric([group, topic, str(partition)], records)
        age = GaugeMetricFamily(
            "hookstream_consumer_lag_seconds",
            "Age of the oldest record a group has not committed yet, per topic (0 when none).",
            labels=["group", "topic"],
        )
        for group, topic, seconds in ages:
            age.add_metric([group, topic], seconds)
        delay = GaugeMetricFamily(
            "hookstream_retry_tier_delay_seconds",
            "The configured delay of each retry tier topic.",
            labels=["topic", "tier"],
        )
        for topic, tier, seconds in tiers:
            delay.add_metric([topic, tier], seconds)
        updated = GaugeMetricFamily(
            "hookstream_consumer_lag_updated_timestamp_seconds",
            "Unix time of the last successful consumer-lag measurement.",
            value=taken_at,
        )
        self._families = [lag, age, delay, updated]

    def collect(self) -> Iterable[Metric]:
        return list(self._families)


LAG = _LagCollector()
REGISTRY.register(LAG)
LAG_ERRORS = Counter(
    "hookstream_consumer_lag_errors",
    "Consumer-lag measurements that failed (the last good snapshot stays exported).",
    registry=REGISTRY,
)


def publish_lag(
    partitions: Iterable[tuple[str, str, int, int]],
    ages: Iterable[tuple[str, str, float]],
    tiers: Iterable[tuple[str, str, float]],
    taken_at: float,
) -> None:
    """Replace the exported lag: (group, topic, partition, records) rows, (group, topic, age in
    seconds) rows, the retry tiers as (topic, tier, delay) and the measurement's unix time."""
    LAG.publish(partitions, ages, tiers, taken_at)


def record_lag_error() -> None:
    """A lag measurement failed."""
    LAG_ERRORS.inc()
