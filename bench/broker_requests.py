"""The broker's requests by kind during a run (SPEC P2, P1): what the broker's CPU is spent on.

The broker's CPU per delivery beside hookstream has been about twice what it is beside the floor
relay. Most of a broker's CPU goes per request, not per byte, so the run counts the requests the
broker served, by kind (Produce, Fetch, OffsetCommit, ...), over the same window as the CPU
figures, and reports them per delivery. The counts are Kafka's own
(`kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<kind>`, whose ``Count`` is
cumulative), read over JMX by ``bench/jmx/BrokerRequests.java``, which the JDK runs from source
(the broker's own Java, so nothing to build); it attaches to the broker's JVM by pid, which needs
the broker to be a local process of the same user (the bench's own broker always is).

Trade-offs: a sample every `SAMPLE_MS` costs the broker one JMX query of a few dozen meters;
the probe's own JVM took 1.7 s of CPU to start (compiling its source) and then 0.85% of a core,
which the box's CPU figure includes (measured beside the development broker, 2026-12-06); it
starts with the rig, before the worker is ready, and the rig waits for its first sample
(`wait_first`) before any window, so its start-up is outside every window. A JVM
that cannot be attached (another user's broker, a remote one)
leaves the figures out, and the run says so, rather than failing the run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Final

PROBE: Final = Path(__file__).with_name("jmx") / "BrokerRequests.java"
SAMPLE_MS: Final = 500
#: Request kinds that only split another one (Fetch = FetchConsumer + FetchFollower).
SUBSETS: Final = frozenset({"FetchConsumer", "FetchFollower"})


class BrokerRequests:
    """Samples a local broker's request counts on a JVM of the probe's own until `stop`."""

    def __init__(self, broker_pid: int, java: str | None = None) -> None:
        java = java or shutil.which("java")
        if java is None:
            raise RuntimeError("`java` is not on PATH: the broker's request counts need it")
        self.samples: list[tuple[float, dict[str, int]]] = []  # (Unix s, kind -> count)
        self.error = ""
        self._first = threading.Event()  # set at the first sample, or when the probe ends
        self._process = subprocess.Popen(
            [java, str(PROBE), str(broker_pid), str(SAMPLE_MS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, name="broker-requests", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        for line in stdout:
            if line.startswith("{"):
                sample = json.loads(line)
                self.samples.append((sample["t"] / 1000, sample["requests"]))
                self._first.set()
        if self._process.stderr is not None:  # the probe ended: keep why, for the run's log
            lines = self._process.stderr.read().strip().splitlines()
            self.error = lines[0] if lines else ""
        self._first.set()

    def wait_first(self, timeout_s: float) -> bool:
        """Wait until the probe has sampled once (or ended); whether it has sampled. Its JVM
        compiles the probe's source first: 1.5 s to the first sample on an idle box, 5.5 s with
        six busy loops on it, more beside a three-broker test in CI: longer than a short run's
        window."""
        self._first.wait(timeout_s)
        return bool(self.samples)

    def per_second(self, start: float, end: float) -> dict[str, float]:
        """Each request kind's rate between two wall-clock times (requests/s), from the first
        sample at or after ``start`` to the last at or before ``end``; {} without two."""
        return rates(self.samples, start, end)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
        self._thread.join(5)
        for pipe in (self._process.stdout, self._process.stderr):
            if pipe is not None:
                pipe.close()


def rates(
    samples: list[tuple[float, dict[str, int]]], start: float, end: float
) -> dict[str, float]:
    """Per-kind requests/s between the first sample at or after ``start`` and the last at or
    before ``end`` (``samples`` in time order); {} when fewer than two fall inside."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return {}
    (t0, first), (t1, last) = inside[0], inside[-1]
    seconds = t1 - t0
    found = {
        kind: (count - first.get(kind, 0)) / seconds
        for kind, count in last.items()
        if kind not in SUBSETS
    }
    return {kind: rate for kind, rate in found.items() if rate > 0}


def per_delivery(per_s: Mapping[str, float], deliveries_per_s: float) -> dict[str, float]:
    """Requests per delivery by kind, with ``total``; {} when either side is unknown."""
    if not per_s or deliveries_per_s <= 0:
        return {}
    found = {kind: rate / deliveries_per_s for kind, rate in sorted(per_s.items())}
    found["total"] = sum(found.values())
    return found


#: (the run's key, the request kind in `per_delivery`'s answer): the figures a row carries
FIGURES: Final = (
    ("broker_requests_per_delivery", "total"),
    ("broker_produce_requests_per_delivery", "Produce"),
    ("broker_fetch_requests_per_delivery", "Fetch"),
)


#: every key the figures add to a run: hookstream's side, then the floor's of the same run
RUN_KEYS: Final = (*(key for key, _ in FIGURES), *(f"floor_{key}" for key, _ in FIGURES))


def figures(requests: Mapping[str, float]) -> dict[str, float | None]:
    """A run's request figures (`FIGURES`) from `per_delivery`'s answer; None where missing."""
    return {key: requests.get(kind) for key, kind in FIGURES}


def floor_figures(floor: Mapping[str, Any]) -> dict[str, Any]:
    """The floor's request figures of the same run, under ``floor_`` keys beside hookstream's."""
    return {f"floor_{key}": floor.get(key) for key, _ in FIGURES}
