"""H7, H8, F4: the fleet's shared breaker (compare-and-set on a version) and the recovery ramp."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.adapters import codec
from streams.domain.breaker import BreakerConfig, BreakerState
from streams.domain.fleet_breaker import (
    BreakerRecord,
    FleetView,
    Step,
    admit,
    claim,
    probe_ended,
    reset,
    trip,
)
from streams.domain.ramp import Ramp, RampConfig
from streams.errors import ConfigError, DecodeError
from streams.settings import load_settings

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
T0 = 1_714_564_800_000
SEC = 1000
ORIGIN = "https://hooks.example.com:443"
CONFIG = BreakerConfig(cooldown_s=30, max_cooldown_s=600, probe_timeout_s=60)


def opened(at: int = T0) -> BreakerRecord:
    record = trip(None, ORIGIN, "a", at, CONFIG)
    assert record is not None
    return record


def test_H8_a_trip_opens_for_the_base_cooldown_and_defers_every_worker_until_it_ends() -> None:
    record = opened()
    assert (record.state, record.version, record.open_until) == (OPEN, 1, T0 + 30 * SEC)
    for me in ("a", "b", "c"):
        decision = admit(record, me, T0 + 29 * SEC, probe_sent=False, recheck_ms=SEC)
        assert decision.step is Step.DEFER and decision.retry_at_ms == T0 + 30 * SEC
    assert admit(None, "a", T0, probe_sent=False, recheck_ms=SEC).step is Step.ALLOW
    assert trip(record, ORIGIN, "b", T0, CONFIG) is None, "only a closed breaker trips"


def test_H8_racing_claims_one_wins_in_log_order_everywhere_so_one_probe_per_cooldown() -> None:
    record = opened()
    after = T0 + 30 * SEC
    claims = [claim(record, me, after + i, CONFIG) for i, me in enumerate("abc")]
    assert all(c is not None and c.version == 2 for c in claims)
    views = [FleetView() for _ in range(3)]
    for view in views:
        view.apply(record)
        taken = [view.apply(c) for c in claims if c is not None]
        assert taken == [True, False, False]
    probes = [
        me
        for me, view in zip("abc", views, strict=True)
        if admit(view.get(ORIGIN), me, after + 5, probe_sent=False, recheck_ms=SEC).step
        is Step.PROBE
    ]
    assert probes == ["a"], "exactly one worker of the fleet probes"
    held = views[1].get(ORIGIN)
    decision = admit(held, "b", after + 5, probe_sent=False, recheck_ms=SEC)
    assert decision.step is Step.DEFER and decision.retry_at_ms == after + 5 + SEC


def test_H7_the_probe_holder_alone_closes_or_reopens_with_the_cooldown_doubled() -> None:
    half = claim(opened(), "a", T0 + 30 * SEC, CONFIG)
    assert half is not None and half.state is HALF_OPEN
    assert probe_ended(half, "b", True, T0 + 31 * SEC, CONFIG) is None
    closed = probe_ended(half, "a", True, T0 + 31 * SEC, CONFIG)
    assert closed is not None and closed.state is CLOSED and closed.version == 3
    reopened = probe_ended(half, "a", False, T0 + 31 * SEC, CONFIG)
    assert reopened is not None and reopened.state is OPEN
    assert reopened.cooldown_ms == 60 * SEC and reopened.open_until == T0 + 91 * SEC


def test_F4_while_deliveries_wait_the_cooldown_stops_growing_at_the_probe_bound() -> None:
    record = opened()
    for _ in range(8):
        half = claim(record, "a", record.open_until, CONFIG)
        assert half is not None
        ended = probe_ended(half, "a", False, record.open_until + 1, CONFIG, waiting_bound_s=60)
        assert ended is not None
        record = ended
    assert record.cooldown_ms == 60 * SEC
    for _ in range(8):
        half = claim(record, "a", record.open_until, CONFIG)
        assert half is not None
        ended = probe_ended(half, "a", False, record.open_until + 1, CONFIG)
        assert ended is not None
        record = ended
    assert record.cooldown_ms == 600 * SEC, "with nothing waiting it grows to the 10 min cap"


def test_H8_a_lost_probe_is_given_up_after_its_lease_and_another_worker_may_claim() -> None:
    half = claim(opened(), "dead-worker", T0 + 30 * SEC, CONFIG)
    assert half is not None
    during = admit(half, "b", T0 + 40 * SEC, probe_sent=False, recheck_ms=SEC)
    assert during.step is Step.DEFER
    assert admit(half, "b", half.probe_until, probe_sent=False, recheck_ms=SEC).step is Step.CLAIM
    again = claim(half, "b", half.probe_until, CONFIG)
    assert again is not None and again.probe_owner == "b" and again.version == half.version + 1


def test_R1_reset_closes_from_any_state_and_a_fresh_view_takes_a_compacted_tail() -> None:
    record = opened()
    closed = reset(record, ORIGIN, "b", T0 + SEC, CONFIG)
    assert closed.state is CLOSED and closed.version == 2
    view = FleetView()
    assert view.apply(closed), "compaction removed version 1: the first record seen is taken"
    assert not view.apply(replace(closed, writer="c")), "a second record of a version lost"
    assert view.apply(replace(closed, version=7)), "a newer one bridges a compacted gap"
    assert view.counts() == {"closed": 1, "open": 0, "half_open": 0}


def test_H8_breaker_records_round_trip_through_the_codec_and_bad_states_are_refused() -> None:
    half = claim(opened(), "a", T0 + 30 * SEC, CONFIG)
    assert half is not None
    assert codec.decode(BreakerRecord, codec.encode(half)) == half
    bad = codec.encode(half).replace(b"half_open", b"half_mad_")
    with pytest.raises(DecodeError) as info:
        codec.decode(BreakerRecord, bad)
    assert info.value.reason == "invalid_enum"


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), max_size=40))
def test_H8_every_view_fed_the_same_log_holds_the_same_breaker(
    log: list[tuple[str, int]],
) -> None:
    """Whatever the proposals, views that read one log agree record for record."""
    views = [FleetView(), FleetView()]
    current: BreakerRecord | None = None
    now = T0
    for writer, kind in log:
        now += 20 * SEC
        if kind == 0:
            proposal = trip(current, ORIGIN, writer, now, CONFIG)
        elif kind == 1 and current is not None:
            proposal = claim(current, writer, now, CONFIG)
        elif kind == 2 and current is not None:
            proposal = probe_ended(current, writer, writer == "a", now, CONFIG)
        else:
            proposal = reset(current, ORIGIN, writer, now, CONFIG)
        if proposal is None:
            continue
        for view in views:
            view.apply(proposal)
            view.apply(proposal)  # a duplicate (a producer retry) is ignored
        current = views[0].get(ORIGIN)
    assert views[0].get(ORIGIN) == views[1].get(ORIGIN)


def test_F4_the_ramp_starts_at_the_start_rate_and_doubles_each_step_until_it_ends() -> None:
    ramp = Ramp(RampConfig(start_rate=5, step_s=1, max_rate=100, growth=2), T0)
    rates = [ramp.fleet_rate(T0 + n * SEC + 500) for n in range(6)]
    assert rates == [5, 10, 20, 40, 80, None]
    assert ramp.fleet_rate(T0) is None, "once over, it stays over"


def test_F4_an_overload_halves_the_ramp_once_per_step_and_shares_add_up() -> None:
    ramp = Ramp(RampConfig(start_rate=4, step_s=1, max_rate=1000, growth=2), T0)
    assert ramp.fleet_rate(T0 + 3 * SEC) == 32
    assert ramp.halve(T0 + 3 * SEC)
    assert not ramp.halve(T0 + 3 * SEC + 10), "the same step's news halves once"
    assert ramp.fleet_rate(T0 + 3 * SEC + 10) == 16
    assert ramp.fleet_rate(T0 + 4 * SEC + 10) == 16, "the halved rate holds two steps"
    assert ramp.fleet_rate(T0 + 5 * SEC + 10) == 32
    shares = [ramp.rate(T0 + 5 * SEC + 10, part / 12) for part in (4, 4, 4)]
    assert sum(r or 0 for r in shares) == pytest.approx(32)
    for n in range(10):  # an endpoint that signals overload every step
        assert ramp.halve(T0 + 6 * SEC + n * SEC)
    assert ramp.fleet_rate(T0 + 16 * SEC) == 0.5, "never below an eighth of the start"


def test_F4_the_default_ramp_triples_each_step_and_an_overload_still_halves_it() -> None:
    ramp = Ramp(RampConfig(), T0)  # 5/s, x3 a second, over at 10,000/s
    rates = [ramp.fleet_rate(T0 + n * SEC + 500) for n in range(8)]
    assert rates[:7] == pytest.approx([5, 15, 45, 135, 405, 1215, 3645])
    assert rates[7] is None, "10,935/s is past the 10,000/s end"
    ramp = Ramp(RampConfig(), T0)
    assert ramp.halve(T0 + 2 * SEC)
    assert ramp.fleet_rate(T0 + 2 * SEC) == pytest.approx(22.5)
    assert ramp.fleet_rate(T0 + 4 * SEC) == pytest.approx(67.5), "then it grows again"
    with pytest.raises(ValueError, match="growth"):
        RampConfig(growth=1.0)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"recovery_start_rate": 0}, "HOOKSTREAM_RECOVERY_START_RATE"),
        ({"recovery_growth": 1}, "HOOKSTREAM_RECOVERY_GROWTH"),
        ({"recovery_step": "0s"}, "HOOKSTREAM_RECOVERY_STEP"),
        ({"recovery_probe_bound": "soon"}, "HOOKSTREAM_RECOVERY_PROBE_BOUND"),
        ({"recovery_start_rate": 50, "recovery_max_rate": 10}, "recovery_max_rate"),
    ],
)
def test_F4_bad_recovery_settings_stop_startup_naming_the_setting(
    overrides: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(**overrides)


def test_F4_the_recovery_defaults_are_on_and_documented() -> None:
    settings = load_settings()
    assert settings.recovery_ramp and settings.recovery_start_rate == 5.0
    assert (settings.recovery_step, settings.recovery_probe_bound) == (1.0, 60.0)
