"""`hookstream publish`: publish events to the ingest topic."""

from __future__ import annotations

import time
import uuid

import click
import orjson

from streams.cli.common import settings
from streams.domain.models import Event
from streams.services.events import publish_events


@click.command()
@click.option("--tenant", "tenant_id", required=True, help="Tenant id (the record key).")
@click.option("--type", "event_type", required=True, help="Event type, e.g. invoice.paid.")
@click.option("--data", default="{}", help="The event's data as a JSON object.")
@click.option("--id", "event_id", default=None, help="Event id (default: generated).")
@click.option("--count", default=1, show_default=True, help="Publish this many (ids suffixed).")
@click.option("--avro", is_flag=True, help="Send Avro single-object encoding instead of JSON.")
def publish(
    tenant_id: str, event_type: str, data: str, event_id: str | None, count: int, avro: bool
) -> None:
    """Publish events to the ingest topic."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--data") from exc
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--data")
    if count < 1:
        raise click.BadParameter("must be at least 1", param_hint="--count")
    data_json = orjson.dumps(parsed).decode()
    base = event_id or f"evt_{uuid.uuid4().hex[:16]}"
    now_ms = int(time.time() * 1000)
    events = [
        Event(
            id=base if count == 1 else f"{base}-{i}",
            tenant_id=tenant_id,
            type=event_type,
            timestamp=now_ms,
            data_json=data_json,
            published_at=now_ms,
        )
        for i in range(count)
    ]
    sent = publish_events(settings(), events, avro=avro)
    click.echo(f"published {sent} event(s)" + (f" id {base}" if count == 1 else ""))
