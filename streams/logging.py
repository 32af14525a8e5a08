"""Structured JSON logs for hookstream workers (SPEC O4).

Every record becomes one JSON object on one line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
``msg``, and every ``extra`` field the caller attached, such as ``delivery_id`` and
``subscription_id``::

    log.info("delivered", extra={"delivery_id": did, "subscription_id": sid})

`RepeatedWarning` keeps one kind of warning that can repeat thousands of times a second (an
invalid event dead-lettered, a consumer error while the broker is away) to one line per
interval: the first occurrence is logged with its details, the rest are counted and summed up
in the next line (``repeated``, and the count per ``count_by`` value). `LibraryThrottle` does
the same for the Kafka libraries' own warnings, one line per library and interval.

Secrets never reach the output: an extra field whose name looks like a credential (``secret``,
``token``, ``password``, ``authorization``, ``api_key``, ...) is replaced by ``"[redacted]"``, and
pydantic ``SecretStr`` values print masked. Callers must still never put a secret into the message
text itself.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
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


#: Libraries whose reconnect loops log a line per attempt while the broker is away (aiokafka's
#: "Unable connect to node", librdkafka's "Connect to ... failed", routed to "librdkafka").
NOISY_LIBRARIES: Final = ("aiokafka", "librdkafka", "kafka", "faust.transport")


class LibraryThrottle(logging.Filter):
    """Lets through one warning (or worse) per ``every_s`` from each of the `NOISY_LIBRARIES`.

    While the broker is away every client of every library reports each failed reconnect, in
    several wordings; they all say the same thing, so one line per library and interval is
    kept, and it carries ``suppressed``: how many of that library's warnings were dropped since
    the line before. Their INFO lines (group joins, assignments) and hookstream's own records
    pass untouched.
    """

    def __init__(
        self,
        every_s: float = 10.0,
        prefixes: tuple[str, ...] = NOISY_LIBRARIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._every_s = every_s
        self._prefixes = prefixes
        self._clock = clock
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}
        self._dropped: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        name = record.name
        library = next((p for p in self._prefixes if name == p or name.startswith(p + ".")), None)
        if library is None:
            return True
        now = self._clock()
        with self._lock:
            if now < self._next.get(library, float("-inf")):
                self._dropped[library] += 1
                return False
            self._next[library] = now + self._every_s
            dropped = self._dropped.pop(library, 0)
        if dropped:
            record.suppressed = dropped
        return True


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log record of the process, hookstream's and its libraries', as JSON lines.

    Replaces the root logger's handlers, so call it once, at an entry point. Python warnings are
    routed through logging too, so they come out as JSON instead of raw stderr text. The
    libraries' repeated lines are throttled (`LibraryThrottle`).
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LibraryThrottle())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


class RepeatedWarning:
    """One kind of log line, at most one per ``every_s`` seconds, with a count of the rest.

    Call it once per occurrence with the occurrence's ``extra`` fields. The first occurrence
    (and the first after a quiet interval) is logged at once. Those that follow within
    ``every_s`` are counted; `flush` (call it from a loop, it is cheap) writes one summary line
    once the interval has passed: ``"<message> (N times in the last 10s)"`` with ``repeated=N``,
    the last occurrence's fields, and, with ``count_by``, how many had each value of that field.
    Thread-safe: lanes call it from their reading threads.
    """

    def __init__(
        self,
        logger: logging.Logger,
        message: str,
        *,
        every_s: float = 10.0,
        level: int = logging.WARNING,
        count_by: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_s <= 0:
            raise ValueError("every_s must be positive")
        self._logger = logger
        self._message = message
        self._every_s = every_s
        self._level = level
        self._count_by = count_by
        self._clock = clock
        self._lock = threading.Lock()
        self._quiet_until = float("-inf")
        self._pending = 0
        self._by_value: Counter[str] = Counter()
        self._last: dict[str, Any] = {}
        self.total = 0

    def __call__(self, **extra: Any) -> None:
        with self._lock:
            self.total += 1
            now = self._clock()
            if now >= self._quiet_until and self._pending == 0:
                self._quiet_until = now + self._every_s
                line: tuple[str, dict[str, Any]] | None = (self._message, extra)
            else:
                self._pending += 1
                if self._count_by is not None:
                    self._by_value[str(extra.get(self._count_by))] += 1
                self._last = extra
                line = self._summary(now)
        if line is not None:
            self._logger.log(self._level, line[0], extra=line[1])

    def flush(self, *, force: bool = False) -> None:
        """Write the summary of what was counted, once the interval has passed (or now)."""
        with self._lock:
            line = self._summary(self._clock(), force=force)
        if line is not None:
            self._logger.log(self._level, line[0], extra=line[1])

    def _summary(self, now: float, *, force: bool = False) -> tuple[str, dict[str, Any]] | None:
        if self._pending == 0 or (now < self._quiet_until and not force):
            return None
        extra = {**self._last, "repeated": self._pending}
        if self._count_by is not None:
            extra[f"{self._count_by}_counts"] = dict(self._by_value)
        message = f"{self._message} ({self._pending} times in the last {self._every_s:g}s)"
        self._pending = 0
        self._by_value.clear()
        self._quiet_until = now + self._every_s
        return message, extra
