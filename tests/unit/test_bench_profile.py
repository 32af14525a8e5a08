"""P1's profiled run reads the worker's count of its event loop's CPU by task (`bench.profile`)."""

from __future__ import annotations

import pytest

from bench import profile


def test_p1_task_cpu_is_read_from_metrics_less_the_start_and_shared_per_delivery() -> None:
    before = {
        'hookstream_task_cpu_seconds_total{task="Router.run"}': 1.0,
        "hookstream_event_loop_cpu_seconds_total": 10.0,
    }
    after = {
        'hookstream_task_cpu_seconds_total{task="Router.run"}': 3.0,
        'hookstream_task_cpu_seconds_total{task="FlowControl._run"}': 6.0,
        "hookstream_event_loop_cpu_seconds_total": 20.0,
        "hookstream_deliveries_total": 5.0,  # not a task
    }
    spent = profile.task_cpu(after, profile.task_cpu(before))
    assert spent == {"Router.run": 2.0, "FlowControl._run": 6.0, profile.LOOP: 10.0}
    figures = profile.per_delivery(spent, 100_000)
    assert list(figures) == ["FlowControl._run", "Router.run", profile.UNTIMED, profile.LOOP]
    assert figures["FlowControl._run"] == pytest.approx(60.0)
    assert figures[profile.UNTIMED] == pytest.approx(20.0)  # 10 s of the loop, 8 in tasks
    assert "| 60.0 | `FlowControl._run` |" in profile.task_markdown(figures)


def test_p1_without_the_workers_count_there_is_no_breakdown() -> None:
    assert profile.per_delivery({}, 1000) == {}
    assert profile.per_delivery({profile.LOOP: 1.0}, 0) == {}
    assert "did not count" in profile.task_markdown({})
