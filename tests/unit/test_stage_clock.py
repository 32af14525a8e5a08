"""P2: the worker's stage clock (`streams.adapters.stage_clock`), off by default, writes when
each delivery reached each stage, to the microsecond, and the benchmark reads it back in order
(`bench.traffic.clock_points`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import hops
from bench.traffic import clock_points
from streams.adapters import stage_clock


@pytest.fixture(autouse=True)
def _clock_stopped() -> Iterator[None]:
    yield
    stage_clock.stop()


def test_p2_the_clock_is_off_until_started_and_stamps_nothing(tmp_path: Path) -> None:
    assert stage_clock.now() == 0.0
    stage_clock.stamp("taken", "dlv_1")  # nowhere to write: nothing happens
    assert list(tmp_path.iterdir()) == []


async def test_p2_stamps_are_written_out_while_the_worker_runs_and_at_stop(tmp_path: Path) -> None:
    path = tmp_path / "data" / "stage-clock.txt"  # its directory is made
    stage_clock.start(path, asyncio.get_running_loop())
    began = stage_clock.now()
    assert began > 0
    stage_clock.stamp("routing", "dlv_1", began)
    stage_clock.stamp("produced", "dlv_1")
    await asyncio.sleep(3 * stage_clock.FLUSH_INTERVAL_S)  # out on the timer, not at stop
    lines = path.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["routing", "dlv_1"], ["produced", "dlv_1"]]
    assert float(lines[0].split()[2]) == pytest.approx(began, abs=1e-6)
    assert float(lines[1].split()[2]) >= began
    stage_clock.stamp("taken", "dlv_1")
    stage_clock.stop()
    assert path.read_text().splitlines()[-1].startswith("taken dlv_1 ")
    stage_clock.stamp("started", "dlv_1")  # stopped: no more lines
    assert len(path.read_text().splitlines()) == 3


def test_p2_the_bench_reads_each_stage_in_order_first_attempts_only(tmp_path: Path) -> None:
    path = tmp_path / "stage-clock.txt"
    stamps = [("routing", 1.0), ("produced", 1.001), ("taken", 1.003), ("started", 1.0035)]
    stamps += [("sending", 1.0036), ("started", 9.0), ("sending", 9.1)]  # a retry's attempt
    text = "".join(f"{stage} dlv_1 {at:.6f}\n" for stage, at in stamps)
    path.write_text(text + "taken dlv_2 1.5")  # a line still being written is left out
    points = clock_points(path)
    assert [name for name, _ in points] == list(stage_clock.STAGES)
    assert dict(points)["started"] == {"dlv_1": 1.0035}
    assert "dlv_2" not in dict(points)["taken"]
    split = hops.split({"dlv_1": 0.998}, points, {"dlv_1": 1.0046})
    assert hops.hop_names(split) == [*stage_clock.STAGES, "http"]
    assert split["taken_p50_ms"] == pytest.approx(2.0)
    assert split["http_p50_ms"] == pytest.approx(1.0)
