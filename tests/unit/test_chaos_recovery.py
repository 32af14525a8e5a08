"""The recovery scenario of the cluster chaos run: its audit and its arming rule (H3, H5, R2).

The audit is pure: made-up control events, notifications, archive times, parked dead letters
and receiver counts go in, the report and its checks come out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from chaos.audit import AuditReport
from chaos.cluster_run import ClusterChaosConfig, verdict
from chaos.farm import ReceiverFarm
from chaos.recovery_check import (
    RecoveryRecords,
    audit_recovery,
    overlapping,
    parked_ids,
)
from chaos.recovery_scenario import RecoveryPlan, arm_threshold, failing_bound
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    ControlEvent,
    DeadLetter,
    Delivery,
    Event,
    Notification,
    Subscription,
)

SUB = "sub_down"
OTHER = "sub_gone"
SUSPENDED_AT = 10_000
REENABLED_AT = 40_000
JOB = "bf_1"


def _event(n: int) -> Event:
    return Event(f"e{n}", "recovery", "order.created", 0, "{}", 0)


def _control(
    suspensions: int = 1, finished: str | None = "finished", other: int = 0
) -> list[ControlEvent]:
    events = [ControlEvent(SUB, "suspend_requested", SUSPENDED_AT - 5)]
    events += [ControlEvent(SUB, "suspended", SUSPENDED_AT + n) for n in range(suspensions)]
    events += [ControlEvent(OTHER, "suspended", 20_000) for _ in range(other)]
    payload = orjson.dumps({"suspended_at": SUSPENDED_AT, "job_id": JOB}).decode()
    events.append(ControlEvent(SUB, "reenabled", REENABLED_AT, "reenabled", payload))
    if finished is not None:
        done = orjson.dumps({"job_id": JOB, "state": finished, "done": 3, "total": 3}).decode()
        events.append(ControlEvent(SUB, "replay_finished", REENABLED_AT + 7_500, finished, done))
    return events


def _notice(nid: str = "n1", kind: str = "endpoint.suspended") -> Notification:
    return Notification(notification_id=nid, subscription_id=SUB, kind=kind, at=SUSPENDED_AT)


# e0 archived before the suspension, e1..e3 while it was suspended, e4 after the re-enable;
# e5's delivery was parked while suspended (its event archived before the suspension)
ARCHIVED = {"e0": 9_000, "e1": 11_000, "e2": 20_000, "e3": 39_999, "e4": 40_000, "e5": 9_500}
PAIRS = {delivery_id(f"e{n}", SUB): f"e{n}" for n in range(6)}
BACKFILLED = [delivery_id(f"e{n}", SUB) for n in (1, 2, 3, 5)]


def _records(
    control: list[ControlEvent] | None = None, notes: list[Notification] | None = None
) -> RecoveryRecords:
    return RecoveryRecords(
        control=_control() if control is None else control,
        notifications=[_notice()] if notes is None else notes,
        archived_at=ARCHIVED,
        parked=frozenset({delivery_id("e5", SUB)}),
    )


def _ok(skip: str | None = None) -> Counter[str]:
    return Counter({did: 1 for did in PAIRS if did != skip})


POSTED = Counter({("endpoint.suspended", "n1"): 1, ("endpoint.warning", "w1"): 1})


def test_h3_h5_r2_one_episode_and_a_complete_backfill_pass() -> None:
    report = audit_recovery(SUB, PAIRS, _records(), _ok(), POSTED)
    assert report.suspensions == 1 and report.suspend_requests == 1
    assert report.other_suspensions == {}
    assert report.notice_ids == 1 and report.notices_posted == 1
    assert report.notices_posted_by_type == {"endpoint.suspended": 1, "endpoint.warning": 1}
    assert (report.job_id, report.backfill_state) == (JOB, "finished")
    assert (report.backfill_done, report.backfill_total) == (3, 3)
    assert report.reenable_to_finished_s == 7.5
    # archived from the suspension up to (not at) the re-enable, and the parked one
    assert report.backfill_expected == 4 and report.backfill_delivered == 4
    assert all(report.checks().values())


def test_h3_two_suspensions_of_one_episode_fail() -> None:
    report = audit_recovery(SUB, PAIRS, _records(_control(suspensions=2)), _ok(), POSTED)
    assert report.suspensions == 2
    assert report.checks()["recovery_one_suspension"] is False


def test_h3_another_subscription_suspended_fails() -> None:
    report = audit_recovery(SUB, PAIRS, _records(_control(other=1)), _ok(), POSTED)
    assert report.other_suspensions == {OTHER: 1}
    assert report.checks()["recovery_no_other_suspension"] is False


def test_h5_a_second_notice_fails_whether_recorded_or_posted() -> None:
    twice = _records(notes=[_notice("n1"), _notice("n2")])
    assert audit_recovery(SUB, PAIRS, twice, _ok(), POSTED).checks()["recovery_one_notice"] is False
    posted_twice = Counter({("endpoint.suspended", "n1"): 2})
    report = audit_recovery(SUB, PAIRS, _records(), _ok(), posted_twice)
    assert report.notices_posted == 2 and report.checks()["recovery_one_notice"] is False
    # the same notification recorded twice (a repeated decision) is one notice
    same = audit_recovery(SUB, PAIRS, _records(notes=[_notice(), _notice()]), _ok(), POSTED)
    assert same.notice_records == 2 and same.checks()["recovery_one_notice"] is True


def test_r2_a_missing_backfilled_delivery_fails() -> None:
    for missing in BACKFILLED:
        report = audit_recovery(SUB, PAIRS, _records(), _ok(skip=missing), POSTED)
        assert report.backfill_expected == 4 and report.backfill_delivered == 3
        assert report.backfill_missing_sample == [missing]
        assert report.checks()["recovery_backfill_delivered"] is False
    # outside the window and not parked: not the backfill's to deliver
    outside = audit_recovery(SUB, PAIRS, _records(), _ok(skip=delivery_id("e0", SUB)), POSTED)
    assert outside.checks()["recovery_backfill_delivered"] is True
    assert outside.undelivered_after_reenable_ms == []
    # archived at the re-enable and never delivered: named, for the main audit's lost pair
    late = audit_recovery(SUB, PAIRS, _records(), _ok(skip=delivery_id("e4", SUB)), POSTED)
    assert late.undelivered_after_reenable_ms == [0]


def test_r2_an_unfinished_or_absent_backfill_fails() -> None:
    running = audit_recovery(SUB, PAIRS, _records(_control(finished=None)), _ok(), POSTED)
    assert running.backfill_state is None and running.reenable_to_finished_s is None
    assert running.checks()["recovery_backfill_finished"] is False
    aborted = audit_recovery(SUB, PAIRS, _records(_control(finished="aborted")), _ok(), POSTED)
    assert aborted.checks()["recovery_backfill_finished"] is False
    never = RecoveryRecords([], [], ARCHIVED, frozenset())
    report = audit_recovery(SUB, PAIRS, never, _ok(), Counter())
    assert report.backfill_expected == 0 and report.suspensions == 0
    checks = report.checks()
    assert checks["recovery_backfill_delivered"] is False  # nothing to check is a fail
    assert checks["recovery_one_suspension"] is False and checks["recovery_one_notice"] is False


def test_a_scenario_error_fails_the_recovery_checks() -> None:
    report = audit_recovery(SUB, PAIRS, _records(), _ok(), POSTED, error="TimeoutError: x")
    assert report.checks()["recovery_scenario_ran"] is False


def test_parked_ids_are_the_subscriptions_suspended_letters_only() -> None:
    def letter(sub: str, reason: str, n: int) -> DeadLetter:
        delivery = Delivery(delivery_id(f"e{n}", sub), sub, "recovery", _event(n))
        return DeadLetter(reason=reason, dead_at=0, subscription_id=sub, delivery=delivery)

    letters = [
        letter(SUB, "suspended", 1),
        letter(SUB, "exhausted", 2),
        letter(OTHER, "suspended", 3),
    ]
    assert parked_ids(letters, SUB) == frozenset({delivery_id("e1", SUB)})


def _sub(sub_id: str, tenant: str, path: str, filters: tuple[str, ...]) -> Subscription:
    return Subscription(sub_id, tenant, sub_id, f"http://127.0.0.1:1/{path}", filters, ())


def test_arming_waits_until_down_is_a_factor_past_every_failing_subscription() -> None:
    subs = [
        _sub("g0", "tenant0", "gone", ("invoice.*",)),
        _sub("m1", "tenant1", "missing", ("invoice.paid",)),
        _sub("k0", "tenant0", "ok", ("*",)),  # never fails: not a bound
        _sub("d", "recovery", "down", ("*",)),
    ]
    made = {("tenant0", "invoice.paid"): 10, ("tenant1", "invoice.paid"): 14,
            ("tenant0", "order.created"): 99, ("recovery", "order.created"): 500}  # fmt: skip
    bound = failing_bound(subs, lambda t, e: made.get((t, e), 0))
    assert bound == 14
    plan = RecoveryPlan(arm_factor=3, arm_margin=20)
    assert arm_threshold(61, bound, plan) is None
    assert arm_threshold(62, bound, plan) == 62
    assert arm_threshold(500, bound, plan) == 62


def test_faults_during_the_backfill() -> None:
    faults = [
        {"step": "leader_kill", "at_s": 10.0, "took_s": 20.0},
        {"step": "controller_restart", "at_s": 50.0, "took_s": 15.0},
        {"step": "broker_rolling", "at_s": 75.0, "took_s": 60.0},
        {"step": "worker_rolling", "at_s": 150.0, "took_s": 60.0},
    ]
    timeline = {"reenabled": {"at_s": 60.0}, "backfill_ended": {"at_s": 100.0}}
    assert overlapping(faults, timeline) == ["controller_restart", "broker_rolling"]
    assert overlapping(faults, {"reenabled": {"at_s": 60.0}}) == []


def _found(lost: int = 0) -> AuditReport:
    return AuditReport(
        published_events=1, expected_pairs=1, events_on_topic=1, archived_events=1,
        routed_pairs=1, routed_records=1, missing_from_events=0, missing_from_archive=0,
        missing_from_routed=0, delivered=1, dead=0, parked=0, lost=lost, delivered_and_dead=0,
        duplicates=0, duplicate_rate=0.0, final_states={}, dead_reasons={}, ledger_states={},
        attempts_recorded=1, receiver_requests=1, receiver_statuses={}, unsigned_requests=0,
    )  # fmt: skip


def test_the_run_verdict_counts_the_recovery_checks_when_it_ran() -> None:
    assert verdict(_found(), True, True, 0)["passed"] is True
    failing = audit_recovery(SUB, PAIRS, _records(_control(suspensions=2)), _ok(), POSTED)
    judged = verdict(_found(), True, True, 0, failing.checks())
    assert judged["recovery_one_suspension"] is False and judged["passed"] is False
    passing = audit_recovery(SUB, PAIRS, _records(), _ok(), POSTED)
    assert verdict(_found(), True, True, 0, passing.checks())["passed"] is True


def test_recovery_is_opt_in_and_re_enables_before_the_rolling_restarts() -> None:
    config = ClusterChaosConfig(deliveries=1, seed=1, work_dir=Path("w"), jars_dir=Path("j"))
    assert config.recovery is False
    assert config.steps()[config.before_rolling()] == "broker_rolling"
    no_rolling = replace(config, broker_rolling=False, worker_rolling=False)
    assert no_rolling.before_rolling() == len(no_rolling.steps())


def test_Q1_a_run_that_leaves_the_killed_node_down_may_not_need_it_afterwards() -> None:
    """The cluster test's sabotaged run leaves the node it killed down (`Faults`, restore):
    a later fault that waits until every partition is in sync again, or a second kill with
    one node already down, could never finish, so such a config is refused at once."""
    base = ClusterChaosConfig(
        deliveries=1,
        seed=1,
        work_dir=Path("w"),
        jars_dir=Path("j"),
        leader_kills=0,
        failover_worker_kills=1,
        controller_restart=False,
        broker_rolling=False,
    )
    assert replace(base, failover_restore=False).steps() == [
        "worker_kill_in_failover",
        "worker_rolling",
    ]
    with pytest.raises(ValueError, match="leaves a node down"):
        replace(base, failover_restore=False, broker_rolling=True)
    with pytest.raises(ValueError, match="leaves a node down"):
        replace(base, failover_restore=False, controller_restart=True)
    with pytest.raises(ValueError, match="at most one worker_kill_in_failover"):
        replace(base, failover_restore=False, failover_worker_kills=2)


def test_h3_a_run_that_does_not_arm_can_tell_how_often_down_was_asked() -> None:
    """A scenario that times out arming records /down's unanswered deliveries by how many
    times each was asked: fewer than the retry policy's attempts means they were deferred (a
    breaker open, say), not failed, and the farm's count of exhausted ones cannot reach the
    threshold."""
    farm = ReceiverFarm(origins=1)  # not started: only its tally is used
    for wid, asked in (("a", 4), ("b", 4), ("c", 1), ("d", 2)):
        farm._tally.down_requests[wid] = asked
    farm._tally.ok["d"] += 1  # answered 2xx once /down healed: not counted
    assert farm.down_requests_histogram() == {1: 1, 4: 2}
    assert farm.down_exhausted(4) == 2
