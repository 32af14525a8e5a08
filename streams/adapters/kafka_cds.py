"""A class-data-sharing archive of the local broker's classes, for a faster start (SPEC X2).

A Kafka node loads and verifies thousands of classes from 46 jars each time it starts; Java's
dynamic AppCDS archives (JEP 350, Java 13+) map them, parsed and verified, from one file instead.
The first broker started without an archive runs with ``-XX:ArchiveClassesAtExit``, and its
first clean stop (SIGTERM, exit without a SIGKILL) moves what the JVM wrote at exit into place;
every later start on the same jars and the same JVM maps it. Nothing changes in what the broker
does, only how it loads its classes; a missing, stale or unreadable archive only means a start
without it (``-Xshare:auto``, Java's default).

Measured with ``python -m bench.broker_start`` (docs/benchmarks.md, "The local broker's
start"): a single node's start, launch to its first metadata answer, 4.30 -> 2.49 s at the
median of 7 alternating starts a side; a node of the three-broker cluster restarted under the
cluster test's load, where a CI run starts most of its brokers, 28-36 s before and 16-32 s with
it in one run each.

The archive is kept beside the jars it was made from, named by the JVM it was made with, so a
new JVM or a new set of jars (a changed pom resolves into a new jars dir) starts without it
and makes its own. The JVM's CDS logging (a warning per class it cannot archive) is turned off:
it would fill the broker's log at the first stop.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Beside the pid file: the archive this run of the broker writes at exit, if it writes one.
PENDING_NAME = "kafka.cds-pending"
_QUIET = "-Xlog:cds*=off"  # every tag set that starts with cds, cds+dynamic too


def archive_path(jars_dir: Path, java: str) -> Path:
    """Where the archive of ``jars_dir``'s classes, as ``java`` loads them, is kept."""
    real = os.path.realpath(java)
    stat = os.stat(real)
    key = hashlib.sha256(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    return jars_dir / f"classes-{key[:16]}.jsa"


def jvm_flags(jars_dir: Path, java: str, kafka_dir: Path) -> tuple[str, ...]:
    """The flags of one broker start: map the archive, or write one at this run's exit.

    A run that writes one names its file in ``kafka_dir`` (`PENDING_NAME`), where `promote`
    finds it once the broker has stopped cleanly; each run writes a file of its own, so nodes
    of a cluster that start together never write the same file.
    """
    archive = archive_path(jars_dir, java)
    marker = kafka_dir / PENDING_NAME
    left = _take_pending(marker)  # a run that ended without `promote` (it crashed, was killed)
    if left is not None:
        left.unlink(missing_ok=True)
    if archive.is_file():
        return (f"-XX:SharedArchiveFile={archive}", _QUIET)
    pending = archive.with_name(f"{archive.name}.{os.getpid()}.{os.urandom(4).hex()}.part")
    marker.write_text(f"{pending}\n")
    return (f"-XX:ArchiveClassesAtExit={pending}", _QUIET)


def promote(kafka_dir: Path, clean_exit: bool) -> Path | None:
    """After a broker of ``kafka_dir`` stopped: move the archive it wrote at exit into place.

    Only after a clean exit: a JVM killed while it wrote the file leaves it cut short, and that
    file is removed instead. Returns the archive, when one was moved into place.
    """
    pending = _take_pending(kafka_dir / PENDING_NAME)
    if pending is None or not pending.is_file():
        return None
    if not clean_exit or pending.stat().st_size == 0:
        pending.unlink(missing_ok=True)
        return None
    archive = pending.with_name(pending.name.split(".jsa.", 1)[0] + ".jsa")
    os.replace(pending, archive)  # atomic: a node starting now maps the old file or this one
    return archive


def _take_pending(marker: Path) -> Path | None:
    """The archive file a run named in ``marker``, which is removed; None without one."""
    try:
        pending = Path(marker.read_text().strip())
    except FileNotFoundError:
        return None
    marker.unlink(missing_ok=True)
    return pending if pending.name.endswith(".part") else None
