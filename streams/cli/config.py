"""`hookstream config`: the settings in force, and (with endpoint health) the live policy."""

from __future__ import annotations

import click

from streams.cli.common import echo_json, json_option
from streams.settings import Settings, load_settings, settings_reference


@click.group()
def config() -> None:
    """Show settings and manage the runtime policy."""


@config.command(name="settings")
@click.option("--markdown", is_flag=True, help="Print the reference table (docs/configuration.md).")
@json_option
def show_settings(markdown: bool, as_json: bool) -> None:
    """Print every setting: its variable, value in force (secrets masked) and meaning."""
    if markdown:
        click.echo(settings_reference(), nl=False)
        return
    current: Settings = load_settings()
    values = {name: str(value) for name, value in current.model_dump().items()}
    if as_json:
        echo_json(values)
        return
    for name, value in values.items():
        click.echo(f"HOOKSTREAM_{name.upper():<36} {value}")
