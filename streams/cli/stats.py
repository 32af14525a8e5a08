"""`hookstream stats`: delivery analytics of a subscription or a tenant (SPEC O2).

The CLI holds no tables, so it reads the `attempts` topic once and folds it with the same pure
code as the workers' analytics agent (``streams.services.stats.ScannedAnalytics``): it needs
only the broker, never a running worker, and reports the same figures.
"""

from __future__ import annotations

import asyncio

import click

from streams.cli.common import echo_json, json_option, settings
from streams.domain.analytics import SPANS, Percentiles, Stats
from streams.services import stats as service
from streams.services.subscriptions import get_subscription, list_subscriptions, load_registry


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _percentiles(name: str, p: Percentiles) -> str:
    return f"{name:<18} p50 {_ms(p.p50)}  p95 {_ms(p.p95)}  p99 {_ms(p.p99)}"


def _lines(report: Stats) -> list[str]:
    lines = [
        f"attempts           {report.attempts} ({report.successes} ok, {report.failures} failed)",
        f"deliveries         {report.deliveries} ended, {report.delivered} delivered, "
        f"{report.failed} dead or exhausted",
        f"success rate       {_pct(report.success_rate)}",
        _percentiles("latency", report.latency_ms),
        _percentiles("attempt duration", report.attempt_duration_ms),
        f"first-attempt ok   {_pct(report.first_attempt_success_rate)}",
        f"rescued by retry   {report.rescued_by_retry}",
        f"average attempts   {_number(report.average_attempts)}",
        f"time to deliver    {_ms(report.mean_time_to_deliver_ms)} (mean)",
        f"retry backlog      {report.retry_backlog}",
    ]
    if report.latency_warning:
        lines.append(
            f"WARNING            p95 attempt duration above 80% of the timeout "
            f"({_ms(report.timeout_ms)})"
        )
    if report.most_failed_types:
        failed = ", ".join(f"{t.event_type} ({t.failures})" for t in report.most_failed_types)
        lines.append(f"most failed types  {failed}")
    for day in report.daily:
        lines.append(
            f"  {day.day}  {day.delivered}/{day.deliveries} delivered  {_pct(day.success_rate)}"
        )
    return lines


@click.command()
@click.option("--subscription", "subscription_id", default=None, help="One subscription's stats.")
@click.option("--tenant", "tenant_id", default=None, help="A tenant's stats, all subscriptions.")
@click.option(
    "--window",
    type=click.Choice(list(SPANS)),
    default="24h",
    show_default=True,
    help="The hourly windows overlapping this last span.",
)
@json_option
def stats(subscription_id: str | None, tenant_id: str | None, window: str, as_json: bool) -> None:
    """Latency percentiles, success rates, failing types and retry health (O2).

    Reads the attempt ledger from Kafka; no worker needs to run.
    """
    if (subscription_id is None) == (tenant_id is None):
        raise click.UsageError("give exactly one of --subscription or --tenant")
    config = settings()
    registry = load_registry(config)
    source = service.ScannedAnalytics(config)
    if subscription_id is not None:
        sub = get_subscription(config, subscription_id, source=registry)
        found = asyncio.run(service.subscription_stats(source, sub, window))
        if as_json:
            echo_json({"subscription_id": sub.id, "window": window, **_fields(found.stats)})
            return
        click.echo(f"subscription {sub.id} ({sub.tenant_id}), last {window}")
        click.echo("\n".join(_lines(found.stats)))
        return
    assert tenant_id is not None
    subs = list_subscriptions(config, tenant_id, source=registry)
    if not subs:
        raise click.ClickException(f"tenant {tenant_id} has no subscriptions")
    report = asyncio.run(service.tenant_stats(source, tenant_id, subs, window))
    if as_json:
        echo_json(
            {
                "tenant_id": tenant_id,
                "window": window,
                **_fields(report.stats),
                "subscriptions": report.subscriptions,
                "latency_warnings": report.latency_warnings,
            }
        )
        return
    click.echo(f"tenant {tenant_id}, {len(subs)} subscriptions, last {window}")
    click.echo("\n".join(_lines(report.stats)))
    for row in report.subscriptions:
        flag = "  WARNING: slow" if row.latency_warning else ""
        click.echo(
            f"  {row.subscription_id}  attempts={row.attempts} "
            f"ok={_pct(row.success_rate)} p95={_ms(row.p95_attempt_duration_ms)} "
            f"backlog={row.retry_backlog}{flag}"
        )


def _fields(report: Stats) -> dict[str, object]:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}
