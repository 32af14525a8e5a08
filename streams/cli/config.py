"""`hookstream config`: the settings in force, and (with endpoint health) the live policy."""

from __future__ import annotations

import click

from streams.cli.common import echo_json, json_option
from streams.cli.settings_doc import settings_reference, written
from streams.domain.policy import policy_to_dict
from streams.services import config as service
from streams.settings import Settings, load_settings


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
    values = {name: written(name, value) for name, value in current.model_dump().items()}
    if as_json:
        echo_json(values)
        return
    for name, value in values.items():
        click.echo(f"HOOKSTREAM_{name.upper():<36} {value}")


@config.command(name="get")
@json_option
def get_(as_json: bool) -> None:
    """Print the suspension policy: how many failures, over how long, suspend a subscription."""
    policy = policy_to_dict(service.get_policy(load_settings()))
    if as_json:
        echo_json(policy)
        return
    for key, value in policy.items():
        click.echo(f"{key:<18} {value}")


@config.command(name="set")
@click.argument("assignments", nargs=-1, required=True)
def set_(assignments: tuple[str, ...]) -> None:
    """Change the suspension policy at runtime: KEY=VALUE ...

    Keys: suspend.<class>=<count>,<min_age>, suspend.<class>.count=N,
    suspend.<class>.min_age=DURATION and early_warning_at=N, where <class> is retryable,
    permanent or fatal. Every worker applies the change within seconds, without a restart.
    """
    updates: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="ASSIGNMENTS")
        updates[key.strip()] = value.strip()
    policy = service.set_policy(load_settings(), updates)
    click.echo(
        "policy published: " + " ".join(f"{k}={v}" for k, v in policy_to_dict(policy).items())
    )
