"""The CLI's way to the workers' state (S6): a call to one worker's admin API.

The ledger, the dead letters and the health records live in the workers (S6), so the CLI's
`deliveries`, `dlq`, `health` and `replay` commands ask a worker with the operator key, the one
code path the API itself serves; any worker answers, forwarding to the one that holds the data.
"""

from __future__ import annotations

import time
from typing import Any, Final

import httpx

from streams.errors import (
    ConfigError,
    ConflictError,
    HookstreamError,
    NotFoundError,
    ValidationError,
)
from streams.settings import Settings

TRIES: Final = 10
TIMEOUT_S: Final = 30.0
#: Bind addresses that mean "every interface": ask the worker on loopback instead.
_ANY_HOST: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104  # compared with, never bound


def worker_url(settings: Settings, given: str | None = None) -> str:
    """``given``, or this machine's worker at ``HOOKSTREAM_WEB_HOST``:``HOOKSTREAM_WEB_PORT``."""
    if given:
        return given.rstrip("/")
    host = "127.0.0.1" if settings.web_host in _ANY_HOST else settings.web_host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.web_port}"


def call(
    settings: Settings,
    method: str,
    path: str,
    *,
    params: dict[str, str | None] | None = None,
    body: dict[str, Any] | None = None,
    url: str | None = None,
    pause_s: float = 1.0,
) -> dict[str, Any]:
    """The worker's JSON answer; its 404, 409 and 422 raised typed, and 503 (partitions moving)
    asked again a few times."""
    token = settings.admin_token
    if token is None:
        raise ConfigError("HOOKSTREAM_ADMIN_TOKEN", "the operator key is needed to ask a worker")
    base = worker_url(settings, url)
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
    for _ in range(TRIES):
        try:
            response = httpx.request(
                method,
                f"{base}{path}",
                params={k: v for k, v in (params or {}).items() if v is not None},
                json=body,
                headers=headers,
                timeout=TIMEOUT_S,
            )
        except httpx.TransportError as exc:
            raise HookstreamError(
                f"no worker answered at {base} ({exc}); start one with `hookstream worker` "
                "or name one with --worker"
            ) from exc
        if response.status_code != 503:
            break
        time.sleep(pause_s)
    answer = _json(response)
    if response.status_code in (200, 201, 202):
        return answer
    message = str(answer.get("message", response.text[:200]))
    if response.status_code == 404:
        raise NotFoundError(message)
    if response.status_code == 409:
        raise ConflictError(message)
    if response.status_code == 422:
        raise ValidationError(dict(answer.get("fields", {})))
    raise HookstreamError(f"the worker at {base} answered {response.status_code}: {message}")


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}
