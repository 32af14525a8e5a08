"""`hookstream subs`: manage subscriptions (the same service functions as the admin API)."""

from __future__ import annotations

import asyncio
import json

import click

from streams.adapters.ssrf import guarded_transport
from streams.cli.common import echo_json, json_option, settings
from streams.services import recovery
from streams.services import subscriptions as service


@click.group()
def subs() -> None:
    """Create, list, show, update, disable, enable, reenable, test and delete subscriptions."""


@subs.command()
@click.option("--tenant", "tenant_id", required=True, help="Tenant that owns the subscription.")
@click.option("--url", required=True, help="Endpoint URL (https, or http when allowed).")
@click.option("--name", default="", help="A name for humans.")
@click.option("--filter", "filters", multiple=True, help="Event type or wildcard (invoice.*).")
@click.option("--email", "emails", multiple=True, help="Owner email for notices.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Seconds, at most 30.")
@click.option("--rate-limit", type=float, default=None, help="Deliveries per second.")
@click.option("--max-in-flight", type=int, default=None, help="Concurrent attempts at most.")
@click.option("--header", "headers", multiple=True, help="Static header NAME=VALUE.")
@json_option
def create(
    tenant_id: str,
    url: str,
    name: str,
    filters: tuple[str, ...],
    emails: tuple[str, ...],
    timeout_s: float | None,
    rate_limit: float | None,
    max_in_flight: int | None,
    headers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create a subscription; prints its signing secret once."""
    data: dict[str, object] = {
        "tenant_id": tenant_id,
        "url": url,
        "name": name,
        "filters": list(filters) or ["*"],
        "owner_emails": list(emails),
    }
    for key, value in (
        ("timeout_s", timeout_s),
        ("rate_limit", rate_limit),
        ("max_in_flight", max_in_flight),
    ):
        if value is not None:
            data[key] = value
    if headers:
        pairs = [h.split("=", 1) for h in headers]
        if any(len(p) != 2 for p in pairs):
            raise click.BadParameter("use NAME=VALUE", param_hint="--header")
        data["headers"] = dict(pairs)
    sub = service.create_subscription(settings(), data)
    if as_json:
        echo_json(service.public_view(sub, show_secret=True))
    else:
        click.echo(f"created {sub.id} -> {sub.url}")
        click.echo(f"secret  {sub.secrets[0].value}  (shown once; receivers verify with it)")


@subs.command(name="list")
@click.option("--tenant", "tenant_id", default=None, help="Only this tenant.")
@click.option(
    "--status",
    type=click.Choice(["active", "suspended", "disabled"]),
    default=None,
    help="Only this status.",
)
@json_option
def list_(tenant_id: str | None, status: str | None, as_json: bool) -> None:
    """List subscriptions."""
    found = service.list_subscriptions(settings(), tenant_id, status)
    if as_json:
        echo_json([service.public_view(s) for s in found])
        return
    for sub in found:
        click.echo(
            f"{sub.id}  {sub.tenant_id:<12} {sub.status.value:<9} {sub.url}  "
            f"[{','.join(sub.filters)}]"
        )
    click.echo(f"{len(found)} subscription(s)")


@subs.command()
@click.argument("subscription_id")
@json_option
def show(subscription_id: str, as_json: bool) -> None:
    """Show one subscription (secrets are never shown) and its backfill's progress."""
    config = settings()
    view = service.public_view(service.get_subscription(config, subscription_id))
    view["backfill"] = recovery.backfill_progress(config, subscription_id)
    if as_json:
        echo_json(view)
        return
    for key, value in view.items():
        click.echo(f"{key:>14}: {value}")


@subs.command()
@click.argument("subscription_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(subscription_id: str, yes: bool) -> None:
    """Delete a subscription for good (suspension never deletes)."""
    if not yes:
        click.confirm(f"delete {subscription_id} and its secrets for good?", abort=True)
    service.remove_subscription(settings(), subscription_id)
    click.echo(f"deleted {subscription_id}")


def _show(view: dict[str, object], as_json: bool) -> None:
    if as_json:
        echo_json(view)
        return
    for key, value in view.items():
        click.echo(f"{key:>14}: {value}")


@subs.command()
@click.argument("subscription_id")
@click.option(
    "--set",
    "changes",
    multiple=True,
    metavar="FIELD=JSON",
    help="A field and its new value as JSON, e.g. --set timeout_s=5 --set 'filters=[\"a.*\"]'. "
    "A value that is not JSON is taken as a string; null clears an optional field.",
)
@json_option
def update(subscription_id: str, changes: tuple[str, ...], as_json: bool) -> None:
    """Change fields of a subscription (validated as on creation)."""
    patch: dict[str, object] = {}
    for change in changes:
        name, sep, text = change.partition("=")
        if not sep:
            raise click.BadParameter("use FIELD=JSON", param_hint="--set")
        try:
            patch[name] = json.loads(text)
        except ValueError:
            patch[name] = text
    if not patch:
        raise click.UsageError("nothing to change: give at least one --set")
    sub = service.update_subscription(settings(), subscription_id, patch)
    _show(service.public_view(sub), as_json)


@subs.command()
@click.argument("subscription_id")
@json_option
def disable(subscription_id: str, as_json: bool) -> None:
    """Disable by hand (status disabled, reason manual); events wait in the archive."""
    sub = service.disable_subscription(settings(), subscription_id)
    if as_json:
        echo_json(service.public_view(sub))
    else:
        click.echo(f"disabled {sub.id}  status={sub.status.value}")


@subs.command()
@click.argument("subscription_id")
@json_option
def enable(subscription_id: str, as_json: bool) -> None:
    """Enable a disabled subscription."""
    sub = service.enable_subscription(settings(), subscription_id)
    if as_json:
        echo_json(service.public_view(sub))
    else:
        click.echo(f"enabled {sub.id}  status={sub.status.value}")


@subs.command(name="rotate-secret")
@click.argument("subscription_id")
@click.option(
    "--grace",
    "grace_s",
    type=float,
    default=service.DEFAULT_GRACE_S,
    show_default=True,
    help="Seconds the old secret keeps signing.",
)
@json_option
def rotate_secret(subscription_id: str, grace_s: float, as_json: bool) -> None:
    """Rotate the signing secret; prints the new one once."""
    sub, secret = service.rotate_secret(settings(), subscription_id, grace_s=grace_s)
    if as_json:
        echo_json({**service.public_view(sub), "secret": secret})
        return
    click.echo(f"rotated {sub.id}; the old secret signs for another {grace_s:g}s")
    click.echo(f"secret  {secret}  (shown once)")


@subs.command(name="test")
@click.argument("subscription_id")
@json_option
def test_(subscription_id: str, as_json: bool) -> None:
    """Send a signed webhook.test event now and print the outcome."""
    config = settings()
    sub = service.get_subscription(config, subscription_id)

    async def send() -> service.TestResult:
        transport = guarded_transport(config, body_cap=config.response_body_cap)
        try:
            return await service.send_test(sub, transport)
        finally:
            await transport.aclose()

    result = asyncio.run(send())
    if as_json:
        echo_json(result)
        return
    click.echo(
        f"{result.outcome} ({result.reason}) status={result.status} "
        f"{result.latency_ms:.1f} ms{'  ' + result.error if result.error else ''}"
    )


@subs.command()
@click.argument("subscription_id")
@click.option(
    "--rate", type=float, default=None, help="Backfill deliveries/s (default 5, capped by limit)."
)
@json_option
def reenable(subscription_id: str, rate: float | None, as_json: bool) -> None:
    """Re-enable a suspended subscription behind a probe, then backfill what it missed."""
    config = settings()

    async def run() -> recovery.ReenableResult:
        transport = guarded_transport(config, body_cap=config.response_body_cap)
        try:
            return await recovery.reenable(config, subscription_id, transport, rate=rate)
        finally:
            await transport.aclose()

    result = asyncio.run(run())
    if as_json:
        echo_json(result.view())
    else:
        probe = result.probe
        click.echo(
            f"probe {probe.outcome} ({probe.reason}) status={probe.status} "
            f"{probe.latency_ms:.1f} ms{'  ' + probe.error if probe.error else ''}"
        )
        if result.ok:
            click.echo(f"reenabled {subscription_id}; backfill job {result.job_id} started")
    if not result.ok:
        raise click.ClickException(
            f"{subscription_id} stays suspended ({result.subscription.status_reason})"
        )
