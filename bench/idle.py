"""What a worker costs with nothing to deliver, or at a moderate rate: its CPU, split by thread.

    python -m bench.idle --runs 3 --seconds 30
    PYTHONPATH=<a worktree> python -m bench.idle --runs 3     (another revision, the same way)
    python -m bench.idle --runs 3 --seconds 20 --rate 1000 --task-cpu

A worker with no traffic still polls Kafka: its lanes' consumers fetch, the idle-lane watch
asks for watermarks ten times a second, the Faust agents' consumer fetches, timers fire. That
cost is paid per second, not per delivery, so at a moderate rate it is a large part of the
worker's CPU per delivery (P2), and it is what every quiet worker of a fleet burns. This
starts the rig of `bench.e2e` (the run's own topics, one subscription to nginx, one worker) on
the broker at ``--bootstrap``, lets it settle for ``--settle`` seconds after its probe event
went through, then reads the worker's threads from /proc over ``--seconds``: the process' % of
one core, and that split into the event loop (the main thread), librdkafka's threads
(``rdk:*``) and the other threads (Faust's consumer thread, the lanes' read threads, the ledger
reader, RocksDB's). Figures are medians over runs. Writes ``bench/results/idle-<time>.json``
(``rate-<R>-<time>.json`` with ``--rate R``); no requirement names an idle figure, so there is
no summary.json entry (docs/benchmarks.md cites the file).

``--rate R`` publishes R events a second through the measured window instead (P2's publisher,
`bench.latency.latency_phase`, after ``--settle`` seconds and a 3 s warm-up at the same rate),
and adds each figure per delivery (µs): what the worker pays per delivery at P2's rate, to set
beside what it pays draining a backlog (P1). ``--task-cpu`` turns the worker's count of its event
loop's CPU by task on (``HOOKSTREAM_TASK_CPU``, about 7 µs more per delivery) and adds that
split per delivery (`bench.profile.per_delivery`): which tasks cost more per delivery when a
read brings a few records than when it brings hundreds.
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

from bench import profile
from bench.cpu import process_cpu_s, stat_fields
from bench.latency import latency_phase
from bench.nginx import nginx_receiver
from bench.report import RESULTS_DIR, machine, write_json
from bench.rig import Rig, RigConfig
from bench.scrape import scrape

GROUPS = ("event_loop", "librdkafka", "other_threads")
#: seconds published at ``--rate`` before the measured window, not counted
RATE_WARMUP_S = 3.0


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


def _config(args: argparse.Namespace) -> RigConfig:
    env = {"HOOKSTREAM_TASK_CPU": "true"} if args.task_cpu else {}
    return RigConfig(args.bootstrap, worker_env=env)


def one_run(args: argparse.Namespace, work: Path) -> dict[str, float]:
    with nginx_receiver() as receiver, Rig(_config(args), receiver, work) as rig:
        assert rig.worker is not None
        time.sleep(args.settle)
        if args.rate:
            latency_phase(rig, args.rate, RATE_WARMUP_S, 0.5, split=False)
        pid = rig.worker.pid
        tasks_before = _tasks(rig, args)
        before, began = thread_cpu_s(pid), time.monotonic()
        process_before = process_cpu_s(stat_fields(pid))
        if args.rate:
            delivered = latency_phase(rig, args.rate, args.seconds, 0.0, split=False)["delivered"]
        else:
            time.sleep(args.seconds)
            delivered = 0
        after, elapsed = thread_cpu_s(pid), time.monotonic() - began
        process_after = process_cpu_s(stat_fields(pid))
        tasks = _tasks(rig, args, tasks_before)
    run = {"worker_percent": 100 * (process_after - process_before) / elapsed}
    for group in GROUPS:  # threads that ended in the window are in the process' figure only
        run[f"{group}_percent"] = 100 * (after[group] - before[group]) / elapsed
    return with_per_delivery(run, elapsed, delivered, tasks or {})


def with_per_delivery(
    run: dict[str, float], elapsed_s: float, delivered: int, tasks: dict[str, float]
) -> dict[str, float]:
    """``run`` (each figure a % of one core over ``elapsed_s``) with each figure also in µs per
    delivery (``<group>_us``), and the event loop's CPU by task (``task <name> us``); ``run``
    alone when nothing was delivered (an idle run)."""
    if not delivered:
        return run
    out = {**run, "delivered": float(delivered)}
    for key, percent in run.items():
        if key.endswith("_percent"):
            out[key.removesuffix("_percent") + "_us"] = percent / 100 * elapsed_s * 1e6 / delivered
    for task, us in profile.per_delivery(tasks, delivered).items():
        out[f"task {task} us"] = us
    return out


def _tasks(
    rig: Rig, args: argparse.Namespace, before: dict[str, float] | None = None
) -> dict[str, float] | None:
    if not args.task_cpu:
        return None
    return profile.task_cpu(scrape(rig, profile.TASK_CPU_METRICS), before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    parser.add_argument("--settle", type=float, default=20.0, help="idle time before it")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--rate", type=float, default=0.0, help="events/s; 0: idle")
    parser.add_argument("--task-cpu", action="store_true", help="the event loop's CPU by task")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    load_before = list(os.getloadavg())
    runs = []
    with tempfile.TemporaryDirectory(prefix="hookstream-idle-") as tmp:
        for n in range(args.runs):
            runs.append(one_run(args, Path(tmp)))
            print(f"run {n + 1}: " + json.dumps({k: round(v, 2) for k, v in runs[-1].items()}))
    keys = [key for key in runs[0] if all(key in run for run in runs)]
    medians = {key: statistics.median(run[key] for run in runs) for key in keys}
    result: dict[str, Any] = {
        "scenario": f"rate-{args.rate:g}" if args.rate else "idle",
        "machine": machine("bench.idle"),
        "load_before": load_before,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": runs,
        "medians": medians,
    }
    path = write_json(result, args.results_dir)
    split = ", ".join(f"{group} {medians[f'{group}_percent']:.1f}%" for group in GROUPS)
    print(
        f"{result['scenario']}: the worker {medians['worker_percent']:.1f}% of a core, "
        f"median of {args.runs}: {split}"
    )
    if "worker_us" in medians:
        print(
            f"per delivery: the worker {medians['worker_us']:.0f} µs, the event loop "
            f"{medians['event_loop_us']:.0f}, librdkafka {medians['librdkafka_us']:.0f}, "
            f"the other threads {medians['other_threads_us']:.0f}"
        )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
