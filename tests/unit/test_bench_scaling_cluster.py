"""X4 on a three-broker cluster (`bench.scaling_cluster`, `bench.failover`): the pure parts.

How the 1/2/3-worker medians and ratios are taken, which partitions and subscriptions a killed
worker held, and how long each subscription stayed silent after the kill."""

from __future__ import annotations

from typing import Any

import pytest

from bench.failover import (
    GRACE_S,
    affected_subscriptions,
    failover_figures,
    resumed_after,
    vanished_partitions,
)
from bench.scaling_cluster import medians_and_ratios
from streams.adapters.kafka_clients import partition_of


def test_x4_medians_per_worker_count_and_ratios_to_one_worker() -> None:
    runs: list[dict[str, Any]] = [
        {"workers": 1, "deliveries_per_s": 400.0},
        {"workers": 2, "deliveries_per_s": 300.0},
        {"workers": 3, "deliveries_per_s": 240.0},
        {"workers": 1, "deliveries_per_s": 500.0},
        {"workers": 2, "deliveries_per_s": 500.0},
        {"workers": 3, "deliveries_per_s": 200.0},
        {"workers": 1, "deliveries_per_s": 600.0},
        {"workers": 2, "error": "the groups did not split"},  # a failed run does not count
        {"workers": 3, "deliveries_per_s": 1000.0},
    ]
    figures = medians_and_ratios(runs)
    assert figures["deliveries_per_s_1w"] == 500.0
    assert figures["deliveries_per_s_2w"] == 400.0  # median of 300 and 500
    assert figures["deliveries_per_s_3w"] == 240.0
    assert figures["ratio_2_1"] == pytest.approx(0.8)
    assert figures["ratio_3_1"] == pytest.approx(0.48)


def test_x4_no_ratio_without_a_one_worker_figure() -> None:
    figures = medians_and_ratios(
        [{"workers": 1, "error": "x"}, {"workers": 3, "deliveries_per_s": 200.0}]
    )
    assert figures["deliveries_per_s_1w"] is None
    assert figures["ratio_3_1"] is None
    assert figures["ratio_2_1"] is None


def test_x4_the_killed_worker_holds_the_partitions_of_the_member_that_is_gone() -> None:
    before = {
        "m-a": [("p.routed", 0), ("p.routed", 1)],
        "m-b": [("p.routed", 2), ("p.routed", 3)],
        "m-c": [("p.routed", 4)],
    }
    # after the rebalance the survivors keep their member ids and hold everything
    assert vanished_partitions(before, ["m-a", "m-c"]) == {("p.routed", 2), ("p.routed", 3)}
    assert vanished_partitions(before, ["m-a", "m-b", "m-c"]) == set()


def test_x4_a_subscription_is_affected_through_its_tenants_events_or_its_routed_partition() -> None:
    partitions = 12
    sub_of = {f"tenant{n}": f"sub_{n}" for n in range(40)}
    lost = {("p.events", 3), ("p.routed", 7)}
    found = affected_subscriptions(sub_of, partitions, lost, "p.events", "p.routed")
    expected = {
        sub
        for tenant, sub in sub_of.items()
        if partition_of(tenant, partitions) == 3 or partition_of(sub, partitions) == 7
    }
    assert found == expected
    assert found and found != set(sub_of.values())  # some, not all
    assert affected_subscriptions(sub_of, partitions, set(), "p.events", "p.routed") == set()


def test_x4_resume_time_is_the_first_arrival_after_the_grace() -> None:
    kill = 1000.0
    # an arrival inside the grace is a request the dying worker had already sent
    assert resumed_after([999.0, kill + GRACE_S / 2, kill + 12.5, kill + 13.0], kill) == 12.5
    assert resumed_after([998.0, 999.5], kill) is None


def test_x4_failover_is_the_last_of_the_killed_workers_subscriptions_to_resume() -> None:
    kill = 500.0
    arrivals = {
        "sub_a": [499.0, kill + 11.0, kill + 11.2],  # the killed worker's
        "sub_b": [498.5, kill + 14.0],  # the killed worker's, last to resume
        "sub_c": [499.9, kill + 0.9, kill + 1.6],  # a survivor's: barely a gap
    }
    figures = failover_figures(arrivals, kill, {"sub_a", "sub_b"})
    assert figures["failover_s"] == pytest.approx(14.0)
    assert figures["first_resumed_s"] == pytest.approx(11.0)
    assert figures["victim_subscriptions"] == 2
    assert figures["others_max_gap_s"] == pytest.approx(0.9)


def test_x4_no_failover_figure_while_one_of_its_subscriptions_is_still_silent() -> None:
    kill = 500.0
    arrivals = {"sub_a": [kill + 11.0], "sub_b": [499.0], "sub_c": [kill + 1.0]}
    figures = failover_figures(arrivals, kill, {"sub_a", "sub_b", "sub_d"})
    assert figures["failover_s"] is None  # sub_b resumed not yet, sub_d never delivered
    assert figures["first_resumed_s"] == pytest.approx(11.0)
