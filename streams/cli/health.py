"""`hookstream health`: the health summary and each subscription's health record (S4).

It asks a worker's admin API (``GET /v1/health``): the records are the health agent's own table,
the one that drives suspension, read from whichever worker holds each subscription (S6).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from streams.cli.common import echo_json, fmt_ms, json_option, settings, shown, worker_option
from streams.services import worker_api


@click.command()
@click.option("--subscription", "subscription_id", default=None, help="Only this subscription.")
@click.option("--tenant", "tenant_id", default=None, help="Only this tenant.")
@worker_option
@json_option
def health(
    subscription_id: str | None, tenant_id: str | None, worker_url: str | None, as_json: bool
) -> None:
    """Counts of active, suspended, disabled and failing subscriptions, and their records."""
    body = worker_api.call(settings(), "GET", "/v1/health", url=worker_url)
    views = body["subscriptions"]
    if tenant_id is not None or subscription_id is not None:
        wanted = {
            s["subscription_id"]
            for s in views
            if subscription_id in (None, s["subscription_id"])
            and tenant_id in (None, s.get("tenant_id"))
        }
        views = [v for v in views if v["subscription_id"] in wanted]
        if subscription_id is not None and not views:
            raise click.ClickException(f"subscription {subscription_id} not found")
    totals = {k: v for k, v in body.items() if k != "subscriptions"}
    if tenant_id is not None or subscription_id is not None:
        totals = _totals(views)
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
            f"last={shown(rec['last_status'])} reason={view['status_reason'] or '-'} "
            f"breaker={view['breaker']}"
        )


def _totals(views: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's counts over some subscriptions' views."""
    statuses = Counter(v["status"] for v in views)
    failing = sorted(
        v["subscription_id"]
        for v in views
        if v["status"] == "active" and v["health"]["consecutive_failures"] > 0
    )
    return {
        "active": statuses.get("active", 0),
        "suspended": statuses.get("suspended", 0),
        "disabled": statuses.get("disabled", 0),
        "failing": len(failing),
        "failing_subscriptions": failing,
        "total": len(views),
    }
