"""`hookstream deliveries` and `hookstream dlq`: the attempt ledger and the dead letters.

Both read the workers' ledger state through a worker's admin API (S6): the same code path as
``GET /v1/deliveries/{id}``, ``GET /v1/subscriptions/{id}/deliveries`` and ``GET /v1/dlq``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from streams.cli.common import (
    echo_json,
    fmt_ms,
    json_option,
    parse_time,
    settings,
    shown,
    worker_option,
)
from streams.cli.replay import dlq_replay
from streams.services import worker_api
from streams.services.ledger import LISTED_STATES

limit_option = click.option(
    "--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Page size."
)
cursor_option = click.option("--cursor", default=None, help="The next page's cursor.")


def _next(page: dict[str, Any]) -> None:
    if page.get("next_cursor"):
        click.echo(f"more: --cursor {page['next_cursor']}")


@click.group()
def deliveries() -> None:
    """Look up deliveries and their attempts: state, status, error, retries."""


@deliveries.command()
@click.argument("delivery_id")
@worker_option
@json_option
def show(delivery_id: str, worker_url: str | None, as_json: bool) -> None:
    """Show one delivery's state and every attempt."""
    path = f"/v1/deliveries/{quote(delivery_id, safe='')}"
    found = worker_api.call(settings(), "GET", path, url=worker_url)
    if as_json:
        echo_json(found)
        return
    summary = found["summary"]
    click.echo(
        f"{summary['delivery_id']}  {summary['state']}  attempts={summary['attempts']}  "
        f"subscription={summary['subscription_id']}"
    )
    for att in found["attempts"]:
        click.echo(
            f"  #{att['attempt']} {fmt_ms(att['started_at'])} {att['lane']:<8} "
            f"{att['outcome']:<9} {att['reason']:<22} {att['duration_ms']:7.1f} ms "
            f"next={fmt_ms(att['next_retry_at'])}"
        )


@deliveries.command(name="list")
@click.option("--subscription", "subscription_id", required=True, help="Its deliveries.")
@click.option(
    "--state", type=click.Choice(LISTED_STATES), default=None, help="Only deliveries in this state."
)
@limit_option
@cursor_option
@worker_option
@json_option
def list_(
    subscription_id: str,
    state: str | None,
    limit: int,
    cursor: str | None,
    worker_url: str | None,
    as_json: bool,
) -> None:
    """List a subscription's deliveries, newest first, by state."""
    path = f"/v1/subscriptions/{quote(subscription_id, safe='')}/deliveries"
    params = {"status": state, "limit": str(limit), "cursor": cursor}
    page = worker_api.call(settings(), "GET", path, params=params, url=worker_url)
    if as_json:
        echo_json(page)
        return
    for s in page["items"]:
        click.echo(
            f"{s['delivery_id']}  {s['state']:<9} attempts={s['attempts']} "
            f"status={shown(s['last_http_status'])} {s['event_type']} "
            f"last={fmt_ms(s['last_attempt_at'])}"
        )
    click.echo(f"{len(page['items'])} deliveries")
    _next(page)


@click.group()
def dlq() -> None:
    """List and replay dead letters: deliveries that failed for good."""


@dlq.command(name="list")
@click.option("--subscription", "subscription_id", default=None, help="Only this subscription.")
@click.option("--tenant", "tenant_id", default=None, help="Only this tenant.")
@click.option("--reason", default=None, help="Reason prefix, e.g. http_404 or exhausted.")
@click.option("--since", default=None, help="ISO-8601 datetime, inclusive.")
@click.option("--until", default=None, help="ISO-8601 datetime, exclusive.")
@limit_option
@cursor_option
@worker_option
@json_option
def dlq_list(
    subscription_id: str | None,
    tenant_id: str | None,
    reason: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    cursor: str | None,
    worker_url: str | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""
    since_ms, until_ms = parse_time(since), parse_time(until)
    params = {
        "subscription_id": subscription_id,
        "tenant_id": tenant_id,
        "reason": reason,
        "since": None if since_ms is None else str(since_ms),
        "until": None if until_ms is None else str(until_ms),
        "limit": str(limit),
        "cursor": cursor,
    }
    page = worker_api.call(settings(), "GET", "/v1/dlq", params=params, url=worker_url)
    if as_json:
        echo_json(page)
        return
    for d in page["items"]:
        event_id = d["delivery"]["event"]["id"] if d.get("delivery") else "-"
        click.echo(
            f"{fmt_ms(d['dead_at'])} {d['reason']:<24} sub={d['subscription_id']} "
            f"event={event_id} attempts={d['attempts']} status={shown(d['last_status'])}"
        )
    click.echo(f"{len(page['items'])} dead letters")
    _next(page)


dlq.add_command(dlq_replay)
