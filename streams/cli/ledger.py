"""`hookstream deliveries` and `hookstream dlq`: the attempt ledger and the dead letters."""

from __future__ import annotations

import click

from streams.cli.common import echo_json, fmt_ms, json_option, parse_time, settings
from streams.cli.replay import dlq_replay
from streams.services import ledger


@click.group()
def deliveries() -> None:
    """Look up deliveries and their attempts: state, status, error, retries."""


@deliveries.command()
@click.argument("delivery_id")
@json_option
def show(delivery_id: str, as_json: bool) -> None:
    """Show one delivery's state and every attempt."""
    history = ledger.delivery_history(settings(), delivery_id)
    if as_json:
        echo_json({"summary": ledger.summarise(history), "attempts": history})
        return
    summary = ledger.summarise(history)
    click.echo(
        f"{summary.delivery_id}  {summary.state.value}  attempts={summary.attempts}  "
        f"subscription={summary.subscription_id}"
    )
    for att in history:
        click.echo(
            f"  #{att.attempt} {fmt_ms(att.started_at)} {att.lane.value:<8} "
            f"{att.outcome.value:<9} {att.reason:<22} {att.duration_ms:7.1f} ms "
            f"next={fmt_ms(att.next_retry_at)}"
        )


@deliveries.command(name="list")
@click.option("--subscription", "subscription_id", default=None, help="Only this subscription.")
@click.option(
    "--state",
    type=click.Choice(["success", "error", "exhausted", "dead"]),
    default=None,
    help="Only deliveries in this state.",
)
@json_option
def list_(subscription_id: str | None, state: str | None, as_json: bool) -> None:
    """List deliveries by subscription and state."""
    found = ledger.list_deliveries(settings(), subscription_id, state)
    if as_json:
        echo_json(found)
        return
    for s in found:
        click.echo(
            f"{s.delivery_id}  {s.state.value:<9} attempts={s.attempts} "
            f"status={s.last_http_status} {s.event_type} last={fmt_ms(s.last_attempt_at)}"
        )
    click.echo(f"{len(found)} deliveries")


@click.group()
def dlq() -> None:
    """List and replay dead letters: deliveries that failed for good."""


@dlq.command(name="list")
@click.option("--subscription", "subscription_id", default=None, help="Only this subscription.")
@click.option("--reason", default=None, help="Reason prefix, e.g. http_404 or exhausted.")
@click.option("--since", default=None, help="ISO-8601 datetime, inclusive.")
@click.option("--until", default=None, help="ISO-8601 datetime, exclusive.")
@json_option
def dlq_list(
    subscription_id: str | None,
    reason: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """List dead letters."""
    found = ledger.list_dead_letters(
        settings(), subscription_id, reason, parse_time(since), parse_time(until)
    )
    if as_json:
        echo_json(found)
        return
    for d in found:
        event_id = d.delivery.event.id if d.delivery else "-"
        click.echo(
            f"{fmt_ms(d.dead_at)} {d.reason:<24} sub={d.subscription_id} event={event_id} "
            f"attempts={d.attempts} status={d.last_status}"
        )
    click.echo(f"{len(found)} dead letters")


dlq.add_command(dlq_replay)
