"""The before/after comparison of `bench.ab` (H8's cost on the hot path, P1): its arithmetic."""

from __future__ import annotations

import pytest

from bench.ab import _env, _side, medians, per_delivery


def test_h8_p1_cpu_per_delivery_is_the_workers_share_of_a_core_over_its_rate() -> None:
    run = {"worker_cpu_percent": 100.0, "deliveries_per_s": 2500.0, "ceiling_rps": 20000.0}
    figures = per_delivery(run)
    assert figures["worker_cpu_us_per_delivery"] == pytest.approx(400.0)
    assert figures["client_cpu_us_per_request"] == pytest.approx(50.0)
    assert figures["deliveries_per_s"] == 2500.0


def test_h8_the_medians_are_taken_per_figure_across_runs() -> None:
    runs = [{"a": 3.0, "b": 10.0}, {"a": 1.0, "b": 30.0}, {"a": 2.0, "b": 20.0}]
    assert medians(runs) == {"a": 2.0, "b": 20.0}


def test_p1_other_processes_cpu_per_delivery_is_kept_where_a_revision_reports_it() -> None:
    run = {
        "worker_cpu_percent": 100.0,
        "deliveries_per_s": 1000.0,
        "ceiling_rps": 10000.0,
        "broker_us_per_delivery": 240.0,
        "nginx_us_per_delivery": None,
    }
    figures = per_delivery(run)
    assert figures["broker_us_per_delivery"] == 240.0
    assert "nginx_us_per_delivery" not in figures, "unknown figures are left out"
    older = per_delivery({k: v for k, v in run.items() if not k.endswith("_per_delivery")})
    assert "broker_us_per_delivery" not in medians([figures, older]), "only what every run has"


def test_s6_each_side_may_run_the_same_revision_in_its_own_environment() -> None:
    """S6's cost is the same revision with the ledger's reader off and on (`--before-env`)."""
    assert _env(["HOOKSTREAM_LEDGER_READER=false", "A=b=c"]) == {
        "HOOKSTREAM_LEDGER_READER": "false",
        "A": "b=c",
    }
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        _env(["HOOKSTREAM_LEDGER_READER"])
    side = {"commit": "c75ce0c", "env": {"HOOKSTREAM_LEDGER_READER": "false"}, "runs": []}
    assert _side(side) == "c75ce0c HOOKSTREAM_LEDGER_READER=false"
    assert _side({"commit": "c75ce0c", "runs": []}) == "c75ce0c"
