"""Helpers shared by the command groups: settings, JSON output, time parsing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from streams.plain import plain
from streams.settings import Settings, load_settings


def settings() -> Settings:
    return load_settings()


def echo_json(value: Any) -> None:
    click.echo(json.dumps(plain(value), indent=2, sort_keys=True))


def shown(value: object) -> str:
    """A value as the CLI prints it: ``-`` for a missing one, never Python's ``None``."""
    return "-" if value is None else str(value)


def fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def parse_time(text: str | None) -> int | None:
    """An ISO-8601 datetime (UTC if no zone) to epoch ms."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not an ISO-8601 datetime") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


#: The worker a command asks (S6: the ledger, dead letters and health live in the workers).
worker_option = click.option(
    "--worker",
    "worker_url",
    default=None,
    help="Base URL of the worker to ask [default: http://<HOOKSTREAM_WEB_HOST>:<HOOKSTREAM_WEB_PORT>].",
)
