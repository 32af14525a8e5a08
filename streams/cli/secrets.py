"""`hookstream secrets`: the key that encrypts endpoint secrets at rest (S5)."""

from __future__ import annotations

import click

from streams.cli.common import echo_json, json_option, settings
from streams.services.secret_keys import rekey as rekey_service


@click.group()
def secrets() -> None:
    """Rotate the key that encrypts endpoint secrets in Kafka."""


@secrets.command()
@json_option
def rekey(as_json: bool) -> None:
    """Re-encrypt every subscription's secrets under HOOKSTREAM_SECRET_KEY.

    Run it with the new key as HOOKSTREAM_SECRET_KEY and the old one as
    HOOKSTREAM_SECRET_KEY_PREVIOUS, after every worker has both (docs/api.md).
    """
    report = rekey_service(settings())
    if as_json:
        echo_json(
            {
                "subscriptions": report.subscriptions,
                "rewritten": report.rewritten,
                "key_id": report.key_id,
            }
        )
        return
    click.echo(
        f"{report.rewritten} of {report.subscriptions} subscriptions re-encrypted under key "
        f"{report.key_id}"
    )
