"""The audit of the recovery scenario of a cluster chaos run (SPEC H3, H5, R2).

`chaos.recovery_scenario` lets one subscription (``/down``) be suspended under the faults and
re-enables it, which starts a backfill. Once the run has drained, `audit_recovery` joins what
Kafka and the receivers hold:

- ``control``: the ``suspended`` transitions (H3: exactly one for the episode, and none for
  any other subscription), the ``reenabled`` event with its backfill job id, and the job's
  ``replay_finished`` event (R2: state ``finished``, done = total);
- ``notifications``: the suspension notices of the subscription (H5: one notification id), and
  what the notification webhook received (H5: one POST of ``endpoint.suspended``);
- the archive time of each of its events and its parked dead letters: every pair archived from
  the suspension to the re-enable, and every pair parked while it was suspended, must have been
  delivered (a 2xx at ``/down``) by the end.

`read_recovery_records` reads those topics; `audit_recovery` is pure, so the counting and the
verdict are unit-tested from made-up records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.models import ControlEvent, DeadLetter, Event, Notification
from streams.domain.notices import NoticeKind
from streams.domain.recovery import ControlKind, JobState
from streams.errors import DecodeError
from streams.settings import Settings

SUSPENDED = "suspended"  # the control agent's transition record (`streams.agents.health`)
PARKED = "suspended"  # the dead-letter reason of a delivery parked while suspended (H4)
SAMPLE = 20


@dataclass(frozen=True)
class RecoveryRecords:
    """What Kafka holds after the run, reduced to what the recovery audit joins on."""

    control: list[ControlEvent]
    notifications: list[Notification]
    archived_at: dict[str, int]  # event id of the scenario's tenant -> first archive time, ms
    parked: frozenset[str]  # delivery ids of the subscription parked with reason ``suspended``


@dataclass
class RecoveryReport:
    subscription_id: str
    suspensions: int
    suspend_requests: int
    other_suspensions: dict[str, int]
    notice_records: int
    notice_ids: int
    notices_posted: int
    notices_posted_by_type: dict[str, int]
    suspended_at: int | None
    reenabled_at: int | None
    job_id: str | None
    backfill_state: str | None
    backfill_done: int | None
    backfill_total: int | None
    backfill_finished_at: int | None
    reenable_to_finished_s: float | None
    backfill_expected: int
    backfill_delivered: int
    backfill_missing_sample: list[str] = field(default_factory=list)
    # pairs archived at or after the re-enable never answered 2xx: ms after the re-enable
    undelivered_after_reenable_ms: list[int] = field(default_factory=list)
    error: str | None = None

    def checks(self) -> dict[str, bool]:
        """H3, H5 and R2 as the run's verdict counts them."""
        return {
            "recovery_one_suspension": self.suspensions == 1,
            "recovery_no_other_suspension": not self.other_suspensions,
            "recovery_one_notice": self.notice_ids == 1 and self.notices_posted == 1,
            "recovery_backfill_finished": self.backfill_state == JobState.FINISHED.value
            and self.backfill_done == self.backfill_total,
            "recovery_backfill_delivered": self.backfill_expected > 0
            and self.backfill_delivered == self.backfill_expected,
            "recovery_scenario_ran": self.error is None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "checks": self.checks()}


def _payload(event: ControlEvent) -> dict[str, Any]:
    try:
        data = orjson.loads(event.payload_json)
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _finished(control: Iterable[ControlEvent], sub_id: str, job_id: str | None) -> ControlEvent:
    """The first end of ``job_id`` (a crash may repeat it), or a placeholder with no end."""
    for event in control:
        ours = event.kind == ControlKind.JOB_FINISHED.value and event.subscription_id == sub_id
        if ours and job_id is not None and _payload(event).get("job_id") == job_id:
            return event
    return ControlEvent(subscription_id=sub_id, kind="", at=0)


