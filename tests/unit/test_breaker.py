"""H7, H8: the per-origin circuit breaker and its registry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.breaker import (
    ALLOW,
    PROBE,
    Admission,
    Breaker,
    BreakerConfig,
    BreakerState,
    Verdict,
    breaker_signal,
    origin_of,
)
from streams.domain.breaker_registry import BreakerRegistry
from streams.domain.models import OutcomeClass

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
T0 = 1_714_564_800_000
SEC = 1000


def tripped(now: int = T0) -> Breaker:
    breaker = Breaker()
    for i in range(5):
        breaker.record(False, now + i)
    assert breaker.state is OPEN
    return breaker


def test_H7_defaults_are_the_specified_ones() -> None:
    config = BreakerConfig()
    assert (config.consecutive_failures, config.failure_rate, config.min_attempts) == (5, 0.5, 20)
    assert (config.window_s, config.cooldown_s, config.max_cooldown_s) == (30.0, 30.0, 600.0)


def test_H7_trips_on_five_consecutive_failures() -> None:
    breaker = Breaker()
    results = [breaker.record(False, T0 + i) for i in range(5)]
    assert results == [None, None, None, None, OPEN]
    assert breaker.allow(T0 + 10) == Admission(Verdict.DEFER, T0 + 4 + 30 * SEC)


def test_H7_a_success_breaks_the_run_of_failures() -> None:
    breaker = Breaker()
    for i in range(4):
        breaker.record(False, T0 + i)
    breaker.record(True, T0 + 5)
    for i in range(4):
        breaker.record(False, T0 + 10 + i)
    assert breaker.state is CLOSED


def alternate(breaker: Breaker, attempts: int, fail_every: int, start: int = T0) -> None:
    """``attempts`` attempts 100 ms apart; every ``fail_every``-th one (from the first) fails."""
    for i in range(attempts):
        breaker.record(i % fail_every != 0, start + i * 100)


def test_H7_trips_on_half_of_twenty_attempts_within_the_window() -> None:
    breaker = Breaker()
    alternate(breaker, 19, 2)  # 10 failures of 19: below min_attempts
    assert breaker.state is CLOSED
    breaker.record(False, T0 + 19 * 100)  # 11 of 20
    assert breaker.state is OPEN


def test_H7_does_not_trip_on_half_of_ten_attempts() -> None:
    breaker = Breaker()
    alternate(breaker, 10, 2)
    assert breaker.state is CLOSED
    assert breaker.window == (10, 5)


def test_H7_a_flapping_endpoint_below_the_rate_stays_closed() -> None:
    breaker = Breaker()
    alternate(breaker, 1000, 3)  # a third of the attempts fail, never twice in a row
    assert breaker.state is CLOSED
    assert breaker.transitions == 0


def test_H7_the_window_slides_and_forgets_old_failures() -> None:
    breaker = Breaker()
    # 12 failures and 6 successes, never 5 failures in a row, in the first few seconds.
    for i in range(18):
        breaker.record(i % 3 == 2, T0 + i * 100)
    assert breaker.window == (18, 12)
    # 40 s later the old ones are gone: 10 failures of 20 in the window would trip, 2 do not.
    later = T0 + 40 * SEC
    for i in range(20):
        breaker.record(i not in (0, 10), later + i * 100)
    assert breaker.window == (20, 2)
    assert breaker.state is CLOSED


def test_H7_within_one_window_earlier_attempts_still_count() -> None:
    breaker = Breaker()
    for i in range(18):
        breaker.record(i % 3 == 2, T0 + i * 100)
    breaker.record(True, T0 + 20 * SEC)
    breaker.record(False, T0 + 20 * SEC + 1)  # 13 failures of 20 within 30 s
    assert breaker.state is OPEN


def test_H7_open_defers_until_the_cooldown_then_lets_one_probe_through() -> None:
    breaker = tripped()
    opened = T0 + 4
    assert breaker.allow(opened + 30 * SEC - 1).verdict is Verdict.DEFER
    assert breaker.allow(opened + 30 * SEC) is PROBE
    assert breaker.state is HALF_OPEN
    deferred = breaker.allow(opened + 30 * SEC + 1)
    assert deferred.verdict is Verdict.DEFER and not deferred.admitted
    # while the probe is out, ask again one base cooldown later (not at the 60 s lease end)
    assert deferred.retry_at_ms == opened + 30 * SEC + 1 + 30 * SEC


def test_H7_cooldown_doubles_on_each_failed_probe_up_to_the_cap() -> None:
    breaker = tripped()
    now = T0 + 4
    cooldowns = []
    for _ in range(8):
        until = breaker.open_until_ms
        assert until is not None
        cooldowns.append((until - now) // SEC)
        now = until
        assert breaker.allow(now) is PROBE
        assert breaker.record(False, now) is OPEN
    assert cooldowns == [30, 60, 120, 240, 480, 600, 600, 600]


def test_H7_a_successful_probe_closes_and_resets_the_cooldown() -> None:
    breaker = tripped()
    now = breaker.open_until_ms or 0
    breaker.allow(now)
    breaker.record(False, now)  # cooldown now 60 s
    now = breaker.open_until_ms or 0
    assert breaker.allow(now) is PROBE
    assert breaker.record(True, now + 50) is CLOSED
    assert breaker.cooldown_s == 30.0
    assert breaker.window == (0, 0)
    assert breaker.allow(now + 51) is ALLOW
    for i in range(5):
        breaker.record(False, now + 100 + i)
    assert breaker.open_until_ms == now + 104 + 30 * SEC


def test_H7_results_of_attempts_sent_before_the_trip_are_ignored() -> None:
    breaker = tripped()
    assert breaker.record(True, T0 + 10) is None
    assert breaker.state is OPEN
    now = breaker.open_until_ms or 0
    breaker.allow(now)
    assert breaker.record(False, now + 1) is OPEN  # the probe's result
    assert breaker.record(True, now + 2) is None  # nothing is probing


def test_H7_a_lost_probe_is_given_up_after_its_lease() -> None:
    breaker = tripped()
    now = breaker.open_until_ms or 0
    assert breaker.allow(now) is PROBE
    assert breaker.allow(now + 60 * SEC - 1).verdict is Verdict.DEFER
    assert breaker.allow(now + 60 * SEC) is PROBE


def test_H7_transitions_are_reported_to_the_listener() -> None:
    seen: list[tuple[BreakerState, BreakerState, int]] = []
    breaker = Breaker(on_transition=lambda old, new, at: seen.append((old, new, at)))
    for i in range(5):
        breaker.record(False, T0 + i)
    breaker.allow(T0 + 4 + 30 * SEC)
    breaker.record(True, T0 + 31 * SEC)
    assert seen == [
        (CLOSED, OPEN, T0 + 4),
        (OPEN, HALF_OPEN, T0 + 4 + 30 * SEC),
        (HALF_OPEN, CLOSED, T0 + 31 * SEC),
    ]
    assert breaker.transitions == 3


@pytest.mark.parametrize(
    ("outcome", "reason", "signal"),
    [
        (OutcomeClass.SUCCESS, "http_200", True),
        (OutcomeClass.RETRYABLE, "http_503", False),
        (OutcomeClass.RETRYABLE, "timeout", False),
        (OutcomeClass.RETRYABLE, "http_429", False),
        (OutcomeClass.FATAL, "dns_nxdomain", False),
        (OutcomeClass.PERMANENT, "http_404", True),
        (OutcomeClass.PERMANENT, "http_410", True),
        (OutcomeClass.PERMANENT, "blocked_destination", None),
        (OutcomeClass.PERMANENT, "tls_invalid", None),
    ],
)
def test_H7_what_an_attempt_tells_the_breaker(
    outcome: OutcomeClass, reason: str, signal: bool | None
) -> None:
    assert breaker_signal(outcome, reason) is signal


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Hooks.Example.com/a/b?c=1", "https://hooks.example.com:443"),
        ("http://hooks.example.com:8080/x", "http://hooks.example.com:8080"),
        ("HTTP://10.0.0.1/", "http://10.0.0.1:80"),
        ("https://[::1]:8443/h", "https://[::1]:8443"),
    ],
)
def test_H8_subscriptions_on_one_host_share_an_origin(url: str, origin: str) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize("url", ["ftp://example.com/", "https:///path", "not a url"])
def test_H8_origin_of_refuses_what_is_not_an_http_url(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        origin_of(url)


def test_H8_the_registry_shares_one_breaker_per_origin() -> None:
    seen: list[tuple[str, BreakerState]] = []
    registry = BreakerRegistry(
        on_transition=lambda origin, _old, new, _at: seen.append((origin, new))
    )
    first = registry.get("https://a.example:443", T0)
    assert registry.get("https://a.example:443", T0 + 1) is first
    assert registry.get("https://b.example:443", T0 + 2) is not first
    for i in range(5):
        first.record(False, T0 + i)
    assert registry.states() == {"https://a.example:443": OPEN, "https://b.example:443": CLOSED}
    assert seen == [("https://a.example:443", OPEN)]


def test_H8_idle_closed_breakers_are_forgotten_and_open_ones_kept() -> None:
    registry = BreakerRegistry(idle_s=60.0)
    for i in range(10):
        registry.get(f"https://h{i}.example:443", T0).record(True, T0)
    dead = registry.get("https://dead.example:443", T0)
    for i in range(5):
        dead.record(False, T0 + i)
    assert len(registry) == 11
    assert registry.evict_idle(T0 + 59 * SEC) == 0
    assert registry.evict_idle(T0 + 61 * SEC) == 10
    assert registry.peek("https://dead.example:443") is dead


def test_H8_every_get_cleans_up_a_little() -> None:
    registry = BreakerRegistry(idle_s=1.0)
    for i in range(100):
        registry.get(f"https://h{i}.example:443", T0 + i * 2 * SEC)
    assert len(registry) <= 2


def test_H8_the_registry_never_holds_more_than_its_cap() -> None:
    registry = BreakerRegistry(max_breakers=3)
    for i in range(10):
        registry.get(f"https://h{i}.example:443", T0)
    assert len(registry) == 3
    assert registry.peek("https://h9.example:443") is not None
    assert registry.peek("https://h0.example:443") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consecutive_failures": 0},
        {"min_attempts": 0},
        {"failure_rate": 0.0},
        {"failure_rate": 1.5},
        {"window_s": 0.0},
        {"cooldown_s": float("nan")},
        {"max_cooldown_s": 10.0},
    ],
)
def test_H7_config_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]  # each case sets one typed field


def test_H7_a_long_window_still_sees_attempts_spread_over_it() -> None:
    breaker = Breaker(BreakerConfig(window_s=3600.0))  # wider buckets, the same bounded ring
    results = [breaker.record(i % 2 == 0, T0 + i * 60 * SEC) for i in range(20)]
    assert breaker.window == (20, 10)  # one attempt a minute for 19 minutes, half failed
    assert results[-1] is OPEN and results.count(OPEN) == 1


ops = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), st.integers(0, 120 * SEC)),
        st.tuples(st.just("allow"), st.just(0)),
        st.tuples(st.just("ok"), st.just(0)),
        st.tuples(st.just("fail"), st.just(0)),
    ),
    max_size=200,
)


@given(ops)
def test_H7_never_two_probes_at_once_and_never_early_out_of_open(
    script: list[tuple[str, int]],
) -> None:
    config = BreakerConfig(probe_timeout_s=60.0)
    breaker = Breaker(config)
    now = T0
    probe_lease_end: int | None = None  # while set, no other attempt may be admitted
    for op, value in script:
        if op == "wait":
            now += value
            continue
        if op in ("ok", "fail"):
            if breaker.state is HALF_OPEN and probe_lease_end is not None:
                probe_lease_end = None
            breaker.record(op == "ok", now)
            continue
        state_before, until = breaker.state, breaker.open_until_ms
        admission = breaker.allow(now)
        if state_before is OPEN and until is not None and now < until:
            assert admission.verdict is Verdict.DEFER
            assert admission.retry_at_ms == until
        if probe_lease_end is not None and now < probe_lease_end:
            assert admission.verdict is Verdict.DEFER
        if admission.verdict is Verdict.PROBE:
            assert state_before is not CLOSED
            probe_lease_end = now + 60 * SEC
        if admission.verdict is Verdict.DEFER:
            assert admission.retry_at_ms is not None and admission.retry_at_ms > now
        if admission.verdict is Verdict.ALLOW:
            assert breaker.state is CLOSED
        assert config.cooldown_s <= breaker.cooldown_s <= config.max_cooldown_s


def test_H7_a_steady_trickle_keeps_one_window_of_attempts() -> None:
    breaker = Breaker()
    for i in range(100):
        breaker.record(i % 4 != 0, T0 + i * SEC)  # one attempt a second, a quarter fail
    assert breaker.window == (30, 7)  # seconds 70..99 of the run


gaps = st.one_of(st.integers(0, 5 * SEC), st.sampled_from([SEC, 3 * SEC, 7 * SEC, 31 * SEC]))


@given(st.lists(st.tuples(gaps, st.booleans()), min_size=1, max_size=300))
def test_H7_the_window_counts_match_a_naive_recount(script: list[tuple[int, bool]]) -> None:
    config = BreakerConfig(consecutive_failures=10_000, failure_rate=1.0, min_attempts=10_000)
    breaker = Breaker(config)
    now = T0
    history: list[tuple[int, bool]] = []
    for gap, ok in script:
        now += gap
        breaker.record(ok, now)
        history.append((now // SEC, ok))
        recent = [h for h in history if h[0] > now // SEC - 30]
        assert breaker.window == (len(recent), sum(1 for _, good in recent if not good))
