"""The `hookstream` command. One module per command group; each exposes a click command."""

from __future__ import annotations

import importlib
import sys

import click

from streams.errors import HookstreamError

# name -> "module:attribute" of the click command, imported on first use so that
# `hookstream --help` stays fast and one group's heavy imports never slow another.
COMMANDS: dict[str, str] = {
    "kafka": "streams.cli.kafka:kafka",
    "topics": "streams.cli.topics:topics",
    "worker": "streams.cli.worker:worker",
    "subs": "streams.cli.subs:subs",
    "publish": "streams.cli.publish:publish",
    "deliveries": "streams.cli.ledger:deliveries",
    "dlq": "streams.cli.ledger:dlq",
    "demo": "streams.cli.demo:demo",
    "config": "streams.cli.config:config",
    "lag": "streams.cli.lag:lag",
    "keys": "streams.cli.keys:keys",
    "bench": "streams.cli.bench:bench",
    "stats": "streams.cli.stats:stats",
    "replay": "streams.cli.replay:replay",
    "health": "streams.cli.health:health",
    "receiver": "streams.cli.receiver:receiver",
    "secrets": "streams.cli.secrets:secrets",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hookstream")
def cli() -> None:
    """hookstream: Kafka-native webhook delivery."""


def main() -> None:
    """Console entry point: a HookstreamError becomes one line on stderr and exit code 1."""
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except HookstreamError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)
