"""`hookstream demo`: the whole pipeline on this machine, end to end."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from streams.cli.common import echo_json
from streams.demo.recovery import run_recovery
from streams.demo.run import Summary, run_demo

T = TypeVar("T")


@click.command()
@click.option(
    "--events",
    "per_type",
    default=100,
    show_default=True,
    help="Events per event type (three types are published).",
)
@click.option("--keep-kafka", is_flag=True, help="Leave the local Kafka running afterwards.")
@click.option(
    "--keep-worker",
    is_flag=True,
    help="After the summary, fix the gone endpoint and keep the worker and receivers up until "
    "Ctrl-C (Kafka keeps running), to re-enable it from the owner's portal at "
    "http://127.0.0.1:6067/portal.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--scenario",
    type=click.Choice(["deliveries", "recovery"]),
    default="deliveries",
    show_default=True,
    help="deliveries: retries, dead letters, a suspension and its notices; recovery: an "
    "endpoint suspended, fixed, re-enabled behind a probe and backfilled.",
)
def demo(per_type: int, keep_kafka: bool, keep_worker: bool, as_json: bool, scenario: str) -> None:
    """Start Kafka, topics, a worker and demo receivers; deliver real webhooks; summarise."""
    if scenario == "recovery":
        run_recovery(click.echo, run=_run)
        return
    show = echo_json if as_json else _print_summary
    summary = _run(run_demo(per_type, click.echo, keep_kafka, keep_worker=keep_worker, show=show))
    if keep_worker and not summary.shortfalls():
        return  # shown before the demo held its worker for the portal, until Ctrl-C
    show(summary)
    shortfalls = summary.shortfalls()
    if shortfalls:
        # a demo that did not do what it shows must not look like one that did
        for line in shortfalls:
            click.echo(f"demo incomplete: {line}", err=True)
        if summary.worker_notes:
            click.echo(f"the worker's warnings and errors ({summary.worker_log}):", err=True)
            for line in summary.worker_notes:
                click.echo(f"  {line}", err=True)
        raise SystemExit(1)


def _run(main: Coroutine[Any, Any, T]) -> T:
    """Run a demo coroutine; SIGTERM (``kill``, a service manager, a CI job's end) stops it as
    Ctrl-C does: its task is cancelled, so the worker and receivers it started are stopped on
    the way out. Killed outright, the demo left its worker running, holding port 6067."""

    async def until_sigterm() -> T:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await main

    try:
        return asyncio.run(until_sigterm())
    except asyncio.CancelledError:
        click.echo("demo stopped (SIGTERM)", err=True)
        raise SystemExit(128 + signal.SIGTERM) from None


def _print_summary(summary: Summary) -> None:
    click.echo("")
    click.echo("summary")
    click.echo(f"  events published            {summary.published}")
    click.echo(f"  deliveries delivered (2xx)  {summary.delivered}")
    click.echo(f"  HTTP attempts made          {summary.attempts}")
    click.echo(f"  delivered after retries     {summary.retried_then_delivered}")
    for reason, count in sorted(summary.dead_lettered.items()):
        click.echo(f"  {'dead-lettered, ' + reason:<28}{count}")
    click.echo(f"  signatures verified         {summary.verified}")
    click.echo(f"  bad signatures              {summary.bad_signatures}")
    for sub_id, reason in summary.suspended.items():
        click.echo(f"  suspended                   {sub_id} ({reason})")
    for line in summary.notices:
        click.echo(f"  owner notice (webhook)      {line}")
    if summary.portal_link:
        click.echo(f"  owner's portal (signed link) {summary.portal_link}")
    click.echo(f"  wall time                   {summary.seconds:.1f}s")
