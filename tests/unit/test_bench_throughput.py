"""P1's client ceiling, measured on each side of a run's drain (`bench.throughput`)."""

from __future__ import annotations

import pytest

from bench.throughput import bracketed_ceiling


def test_p1_the_ceiling_is_the_mean_of_the_two_measurements_cost_per_request() -> None:
    # 10,000 req/s = 100 µs per request, 20,000 = 50 µs: the run's client costs 75 µs
    found = bracketed_ceiling(10_000.0, 20_000.0)
    assert found["ceiling_before_rps"] == 10_000.0
    assert found["ceiling_after_rps"] == 20_000.0
    assert found["ceiling_rps"] == pytest.approx(1e6 / 75)
    # not the mean of the rates (15,000/s, 66.7 µs), which would favour the faster side
    assert found["ceiling_rps"] != pytest.approx(15_000.0)


def test_p1_a_steady_client_gives_its_own_ceiling() -> None:
    assert bracketed_ceiling(12_500.0, 12_500.0)["ceiling_rps"] == pytest.approx(12_500.0)
