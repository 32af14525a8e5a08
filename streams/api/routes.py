"""The one route table of the admin API: it registers the views AND builds /openapi.json.

Because both come from `ROUTES`, the document cannot drift from what the worker serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from streams.api import recovery_views as rv
from streams.api import schemas as s
from streams.api import views as v
from streams.api.context import ApiContext, ApiRequest, Reply
from streams.services.ledger import LISTED_STATES

Handler = Callable[[ApiContext, ApiRequest], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Query:
    """A query parameter: its name, JSON Schema and description."""

    name: str
    schema: s.Schema
    description: str


@dataclass(frozen=True, slots=True)
class Route:
    method: str  # lower case: get, post, patch, delete
    path: str  # aiohttp/OpenAPI style: /v1/subscriptions/{id}
    handler: Handler
    summary: str
    response: s.Schema
    status: int = 200
    request: s.Schema | None = None
    request_required: bool = True
    query: tuple[Query, ...] = ()
    errors: tuple[int, ...] = ()
    auth: bool = True
    tag: str = "subscriptions"

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


_LIMIT = Query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "Page size.")
_CURSOR = Query("cursor", {"type": "string"}, "next_cursor of the previous page.")
_SUB = "/v1/subscriptions/{id}"
_WINDOW = Query(
    "window",
    {"type": "string", "enum": ["1h", "24h", "7d"]},
    "The hourly windows overlapping the last 1h, 24h (default) or 7d.",
)
_404 = (404,)

ROUTES: tuple[Route, ...] = (
    Route("get", "/v1/subscriptions", v.list_subscriptions, "List subscriptions.",
          s.SUBSCRIPTION_LIST, errors=(422,), query=(
              Query("tenant_id", {"type": "string"}, "Only this tenant (operator key)."),
              Query("status", {"type": "string", "enum": ["active", "suspended", "disabled"]},
                    "Only this status."),
              _LIMIT,
              Query("cursor", {"type": "string"}, "next_cursor of the previous page."))),
    Route("post", "/v1/subscriptions", v.create_subscription,
          "Create a subscription; the answer holds its signing secret, shown only this once.",
          s.SUBSCRIPTION, status=201, request=s.SUBSCRIPTION_CREATE, errors=(400, 422)),
    Route("get", _SUB, v.get_subscription, "Show a subscription.", s.SUBSCRIPTION, errors=_404),
    Route("patch", _SUB, v.update_subscription, "Change some fields of a subscription.",
          s.SUBSCRIPTION, request=s.SUBSCRIPTION_UPDATE, errors=(400, 404, 422)),
    Route("delete", _SUB, v.delete_subscription, "Delete a subscription for good.", s.DELETED,
          errors=_404),
    Route("post", f"{_SUB}/disable", v.disable_subscription,
          "Disable by hand (status disabled, reason manual).", s.SUBSCRIPTION,
          errors=(404, 409)),
    Route("post", f"{_SUB}/enable", v.enable_subscription, "Enable a disabled subscription.",
          s.SUBSCRIPTION, errors=(404, 409)),
    Route("post", f"{_SUB}/test", v.test_subscription,
          "Send a signed webhook.test event now and report the outcome.", s.TEST_RESULT,
          errors=_404),
    Route("post", f"{_SUB}/rotate-secret", v.rotate_secret,
          "New signing secret, shown once; the old one keeps signing for grace_s.",
          s.SUBSCRIPTION, request=s.ROTATE_REQUEST, request_required=False,
          errors=(400, 404, 422)),
    Route("get", f"{_SUB}/deliveries", v.subscription_deliveries,
          "The subscription's deliveries from the ledger, newest first (S6).", s.DELIVERY_LIST,
          errors=(404, 422), tag="deliveries", query=(
              Query("status", {"type": "string", "enum": list(LISTED_STATES)},
                    "Only deliveries in this state."), _LIMIT, _CURSOR)),
    Route("get", f"{_SUB}/health", v.subscription_health,
          "Health record (H1) and the fleet's shared breaker state for the endpoint (H7, H8).",
          s.HEALTH_RECORD, errors=(404,), tag="health"),
    Route("post", f"{_SUB}/reenable", rv.reenable_subscription,
          "Re-enable a suspended subscription behind one signed endpoint.probe; on success "
          "it is active and its backfill starts. A failed probe answers 409 (probe_failed) "
          "with the probe's status and error; the subscription stays suspended.",
          s.REENABLE_RESULT, request=s.REENABLE_REQUEST, request_required=False,
          errors=(400, 404, 409, 422)),
    Route("post", f"{_SUB}/replay", rv.replay_subscription,
          "Replay the archived events of a time range to this subscription, paced on the "
          "backfill lane, or count them with dry_run.", s.REPLAY_RESULT,
          request=s.REPLAY_RANGE_REQUEST, errors=(400, 404, 409, 422)),
    Route("get", f"{_SUB}/stats", v.subscription_stats,
          "Delivery analytics of a subscription over a window (O2).", s.SUBSCRIPTION_STATS,
          errors=(404, 422, 503), tag="analytics", query=(_WINDOW,)),
    Route("get", "/v1/tenants/{id}/stats", v.tenant_stats,
          "Delivery analytics of a tenant: its subscriptions merged, and one row each (O2).",
          s.TENANT_STATS, errors=(404, 422, 503), tag="analytics", query=(_WINDOW,)),
    Route("get", "/v1/deliveries/{id}", v.get_delivery, "A delivery and all its attempts.",
          s.DELIVERY, errors=_404, tag="deliveries"),
    Route("post", "/v1/deliveries/{id}/replay", rv.replay_delivery,
          "Send one delivery again with its webhook-id; 409 if it already succeeded, unless "
          "confirm_duplicate.", s.REPLAY_RESULT, request=s.REPLAY_DELIVERY_REQUEST,
          request_required=False, errors=(400, 404, 409, 422), tag="deliveries"),
    Route("post", "/v1/dlq/replay", rv.replay_dead_letters,
          "Send a subscription's dead letters again (by reason prefix and time), paced, "
          "or count them with dry_run.", s.REPLAY_RESULT,
          request=s.REPLAY_DLQ_REQUEST, errors=(400, 404, 409, 422), tag="deliveries"),
    Route("get", "/v1/dlq", v.list_dead_letters, "Dead letters, newest first (S6).",
          s.DEAD_LETTER_LIST, errors=(404, 422), tag="deliveries", query=(
              Query("subscription_id", {"type": "string"}, "Only this subscription."),
              Query("tenant_id", {"type": "string"}, "Only this tenant (operator key)."),
              Query("reason", {"type": "string"}, "Reason prefix, e.g. http_404."),
              Query("since", {"type": "integer", "minimum": 0}, "From (epoch ms, inclusive)."),
              Query("until", {"type": "integer", "minimum": 0}, "To (epoch ms, exclusive)."),
              _LIMIT, _CURSOR)),
    Route("get", "/v1/health", v.health_summary,
          "Counts of active, suspended, disabled and failing subscriptions, and each "
          "visible subscription's health (S4).", s.HEALTH_SUMMARY, tag="health"),
    Route("post", "/v1/events", v.ingest_events,
          "Publish one event, or a batch as {\"events\": [...]}, for the key's tenant: all or "
          "nothing. Over the producer's rate: 429 with Retry-After (F5); too large: 413 (F6).",
          s.INGEST_RESULT, status=202, request=s.INGEST_REQUEST, errors=(413, 422, 429),
          tag="events"),
    Route("get", "/openapi.json", v.openapi_document, "This OpenAPI document.",
          s.OPENAPI_DOCUMENT, auth=False, tag="meta"),
)  # fmt: skip
