"""`hookstream worker`: run a hookstream worker process in the foreground."""

from __future__ import annotations

import click

from streams.settings import Settings, load_settings


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
    require_topics(settings)
    run_worker(create_app(settings, DEFAULT_COMPONENTS), settings)


def require_topics(settings: Settings) -> None:
    """Refuse to start before every topic of topics.yaml exists (SPEC X1): a worker would
    otherwise run until a write to the missing topic timed out, minutes later."""
    from streams.adapters.kafka_admin import TopicAdmin, load_topology

    names = [spec.full_name for spec in load_topology(settings).topics]
    missing = TopicAdmin(settings).missing(names)
    if missing:
        raise click.ClickException(
            f"{len(missing)} topic(s) of {settings.topics_file} missing on "
            f"{settings.kafka_bootstrap}: {', '.join(missing)}. "
            "Create them with `hookstream topics apply`, then start the worker again."
        )
