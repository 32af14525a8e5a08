"""Structured JSON logs for hookstream workers (SPEC O4).

Every record becomes one JSON object on one line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
``msg``, and every ``extra`` field the caller attached, such as ``delivery_id`` and
``subscription_id``::

    log.info("delivered", extra={"delivery_id": did, "subscription_id": sid})

Secrets never reach the output: an extra field whose name looks like a credential (``secret``,
``token``, ``password``, ``authorization``, ``api_key``, ...) is replaced by ``"[redacted]"``, and
pydantic ``SecretStr`` values print masked. Callers must still never put a secret into the message
text itself.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Final

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
_SECRET_MARKERS: Final = (
    "secret",
    "token",
    "password",
    "passwd",
    "authorization",
    "api_key",
    "apikey",
    "credential",
    "private_key",
)
REDACTED: Final = "[redacted]"


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def _jsonable(value: Any) -> Any:
    """Values json can write as they are; anything else as its str() (SecretStr prints masked)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {
            str(key): REDACTED if _is_secret_name(str(key)) else _jsonable(item)
            for key, item in value.items()
        }
    return str(value)


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON with its `extra` fields, secrets redacted."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name in _RECORD_ATTRIBUTES or name in payload or name.startswith("_"):
                continue
            payload[name] = REDACTED if _is_secret_name(name) else _jsonable(value)
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log record of the process, hookstream's and its libraries', as JSON lines.

    Replaces the root logger's handlers, so call it once, at an entry point. Python warnings are
    routed through logging too, so they come out as JSON instead of raw stderr text.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
