"""`hookstream keys`: tenant API keys of the admin API (Q6)."""

from __future__ import annotations

import dataclasses

import click

from streams.cli.common import echo_json, fmt_ms, json_option, settings
from streams.services import keys as service


@click.group()
def keys() -> None:
    """Create, list and revoke tenant API keys."""


@keys.command()
@click.option("--tenant", "tenant_id", required=True, help="The tenant the key may see.")
@click.option("--name", default="", help="A name for humans.")
@json_option
def create(tenant_id: str, name: str, as_json: bool) -> None:
    """Create a key; prints it once (only its hash is stored)."""
    key, token = service.create_key(settings(), tenant_id, name)
    if as_json:
        echo_json({"key_id": key.key_id, "tenant_id": key.tenant_id, "key": token})
        return
    click.echo(f"created {key.key_id} for tenant {key.tenant_id}")
    click.echo(f"key  {token}  (shown once)")


@keys.command(name="list")
@click.option("--tenant", "tenant_id", default=None, help="Only this tenant.")
@json_option
def list_(tenant_id: str | None, as_json: bool) -> None:
    """List keys: ids, tenants and names (never the keys, nor their hashes)."""
    found = service.list_keys(settings(), tenant_id)
    if as_json:
        echo_json(
            [{k: v for k, v in dataclasses.asdict(key).items() if k != "key_hash"} for key in found]
        )
        return
    for key in found:
        click.echo(f"{key.key_id}  {key.tenant_id:<12} {fmt_ms(key.created_at)}  {key.name}")
    click.echo(f"{len(found)} key(s)")


@keys.command()
@click.argument("key_id")
def revoke(key_id: str) -> None:
    """Revoke a key; every worker refuses it within moments."""
    service.revoke_key(settings(), key_id)
    click.echo(f"revoked {key_id}")
