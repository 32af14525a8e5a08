"""Re-enable, backfill and replay rules (R1-R3), without Kafka."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from streams.domain import recovery as r
from streams.domain.models import (
    DeadLetter,
    Delivery,
    Event,
    Lane,
    Secret,
    Subscription,
    SubscriptionStatus,
)
from streams.errors import ConflictError, ValidationError

DAY_S = 86400.0


def _sub(status: SubscriptionStatus = SubscriptionStatus.ACTIVE, **kw: Any) -> Subscription:
    base = Subscription(
        id="sub_1", tenant_id="acme", name="n", url="https://x.example/h",
        filters=("invoice.*",), secrets=(Secret("whsec_x"),), status=status,
    )  # fmt: skip
    return dataclasses.replace(base, **kw)


def _event(etype: str = "invoice.paid", tenant: str = "acme", n: int = 1) -> Event:
    return Event(id=f"e{n}", tenant_id=tenant, type=etype, timestamp=0, data_json="{}",
                 published_at=0)  # fmt: skip


def test_r1_only_a_suspended_subscription_is_reenabled() -> None:
    r.check_reenable(_sub(SubscriptionStatus.SUSPENDED))
    with pytest.raises(ConflictError, match="already active"):
        r.check_reenable(_sub())
    with pytest.raises(ConflictError, match=r"disabled.*enable"):
        r.check_reenable(_sub(SubscriptionStatus.DISABLED, status_reason="manual"))


@pytest.mark.parametrize("status", [SubscriptionStatus.SUSPENDED, SubscriptionStatus.DISABLED])
def test_r3_r5_replay_to_an_inactive_subscription_is_refused_naming_the_status(
    status: SubscriptionStatus,
) -> None:
    with pytest.raises(ConflictError, match=status.value):
        r.check_replayable(_sub(status))
    r.check_replayable(_sub())


def test_r3_a_succeeded_delivery_needs_confirmation() -> None:
    with pytest.raises(ConflictError, match="confirm_duplicate"):
        r.check_duplicate("msg_1", succeeded=True, confirm_duplicate=False)
    r.check_duplicate("msg_1", succeeded=True, confirm_duplicate=True)
    r.check_duplicate("msg_1", succeeded=False, confirm_duplicate=False)


def test_r2_backfill_window_starts_at_suspension_inside_retention() -> None:
    w = r.backfill_window(suspended_at=1_000_000, reenabled_at=2_000_000, retention_s=DAY_S)
    assert (w.start_ms, w.end_ms, w.clipped) == (1_000_000, 2_000_000, False)


def test_r2_backfill_window_is_capped_at_retention() -> None:
    reenabled = 10 * 86_400_000
    w = r.backfill_window(suspended_at=0, reenabled_at=reenabled, retention_s=DAY_S)
    assert w.start_ms == reenabled - 86_400_000 and w.clipped
    assert w.holds(reenabled - 1) and not w.holds(reenabled) and not w.holds(w.start_ms - 1)


def test_r2_backfill_window_reaches_the_settle_time_past_the_reenable() -> None:
    """A router whose registry has not taken the active version yet skips the subscription:
    what it archives in the settle time must still be in the window (D1, R2)."""
    w = r.backfill_window(1_000_000, 2_000_000, DAY_S, settle_ms=10_000)
    assert (w.start_ms, w.end_ms) == (1_000_000, 2_010_000)
    assert w.holds(2_000_396) and not w.holds(2_010_000)


def _backfill(**overrides: object) -> r.Job:
    fields: dict[str, object] = dict(
        job_id="bf_1", kind=r.JobKind.BACKFILL, subscription_id="sub_1",
        requested_at=2_000_000, rate=5.0, since_ms=1_000_000, until_ms=2_010_000,
        dlq_reason="suspended", dlq_since_ms=1_000_000, dlq_until_ms=2_010_000,
    )  # fmt: skip
    fields.update(overrides)
    return r.Job(**fields)  # type: ignore[arg-type]


def test_r2_a_backfill_writes_only_once_its_windows_have_ended() -> None:
    assert _backfill().writes_after_ms == 2_010_000
    assert _backfill(dlq_until_ms=2_020_000).writes_after_ms == 2_020_000
    # a replay covers the past: a DLQ replay "until tomorrow" does not wait for tomorrow
    replay = _backfill(kind=r.JobKind.DLQ, until_ms=None, dlq_until_ms=9_000_000_000)
    assert replay.writes_after_ms == 0


def test_r2_the_backfill_leaves_to_the_live_path_what_it_attempted_after_the_reenable() -> None:
    job = _backfill()
    assert job.overlaps_live(archived_at_ms=2_000_000, attempts=1)
    assert not job.overlaps_live(archived_at_ms=2_000_000, attempts=0)  # a lagging router's
    assert not job.overlaps_live(archived_at_ms=1_999_999, attempts=3)  # suspended: resent
    assert not _backfill(kind=r.JobKind.REPLAY).overlaps_live(2_000_500, attempts=1)


def test_r3_replay_window_is_clipped_and_validated() -> None:
    now = 100 * 86_400_000
    w = r.replay_window(0, now + 5000, now, DAY_S)
    assert (w.start_ms, w.end_ms, w.clipped) == (now - 86_400_000, now, True)
    with pytest.raises(ValidationError):
        r.replay_window(10, 10, now, DAY_S)


def test_r2_selection_is_tenant_and_filters() -> None:
    sub = _sub()
    assert r.selects(sub, _event())
    assert not r.selects(sub, _event("user.created"))
    assert not r.selects(sub, _event(tenant="other"))


def _letter(reason: str, dead_at: int, sub_id: str = "sub_1", attempt: int = 2) -> DeadLetter:
    delivery = Delivery(
        delivery_id="msg_1",
        subscription_id=sub_id,
        tenant_id="acme",
        event=_event(),
        attempt=attempt,
        lane=Lane.RETRY,
        first_attempt_at=5,
    )
    return DeadLetter(
        reason=reason,
        dead_at=dead_at,
        subscription_id=sub_id,
        delivery=delivery,
        attempts=attempt - 1,
    )


def test_r2_parked_letters_of_the_suspension_are_selected() -> None:
    window = r.Window(100, 200)
    assert r.letter_selected(_letter("suspended", 150), "sub_1", "suspended", window)
    assert not r.letter_selected(_letter("suspended", 99), "sub_1", "suspended", window)
    assert not r.letter_selected(_letter("http_404", 150), "sub_1", "suspended", window)
    assert not r.letter_selected(_letter("suspended", 150, "sub_2"), "sub_1", "suspended", window)


def test_d2_d7_a_replayed_letter_keeps_its_key_and_lifetime_attempts() -> None:
    again = r.from_letter(_letter("suspended", 150, attempt=3), Lane.BACKFILL, 999)
    assert again.delivery_id == "msg_1" and again.attempt == 3 and again.lane is Lane.BACKFILL
    assert again.first_attempt_at is None and again.routed_at == 999


def test_jobs_and_progress_round_trip() -> None:
    job = r.Job("bf_1", r.JobKind.BACKFILL, "sub_1", 5, 20.0, 1, 2, "suspended", 1, 2, 7)
    assert r.Job.from_json(job.to_json()) == job
    assert job.lane is Lane.BACKFILL and job.reads_dlq
    assert r.Job("rp", r.JobKind.REPLAY, "s", 1, 5.0, 1, 2).lane is Lane.REPLAY
    progress = r.Progress("bf_1", "sub_1", total=9, done=4, positions={0: 5}, ends={0: 9})
    again = r.Progress.from_json(progress.to_json())
    assert again == progress and not again.archive_finished
    assert r.resume_point(progress.to_json(), job) == progress
    other = r.Job("bf_2", r.JobKind.BACKFILL, "sub_1", 5, 20.0)
    assert r.resume_point(progress.to_json(), other).done == 0
    assert r.resume_point("not json", job).done == 0


def test_r1_the_first_live_claim_on_a_version_wins() -> None:
    first = r.Claim("a", "sub_1", 10, offset=5, at=1000)
    second = r.Claim("b", "sub_1", 10, offset=6, at=1500)
    assert r.claim_wins(first, [first, second])
    assert not r.claim_wins(second, [first, second])
    newer_version = r.Claim("c", "sub_1", 11, offset=7, at=1600)
    assert r.claim_wins(newer_version, [first, second, newer_version])
    after_lease = r.Claim("d", "sub_1", 10, offset=8, at=1000 + r.CLAIM_LEASE_MS)
    assert r.claim_wins(after_lease, [first, after_lease])


def test_r1_breaker_reset_is_due_once_per_reenabled_version() -> None:
    seen: dict[str, int] = {}
    sub = _sub(status_reason=r.REENABLED_REASON, updated_at=7)
    assert r.breaker_reset_due(sub, seen)
    assert not r.breaker_reset_due(sub, seen)
    assert r.breaker_reset_due(_sub(status_reason=r.REENABLED_REASON, updated_at=8), seen)
    assert not r.breaker_reset_due(_sub(updated_at=9), seen)
