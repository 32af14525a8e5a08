"""`hookstream replay` and `hookstream dlq replay`: send deliveries again with the same keys (R3),
and reset a consumer group's offsets to a datetime (R4)."""

from __future__ import annotations

from urllib.parse import quote

import click

from streams.cli.common import (
    echo_json,
    fmt_ms,
    json_option,
    parse_time,
    settings,
    worker_option,
)
from streams.errors import ValidationError
from streams.services import offset_reset, worker_api
from streams.services import replay as service

_RATE = click.option(
    "--rate", type=float, default=None, help="Deliveries/s (default 5, capped by the rate_limit)."
)


@click.group(invoke_without_command=True)
@click.option("--reset-offsets", is_flag=True, help="Reset a consumer group to --to-datetime.")
@click.option("--to-datetime", default=None, help="ISO-8601 datetime (UTC unless a zone).")
@click.option(
    "--group",
    type=click.Choice(offset_reset.GROUPS),
    default="dispatch",
    show_default=True,
    help="Which consumer group: the dispatcher's or the router's.",
)
@click.option("--dry-run", is_flag=True, help="Show the new offsets; change nothing.")
@json_option
@click.pass_context
def replay(
    ctx: click.Context,
    reset_offsets: bool,
    to_datetime: str | None,
    group: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replay deliveries (subcommands), or reset a consumer group's offsets (stop workers first)."""
    if ctx.invoked_subcommand is not None:
        return
    if not reset_offsets:
        click.echo(ctx.get_help())
        return
    when = parse_time(to_datetime)
    if when is None:
        raise click.UsageError("--reset-offsets needs --to-datetime")
    moves = offset_reset.reset_offsets(settings(), group, when, dry_run=dry_run)
    if as_json:
        echo_json(moves)
        return
    for m in moves:
        click.echo(
            f"{m.topic}[{m.partition}]  {m.current if m.current is not None else '-'} -> {m.target}"
        )
    verb = "would move" if dry_run else "moved"
    click.echo(
        f"{verb} {len(moves)} partition(s) of {offset_reset.group_name(settings(), group)}"
        f" to {fmt_ms(when)}"
    )


@replay.command()
@click.argument("delivery_id")
@click.option("--confirm-duplicate", is_flag=True, help="Replay even if it already succeeded.")
@json_option
@worker_option
def delivery(
    delivery_id: str, confirm_duplicate: bool, worker_url: str | None, as_json: bool
) -> None:
    """Send one delivery again, with its webhook-id (409 if it already succeeded)."""
    path = f"/v1/deliveries/{quote(delivery_id, safe='')}/replay"
    body = {"confirm_duplicate": confirm_duplicate}
    done = worker_api.call(settings(), "POST", path, body=body, url=worker_url)
    if as_json:
        echo_json(done)
        return
    click.echo(
        f"replaying {done['delivery_id']} to {done['subscription_id']} (attempt {done['attempt']})"
    )


@replay.command(name="range")
@click.option("--subscription", "subscription_id", default=None, help="One subscription.")
@click.option("--tenant", "tenant_id", default=None, help="Every active subscription of it.")
@click.option("--since", required=True, help="ISO-8601 datetime, inclusive.")
@click.option("--until", required=True, help="ISO-8601 datetime, exclusive.")
@click.option("--dry-run", is_flag=True, help="Only count the events it would replay.")
@_RATE
@json_option
def range_(
    subscription_id: str | None,
    tenant_id: str | None,
    since: str,
    until: str,
    dry_run: bool,
    rate: float | None,
    as_json: bool,
) -> None:
    """Replay the archived events of a time range, paced on the backfill lane."""
    since_ms, until_ms = parse_time(since), parse_time(until)
    assert since_ms is not None and until_ms is not None
    done = service.replay_range(
        settings(),
        since_ms,
        until_ms,
        subscription_id=subscription_id,
        tenant_id=tenant_id,
        dry_run=dry_run,
        rate=rate,
    )
    if as_json:
        echo_json(done)
        return
    window = f"{fmt_ms(done['since'])} .. {fmt_ms(done['until'])}"
    if done["clipped"]:
        window += " (clipped to the retention window)"
    for sub in done["subscriptions"]:
        what = f"{sub['events']} events" if dry_run else f"job {sub['job_id']}"
        click.echo(f"{sub['id']}  {what}")
    for sub in done["refused"]:
        click.echo(f"{sub['id']}  refused: {sub['status']}")
    if dry_run:
        click.echo(f"would replay {done['events']} events, {window}")
    else:
        click.echo(f"replay started for {len(done['subscriptions'])} subscription(s), {window}")


@click.command(name="replay")
@click.option("--subscription", "subscription_id", required=True, help="Its dead letters.")
@click.option("--reason", default=None, help="Reason prefix, e.g. suspended or exhausted.")
@click.option("--since", default=None, help="Dead since (ISO-8601, inclusive).")
@click.option("--until", default=None, help="Dead before (ISO-8601, exclusive).")
@click.option("--dry-run", is_flag=True, help="Only count the dead letters it would replay.")
@_RATE
@json_option
@worker_option
def dlq_replay(
    subscription_id: str,
    reason: str | None,
    since: str | None,
    until: str | None,
    dry_run: bool,
    rate: float | None,
    worker_url: str | None,
    as_json: bool,
) -> None:
    """Send dead letters again (same webhook-ids), paced on the backfill lane."""
    body = {
        "subscription_id": subscription_id,
        "reason": reason,
        "since": parse_time(since),
        "until": parse_time(until),
        "dry_run": dry_run,
        "rate": rate,
    }
    body = {name: value for name, value in body.items() if value is not None}
    try:
        done = worker_api.call(settings(), "POST", "/v1/dlq/replay", body=body, url=worker_url)
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from exc
    if as_json:
        echo_json(done)
    elif dry_run:
        click.echo(f"would replay {done['dead_letters']} dead letters of {subscription_id}")
    else:
        click.echo(f"replay of {subscription_id}'s dead letters started: job {done['job_id']}")
