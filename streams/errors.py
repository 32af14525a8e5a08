"""The one exception tree of hookstream.

Split by what the caller does next::

    HookstreamError
    ├── ConfigError            bad setting or config file: stop at startup, name the setting
    │   └── TopicsFileError    topics.yaml is invalid: names the topic and the field
    ├── DecodeError            a record cannot be decoded: dead-letter it with `reason`
    ├── ValidationError        bad user input (API/CLI): a 4xx naming each field
    ├── NotFoundError          an object does not exist (or is not visible to the caller)
    ├── ConflictError          the operation conflicts with the object's state (HTTP 409)
    ├── LocalKafkaError        the local development broker cannot be started or reached
    ├── TransportError         an HTTP delivery attempt failed below HTTP (see `FailureKind`)
    └── ApiError               an answer with its own HTTP status (the admin API renders it)
        ├── UnauthorizedError  no valid API key: 401 with a challenge
        └── UnavailableError   not here, not now (the owning worker moves or is away): 503,
                               Retry-After when known

The API-only errors (bad request, 413, 415, 429, ...) are in `streams.api.errors`; these two are
here because the workers' forwarding of reads (`streams.agents.owners`) raises them too.

Third-party exceptions are converted in one place per adapter, with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Mapping


class HookstreamError(Exception):
    """Root of every error hookstream raises on purpose."""


class ConfigError(HookstreamError):
    """A setting or configuration file is invalid. ``setting`` names it."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")


class TopicsFileError(ConfigError):
    """topics.yaml is invalid: names the topic and the field."""

    def __init__(self, topic: str, field: str, message: str) -> None:
        self.topic = topic
        self.field = field
        super().__init__(f"topics.yaml topic {topic!r} field {field!r}", message)


class DecodeError(HookstreamError):
    """A record cannot be decoded. ``reason`` is the DLQ reason code."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {message}")


class ValidationError(HookstreamError):
    """User input is invalid. ``fields`` maps each bad field to what is wrong with it."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        self.fields = dict(fields)
        detail = "; ".join(f"{name}: {msg}" for name, msg in self.fields.items())
        super().__init__(f"invalid input: {detail}")


class NotFoundError(HookstreamError):
    """The object does not exist, or the caller may not see it."""


class ConflictError(HookstreamError):
    """The operation conflicts with the object's current state."""


class LocalKafkaError(HookstreamError):
    """The local development broker cannot be prepared, started or reached."""


class TransportError(HookstreamError):
    """An HTTP attempt failed below the HTTP layer. ``kind`` is a `FailureKind` value."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


REALM = 'Bearer realm="hookstream"'


class ApiError(HookstreamError):
    """An error that exists only at the HTTP edge."""

    status = 500
    code = "error"

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        self.message = message
        self.headers = headers or {}
        super().__init__(message)


class UnauthorizedError(ApiError):
    status = 401
    code = "unauthorized"

    def __init__(self, message: str, *, invalid: bool) -> None:
        challenge = f'{REALM}, error="invalid_token"' if invalid else REALM
        super().__init__(message, {"WWW-Authenticate": challenge})


class UnavailableError(ApiError):
    status = 503
    code = "unavailable"
