"""`hookstream stats`: delivery analytics of a subscription or a tenant (SPEC O2).

The figures live in the workers' analytics tables, so the command asks a worker's admin API
(``--worker``, by default this machine's ``HOOKSTREAM_WEB_PORT``) with the operator key (S6).
Only with ``--ledger``, an audit, it reads the `attempts` topic once and folds it with the same
pure code as the analytics agent (``streams.services.stats.ScannedAnalytics``): that needs only
the broker, and takes longer on a large ledger.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import click

from streams.cli.common import echo_json, json_option, settings
from streams.domain.analytics_report import Percentiles, Stats, stats_from_dict
from streams.domain.analytics_window import SPANS
from streams.services import stats as service
from streams.services.subscriptions import get_subscription, list_subscriptions, load_registry
from streams.settings import Settings

#: Bind addresses that mean "every interface": ask the worker on loopback instead.
_ANY_HOST = frozenset({"", "0.0.0.0", "::"})  # noqa: S104  # compared with, never bound


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


def _worker_url(config: Settings, given: str | None) -> str:
    if given:
        return given.rstrip("/")
    host = "127.0.0.1" if config.web_host in _ANY_HOST else config.web_host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.web_port}"


def _from_ledger(
    config: Settings, subscription_id: str | None, tenant_id: str | None, window: str
) -> dict[str, Any]:
    """The answer a worker would give, folded from the attempts ledger here."""
    registry = load_registry(config)
    source = service.ScannedAnalytics(config)
    if subscription_id is not None:
        sub = get_subscription(config, subscription_id, source=registry)
        return service.subscription_answer(
            asyncio.run(service.subscription_stats(source, sub, window))
        )
    assert tenant_id is not None
    subs = list_subscriptions(config, tenant_id, source=registry)
    if not subs:
        raise click.ClickException(f"tenant {tenant_id} has no subscriptions")
    return service.tenant_answer(asyncio.run(service.tenant_stats(source, tenant_id, subs, window)))


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
@click.option(
    "--worker",
    "worker_url",
    default=None,
    help="Base URL of the worker to ask [default: http://<HOOKSTREAM_WEB_HOST>:<HOOKSTREAM_WEB_PORT>].",
)
@click.option(
    "--ledger", "from_ledger", is_flag=True, help="Fold the attempts ledger here; ask no worker."
)
@json_option
def stats(
    subscription_id: str | None,
    tenant_id: str | None,
    window: str,
    worker_url: str | None,
    from_ledger: bool,
    as_json: bool,
) -> None:
    """Latency percentiles, success rates, failing event types and retry health.

    Asks a worker, which reads the analytics tables of whichever worker holds each
    subscription. With --ledger, folds the attempts topic here instead (an audit).
    """
    if (subscription_id is None) == (tenant_id is None):
        raise click.UsageError("give exactly one of --subscription or --tenant")
    config = settings()
    url = _worker_url(config, worker_url)
    if subscription_id is not None:
        path = f"/v1/subscriptions/{quote(subscription_id, safe='')}/stats"
    else:
        path = f"/v1/tenants/{quote(tenant_id or '', safe='')}/stats"
    answer = None if from_ledger else service.ask_worker(config, url, path, window)
    if answer is None and not from_ledger:
        why = (
            "HOOKSTREAM_ADMIN_TOKEN is not set"
            if config.admin_token is None
            else f"no worker answered at {url}"
        )
        raise click.ClickException(
            f"{why}; --ledger folds the attempts topic here instead (an audit: it reads the "
            "whole topic)"
        )
    if answer is None:
        answer = _from_ledger(config, subscription_id, tenant_id, window)
    if as_json:
        echo_json(answer)
        return
    report = stats_from_dict(answer)
    if subscription_id is not None:
        click.echo(f"subscription {subscription_id}, last {window}")
        click.echo("\n".join(_lines(report)))
        return
    rows = service.rows_from_answer(answer)
    click.echo(f"tenant {tenant_id}, {len(rows)} subscriptions, last {window}")
    click.echo("\n".join(_lines(report)))
    for row in rows:
        flag = "  WARNING: slow" if row.latency_warning else ""
        click.echo(
            f"  {row.subscription_id}  attempts={row.attempts} "
            f"ok={_pct(row.success_rate)} p95={_ms(row.p95_attempt_duration_ms)} "
            f"backlog={row.retry_backlog}{flag}"
        )
