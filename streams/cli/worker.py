"""`hookstream worker`: run a hookstream worker process in the foreground."""

from __future__ import annotations

import click

from streams.settings import load_settings


@click.command()
@click.option(
    "--web-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port of the worker's web server (admin API, /metrics, probes); "
    "overrides HOOKSTREAM_WEB_PORT.",
)
def worker(web_port: int | None) -> None:
    """Run a worker: consume, deliver and serve the admin API until SIGTERM or Ctrl-C.

    Configured through HOOKSTREAM_* environment variables. Start more workers with the same
    HOOKSTREAM_GROUP_ID to share the partitions; their tables recover from Kafka changelogs.
    """
    from streams.app import DEFAULT_COMPONENTS, create_app, run_worker

    overrides = {} if web_port is None else {"web_port": web_port}
    settings = load_settings(**overrides)
    run_worker(create_app(settings, DEFAULT_COMPONENTS), settings)
