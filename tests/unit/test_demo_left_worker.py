"""A demo that was killed (kill -9, a lost terminal) leaves its worker running; the next demo
stops it before it deletes the demo's consumer groups, which a live member keeps ("The group is
not empty"). Only a process that runs the demo's worker command is stopped (SPEC §1)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.demo.state import stop_left_worker, worker_pid_file
from streams.settings import Settings, load_settings

# A stand-in for `python -m streams.cli worker`: the same command line, from a package of the
# same name placed first on sys.path (``-m`` puts the working directory there), that sleeps.
STAND_IN = "import time\ntime.sleep(120)\n"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "data", group_id="hookstream-demo")


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    package = tmp_path / "fake" / "streams" / "cli"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(STAND_IN)
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker"], cwd=package.parent.parent
    )
    time.sleep(0.5)  # its command line is in /proc from exec on; give the interpreter a moment
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(10)


def test_the_worker_a_killed_demo_left_is_stopped(
    settings: Settings, stand_in: subprocess.Popen[bytes]
) -> None:
    settings.data_dir.mkdir(parents=True)
    worker_pid_file(settings).write_text(f"{stand_in.pid}\n")
    assert stop_left_worker(settings, wait_s=10) == stand_in.pid
    assert stand_in.wait(10) == -15  # SIGTERM: the worker's own clean stop
    assert not worker_pid_file(settings).exists()


def test_a_pid_that_is_not_a_demo_worker_is_left_alone(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "60"])
    try:
        worker_pid_file(settings).write_text(f"{other.pid}\n")
        assert stop_left_worker(settings, wait_s=1) is None
        assert other.poll() is None
        assert not worker_pid_file(settings).exists()  # a stale file is forgotten
    finally:
        other.kill()
        other.wait(10)


def test_no_pid_file_or_a_garbled_one_stops_nothing(settings: Settings) -> None:
    assert stop_left_worker(settings) is None
    settings.data_dir.mkdir(parents=True)
    worker_pid_file(settings).write_text("not a pid\n")
    assert stop_left_worker(settings) is None
