"""The broker's requests by kind in P2 and P1 (`bench.broker_requests`): cumulative counts read
over JMX become requests per second over a run's window, then per delivery."""

from __future__ import annotations

import time
from pathlib import Path

from bench.broker_requests import BrokerRequests, figures, per_delivery, rates

SAMPLES = [
    (99.5, {"Produce": 10, "Fetch": 20, "FetchConsumer": 20}),
    (100.0, {"Produce": 100, "Fetch": 50, "FetchConsumer": 50}),
    (101.0, {"Produce": 400, "Fetch": 250, "FetchConsumer": 250, "Heartbeat": 1}),
    (102.0, {"Produce": 700, "Fetch": 450, "FetchConsumer": 450, "Heartbeat": 1}),
    (102.5, {"Produce": 9000, "Fetch": 9000, "FetchConsumer": 9000, "Heartbeat": 9}),
]


def test_p2_rates_come_from_the_samples_inside_the_window() -> None:
    # from the first sample at or after the start to the last at or before the end: 100 -> 102
    found = rates(SAMPLES, 99.8, 102.2)
    assert found == {"Produce": 300.0, "Fetch": 200.0, "Heartbeat": 0.5}
    # FetchConsumer only splits Fetch: counting it too would count each fetch twice


def test_p2_a_kind_that_first_appears_inside_the_window_counts_from_zero() -> None:
    assert rates(SAMPLES, 100.0, 101.0)["Heartbeat"] == 1.0


def test_p2_fewer_than_two_samples_in_the_window_give_no_rates() -> None:
    assert rates(SAMPLES, 100.2, 100.9) == {}
    assert rates(SAMPLES, 101.0, 101.0) == {}
    assert rates([], 0.0, 1e12) == {}


def test_p2_per_delivery_divides_by_the_delivery_rate_and_adds_a_total() -> None:
    found = per_delivery({"Produce": 300.0, "Fetch": 200.0}, 1000.0)
    assert found == {"Fetch": 0.2, "Produce": 0.3, "total": 0.5}
    assert per_delivery({}, 1000.0) == {}
    assert per_delivery({"Produce": 1.0}, 0.0) == {}


def test_p2_a_run_carries_all_produce_and_fetch_requests_per_delivery() -> None:
    assert figures({"Fetch": 0.2, "Produce": 0.3, "total": 0.5}) == {
        "broker_requests_per_delivery": 0.5,
        "broker_produce_requests_per_delivery": 0.3,
        "broker_fetch_requests_per_delivery": 0.2,
    }
    assert set(figures({}).values()) == {None}


def _probe(tmp_path: Path, body: str) -> str:
    """A stand-in for `java BrokerRequests.java <pid> <ms>`: a script run with the same args."""
    script = tmp_path / "java"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


def test_p2_a_run_waits_for_the_probes_first_sample(tmp_path: Path) -> None:
    # the probe's JVM compiles its source before it samples: seconds on a busy box
    line = '{"t":1000,"requests":{"Produce":5}}'
    java = _probe(tmp_path, f"sleep 0.5\necho '{line}'\nexec sleep 30\n")
    probe = BrokerRequests(1, java=java)
    try:
        began = time.monotonic()
        assert probe.wait_first(20.0)
        assert time.monotonic() - began >= 0.4
        assert probe.samples == [(1.0, {"Produce": 5})]
    finally:
        probe.stop()


def test_p2_a_probe_that_cannot_attach_ends_the_wait_with_its_reason(tmp_path: Path) -> None:
    java = _probe(tmp_path, "echo 'AttachNotSupportedException: no such process' >&2\nexit 1\n")
    probe = BrokerRequests(1, java=java)
    try:
        began = time.monotonic()
        assert not probe.wait_first(20.0)
        assert time.monotonic() - began < 10.0  # the wait ends when the probe does
        assert probe.error == "AttachNotSupportedException: no such process"
    finally:
        probe.stop()
