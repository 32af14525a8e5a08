"""Q1, D1: a dispatcher stops starting attempts that Kafka could not record."""

from __future__ import annotations

from streams.domain.commit_gate import CommitGate


def test_q1_the_gate_holds_at_the_cap_whatever_the_commits_do() -> None:
    gate = CommitGate(cap=1024, stalled_cap=64)
    assert not gate.held(settled=1023, confirmed=0, now=0.0)
    assert gate.held(settled=1024, confirmed=0, now=0.0)
    assert not gate.held(settled=1024, confirmed=1, now=0.1)  # a commit confirmed: under again


def test_q1_with_no_commit_confirmed_for_a_second_it_holds_at_the_stalled_cap() -> None:
    gate = CommitGate(cap=1024, stalled_cap=64, stall_s=1.0)
    assert not gate.held(settled=500, confirmed=100, now=10.0)  # confirmed at 10.0
    assert not gate.held(settled=600, confirmed=100, now=10.9)
    assert gate.held(settled=600, confirmed=100, now=11.0)  # Kafka silent for 1 s
    assert not gate.held(settled=163, confirmed=100, now=12.0)  # under the stalled cap: go
    assert gate.held(settled=164, confirmed=100, now=12.0)
    assert not gate.held(settled=700, confirmed=600, now=12.5)  # a commit came: full cap again


def test_q1_an_idle_stretch_is_not_a_stall() -> None:
    """Nothing waiting for a commit restarts the clock: after a quiet minute, a burst of
    deliveries is not held just because the last confirmation is a minute old."""
    gate = CommitGate(cap=1024, stalled_cap=64, stall_s=1.0)
    assert not gate.held(settled=100, confirmed=100, now=0.0)
    assert not gate.held(settled=100, confirmed=100, now=60.0)  # idle, all confirmed
    assert not gate.held(settled=400, confirmed=100, now=60.5)
    assert gate.held(settled=400, confirmed=100, now=61.0)
