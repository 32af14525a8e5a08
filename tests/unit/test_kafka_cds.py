"""The local broker's class archive, its files without a JVM (SPEC X2).

`tests/integration/test_local_kafka.py` starts a real broker that writes the archive at its
first clean stop and maps it at the next start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from streams.adapters import kafka_cds


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    jars, kafka = tmp_path / "jars", tmp_path / "kafka"
    jars.mkdir()
    kafka.mkdir()
    return jars, kafka


def _pending(kafka: Path) -> Path:
    return Path((kafka / kafka_cds.PENDING_NAME).read_text().strip())


def test_X2_without_an_archive_a_start_writes_one_at_exit_under_a_name_of_its_own(
    dirs: tuple[Path, Path],
) -> None:
    jars, kafka = dirs
    flags = kafka_cds.jvm_flags(jars, sys.executable, kafka)
    first = _pending(kafka)
    assert flags[0] == f"-XX:ArchiveClassesAtExit={first}"
    assert first.parent == jars and first.name.endswith(".part")
    assert any(flag.startswith("-Xlog:cds") for flag in flags)  # no warning per class in the log
    # a second node starting beside it (a cluster) writes another file
    other = jars.parent / "kafka2"
    other.mkdir()
    kafka_cds.jvm_flags(jars, sys.executable, other)
    assert _pending(other) != first


def test_X2_a_clean_stop_moves_the_archive_into_place_and_later_starts_map_it(
    dirs: tuple[Path, Path],
) -> None:
    jars, kafka = dirs
    kafka_cds.jvm_flags(jars, sys.executable, kafka)
    _pending(kafka).write_bytes(b"archive")  # what the JVM writes at its exit
    archive = kafka_cds.promote(kafka, clean_exit=True)
    assert archive == kafka_cds.archive_path(jars, sys.executable)
    assert archive.read_bytes() == b"archive"
    assert not (kafka / kafka_cds.PENDING_NAME).exists()
    assert list(jars.glob("*.part")) == []
    flags = kafka_cds.jvm_flags(jars, sys.executable, kafka)
    assert flags[0] == f"-XX:SharedArchiveFile={archive}"
    assert not (kafka / kafka_cds.PENDING_NAME).exists()


def test_X2_a_killed_broker_leaves_no_archive_and_no_part_file(dirs: tuple[Path, Path]) -> None:
    jars, kafka = dirs
    kafka_cds.jvm_flags(jars, sys.executable, kafka)
    pending = _pending(kafka)
    pending.write_bytes(b"cut sh")  # SIGKILL while it wrote
    assert kafka_cds.promote(kafka, clean_exit=False) is None
    assert not pending.exists()
    assert not kafka_cds.archive_path(jars, sys.executable).exists()


def test_X2_a_stop_that_wrote_nothing_or_had_no_marker_keeps_nothing(
    dirs: tuple[Path, Path],
) -> None:
    jars, kafka = dirs
    assert kafka_cds.promote(kafka, clean_exit=True) is None  # started before this feature
    kafka_cds.jvm_flags(jars, sys.executable, kafka)
    assert kafka_cds.promote(kafka, clean_exit=True) is None  # a JVM that could not dump
    assert list(jars.iterdir()) == []


def test_X2_a_start_after_a_crash_drops_the_crashed_runs_file(dirs: tuple[Path, Path]) -> None:
    jars, kafka = dirs
    kafka_cds.jvm_flags(jars, sys.executable, kafka)
    crashed = _pending(kafka)
    crashed.write_bytes(b"?")  # exited by itself: nobody called stop, nobody promoted it
    kafka_cds.jvm_flags(jars, sys.executable, kafka)
    assert not crashed.exists()
    assert _pending(kafka) != crashed


def test_X2_the_archive_is_named_by_the_jvm_it_was_made_with(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    jars, _kafka = dirs
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    first = kafka_cds.archive_path(jars, str(java))
    assert first == kafka_cds.archive_path(jars, str(java))
    os.utime(java, ns=(0, 1_000_000_000))  # an upgraded JVM: another file, made again
    assert kafka_cds.archive_path(jars, str(java)) != first
    assert first.parent == jars and first.suffix == ".jsa"
