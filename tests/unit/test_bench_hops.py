"""The P2 hop breakdown (`bench.hops`) and the floor relay's hop file (`bench.floor`), from given
timestamps: each hop is the difference of consecutive points, named after where it ends, and
the slowest 1% says which hop holds the p99 (SPEC P2)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import figures_speed, hops
from bench.floor import read_hops
from bench.latency import hop_medians, with_floor


def _points(
    n: int,
) -> tuple[dict[str, float], list[tuple[str, dict[str, float]]], dict[str, float]]:
    """``n`` deliveries published 1 s apart; each spends 1 ms in append, 2 ms in route and
    0.5 ms in http, and delivery 7 waits 50 ms in route on top."""
    sent = {f"d{i}": 1000.0 + i for i in range(n)}
    append = {k: t + 0.001 for k, t in sent.items()}
    route = {k: t + 0.002 + (0.05 if k == "d7" else 0.0) for k, t in append.items()}
    received = {k: t + 0.0005 for k, t in route.items()}
    return sent, [("append", append), ("route", route)], received


def test_p2_each_hop_is_the_time_between_consecutive_points() -> None:
    sent, points, received = _points(10)
    figures = hops.split(sent, points, received)
    assert figures["split"] == 10
    assert figures["append_p50_ms"] == pytest.approx(1.0)
    assert figures["route_p50_ms"] == pytest.approx(2.0)
    assert figures["http_p50_ms"] == pytest.approx(0.5)
    assert figures["route_max_ms"] == pytest.approx(52.0)
    assert figures["append_max_ms"] == pytest.approx(1.0)
    assert hops.hop_names(figures) == ["append", "route", "http"]


def test_p2_the_slowest_deliveries_name_the_hop_that_holds_the_p99() -> None:
    sent, points, received = _points(100)
    figures = hops.split(sent, points, received)
    # the p99 of the totals falls between the steady 3.5 ms and the one 53.5 ms delivery
    assert 3.5 < figures["total_p99_ms"] < 53.5
    # the slowest 1% is delivery 7 alone: the tail is route's 52 ms, not append's 1 ms
    assert figures["route_tail_ms"] == pytest.approx(52.0)
    assert figures["append_tail_ms"] == pytest.approx(1.0)
    assert figures["http_tail_ms"] == pytest.approx(0.5)


def test_p2_deliveries_a_point_missed_are_left_out_and_none_left_is_nan() -> None:
    sent, points, received = _points(5)
    del points[1][1]["d2"]  # the route point lacks d2
    del received["d3"]  # nginx never logged d3
    assert hops.split(sent, points, received)["split"] == 3
    empty = hops.split(sent, points, {})
    assert empty["split"] == 0 and math.isnan(empty["route_p99_ms"])
    assert math.isnan(empty["route_tail_ms"])


def test_p2_the_hop_table_shows_every_hop_of_every_side() -> None:
    sent, points, received = _points(10)
    figures = hops.split(sent, points, received)
    text = hops.table({"hookstream": figures, "floor": figures})
    lines = text.splitlines()
    assert lines[0].startswith("| hop | of |")
    assert len(lines) == 2 + 2 * 3
    assert "| route | floor | 2.0 | " in text
    # a median the runs could not give shows as n/a
    assert "| route | old | n/a | n/a | n/a | n/a |" in hops.table({"old": {"route_p50_ms": None}})


def test_p2_the_floor_hop_file_is_read_per_event(tmp_path: Path) -> None:
    path = tmp_path / "hops.txt"
    assert read_hops(path) == {"route": {}, "produce": {}, "dispatch": {}}
    path.write_text(
        "evt_a 10.5 10.501 10.503\n"
        "evt_b 11.0 nan 11.004\n"
        "evt_a 99 99 99\n"  # a repeat keeps the first
        "torn line\n"
    )
    found = read_hops(path)
    assert found["route"] == {"evt_a": 10.5, "evt_b": 11.0}
    assert found["produce"] == {"evt_a": 10.501}
    assert found["dispatch"] == {"evt_a": 10.503, "evt_b": 11.004}


def test_p2_a_run_carries_the_floor_of_the_same_run_and_medians_of_its_hops() -> None:
    own = {"p50_ms": 3.0, "p99_ms": 9.0, "hops": {"route_p99_ms": 4.0, "route_p50_ms": 1.0}}
    floor = {
        "p50_ms": 2.0,
        "p95_ms": 3.0,
        "p99_ms": 5.0,
        "max_ms": 7.0,
        "worker_us_per_delivery": 300.0,
        "broker_us_per_delivery": 400.0,
        "hops": {"route_p99_ms": 2.0, "route_p50_ms": 0.5},
    }
    run = with_floor(own, floor, floor_first=True)
    assert run["floor_p50_ms"] == 2.0 and run["floor_p99_ms"] == 5.0
    assert run["floor_relay_us_per_delivery"] == 300.0 and run["floor_first"] is True
    assert run["p99_ms"] == 9.0  # hookstream's own figures stay as they were
    other = with_floor({**own, "hops": {"route_p99_ms": 8.0, "route_p50_ms": 1.0}}, floor, False)
    medians = hop_medians([run, other])
    assert medians["hookstream"]["route_p99_ms"] == 6.0
    assert medians["floor"]["route_p99_ms"] == 2.0


def test_p2_row_lists_the_hop_p99s_and_each_process_cpu_beside_the_floor() -> None:
    runs = [
        {
            "p99_ms": p99,
            "worker_us_per_delivery": 500.0,
            "floor_relay_us_per_delivery": 120.0,
            "broker_us_per_delivery": 300.0,
            "publisher_us_per_delivery": 40.0,
        }
        for p99 in (10.0, 12.0, 11.0)
    ]
    medians = {"p50_ms": 3.0, "p95_ms": 6.0, "p99_ms": 11.0}
    medians |= {"floor_p50_ms": 2.5, "floor_p99_ms": 6.0}
    split = {"hookstream": {"append_p99_ms": 1.0, "route_p99_ms": 4.0, "http_p99_ms": 1.0}}
    split["floor"] = {"append_p99_ms": 1.0, "route_p99_ms": 2.0, "http_p99_ms": 0.5}
    result = {"config": {"rate": 1000}, "runs": runs, "medians": medians, "hop_medians": split}
    figure = figures_speed.p2(result)
    assert figure is not None and figure["met"] is True  # 1.2x and 1.83x, spread 1.09
    extra = figure["extra"]
    assert extra["p50_over_floor"] == 1.2 and extra["p99_over_floor"] == 1.83
    assert extra["worker_cpu_per_delivery_us"] == 500
    assert extra["floor_relay_cpu_per_delivery_us"] == 120
    assert extra["hops"] == "append/route/http"
    assert extra["hop_p99_ms"] == [1.0, 4.0, 1.0]
    assert extra["floor_hop_p99_ms"] == [1.0, 2.0, 0.5]
    assert "stages" not in extra  # no stage clock in these runs


def test_p2_row_lists_the_worker_stage_clock_medians_when_the_runs_have_them() -> None:
    runs = [
        {
            "p99_ms": 10.0,
            "stages": {
                "routing_p50_ms": p50,
                "routing_p99_ms": 2 * p50,
                "taken_p50_ms": 0.3,
                "taken_p99_ms": 0.9,
                "http_p50_ms": 0.5,
                "http_p99_ms": 1.0,
            },
        }
        for p50 in (1.0, 3.0, 2.0)
    ]
    medians = {"p50_ms": 3.0, "p95_ms": 6.0, "p99_ms": 10.0}
    result = {"config": {"rate": 1000}, "runs": runs, "medians": medians}
    result["hop_medians"] = hop_medians(runs)
    figure = figures_speed.p2(result)
    assert figure is not None
    extra = figure["extra"]
    assert extra["stages"] == "routing/taken/http"
    assert extra["stage_p50_ms"] == [2.0, 0.3, 0.5]
    assert extra["stage_p99_ms"] == [4.0, 0.9, 1.0]


def test_p2_the_slowest_deliveries_are_listed_with_their_hops_and_second() -> None:
    sent, points, received = _points(10)
    worst = hops.slowest(sent, points, received, began=1000.0, count=2)
    assert len(worst) == 2
    assert worst[0] == {
        "at_s": 7.0,
        "total_ms": 53.5,
        "append_ms": 1.0,
        "route_ms": 52.0,
        "http_ms": 0.5,
    }
    assert worst[1]["total_ms"] == 3.5
    # a second with several slow deliveries shows its slowest once
    sent["d7b"], received["d7b"] = sent["d7"] + 0.1, received["d7"] + 0.1
    for _, times in points:
        times["d7b"] = times["d7"] + 0.1  # a second delivery stalled alike in second 7
    worst = hops.slowest(sent, points, received, began=1000.0, count=2)
    assert worst[0]["at_s"] in (7.0, 7.1) and worst[0]["total_ms"] == 53.5
    assert worst[1]["total_ms"] == 3.5 and int(worst[1]["at_s"]) != 7
