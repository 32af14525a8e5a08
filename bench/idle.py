"""What a worker costs with nothing to deliver: an idle worker's CPU, split by thread.

    python -m bench.idle --runs 3 --seconds 30
    PYTHONPATH=<a worktree> python -m bench.idle --runs 3     (another revision, the same way)

A worker with no traffic still polls Kafka: its lanes' consumers fetch, the idle-lane watch
asks for watermarks ten times a second, the Faust agents' consumer fetches, timers fire. That
cost is paid per second, not per delivery, so at a moderate rate it is a large part of the
worker's CPU per delivery (P2), and it is what every quiet worker of a fleet burns. This
starts the rig of `bench.e2e` (the run's own topics, one subscription to nginx, one worker) on
the broker at ``--bootstrap``, lets it settle for ``--settle`` seconds after its probe event
went through, then reads the worker's threads from /proc over ``--seconds``: the process' % of
one core, and that split into the event loop (the main thread), librdkafka's threads
(``rdk:*``) and the other threads (Faust's consumer thread, the lanes' read threads, the ledger
reader, RocksDB's). Figures are medians over runs. Writes ``bench/results/idle-<time>.json``;
no requirement names an idle figure, so there is no summary.json entry (docs/benchmarks.md
cites the file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cpu import process_cpu_s, stat_fields
from bench.nginx import nginx_receiver
from bench.report import RESULTS_DIR, machine, write_json
from bench.rig import Rig, RigConfig

GROUPS = ("event_loop", "librdkafka", "other_threads")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds so far of each group of ``pid``'s threads (see `GROUPS`)."""
    totals = dict.fromkeys(GROUPS, 0.0)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        used = process_cpu_s(raw.rsplit(")", 1)[1].split())
        if int(tid) == pid:
            totals["event_loop"] += used
        elif name.startswith("rdk:"):
            totals["librdkafka"] += used
        else:
            totals["other_threads"] += used
    return totals


def one_run(args: argparse.Namespace, work: Path) -> dict[str, float]:
    with nginx_receiver() as receiver, Rig(RigConfig(args.bootstrap), receiver, work) as rig:
        assert rig.worker is not None
        time.sleep(args.settle)
        pid = rig.worker.pid
        before, began = thread_cpu_s(pid), time.monotonic()
        process_before = process_cpu_s(stat_fields(pid))
        time.sleep(args.seconds)
        after, elapsed = thread_cpu_s(pid), time.monotonic() - began
        process_after = process_cpu_s(stat_fields(pid))
    run = {"worker_percent": 100 * (process_after - process_before) / elapsed}
    for group in GROUPS:  # threads that ended in the window are in the process' figure only
        run[f"{group}_percent"] = 100 * (after[group] - before[group]) / elapsed
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    parser.add_argument("--settle", type=float, default=20.0, help="idle time before it")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    load_before = list(os.getloadavg())
    runs = []
    with tempfile.TemporaryDirectory(prefix="hookstream-idle-") as tmp:
        for n in range(args.runs):
            runs.append(one_run(args, Path(tmp)))
            print(f"run {n + 1}: " + json.dumps({k: round(v, 2) for k, v in runs[-1].items()}))
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    result: dict[str, Any] = {
        "scenario": "idle",
        "machine": machine("bench.idle"),
        "load_before": load_before,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": runs,
        "medians": medians,
    }
    path = write_json(result, args.results_dir)
    split = ", ".join(f"{group} {medians[f'{group}_percent']:.1f}%" for group in GROUPS)
    print(
        f"idle worker: {medians['worker_percent']:.1f}% of a core, median of {args.runs}: {split}"
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
