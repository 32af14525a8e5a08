"""What hookstream tells an endpoint's owner (SPEC H5, H6, R1).

A notice is a plain frozen record of facts: `SuspensionNotice` when a subscription is suspended
(H5), `EarlyWarningNotice` at N consecutive failures while it is still active (H6),
`ProbeFailedNotice` when a re-enable probe fails (R1) and `ReenabledNotice` when it comes back.
None of them has a field that could hold a signing secret, so no rendering can leak one (S5).

Each notice belongs to one episode: the failure episode (its first failure time) for
suspensions and warnings, the probe time for a failed probe, the re-enable time for a
re-enable. `notification_id` is a pure function of (kind, subscription, episode), so however
many workers see the same transition, or however often a message is redelivered, the outbox
holds one key and the owner gets one message. The email's Message-ID and the notification
webhook's ``webhook-id`` both derive from it, so even a resend after a crash can be
recognised as the same message by mail systems and receivers.

Notices travel on the ``notifications`` topic as JSON inside `Notification.payload_json`
(`to_notification`, `notice_from_notification`). Rendering (`render_webhook` here, the email in
`streams.domain.notice_email`) is pure: building an `EmailMessage` does no I/O, and every time
shown comes from the notice.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar, get_args, get_type_hints
from urllib.parse import quote

import orjson

from streams.domain.envelope import iso_timestamp
from streams.domain.models import Notification, OutcomeClass
from streams.errors import DecodeError

__all__ = [
    "ERROR_EXCERPT_CHARS",
    "EarlyWarningNotice",
    "Notice",
    "NoticeKind",
    "ProbeFailedNotice",
    "ReenabledNotice",
    "SuspensionNotice",
    "error_excerpt",
    "message_id",
    "notice_from_notification",
    "notice_from_payload",
    "notice_id",
    "notification_id",
    "render_webhook",
    "to_notification",
    "to_payload",
]

#: The longest error excerpt a notice carries (H1, H5).
ERROR_EXCERPT_CHARS = 500
# Versioned, so a future change of scheme can never collide with ids already sent.
_ID_DOMAIN = b"hookstream.notification-id.v1\x00"
_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_WIDTH = 72  # prose is wrapped to this many characters


class NoticeKind(StrEnum):
    """The kind of a notice: `Notification.kind` and the notification webhook's event type."""

    SUSPENDED = "endpoint.suspended"
    WARNING = "endpoint.warning"
    PROBE_FAILED = "endpoint.probe_failed"
    REENABLED = "endpoint.reenabled"


def error_excerpt(text: str | None) -> str | None:
    """``text`` cut to at most `ERROR_EXCERPT_CHARS` characters, an ellipsis marking the cut."""
    if text is None or len(text) <= ERROR_EXCERPT_CHARS:
        return text
    return text[: ERROR_EXCERPT_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True, kw_only=True)
class _EndpointNotice:
    """The endpoint a notice is about, and how its owner brings it back."""

    subscription_id: str
    subscription_name: str
    tenant_id: str
    url: str
    #: The signed, expiring portal link to the subscription (U1), when the portal has a URL.
    portal_link: str | None = None
    # The names of the fields that hold the notice's episode and its own time.
    _EPISODE: ClassVar[str]
    _AT: ClassVar[str]

    @property
    def episode(self) -> int:
        """What makes this notice one of a kind for its subscription (see `notice_id`)."""
        value: int = getattr(self, self._EPISODE)
        return value

    @property
    def at(self) -> int:
        """When the notice's event happened, ms: its email Date and webhook timestamp."""
        value: int = getattr(self, self._AT)
        return value

    @property
    def reenable_command(self) -> str:
        """The CLI command that re-enables the subscription."""
        return f"hookstream subs reenable {shlex.quote(self.subscription_id)}"

    @property
    def reenable_route(self) -> str:
        """The admin API call that re-enables the subscription."""
        return f"POST /v1/subscriptions/{quote(self.subscription_id, safe='')}/reenable"


@dataclass(frozen=True, slots=True, kw_only=True)
class SuspensionNotice(_EndpointNotice):
    """H5: the subscription was suspended. ``events_waiting`` will be backfilled on re-enable."""

    KIND: ClassVar[NoticeKind] = NoticeKind.SUSPENDED
    _EPISODE: ClassVar[str] = "first_failure_at"
    _AT: ClassVar[str] = "suspended_at"
    outcome_class: OutcomeClass
    failure_count: int
    first_failure_at: int
    suspended_at: int
    events_waiting: int
    retention_s: float
    last_status: int | None = None
    last_error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "last_error", error_excerpt(self.last_error))


