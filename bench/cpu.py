"""Where the box's CPU goes during a run: the broker, nginx, the bench and the whole machine.

The worker samples its own CPU (`bench.worker`). P1 is measured with the broker, nginx and the
bench on the same two cores, so a throughput figure means little without the share each of
them took. `BoxSampler` reads, every `SAMPLE_S` seconds, the CPU time of:

- ``broker``: the process listening on the bench's bootstrap port (`listening_pid`), so a second
  broker on the box (another cluster, another user's) is not counted; none when the bootstrap
  address is not on this machine, and its figure is then ``None``;
- ``nginx``: the receiver's master process and its workers;
- ``bench``: this process, the publisher (its sampler threads included);
- ``box``: all cores together, from ``/proc/stat``, so 200 means two cores fully busy.

Linux only (``/proc``), like the rest of the bench.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_S = 0.25
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Sample:
    at: float
    # group -> user + system CPU seconds so far (box: busy seconds); a group is missing from a
    # sample while none of its processes runs
    cpu_s: dict[str, float]


def stat_fields(pid: int | str) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (field 3 of the file is item 0 here)."""
    # the command name is in parentheses and may hold spaces; the fields after it are fixed
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu_s(fields: list[str]) -> float:
    """User + system CPU seconds of a process, from its `stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / TICKS


def percent_between(
    points: Sequence[tuple[float, float]], start: float, end: float
) -> float | None:
    """CPU use in % of one core between two wall-clock times, from (time, CPU seconds so far)
    samples: the first and last sample inside the window; None with fewer than two."""
    inside = [(at, cpu_s) for at, cpu_s in points if start <= at <= end]
    if len(inside) < 2:
        return None
    (first_at, first_cpu), (last_at, last_cpu) = inside[0], inside[-1]
    return 100.0 * (last_cpu - first_cpu) / max(last_at - first_at, 1e-9)


def _box_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / TICKS  # user .. steal; guest time is inside user


def _broker_pids() -> list[str]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"\0kafka.Kafka\0" in cmdline:
            pids.append(entry)
    return pids


def listening_links(table: str, port: int) -> set[str]:
    """``socket:[inode]`` links of the sockets listening on ``port`` in the text of
    ``/proc/net/tcp`` or ``tcp6``: rows in state ``0A`` (LISTEN) with that local port."""
    links: set[str] = set()
    for row in table.splitlines()[1:]:
        fields = row.split()
        listening = len(fields) > 9 and fields[3] == "0A"
        if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
            links.add(f"socket:[{fields[9]}]")
    return links


def listening_inodes(port: int) -> set[str]:
    """`listening_links` of this machine's IPv4 and IPv6 TCP tables."""
    links: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            links |= listening_links(Path(table).read_text(), port)
        except OSError:
            continue
    return links


def _holds(pid: str, links: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in links:
                return True
        except OSError:
            continue
    return False


def listening_pid(port: int) -> int | None:
    """The process with a TCP socket listening on ``port`` (any address), or None.

    The process is the one holding an fd that links to the socket's inode. Reading other users'
    fds needs root or the same user, as psutil's ``net_connections`` does.
    """
    links = listening_inodes(port)
    if not links:
        return None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _holds(entry, links):
            return int(entry)
    return None


def bootstrap_broker_pid(bootstrap: str) -> int | None:
    """The local process serving the first address of a ``host:port,...`` bootstrap list."""
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", ""):
        return None
    return listening_pid(int(port))


def local_broker_running() -> bool:
    """Whether a Kafka broker (``kafka.Kafka``) runs on this machine."""
    return bool(_broker_pids())


def _children(parent: int) -> list[str]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if int(stat_fields(entry)[1]) == parent:  # field 4 of stat: the parent pid
                kids.append(entry)
        except (OSError, IndexError, ValueError):
            continue
    return kids


def _cpu_s(pids: list[str]) -> float | None:
    total, seen = 0.0, False
    for pid in pids:
        try:
            total += process_cpu_s(stat_fields(pid))
        except OSError:
            continue  # exited between the listing and the read
        seen = True
    return total if seen else None


class BoxSampler:
    """Samples the broker's, nginx's, this process' and the whole box's CPU time on a thread of
    its own. ``broker_pid`` is the broker at the bench's bootstrap address (None: not here)."""

    def __init__(self, nginx_pid: int | None, broker_pid: int | None) -> None:
        self._nginx_pid = nginx_pid
        self._nginx_pids: list[str] = []
        self._broker_pids = [str(broker_pid)] if broker_pid is not None else []
        self._bench_pids = [str(os.getpid())]
        self.samples: list[_Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="box-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append(self._sample())
            if self._stop.wait(SAMPLE_S):
                return

    def _sample(self) -> _Sample:
        if self._nginx_pid is not None and not self._nginx_pids:
            kids = _children(self._nginx_pid)  # nginx forks its worker once it has started
            if kids:
                self._nginx_pids = [str(self._nginx_pid), *kids]
        cpu = {"box": _box_busy_s()}
        groups = (
            ("broker", self._broker_pids),
            ("nginx", self._nginx_pids),
            ("bench", self._bench_pids),
        )
        for name, pids in groups:
            value = _cpu_s(pids)
            if value is not None:
                cpu[name] = value
        return _Sample(time.time(), cpu)

    def percent(self, group: str, start: float, end: float) -> float | None:
        """``group``'s CPU between two wall-clock times, in % of one core (None: not seen)."""
        points = [(s.at, s.cpu_s[group]) for s in self.samples if group in s.cpu_s]
        return percent_between(points, start, end)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


#: (process, the run's key of its CPU %): what `per_delivery_us` reports
PROCESSES = (
    ("worker", "worker_cpu_percent"),
    ("broker", "broker_cpu_percent"),
    ("nginx", "nginx_cpu_percent"),
    ("publisher", "bench_cpu_percent"),
    ("box", "box_cpu_percent"),
)


def per_delivery_us(
    figures: Mapping[str, Any], deliveries_per_s: float | None
) -> dict[str, float | None]:
    """Each process' CPU per delivery in µs (``<process>_us_per_delivery``) from its CPU % of
    one core over a window in which ``deliveries_per_s`` arrived; None where either is unknown.
    ``worker`` is whatever ran in the worker's place (the floor relay in its runs)."""
    found: dict[str, float | None] = {}
    for name, key in PROCESSES:
        percent = figures.get(key)
        value = None
        if isinstance(percent, int | float) and deliveries_per_s:
            value = percent / 100 * 1e6 / deliveries_per_s
        found[f"{name}_us_per_delivery"] = value
    return found
