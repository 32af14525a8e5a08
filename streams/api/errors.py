"""HTTP errors of the admin API, and the one place where exceptions become responses.

Views raise hookstream's typed errors (``streams.errors``) or the HTTP-only ones below; `render`
turns any of them into a status, a JSON body and headers:

=========================  ======  =======================================================
exception                  status  body
=========================  ======  =======================================================
UnauthorizedError          401     {"error": "unauthorized", "message"} + WWW-Authenticate
BadRequestError            400     {"error": "bad_request", "message"} (e.g. bad JSON)
ValidationError            422     {"error": "validation", "fields": {name: message}}
NotFoundError              404     {"error": "not_found", "message"}
ConflictError              409     {"error": "conflict", "message"}
PayloadTooLargeApiError    413     {"error": "payload_too_large", "message"}
UnsupportedMediaTypeError  415     {"error": "unsupported_media_type", "message"}
TooManyRequestsError       429     {"error": "rate_limited", "message"} + Retry-After
NotImplementedYetError     501     {"error": "not_implemented", "message"}
ConfigError                503     {"error": "unavailable", "message"}
other HookstreamError      503     {"error": "unavailable", "message"} (Kafka unreachable...)
=========================  ======  =======================================================

Errors the web server raises before any view runs (an unknown route, a method the path does not
serve, a body over the server's size limit) get the same ``{"error", "message"}`` shape through
`http_error_body`, with the codes in `HTTP_ERROR_CODES`.
"""

from __future__ import annotations

from typing import Any

from streams.errors import (
    ApiError,
    ConfigError,
    ConflictError,
    HookstreamError,
    NotFoundError,
    ValidationError,
)


class BadRequestError(ApiError):
    status = 400
    code = "bad_request"


class NotImplementedYetError(ApiError):
    status = 501
    code = "not_implemented"


class TooManyRequestsError(ApiError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after_s)})


class PayloadTooLargeApiError(ApiError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaTypeError(ApiError):
    status = 415
    code = "unsupported_media_type"


Rendered = tuple[int, dict[str, Any], dict[str, str]]


def render(exc: HookstreamError) -> Rendered:
    """The response for a typed error: (status, JSON body, headers)."""
    if isinstance(exc, ApiError):
        return exc.status, {"error": exc.code, "message": exc.message}, exc.headers
    if isinstance(exc, ValidationError):
        return 422, {"error": "validation", "fields": exc.fields}, {}
    if isinstance(exc, NotFoundError):
        return 404, {"error": "not_found", "message": str(exc)}, {}
    if isinstance(exc, ConflictError):
        return 409, {"error": "conflict", "message": str(exc)}, {}
    if isinstance(exc, ConfigError):
        return 503, {"error": "unavailable", "message": str(exc)}, {}
    return 503, {"error": "unavailable", "message": str(exc)}, {}


#: The error code of each status the web server itself answers with (not a view).
HTTP_ERROR_CODES: dict[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: PayloadTooLargeApiError.code,
    415: UnsupportedMediaTypeError.code,
}


def http_error_body(status: int, message: str) -> dict[str, Any]:
    """The documented JSON body for an error the web server raised with ``status``."""
    return {"error": HTTP_ERROR_CODES.get(status, f"http_{status}"), "message": message}
