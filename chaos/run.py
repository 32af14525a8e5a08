"""The chaos run (SPEC Q1, D1): kill -9 workers and restart the broker under load, then audit.

    python -m chaos.run --deliveries 100000 --kills 12 --broker-restart --seed 7 \\
        --report chaos-report.json

Publishes events at ``--rate`` deliveries/s until ``--deliveries`` (event x matching
subscription pairs) are out. Starting with publishing, a random worker is killed with
``kill -9`` every 10-30 s (seeded) and started again, ``--kills`` times; with
``--broker-restart`` the broker is stopped and started once halfway through publishing. The
run then waits until the pipeline has drained (no lag on the ingest, live and retry topics and
no receiver traffic for ``--quiet`` seconds, within ``--drain-timeout``) and audits every pair
(`chaos.audit`). The exit status is 1 when a pair was lost or duplicates reached 1%.

A run of Q1's size (``--deliveries`` 100,000 or more, as ``make chaos``) also keeps its report
as ``chaos/results/chaos-<N>k-<time>.json`` and records Q1 in ``bench/results/summary.json``
(and the current figures of docs/benchmarks.md), unless ``--no-summary``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import record_or_say
from chaos.audit import audit, expected_pairs, read_recorded
from chaos.cluster import Cluster, ClusterConfig, default_jars_dir, free_port_pair
from chaos.farm import ReceiverFarm
from chaos.load import EventSource, Publisher, subscribe_all
from streams.adapters.lag import LagReader

DUPLICATE_TARGET = 0.01
TICK_S = 0.05
#: Q1 asks for a long run; smaller runs (CI's, trials) leave the summary alone.
Q1_MIN_DELIVERIES = 100_000
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class ChaosConfig:
    deliveries: int
    kills: int
    broker_restart: bool
    seed: int
    work_dir: Path
    jars_dir: Path
    rate: float = 400.0  # deliveries per second
    tenants: int = 4
    kill_interval: tuple[float, float] = (10.0, 30.0)
    quiet_s: float = 15.0
    drain_timeout_s: float = 900.0
    kafka_port: int = 0  # 0: any free pair


@dataclass
class Timeline:
    started_at: float = field(default_factory=time.monotonic)
    publish_began: float = 0.0  # unix time: every at_s of the report counts from here
    kills: list[dict[str, Any]] = field(default_factory=list)
    broker_restart: dict[str, Any] = field(default_factory=dict)
    publish_s: float = 0.0
    drain_s: float = 0.0
    drained: bool = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at


class FaultSchedule:
    """When to kill which worker and when to restart the broker, from one seeded RNG."""

    def __init__(self, config: ChaosConfig, rng: random.Random, workers: int) -> None:
        self._rng = rng
        self._workers = workers
        low, high = config.kill_interval
        at, self.kill_times = 0.0, []
        for _ in range(config.kills):
            at += rng.uniform(low, high)
            self.kill_times.append(at)
        publish_s = config.deliveries / config.rate
        self.broker_at = rng.uniform(0.4, 0.6) * publish_s if config.broker_restart else None

    def due_kill(self, elapsed_s: float) -> int | None:
        """The worker to kill now, if a kill is due."""
        if self.kill_times and elapsed_s >= self.kill_times[0]:
            self.kill_times.pop(0)
            return self._rng.randrange(self._workers)
        return None

    def due_broker(self, elapsed_s: float) -> bool:
        if self.broker_at is not None and elapsed_s >= self.broker_at:
            self.broker_at = None
            return True
        return False

    @property
    def pending(self) -> bool:
        return bool(self.kill_times) or self.broker_at is not None


def _say(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _lag(reader: LagReader) -> int:
    """Records not yet committed by the router and dispatcher groups."""
    report = reader.measure(with_age=False)
    return sum(p.lag for p in report.partitions if p.group.endswith(("-router", "-dispatch")))


class ChaosRun:
    def __init__(self, config: ChaosConfig, cluster: Cluster, farm: ReceiverFarm) -> None:
        self.config = config
        self.cluster = cluster
        self.farm = farm
        self.rng = random.Random(config.seed)
        self.timeline = Timeline()
        self._broker_thread: threading.Thread | None = None

    def _faults(self, schedule: FaultSchedule, t0: float) -> None:
        elapsed = time.monotonic() - t0
        victim = schedule.due_kill(elapsed)
        if victim is not None:
            pid = self.cluster.kill_and_restart(victim)
            self.timeline.kills.append({"at_s": round(elapsed, 1), "worker": victim, "pid": pid})
            _say(f"kill -9 worker{victim} (pid {pid}) at {elapsed:.0f}s, restarted")
        if schedule.due_broker(elapsed):
            _say(f"restarting the broker at {elapsed:.0f}s")
            self._broker_thread = threading.Thread(target=self._restart_broker, args=(elapsed,))
            self._broker_thread.start()
        if self._broker_thread is None or not self._broker_thread.is_alive():
            self.cluster.supervise(elapsed)

    def _restart_broker(self, at_s: float) -> None:
        self.timeline.broker_restart = {"at_s": round(at_s, 1), **self.cluster.restart_broker()}
        _say(f"broker back: {self.timeline.broker_restart}")

    def publish(self, publisher: Publisher, schedule: FaultSchedule) -> None:
        t0 = time.monotonic()
        self.timeline.publish_began = time.time()
        while publisher.deliveries < self.config.deliveries or schedule.pending:
            publisher.tick(self.config.deliveries)
            self._faults(schedule, t0)
            time.sleep(TICK_S)
        if self._broker_thread is not None:
            self._broker_thread.join()
        left = publisher.settle(120)
        if left:
            raise RuntimeError(f"{left} events were never acknowledged by the broker")
        self.timeline.publish_s = round(time.monotonic() - t0, 1)

    def drain(self) -> None:
        began = time.monotonic()
        deadline = began + self.config.drain_timeout_s
        reader = LagReader(self.cluster.settings)
        calm = 0
        while time.monotonic() < deadline:
            self.cluster.supervise(self.timeline.elapsed())
            quiet = time.time() - self.farm.last_request_at() >= self.config.quiet_s
            ready = self.cluster.all_ready()
            calm = calm + 1 if quiet and ready and _lag(reader) == 0 else 0
            if calm >= 2:
                self.timeline.drained = True
                break
            time.sleep(2)
        self.timeline.drain_s = round(time.monotonic() - began, 1)


def run_chaos(config: ChaosConfig) -> dict[str, Any]:
    """The whole scenario; returns the report (see the module docstring)."""
    port = config.kafka_port or free_port_pair()
    cluster_config = ClusterConfig(work_dir=config.work_dir, jars_dir=config.jars_dir)
    cluster_config = ClusterConfig(**{**asdict(cluster_config), "kafka_port": port})
    with ReceiverFarm(origins=3) as farm, Cluster(cluster_config, say=_say) as cluster:
        subscribe_all(cluster, farm, config.tenants)
        cluster.start_workers()
        _say(f"{len(cluster.workers)} workers ready, {len(cluster.subscriptions)} subscriptions")
        chaos = ChaosRun(config, cluster, farm)
        source = EventSource(cluster, uuid.uuid4().hex[:6], chaos.rng)
        publisher = Publisher(cluster, source, config.rate)
        chaos.publish(publisher, FaultSchedule(config, chaos.rng, len(cluster.workers)))
        _say(f"published {len(publisher.acked)} events ({publisher.deliveries} deliveries)")
        chaos.drain()
        _say(f"drained={chaos.timeline.drained} after {chaos.timeline.drain_s}s; auditing")
        pairs = expected_pairs(publisher.acked.values(), cluster.subscriptions)
        tally = farm.snapshot()
        recorded = read_recorded(cluster.settings)
        report = audit(pairs, publisher.acked, recorded, tally.ok, tally.statuses, tally.unsigned)
        found = report.as_dict()
        found["duplicates_by_10s"] = _buckets(tally.duplicate_at, chaos.timeline.publish_began)
        return _report(config, port, chaos, publisher, found)


def _buckets(times: list[float], origin: float, width_s: float = 10.0) -> dict[str, int]:
    """How many duplicates arrived in each window, in seconds since publishing began."""
    counts: dict[int, int] = {}
    for at in times:
        start = int((at - origin) // width_s * width_s)
        counts[start] = counts.get(start, 0) + 1
    return {f"{start}s": n for start, n in sorted(counts.items())}


def _report(
    config: ChaosConfig, port: int, chaos: ChaosRun, publisher: Publisher, found: dict[str, Any]
) -> dict[str, Any]:
    timeline = chaos.timeline
    busy_s = timeline.publish_s + timeline.drain_s - (config.quiet_s if timeline.drained else 0)
    passed = found["passed"] and found["duplicate_rate"] < DUPLICATE_TARGET and timeline.drained
    return {
        "config": {
            **{k: v for k, v in asdict(config).items() if k not in ("work_dir", "jars_dir")},
            "kafka_port": port,
            "retry_schedule": chaos.cluster.config.retry_schedule,
            "workers": len(chaos.cluster.workers),
            "subscriptions": len(chaos.cluster.subscriptions),
        },
        "timeline": {
            "kills": timeline.kills,
            "broker_restart": timeline.broker_restart,
            "unexpected_worker_exits": chaos.cluster.unexpected_exits,
            "publish_s": timeline.publish_s,
            "drain_s": timeline.drain_s,
            "drained": timeline.drained,
        },
        "publish": {
            "events": len(publisher.acked),
            "deliveries": publisher.deliveries,
            "republished_events": publisher.republished,
        },
        "throughput_deliveries_per_s": round(found["expected_pairs"] / busy_s, 1) if busy_s else 0,
        "audit": found,
        "verdict": {
            "lost_is_zero": found["lost"] == 0,
            "duplicate_rate_under_1pct": found["duplicate_rate"] < DUPLICATE_TARGET,
            "drained": timeline.drained,
            "passed": passed,
        },
    }


def _parse(argv: list[str] | None) -> tuple[ChaosConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=10000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--broker-restart", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=400.0, help="deliveries per second")
    parser.add_argument("--quiet", type=float, default=15.0, help="seconds without traffic")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--work-dir", type=Path, default=Path(".chaos"))
    parser.add_argument("--jars-dir", type=Path, default=None, help="the broker's jar cache")
    parser.add_argument("--kafka-port", type=int, default=0, help="0: any free port pair")
    parser.add_argument("--report", type=Path, default=Path("chaos-report.json"))
    parser.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    parser.add_argument(
        "--no-summary", action="store_true", help="leave chaos/results and summary.json alone"
    )
    args = parser.parse_args(argv)
    config = ChaosConfig(
        deliveries=args.deliveries,
        kills=args.kills,
        broker_restart=args.broker_restart,
        seed=args.seed,
        work_dir=args.work_dir.resolve() / f"run-{args.seed}-{uuid.uuid4().hex[:6]}",
        jars_dir=(args.jars_dir or default_jars_dir()).resolve(),
        rate=args.rate,
        quiet_s=args.quiet,
        drain_timeout_s=args.drain_timeout,
        kafka_port=args.kafka_port,
    )
    return config, args


def _keep_and_record(report: dict[str, Any], deliveries: int) -> None:
    """Keep a Q1-sized run's report where the summary can cite it, and record Q1."""
    if deliveries < Q1_MIN_DELIVERIES:
        _say(f"summary.json unchanged: Q1 needs a run of {Q1_MIN_DELIVERIES:,} deliveries")
        return
    kept = RESULTS / f"chaos-{deliveries // 1000}k-{time.strftime('%Y%m%dT%H%M%S')}.json"
    kept.write_text(json.dumps(report, indent=2) + "\n")
    record_or_say(report, kept, _say)


def main(argv: list[str] | None = None) -> int:
    config, args = _parse(argv)
    report_path: Path = args.report
    try:
        report = run_chaos(config)
    finally:
        if not args.keep:
            shutil.rmtree(config.work_dir, ignore_errors=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    if not args.no_summary:
        _keep_and_record(report, config.deliveries)
    audit_part = report["audit"]
    _say(
        f"lost={audit_part['lost']} duplicates={audit_part['duplicate_rate']:.4%} "
        f"states={audit_part['final_states']} -> {report_path}"
    )
    return 0 if report["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
