"""`hookstream health`: the health summary and each subscription's health record (S4)."""

from __future__ import annotations

import click

from streams.cli.common import echo_json, fmt_ms, json_option, settings
from streams.domain.breaker import origin_of
from streams.services import health as service
from streams.services.breakers import breaker_view
from streams.services.subscriptions import list_subscriptions


@click.command()
@click.option("--subscription", "subscription_id", default=None, help="Only this subscription.")
@click.option("--tenant", "tenant_id", default=None, help="Only this tenant.")
@json_option
def health(subscription_id: str | None, tenant_id: str | None, as_json: bool) -> None:
    """Counts of active, suspended, disabled and failing subscriptions, and their records."""
    current = settings()
    subs = list_subscriptions(current, tenant_id)
    if subscription_id is not None:
        subs = [s for s in subs if s.id == subscription_id]
        if not subs:
            raise click.ClickException(f"subscription {subscription_id} not found")
    records = service.health_records(current)
    breakers = breaker_view(current)  # the fleet's shared breakers (H8), as workers hold them
    views = [
        service.record_view(s, records.get(s.id), breakers.state_of(origin_of(s.url)).value)
        for s in subs
    ]
    totals = service.summary(subs, records)
    if as_json:
        echo_json({**totals, "subscriptions": views})
        return
    click.echo(
        f"active {totals['active']}  suspended {totals['suspended']}  "
        f"disabled {totals['disabled']}  failing {totals['failing']}"
    )
    for view in views:
        rec = view["health"]
        click.echo(
            f"{view['subscription_id']}  {view['status']:<9} "
            f"failures={rec['consecutive_failures']} since={fmt_ms(rec['first_failure_at'])} "
            f"last={rec['last_status']} reason={view['status_reason'] or '-'} "
            f"breaker={view['breaker']}"
        )
