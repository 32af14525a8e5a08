"""`hookstream demo` fails when the scenario it shows did not happen (SPEC §1).

The demo is the README's first command. A run whose deliveries never settled, or whose gone
endpoint was never suspended, must exit non-zero, so neither a newcomer nor CI mistakes it for
a working pipeline.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.cli import demo as demo_cli
from streams.demo.run import Summary
from streams.demo.state import notable_log_lines

COMPLETE = Summary(
    published=30,
    expected_deliveries=60,
    delivered=40,
    attempts=112,
    retried_then_delivered=10,
    dead_lettered={"exhausted": 10, "http_404": 10},
    verified=112,
    bad_signatures=0,
    suspended={"sub_demo_gone": "auto_suspend:permanent:5"},
    notices=["endpoint.warning subscription_id=sub_demo_gone", "endpoint.suspended x"],
    seconds=12.0,
    settled=True,
)


def test_a_complete_run_has_no_shortfalls() -> None:
    assert COMPLETE.shortfalls() == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"settled": False, "delivered": 30}, "deliveries did not settle: 30 delivered, 20 dead"),
        ({"bad_signatures": 2}, "2 bad signatures"),
        ({"suspended": {}}, "sub_demo_gone was not suspended"),
        ({"notices": ["endpoint.warning x"]}, "no endpoint.suspended notice arrived"),
        ({"worker_exit": 1}, "the worker exited with code 1 during the demo"),
    ],
)
def test_each_missing_outcome_is_named(change: dict[str, object], expected: str) -> None:
    summary = dataclasses.replace(COMPLETE, **change)  # type: ignore[arg-type]
    assert [line for line in summary.shortfalls() if line.startswith(expected)], summary


@pytest.mark.parametrize("as_json", [False, True])
def test_the_command_exits_non_zero_when_the_demo_did_not_settle(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    stalled = dataclasses.replace(COMPLETE, settled=False, delivered=30)

    async def fake_run(per_type: int, say: object, keep: bool, **_: object) -> Summary:
        return stalled

    monkeypatch.setattr(demo_cli, "run_demo", fake_run)
    args = ["--events", "10", "--json"] if as_json else ["--events", "10"]
    result = CliRunner().invoke(demo_cli.demo, args)
    assert result.exit_code == 1
    assert "demo incomplete: deliveries did not settle" in result.stderr
    assert ('"delivered": 30' if as_json else "deliveries delivered (2xx)  30") in result.stdout


def test_the_command_exits_zero_when_the_demo_worked(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_run(per_type: int, say: object, keep: bool, **_: object) -> Summary:
        return COMPLETE

    monkeypatch.setattr(demo_cli, "run_demo", fake_run)
    result = CliRunner().invoke(demo_cli.demo, ["--events", "10"])
    assert result.exit_code == 0, result.output


#: A worker's logged traceback; the demo shows its last line, which says what broke.
TRACE = (
    'Traceback (most recent call last):\n  File "aiohttp/web_runner.py", line 138, in start\n'
    "OSError: [Errno 98] address already in use\n"
)


def test_a_short_demo_shows_the_worker_logs_warnings_and_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """§1: a demo that fell short says why, from its worker's log: its warnings, errors and
    group joins (a second join is a rebalance), not its routine lines."""
    log = tmp_path / "worker.log"
    joined = "Joined group 'g' (generation 2)"
    failed = "HealthOutcome not applied"
    lines = [
        {"ts": "t1", "level": "INFO", "logger": "faust.worker", "msg": "[^Worker]: Starting..."},
        {"ts": "t2", "level": "INFO", "logger": "aiokafka", "msg": joined},
        {"ts": "t3", "level": "ERROR", "logger": "health", "msg": failed, "subscription_id": "s1"},
        {"ts": "t4", "level": "ERROR", "logger": "faust.worker", "msg": "Error", "exc": TRACE},
    ]
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\nTraceback (most recent)\n")
    assert notable_log_lines(log) == [
        f"t2 INFO aiokafka: {joined}",
        f't3 ERROR health: {failed} {{"subscription_id": "s1"}}',
        't4 ERROR faust.worker: Error {"exc": "OSError: [Errno 98] address already in use"}',
        "Traceback (most recent)",
    ]
    assert notable_log_lines(log, limit=1) == ["Traceback (most recent)"]
    assert "could not be read" in notable_log_lines(tmp_path / "missing.log")[0]

    short = dataclasses.replace(
        COMPLETE, suspended={}, worker_log=str(log), worker_notes=notable_log_lines(log)
    )

    async def fake_run(per_type: int, say: object, keep: bool, **_: object) -> Summary:
        return short

    monkeypatch.setattr(demo_cli, "run_demo", fake_run)
    result = CliRunner().invoke(demo_cli.demo, ["--events", "10"])
    assert result.exit_code == 1
    assert f"the worker's warnings and errors ({log}):" in result.stderr
    assert f"  t3 ERROR health: {failed}" in result.stderr
