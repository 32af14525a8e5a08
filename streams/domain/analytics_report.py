"""Delivery analytics reports (SPEC O2), pure: what a query over some windows answers.

`summarise` turns the hourly `WindowAggregate` windows of a span (one subscription's, or a
tenant's merged) into a `Stats` report; the admin API and ``hookstream stats`` both print it.
`stats_from_dict` reads a report back from its JSON form, as ``hookstream stats`` receives it
from a worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from streams.domain.analytics_window import DAY_MS, TOP_TYPES_SHOWN, WindowAggregate, merge_all
from streams.domain.sketch import LatencySketch
from streams.errors import DecodeError

#: p95 attempt duration above this share of the subscription's timeout raises a warning.
LATENCY_WARNING_RATIO: Final = 0.8


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class DailyRate:
    day: str  # UTC date, YYYY-MM-DD
    deliveries: int
    delivered: int
    success_rate: float | None


@dataclass(frozen=True, slots=True)
class FailedType:
    event_type: str
    failures: int


@dataclass(frozen=True, slots=True)
class Stats:
    """A report over a span; rates and means are None when nothing was counted."""

    since: int
    until: int
    attempts: int
    successes: int
    failures: int
    deliveries: int
    delivered: int
    failed: int
    success_rate: float | None
    first_attempt_success_rate: float | None
    rescued_by_retry: int
    average_attempts: float | None
    mean_time_to_deliver_ms: float | None
    latency_ms: Percentiles
    attempt_duration_ms: Percentiles
    most_failed_types: tuple[FailedType, ...]
    daily: tuple[DailyRate, ...]
    retry_backlog: int
    timeout_ms: float | None
    latency_warning: bool


def _ratio(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


def percentiles(sketch: LatencySketch) -> Percentiles:
    return Percentiles(sketch.quantile(0.5), sketch.quantile(0.95), sketch.quantile(0.99))


def latency_warning(duration: LatencySketch, timeout_ms: float | None) -> bool:
    """p95 of the attempt duration is above 80% of the subscription's timeout."""
    p95 = duration.quantile(0.95)
    return timeout_ms is not None and p95 is not None and p95 > LATENCY_WARNING_RATIO * timeout_ms


def daily_rates(windows: Iterable[WindowAggregate]) -> tuple[DailyRate, ...]:
    """Delivery success rate per UTC day, oldest first."""
    days: dict[int, list[int]] = {}
    for w in windows:
        day = days.setdefault(w.start - w.start % DAY_MS, [0, 0])
        day[0] += w.delivered + w.failed
        day[1] += w.delivered
    return tuple(
        DailyRate(
            day=datetime.fromtimestamp(start / 1000, tz=UTC).date().isoformat(),
            deliveries=total,
            delivered=ok,
            success_rate=_ratio(ok, total),
        )
        for start, (total, ok) in sorted(days.items())
    )


def top_failed(failed_types: dict[str, int], n: int = TOP_TYPES_SHOWN) -> tuple[FailedType, ...]:
    ranked = sorted(failed_types.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(FailedType(t, c) for t, c in ranked[:n])


def summarise(
    windows: list[WindowAggregate],
    *,
    since: int,
    until: int,
    retry_backlog: int = 0,
    timeout_ms: float | None = None,
) -> Stats:
    """The report over the windows that start in ``[since, until]``."""
    chosen = [w for w in windows if since <= w.start <= until]
    total = merge_all(chosen, since)
    deliveries = total.delivered + total.failed
    mean_ttd = None if total.delivered == 0 else total.time_to_deliver_ms / total.delivered
    return Stats(
        since=since,
        until=until,
        attempts=total.attempts,
        successes=total.successes,
        failures=total.failures,
        deliveries=deliveries,
        delivered=total.delivered,
        failed=total.failed,
        success_rate=_ratio(total.delivered, deliveries),
        first_attempt_success_rate=_ratio(total.first_attempt_successes, total.first_attempts),
        rescued_by_retry=total.rescued,
        average_attempts=None if deliveries == 0 else total.terminal_attempts / deliveries,
        mean_time_to_deliver_ms=mean_ttd,
        latency_ms=percentiles(total.latency),
        attempt_duration_ms=percentiles(total.duration),
        most_failed_types=top_failed(total.failed_types),
        daily=daily_rates(chosen),
        retry_backlog=retry_backlog,
        timeout_ms=timeout_ms,
        latency_warning=latency_warning(total.duration, timeout_ms),
    )


def _percentiles_from(data: Any) -> Percentiles:
    return Percentiles(
        *(None if data[k] is None else float(data[k]) for k in ("p50", "p95", "p99"))
    )


def _rate(value: Any) -> float | None:
    return None if value is None else float(value)


def stats_from_dict(data: Any) -> Stats:
    """A report from its JSON form (the admin API's answer); `DecodeError` if it is not one."""
    try:
        return Stats(
            since=int(data["since"]),
            until=int(data["until"]),
            attempts=int(data["attempts"]),
            successes=int(data["successes"]),
            failures=int(data["failures"]),
            deliveries=int(data["deliveries"]),
            delivered=int(data["delivered"]),
            failed=int(data["failed"]),
            success_rate=_rate(data["success_rate"]),
            first_attempt_success_rate=_rate(data["first_attempt_success_rate"]),
            rescued_by_retry=int(data["rescued_by_retry"]),
            average_attempts=_rate(data["average_attempts"]),
            mean_time_to_deliver_ms=_rate(data["mean_time_to_deliver_ms"]),
            latency_ms=_percentiles_from(data["latency_ms"]),
            attempt_duration_ms=_percentiles_from(data["attempt_duration_ms"]),
            most_failed_types=tuple(
                FailedType(str(t["event_type"]), int(t["failures"]))
                for t in data["most_failed_types"]
            ),
            daily=tuple(
                DailyRate(
                    str(d["day"]),
                    int(d["deliveries"]),
                    int(d["delivered"]),
                    _rate(d["success_rate"]),
                )
                for d in data["daily"]
            ),
            retry_backlog=int(data["retry_backlog"]),
            timeout_ms=_rate(data["timeout_ms"]),
            latency_warning=bool(data["latency_warning"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError("invalid_stats", f"not an analytics report: {exc!r}") from exc