@dataclass(frozen=True, slots=True, kw_only=True)
class EarlyWarningNotice(_EndpointNotice):
    """H6: N consecutive failures; still active. The suspension threshold, when known."""

    KIND: ClassVar[NoticeKind] = NoticeKind.WARNING
    _EPISODE: ClassVar[str] = "first_failure_at"
    _AT: ClassVar[str] = "warned_at"
    outcome_class: OutcomeClass
    failure_count: int
    first_failure_at: int
    warned_at: int
    last_status: int | None = None
    last_error: str | None = None
    suspend_count: int | None = None
    suspend_after_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "last_error", error_excerpt(self.last_error))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeFailedNotice(_EndpointNotice):
    """R1: the re-enable probe failed, so the subscription stays suspended."""

    KIND: ClassVar[NoticeKind] = NoticeKind.PROBE_FAILED
    _EPISODE: ClassVar[str] = "probed_at"
    _AT: ClassVar[str] = "probed_at"
    probed_at: int
    outcome_class: OutcomeClass
    retention_s: float
    probe_status: int | None = None
    probe_error: str | None = None
    suspended_at: int | None = None
    events_waiting: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "probe_error", error_excerpt(self.probe_error))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReenabledNotice(_EndpointNotice):
    """R1, R2: the probe succeeded; the subscription is active and the backfill has started."""

    KIND: ClassVar[NoticeKind] = NoticeKind.REENABLED
    _EPISODE: ClassVar[str] = "reenabled_at"
    _AT: ClassVar[str] = "reenabled_at"
    reenabled_at: int
    suspended_at: int | None = None
    backfill_total: int = 0


Notice = SuspensionNotice | EarlyWarningNotice | ProbeFailedNotice | ReenabledNotice
_BY_KIND: dict[str, type[Notice]] = {
    cls.KIND.value: cls
    for cls in (SuspensionNotice, EarlyWarningNotice, ProbeFailedNotice, ReenabledNotice)
}


# --- identity ----------------------------------------------------------------------------------


def _field(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(8, "big") + raw


def notification_id(kind: str, subscription_id: str, episode: int | str) -> str:
    """The de-duplication key of one notice: ``ntf_`` and 40 hex digits.

    One per (kind, subscription, episode); ``episode`` 5 and ``"5"`` are the same episode.
    """
    digest = hashlib.sha256(
        _ID_DOMAIN + _field(kind) + _field(subscription_id) + _field(str(episode))
    ).digest()
    return "ntf_" + digest[:20].hex()


def message_id(notification_id: str, domain: str = "hookstream.local") -> str:
    """The email Message-ID of a notification, the same every time it is (re)sent."""
    if not _ATOM.fullmatch(notification_id) or not _ATOM.fullmatch(domain):
        raise ValueError("a Message-ID needs a plain notification id and domain")
    return f"<{notification_id}@{domain}>"


def notice_id(notice: Notice) -> str:
    """The notification id of ``notice``."""
    return notification_id(notice.KIND, notice.subscription_id, notice.episode)


# --- the outbox payload ------------------------------------------------------------------------


def to_payload(notice: Notice) -> str:
    """``notice`` as the JSON text kept in `Notification.payload_json`."""
    values = {f.name: getattr(notice, f.name) for f in fields(notice)}
    return orjson.dumps(values).decode("utf-8")


def _accepts(hint: Any, value: object) -> bool:
    for option in get_args(hint) or (hint,):
        if option is type(None) and value is None:
            return True
        if isinstance(value, bool):
            continue  # JSON true/false is never a count, a time or a name
        if option is OutcomeClass and value in OutcomeClass.__members__.values():
            return True
        if option is float and isinstance(value, int | float):
            return True
        if option in (int, str) and isinstance(value, option):
            return True
    return False


def notice_from_payload(kind: str, payload_json: str) -> Notice:
    """The notice of ``kind`` kept in ``payload_json``. Raises DecodeError when it is not one."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise DecodeError("bad_notification", f"unknown notification kind {kind!r}")
    try:
        data = orjson.loads(payload_json)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("bad_notification", "the payload is not JSON") from exc
    if not isinstance(data, dict):
        raise DecodeError("bad_notification", "the payload is not a JSON object")
    values: dict[str, Any] = {}
    hints = get_type_hints(cls)
    for f in fields(cls):
        if f.name not in data:
            if f.default is MISSING:
                raise DecodeError("bad_notification", f"{kind} payload lacks {f.name!r}")
            continue
        if not _accepts(hints[f.name], data[f.name]):
            raise DecodeError("bad_notification", f"{kind} payload has a bad {f.name!r}")
        values[f.name] = data[f.name]
    if "outcome_class" in values:
        values["outcome_class"] = OutcomeClass(values["outcome_class"])
    return cls(**values)


def to_notification(notice: Notice, recipients: Sequence[str]) -> Notification:
    """The outbox record for ``notice``, keyed by its notification id."""
    return Notification(
        notification_id=notice_id(notice),
        subscription_id=notice.subscription_id,
        kind=notice.KIND.value,
        at=notice.at,
        payload_json=to_payload(notice),
        recipients=tuple(recipients),
    )


def notice_from_notification(notification: Notification) -> Notice:
    """The notice inside an outbox record. Raises DecodeError when it holds none."""
    return notice_from_payload(notification.kind, notification.payload_json)


# --- the notification webhook -------------------------------------------------------------------


def render_webhook(notice: Notice) -> bytes:
    """The notification webhook body: ``{"id", "type", "timestamp", "data"}`` as compact JSON.

    ``id`` is the notification id, ``type`` the notice kind; times in ``data`` are ISO-8601 UTC.
    """
    data: dict[str, Any] = {}
    for f in fields(notice):
        value = getattr(notice, f.name)
        is_time = f.name.endswith("_at") and isinstance(value, int)
        data[f.name] = iso_timestamp(value) if is_time else value
    data["reenable"] = {"command": notice.reenable_command, "api": notice.reenable_route}
    envelope = {
        "id": notice_id(notice),
        "type": notice.KIND.value,
        "timestamp": iso_timestamp(notice.at),
        "data": data,
    }
    return orjson.dumps(envelope)
