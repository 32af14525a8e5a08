"""`hookstream receiver`: a local endpoint that prints each webhook it receives."""

from __future__ import annotations

import asyncio
import contextlib

import click

from streams.demo.listen import serve


@click.command()
@click.option("--port", default=9000, show_default=True, help="Port to listen on (127.0.0.1).")
@click.option(
    "--status",
    default=200,
    show_default=True,
    type=click.IntRange(100, 599),
    help="HTTP status to answer with (try 500 to see retries, 404 for dead letters).",
)
@click.option(
    "--secret",
    default=None,
    help="The subscription's whsec_ secret: each request's signature is then verified.",
)
def receiver(port: int, status: int, secret: str | None) -> None:
    """Run a local webhook endpoint that prints every delivery it receives."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve("127.0.0.1", port, status, secret, lambda line: click.echo(line)))
