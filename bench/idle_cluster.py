"""What a quiet fleet costs its Kafka cluster: three brokers' CPU beside idle workers.

    python -m bench.idle_cluster --runs 3
    python -m bench.idle_cluster --runs 3 --revision /tmp/before --revision .   (A/B, alternating)

A worker with nothing to deliver still fetches: its router, its dispatcher, the shared breakers'
reader, the registries, Faust's agents and the ledger reader each ask every broker that leads
one of their partitions for records, again as soon as the broker answers "none" after the
consumer's fetch wait. The broker pays for each ask, whether or not a record comes back, so an
idle installation keeps its cluster busy. This starts a three-node KRaft cluster of its own
(replication 3, `chaos.replicated`, the cluster chaos run's), measures the brokers' CPU with no
worker, then, for each ``--revision`` in turn and ``--runs`` times over (alternating, so the
box's drift falls on every side alike): starts ``--workers`` workers from that checkout, waits
``--settle`` seconds after they are ready, reads the brokers' and the workers' CPU from /proc
over ``--seconds``, and stops them. The first ``--warmup-runs`` rounds (one by default: the
brokers' JIT is still compiling) are kept in the result as ``warmup_runs``, not counted.
Reported per revision: the medians over runs of the three brokers' CPU together and of the
workers' together, in % of one core, and what the workers add to the brokers' idle figure
measured in the same round. Writes ``bench/results/idle-cluster-<time>.json``; no requirement
names an idle figure, so there is no summary.json entry (docs/benchmarks.md cites the file).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cpu import process_cpu_s, stat_fields
from bench.report import REPO, RESULTS_DIR, machine, write_json
from chaos.cluster import ClusterConfig, default_jars_dir
from chaos.cluster_run import free_port_range
from chaos.replicated import ReplicatedCluster
from tests.integration.workers import WorkerProcess


def cpu_percent(pids: list[int], seconds: float) -> dict[int, float]:
    """Each process' CPU over the next ``seconds``, in % of one core."""
    before = {pid: process_cpu_s(stat_fields(pid)) for pid in pids}
    began = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    return {pid: 100 * (process_cpu_s(stat_fields(pid)) - before[pid]) / took for pid in pids}


def start_workers(
    cluster: ReplicatedCluster, revision: Path, count: int, log_dir: Path
) -> list[WorkerProcess]:
    """``count`` workers whose code is ``revision``'s (their working directory, so its
    ``streams`` comes first on their path), each ready."""
    workers = [WorkerProcess(cluster.settings, f"w{n}", log_dir) for n in range(count)]
    for worker in workers:
        with worker.log_path.open("ab") as log:
            worker.proc = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", "worker"],
                env=worker.env,
                cwd=revision,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    for worker in workers:
        worker.wait_ready(300.0)
    return workers


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    config = ClusterConfig(
        work_dir=work, jars_dir=default_jars_dir(), kafka_port=free_port_range(), workers=0
    )
    runs: list[dict[str, Any]] = []
    with ReplicatedCluster(config, say=lambda message: print(message, flush=True)) as cluster:
        brokers = [pid for node in cluster.brokers.nodes.values() if (pid := node.running_pid())]
        time.sleep(args.settle)
        for run in range(-args.warmup_runs, args.runs):  # negative: a warm-up, not counted
            alone = sum(cpu_percent(brokers, args.seconds).values())
            for revision in args.revision:
                log_dir = work / f"workers-{len(runs)}"
                log_dir.mkdir(parents=True)
                workers = start_workers(cluster, revision, args.workers, log_dir)
                try:
                    time.sleep(args.settle)
                    pids = [w.proc.pid for w in workers if w.proc is not None]
                    used = cpu_percent(brokers + pids, args.seconds)
                finally:
                    for worker in workers:
                        worker.stop(30.0)
                beside = sum(used[pid] for pid in brokers)
                runs.append(
                    {
                        "run": run,
                        "revision": str(revision),
                        "brokers_alone_percent": round(alone, 1),
                        "brokers_percent": round(beside, 1),
                        "workers_percent": round(sum(used[pid] for pid in pids), 1),
                        "brokers_added_percent": round(beside - alone, 1),
                    }
                )
                print(json.dumps(runs[-1]), flush=True)
    return summarise(runs)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The counted rounds (``run`` >= 0), the warm-up rounds, and per revision the median of
    each figure over its counted rounds."""
    counted = [r for r in runs if r["run"] >= 0]
    warmup = [r for r in runs if r["run"] < 0]
    return {"runs": counted, "warmup_runs": warmup, "medians": medians(counted)}


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per revision, the median of each figure over its runs."""
    out: dict[str, dict[str, float]] = {}
    for revision in dict.fromkeys(r["revision"] for r in runs):
        mine = [r for r in runs if r["revision"] == revision]
        out[revision] = {
            key: round(statistics.median(r[key] for r in mine), 1)
            for key in mine[0]
            if key.endswith("_percent")
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cluster", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--warmup-runs", type=int, default=1, help="rounds first, reported but not counted"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    parser.add_argument("--settle", type=float, default=15.0, help="idle time before it")
    parser.add_argument(
        "--revision",
        type=Path,
        action="append",
        help="a checkout whose workers to measure (repeat to alternate); default this one",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    args.revision = [path.resolve() for path in (args.revision or [REPO])]
    work = Path(tempfile.mkdtemp(prefix="hookstream-idle-cluster-"))
    try:
        result = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    config = {k: v for k, v in vars(args).items() if k not in ("results_dir", "revision")}
    result = {
        "scenario": "idle-cluster",
        "machine": machine("bench.idle_cluster"),
        "config": {**config, "revision": [str(path) for path in args.revision]},
        **result,
    }
    path = write_json(result, args.results_dir)
    print(json.dumps({"medians": result["medians"], "results": str(path)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
