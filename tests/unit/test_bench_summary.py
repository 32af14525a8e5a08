"""bench/results/summary.json: one entry per measured requirement (P1, P2, P6, P7, F1, F3, F5,
F7, Q1), written only through `bench.summary.record`, and the docs table generated from it."""

from __future__ import annotations

import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bench import figures, figures_speed, summary
from bench.summary import SummaryError, record

#: The committed P1 results file (whichever the summary cites now): a real one to record from.
FILE = next(
    e["results_file"]
    for e in json.loads((Path(__file__).parents[2] / "bench/results/summary.json").read_text())
    if e["id"] == "P1"
)


def _record(path: Path, entry_id: str = "P1", **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "value": 6.02,
        "unit": "x the bare client's CPU per request",
        "target": "<= 4x",
        "met": False,
        "results_file": FILE,
    }
    return record(entry_id, **{**fields, **changes}, path=path)


def test_record_fills_in_commit_and_date_and_writes_one_entry(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    entry = _record(path, extra={"deliveries_per_s": 2472})
    assert json.loads(path.read_text()) == [entry]
    assert entry["id"] == "P1" and entry["met"] is False
    assert entry["extra"] == {"deliveries_per_s": 2472}
    assert re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?|unknown", entry["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["date"])


def test_record_merges_by_id_and_keeps_the_file_sorted(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    _record(path, "Q1", value=0.23, unit="% duplicates", target="< 1%", met=True)
    _record(path, "F7", value=2.3, unit="x", target="<= 2x", met=False)
    _record(path, "P1")
    newer = _record(path, "F7", value=1.9, unit="x", target="<= 2x", met=True, commit="abc1234")
    entries = summary.load(path)
    assert [e["id"] for e in entries] == ["F7", "P1", "Q1"]
    assert entries[0] == newer and entries[0]["value"] == 1.9
    assert [e["id"] for e in json.loads(path.read_text())] == ["F7", "P1", "Q1"]
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["summary.json"]  # no .tmp


@pytest.mark.parametrize("bad_id", ["p1", "P", "P1 ", "PX1", "P123", "Q1_cluster", "", 1])
def test_record_refuses_an_id_that_is_not_a_requirement_id(tmp_path: Path, bad_id: Any) -> None:
    path = tmp_path / "summary.json"
    _record(path)
    before = path.read_text()
    with pytest.raises(SummaryError, match=r"^id: "):
        _record(path, bad_id)
    assert path.read_text() == before  # nothing written


@pytest.mark.parametrize("met", [1, 0, "true", None])
def test_record_refuses_met_that_is_not_a_bool(tmp_path: Path, met: Any) -> None:
    with pytest.raises(SummaryError, match=r"^met: "):
        _record(tmp_path / "summary.json", met=met)
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("value", [True, math.nan, math.inf, "6", None])
def test_record_refuses_a_value_that_is_not_a_finite_number(tmp_path: Path, value: Any) -> None:
    with pytest.raises(SummaryError, match=r"^value: "):
        _record(tmp_path / "summary.json", value=value)


@pytest.mark.parametrize(
    "results_file",
    ["/tmp/throughput.json", "bench/results/raw/profile.txt", "docs/x.json", "bench/results/../x"],
)
def test_record_refuses_a_results_file_git_would_not_keep(
    tmp_path: Path, results_file: str
) -> None:
    with pytest.raises(SummaryError, match="results_file"):
        _record(tmp_path / "summary.json", results_file=results_file)


def test_validate_names_every_missing_field_and_refuses_unknown_ones() -> None:
    entry = _entry()
    del entry["unit"], entry["commit"]
    with pytest.raises(SummaryError, match=r"missing field\(s\): unit, commit"):
        summary.validate(entry)
    with pytest.raises(SummaryError, match=r"unknown field\(s\): figure"):
        summary.validate({**_entry(), "figure": 1})
    with pytest.raises(SummaryError, match=r"^date: "):
        summary.validate({**_entry(), "date": "yesterday"})
    with pytest.raises(SummaryError, match=r"^extra.runs: "):
        summary.validate({**_entry(), "extra": {"runs": {"a": 1}}})
    assert summary.validate(_entry()) == _entry()


def _entry() -> dict[str, Any]:
    return {
        "id": "P6",
        "value": 290,
        "unit": "MiB",
        "target": "<= 400 MiB",
        "met": True,
        "results_file": "bench/results/memory-20261130T052627.json",
        "commit": "44587e0697ce",
        "date": "2026-11-30T05:26:27Z",
    }


def test_load_refuses_a_file_with_an_id_twice(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps([_entry(), _entry()]))
    with pytest.raises(SummaryError, match="twice"):
        summary.load(path)


def test_docs_block_is_regenerated_between_its_markers_only(tmp_path: Path) -> None:
    path, docs = tmp_path / "summary.json", tmp_path / "benchmarks.md"
    _record(path, note="from an older run")
    docs.write_text(f"# Before\n\n{summary.BEGIN}\nstale\n{summary.END}\n\n## After\n")
    assert summary.update_docs(docs, path)
    text = docs.read_text()
    assert text.startswith("# Before\n\n") and text.endswith("\n\n## After\n")
    assert "stale" not in text
    assert "| **P1[^P1]** | 6.02 x the bare client's CPU per request | <= 4x | **no** |" in text
    assert "[^P1]: from an older run" in text
    assert summary.docs_block(docs) == summary.render(summary.load(path))
    assert not summary.update_docs(tmp_path / "summary.json", path)  # no markers: False


def test_committed_docs_block_is_what_the_committed_summary_generates() -> None:
    """docs/benchmarks.md's current figures are generated from summary.json (SPEC P, F, Q1)."""
    assert summary.docs_block() == summary.render(summary.load())


def test_committed_summary_cites_result_files_that_exist() -> None:
    entries = summary.load()
    assert {"P1", "P2", "F7", "Q1"} <= {e["id"] for e in entries}
    for entry in entries:
        assert (summary.REPO / entry["results_file"]).is_file(), entry["results_file"]


def _throughput(runs: list[tuple[float, float, float]]) -> dict[str, Any]:
    made = [
        {"worker_cpu_percent": cpu, "ceiling_rps": ceiling, "deliveries_per_s": rate}
        for cpu, ceiling, rate in runs
    ]
    medians = {"deliveries_per_s": 2000.0, "ceiling_rps": 10000.0, "ratio_to_ceiling": 0.2}
    return {"scenario": "throughput", "runs": made, "medians": medians}


def test_p1_is_the_worker_cpu_per_delivery_over_the_client_cpu_per_request_per_run() -> None:
    # 100% of a core at 2,000/s = 500 µs per delivery; a 10,000 req/s ceiling = 100 µs: 5x
    figure = figures_speed.p1(
        _throughput([(100, 10000, 2000), (50, 10000, 2500), (100, 20000, 2000)])
    )
    assert figure is not None
    assert figure["value"] == 5.0 and figure["met"] is False
    assert figure["extra"]["multiple_runs"] == [5.0, 2.0, 10.0]
    met = figures_speed.p1(_throughput([(80, 10000, 2000)] * 3))
    assert met is not None and met["value"] == 4.0 and met["met"] is True


def test_p1_says_what_the_floor_relay_costs_against_the_client_in_the_same_runs() -> None:
    # P1: the same 100 µs client; the floor relay drains at 120 and 150 µs per delivery
    result = _throughput([(100, 10000, 2000), (50, 10000, 2500)])
    result["runs"][0]["floor_relay_us_per_delivery"] = 120.0
    result["runs"][1]["floor_relay_us_per_delivery"] = 150.0
    figure = figures_speed.p1(result)
    assert figure is not None
    extra = figure["extra"]
    assert extra["floor_multiple_runs"] == [1.2, 1.5]
    assert extra["floor_multiple"] == 1.35
    assert extra["floor_relay_cpu_per_delivery_us"] == 135
    # the worker's 500 and 200 µs over the floor's 120 and 150
    assert extra["worker_over_floor"] == round((500 / 120 + 200 / 150) / 2, 2)
    without = figures_speed.p1(_throughput([(100, 10000, 2000)]))
    assert without is not None and "floor_multiple" not in without["extra"]


def _latency(rate: float, p99s: list[float], **floor: float) -> dict[str, Any]:
    medians = {"p50_ms": 3.0, "p95_ms": 8.0, "p99_ms": sorted(p99s)[1], **floor}
    runs = [{"p99_ms": p} for p in p99s]
    return {"scenario": "latency", "config": {"rate": rate}, "runs": runs, "medians": medians}


def test_p2_is_judged_against_the_floor_and_the_spread_of_the_runs() -> None:
    assert figures_speed.p2(_latency(300, [10, 11, 12])) is None  # not P2's rate
    within = figures_speed.p2(_latency(1000, [10, 11, 12], floor_p50_ms=2.5, floor_p99_ms=6.0))
    assert within is not None and within["met"] is True and within["value"] == 11
    spread = figures_speed.p2(_latency(1000, [10, 11, 30], floor_p50_ms=2.5, floor_p99_ms=6.0))
    assert spread is not None and spread["met"] is False  # 30 > 2 x 11
    no_floor = figures_speed.p2(_latency(1000, [10, 11, 12]))
    assert no_floor is not None and no_floor["met"] is False and "floor" in no_floor["note"]


def test_p2_shows_a_warm_up_run_beside_the_counted_runs_without_counting_it() -> None:
    result = _latency(1000, [10, 11, 12], floor_p50_ms=2.5, floor_p99_ms=6.0)
    result["warmup_runs"] = [{"p99_ms": 40.0}]
    figure = figures_speed.p2(result)
    assert figure is not None and figure["met"] is True and figure["value"] == 11
    assert figure["extra"]["warmup_p99_runs_ms"] == [40.0]
    assert figure["extra"]["worst_run_over_median_run"] == round(12 / 11, 2)
    assert figure["extra"]["worst_over_median_counting_warmup"] == round(40 / 11, 2)


def test_f7_and_q1_figures_carry_their_targets() -> None:
    runs = [{"p99_ratio": 1.5}, {"p99_ratio": 2.5}, {"p99_ratio": 1.9}]
    medians = {"p99_ratio": 1.9, "measured_p99_ms": 13.0, "baseline_p99_ms": 7.0}
    f7 = {"scenario": "flow-f7", "config": {"design": "alternating"}, "runs": runs}
    figure = figures.f7({**f7, "medians": medians})
    assert (
        figure is not None and figure["met"] is True and figure["extra"]["runs"] == [1.5, 2.5, 1.9]
    )
    slots = {**f7, "medians": medians, "config": {"big_delay_ms": 100}}
    assert figures.f7(slots) is None
    audit = {"duplicate_rate": 0.0023, "lost": 0, "duplicates": 232, "expected_pairs": 100000}
    report = {
        "audit": audit,
        "verdict": {},
        "timeline": {"kills": [{}] * 12, "broker_restart": {"at_s": 1}, "drained": True},
        "config": {"workers": 2},
    }
    q1 = figures.figure_of(report)
    assert q1 is not None and q1["id"] == "Q1" and q1["met"] is True and q1["value"] == 0.23
    lost = figures.q1({**report, "audit": {**audit, "lost": 1}})
    assert lost is not None and lost["met"] is False


def test_every_result_file_git_keeps_is_cited_by_the_summary_or_the_docs() -> None:
    tracked = summary.git_output("ls-files", "--", *summary.RESULT_ROOTS).splitlines()
    assert "bench/results/summary.json" in tracked
    cited = {e["results_file"] for e in summary.load()} | summary.cited_in_docs()
    assert [f for f in tracked if f != "bench/results/summary.json" and f not in cited] == []


def test_an_existing_result_file_is_recorded_with_the_commit_and_time_of_its_run(
    tmp_path: Path,
) -> None:
    """P1 from the official throughput run, recorded again from its file: the same entry the
    benchmark wrote when it ran (commit and time of the run, not of now)."""
    path = tmp_path / "summary.json"
    (entry,) = figures.record_file(summary.REPO / FILE, note="seeded", summary=path)
    (official,) = [e for e in summary.load() if e["id"] == "P1"]
    assert entry["id"] == "P1" and entry["results_file"] == FILE
    for key in ("value", "met", "commit", "date", "unit", "target"):
        assert entry[key] == official[key], key
    assert entry["extra"] == official["extra"] and entry["note"] == "seeded"
    with pytest.raises(SummaryError, match="no requirement figure"):
        figures.record_file(
            summary.REPO / "bench/results/tables-20261129T163300.json", summary=path
        )


def test_tools_recording_at_once_keep_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    ids = [f"F{n}" for n in range(1, 13)]
    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        list(pool.map(lambda entry_id: _record(path, entry_id), ids))
    assert [e["id"] for e in summary.load(path)] == sorted(ids)