def audit_recovery(
    sub_id: str,
    pairs: Mapping[str, str],
    records: RecoveryRecords,
    ok: Mapping[str, int],
    posted: Mapping[tuple[str, str], int],
    error: str | None = None,
) -> RecoveryReport:
    """``pairs``: delivery id -> event id of the subscription's expected pairs; ``ok``: 2xx
    answers per delivery id; ``posted``: notification webhook POSTs per (type, id)."""
    control = records.control
    transitions = Counter(e.subscription_id for e in control if e.kind == SUSPENDED)
    mine = [e for e in control if e.kind == SUSPENDED and e.subscription_id == sub_id]
    reenabled = [
        e for e in control if e.kind == ControlKind.REENABLED.value and e.subscription_id == sub_id
    ]
    suspended_at = mine[0].at if mine else None
    reenabled_at = reenabled[0].at if reenabled else None
    job_id = _payload(reenabled[0]).get("job_id") if reenabled else None
    end = _finished(control, sub_id, None if job_id is None else str(job_id))
    progress = _payload(end) if end.kind else {}
    notes = [
        n
        for n in records.notifications
        if n.subscription_id == sub_id and n.kind == NoticeKind.SUSPENDED.value
    ]
    expected = set(records.parked & pairs.keys())
    if suspended_at is not None and reenabled_at is not None:
        for did, event_id in pairs.items():
            at = records.archived_at.get(event_id)
            if at is not None and suspended_at <= at < reenabled_at:
                expected.add(did)
    missing = sorted(did for did in expected if ok.get(did, 0) == 0)
    late: list[int] = []
    if reenabled_at is not None:
        for did, event_id in pairs.items():
            at = records.archived_at.get(event_id)
            if at is not None and at >= reenabled_at and ok.get(did, 0) == 0:
                late.append(at - reenabled_at)
    by_type: Counter[str] = Counter()
    for (kind, _id), n in posted.items():
        by_type[kind] += n
    took = None
    if end.kind and reenabled_at is not None:
        took = round((end.at - reenabled_at) / 1000, 1)
    return RecoveryReport(
        subscription_id=sub_id,
        suspensions=len(mine),
        suspend_requests=sum(
            1 for e in control if e.kind == "suspend_requested" and e.subscription_id == sub_id
        ),
        other_suspensions={s: n for s, n in sorted(transitions.items()) if s != sub_id},
        notice_records=len(notes),
        notice_ids=len({n.notification_id for n in notes}),
        notices_posted=by_type[NoticeKind.SUSPENDED.value],
        notices_posted_by_type=dict(sorted(by_type.items())),
        suspended_at=suspended_at,
        reenabled_at=reenabled_at,
        job_id=None if job_id is None else str(job_id),
        backfill_state=end.reason if end.kind else None,
        backfill_done=progress.get("done"),
        backfill_total=progress.get("total"),
        backfill_finished_at=end.at if end.kind else None,
        reenable_to_finished_s=took,
        backfill_expected=len(expected),
        backfill_delivered=len(expected) - len(missing),
        backfill_missing_sample=missing[:SAMPLE],
        undelivered_after_reenable_ms=sorted(late)[:SAMPLE],
        error=error,
    )


def overlapping(faults: Iterable[Mapping[str, Any]], timeline: Mapping[str, Any]) -> list[str]:
    """The fault steps that ran while the backfill did (from the re-enable to its end)."""
    began, ended = timeline.get("reenabled"), timeline.get("backfill_ended")
    if not isinstance(began, Mapping) or not isinstance(ended, Mapping):
        return []
    start, end = float(began["at_s"]), float(ended["at_s"])
    return [
        str(f["step"])
        for f in faults
        if float(f["at_s"]) < end and float(f["at_s"]) + float(f.get("took_s", 0.0)) > start
    ]


# --- reading Kafka -----------------------------------------------------------------------------


def _decoded(settings: Settings, name: str, cls: type[Any], timeout_s: float) -> list[Any]:
    out = []
    for msg in scan(settings, settings.topic(name), timeout_s):
        try:
            out.append(codec.decode(cls, msg.value() or b""))
        except DecodeError:
            continue
    return out


def archive_times(settings: Settings, tenant: str, timeout_s: float = 300.0) -> dict[str, int]:
    """Event id -> the time of its first archive record, for ``tenant``'s events only."""
    key = tenant.encode()
    times: dict[str, int] = {}
    for msg in scan(settings, settings.topic("archive"), timeout_s):
        if msg.key() != key:
            continue
        try:
            event = codec.decode(Event, msg.value() or b"")
        except DecodeError:
            continue
        _kind, at = msg.timestamp()
        if event.id not in times or at < times[event.id]:
            times[event.id] = at
    return times


def parked_ids(letters: Iterable[DeadLetter], sub_id: str) -> frozenset[str]:
    """Delivery ids of ``sub_id`` dead-lettered as parked while it was suspended (H4)."""
    return frozenset(
        letter.delivery.delivery_id
        for letter in letters
        if letter.delivery is not None
        and letter.delivery.subscription_id == sub_id
        and letter.reason == PARKED
    )


def read_recovery_records(
    settings: Settings,
    tenant: str,
    sub_id: str,
    letters: Iterable[DeadLetter],
    timeout_s: float = 300.0,
) -> RecoveryRecords:
    return RecoveryRecords(
        control=_decoded(settings, "control", ControlEvent, timeout_s),
        notifications=_decoded(settings, "notifications", Notification, timeout_s),
        archived_at=archive_times(settings, tenant, timeout_s),
        parked=parked_ids(letters, sub_id),
    )
