"""The soak (SPEC Q1, P6): a steady load for a long time, watching each worker's footprint.

    python -m chaos.soak --minutes 30 --rate 200 --report soak-report.json

The same installation as the chaos run (own broker, two workers, the receiver farm), without
faults. Every ``--interval`` seconds it samples, per worker: RSS (``VmRSS`` of
/proc/<pid>/status), open file descriptors (entries of /proc/<pid>/fd, also counted by kind)
and the size on disk of its data dir (the RocksDB tables). A series levels off when its slope
over the last third of the run is at most a quarter of its slope over the first third, or
below a small absolute floor (growth that would not matter in a week). The run ends with the
same audit as the chaos run, so nothing may be lost during the soak either.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from chaos.audit import audit, expected_pairs, read_recorded
from chaos.cluster import Cluster, ClusterConfig, default_jars_dir, free_port_pair
from chaos.farm import ReceiverFarm
from chaos.load import EventSource, Publisher, subscribe_all

# Growth per hour below which a series counts as flat whatever its shape.
FLOORS_PER_HOUR = {"rss_mib": 8.0, "fds": 5.0, "disk_mib": 16.0}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fd_kinds(pid: int) -> dict[str, int]:
    """Open descriptors by what they are: sockets (Kafka, receivers, peers), RocksDB table
    files (``.sst``), other files (RocksDB logs and manifests, the code), and pipes and event
    descriptors (the event loop, threads). Growth is then attributable, not just counted."""
    kinds = {"socket": 0, "sst": 0, "file": 0, "pipe_or_event": 0}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            target = os.readlink(f"{base}/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:"):
            kinds["socket"] += 1
        elif target.endswith(".sst"):
            kinds["sst"] += 1
        elif target.startswith("/"):
            kinds["file"] += 1
        else:
            kinds["pipe_or_event"] += 1
    return kinds


def disk_mib(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:
                continue  # compaction removed it meanwhile
    return total / 2**20


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600


def levels_off(points: list[tuple[float, float]], floor_per_hour: float) -> dict[str, Any]:
    """Compare the last third's slope with the first third's (see the module docstring)."""
    third = max(2, len(points) // 3)
    first, last = slope_per_hour(points[:third]), slope_per_hour(points[-third:])
    flat = last <= floor_per_hour or last <= 0.25 * max(first, 0.0)
    return {
        "first_third_per_hour": round(first, 2),
        "last_third_per_hour": round(last, 2),
        "start": round(points[0][1], 1) if points else None,
        "end": round(points[-1][1], 1) if points else None,
        "max": round(max(v for _, v in points), 1) if points else None,
        "levels_off": flat,
    }


def sample(cluster: Cluster, elapsed: float) -> list[dict[str, Any]]:
    rows = []
    for index, worker in enumerate(cluster.workers):
        if worker.proc is None or worker.proc.poll() is not None:
            continue
        pid = worker.proc.pid
        kinds = fd_kinds(pid)
        rows.append(
            {
                "t_s": round(elapsed, 1),
                "worker": index,
                "rss_mib": round(rss_mib(pid), 1),
                "fds": sum(kinds.values()),
                "fd_kinds": kinds,
                "disk_mib": round(disk_mib(worker.data_dir), 2),
            }
        )
    return rows


def run_soak(args: argparse.Namespace) -> dict[str, Any]:
    work_dir = args.work_dir.resolve() / f"soak-{uuid.uuid4().hex[:6]}"
    config = ClusterConfig(
        work_dir=work_dir,
        jars_dir=(args.jars_dir or default_jars_dir()).resolve(),
        kafka_port=args.kafka_port or free_port_pair(),
    )
    samples: list[dict[str, Any]] = []
    with ReceiverFarm(origins=3) as farm, Cluster(config) as cluster:
        subscribe_all(cluster, farm, tenants=4)
        cluster.start_workers()
        source = EventSource(cluster, uuid.uuid4().hex[:6], random.Random(args.seed))
        publisher = Publisher(cluster, source, args.rate)
        began = time.monotonic()
        end, next_sample = began + args.minutes * 60, began
        while time.monotonic() < end:
            publisher.tick(sys.maxsize)
            cluster.supervise(time.monotonic() - began)
            if time.monotonic() >= next_sample:
                samples += sample(cluster, time.monotonic() - began)
                next_sample += args.interval
            time.sleep(0.05)
        publisher.settle(120)
        time.sleep(30)  # let the last retries (1+2+4 s) and commits land before the audit
        pairs = expected_pairs(publisher.acked.values(), cluster.subscriptions)
        tally = farm.snapshot()
        found = audit(pairs, publisher.acked, read_recorded(cluster.settings), tally.ok, {})
        exits = cluster.unexpected_exits
    if not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    series = {
        f"worker{w}.{metric}": levels_off(
            [(s["t_s"], s[metric]) for s in samples if s["worker"] == w], floor
        )
        for w in range(config.workers)
        for metric, floor in FLOORS_PER_HOUR.items()
    }
    kinds = {
        f"worker{w}": {
            "start": first["fd_kinds"],
            "end": last["fd_kinds"],
        }
        for w in range(config.workers)
        for mine in [[s for s in samples if s["worker"] == w]]
        if mine
        for first, last in [(mine[0], mine[-1])]
    }
    return {
        "config": {"minutes": args.minutes, "rate": args.rate, "interval_s": args.interval},
        "deliveries": publisher.deliveries,
        "unexpected_worker_exits": exits,
        "series": series,
        "levels_off": all(s["levels_off"] for s in series.values()),
        "fd_kinds": kinds,
        "audit": {k: v for k, v in found.as_dict().items() if k != "lost_sample"},
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0, help="deliveries per second")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=Path(".chaos"))
    parser.add_argument("--jars-dir", type=Path, default=None)
    parser.add_argument("--kafka-port", type=int, default=0)
    parser.add_argument("--report", type=Path, default=Path("soak-report.json"))
    parser.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    args = parser.parse_args(argv)
    report = run_soak(args)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    for name, result in report["series"].items():
        print(f"{name}: {result}")
    for name, kinds in report["fd_kinds"].items():
        print(f"{name} fds by kind: {kinds['start']} -> {kinds['end']}")
    print(f"lost={report['audit']['lost']} levels_off={report['levels_off']} -> {args.report}")
    return 0 if report["levels_off"] and report["audit"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
