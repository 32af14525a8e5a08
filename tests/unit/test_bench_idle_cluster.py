"""`bench.idle_cluster` reports, per revision, the medians of its counted rounds; the warm-up
rounds (the brokers' JIT still compiling) are kept apart and never counted."""

from __future__ import annotations

from typing import Any

from bench.idle_cluster import summarise


def _round(run: int, revision: str, added: float) -> dict[str, Any]:
    return {
        "run": run,
        "revision": revision,
        "brokers_alone_percent": 20.0,
        "brokers_percent": 20.0 + added,
        "workers_percent": 25.0,
        "brokers_added_percent": added,
    }


def test_p2_warmup_rounds_are_kept_apart_and_medians_are_per_revision() -> None:
    rounds = [
        _round(-1, "before", 140.0),  # a cold cluster: must not move the median
        _round(-1, "after", 19.0),
        *(_round(n, "before", added) for n, added in enumerate((48.0, 36.0, 40.0))),
        *(_round(n, "after", added) for n, added in enumerate((22.0, 25.0, 21.0))),
    ]
    result = summarise(rounds)
    assert [r["run"] for r in result["warmup_runs"]] == [-1, -1]
    assert len(result["runs"]) == 6
    assert result["medians"]["before"]["brokers_added_percent"] == 40.0
    assert result["medians"]["after"]["brokers_added_percent"] == 22.0
    assert result["medians"]["after"]["brokers_percent"] == 42.0
    assert "run" not in result["medians"]["before"]  # only the figures, in % of a core
