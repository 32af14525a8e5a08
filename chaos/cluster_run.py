"""The cluster chaos run (SPEC Q1, D1): broker failover and rolling restarts on three brokers.

    python -m chaos.cluster_run --deliveries 50000 --seed 7 --report chaos/results/x.json

Starts a three-node KRaft cluster of its own (replication 3, ``min.insync.replicas`` 2,
`chaos.replicated`), three real ``hookstream worker`` processes and the receiver farm, then
publishes ``--deliveries`` (event x matching subscription pairs) at ``--rate`` per second while
it runs the faults in order, ``--gap`` seconds apart: ``--leader-kills`` times ``kill -9`` of
the leader of a busy partition, ``--failover-worker-kills`` times a worker's ``kill -9`` while a
killed node's partitions have no leader (`chaos.replicated`), a restart of the active
controller, a rolling restart of the three brokers, a rolling restart of the three workers.
With ``--recovery`` one more subscription is suspended under the faults and re-enabled before
the rolling restarts, and its backfill audited (`chaos.recovery_scenario`, H3, H5, R2).
Publishing goes on until both the deliveries are out and the faults are done. The run then
waits until the pipeline has drained and audits every pair as `chaos.run` does
(`chaos.audit`). Exit status 1 when a pair was lost, duplicates reached 1%, a fault failed or
a worker exited by itself.
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
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.audit import AuditReport, audit, expected_pairs, read_recorded
from chaos.cluster import ClusterConfig, default_jars_dir, free_port_pair, port_free
from chaos.cluster_summary import record_summary
from chaos.farm import ReceiverFarm
from chaos.load import EventSource, Publisher, subscribe_all
from chaos.recovery_check import audit_recovery, overlapping, read_recovery_records
from chaos.recovery_scenario import TENANT, RecoveryScenario, subscribe_down
from chaos.replicated import Faults, ReplicatedCluster
from chaos.run import DUPLICATE_TARGET, TICK_S
from streams.adapters.lag import LagReader
from streams.adapters.local_kafka import BROKER_HEAP

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class ClusterChaosConfig:
    deliveries: int
    seed: int
    work_dir: Path
    jars_dir: Path
    leader_kills: int = 3
    failover_worker_kills: int = 0  # `Faults.worker_kill_in_failover` steps, after the kills
    failover_kills_all: bool = False  # those steps kill every worker, not worker 0
    #: those steps start the killed node again and wait until it is back in sync; a run whose
    #: last fault is one, and that audits only what its workers lost, may leave it down
    failover_restore: bool = True
    controller_restart: bool = True
    broker_rolling: bool = True
    worker_rolling: bool = True
    workers: int = 3
    rate: float = 250.0  # deliveries per second
    gap_s: float = 20.0  # between two faults
    tenants: int = 4
    quiet_s: float = 15.0
    drain_timeout_s: float = 900.0
    kafka_port: int = 0  # 0: any free port; the nodes take six from there
    recovery: bool = False  # the recovery scenario (`chaos.recovery_scenario`)
    broker_jvm: tuple[str, ...] = BROKER_HEAP  # the nodes' heap and JIT/GC flags

    def __post_init__(self) -> None:
        if not self.failover_restore and (
            self.failover_worker_kills > 1 or self.controller_restart or self.broker_rolling
        ):
            raise ValueError(
                "failover_restore=False leaves a node down: at most one worker_kill_in_failover "
                "step, and no controller_restart or broker_rolling after it"
            )

    def steps(self) -> list[str]:
        steps = ["leader_kill"] * self.leader_kills
        steps += ["worker_kill_in_failover"] * self.failover_worker_kills
        steps += ["controller_restart"] if self.controller_restart else []
        steps += ["broker_rolling"] if self.broker_rolling else []
        steps += ["worker_rolling"] if self.worker_rolling else []
        return steps

    def before_rolling(self) -> int:
        """How many fault steps come before the first rolling restart."""
        steps = self.steps()
        rolling = [n for n, step in enumerate(steps) if step.endswith("_rolling")]
        return rolling[0] if rolling else len(steps)


def _say(message: str) -> None:
    print(f"[chaos-cluster {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port_range(ports: int = 6) -> int:
    """A port p such that p .. p+ports-1 are all free on loopback now."""
    for _ in range(50):
        base = free_port_pair()
        if base + ports < 65000 and all(port_free(base + n) for n in range(ports)):
            return base
    raise RuntimeError(f"no {ports} consecutive free loopback ports")


def _lag(reader: LagReader) -> int:
    report = reader.measure(with_age=False)
    return sum(p.lag for p in report.partitions if p.group.endswith(("-router", "-dispatch")))


def _publish(
    config: ClusterChaosConfig,
    cluster: ReplicatedCluster,
    publisher: Publisher,
    faults: Faults,
    recovery: RecoveryScenario | None,
) -> float:
    began = time.monotonic()
    faults.start(began)
    if recovery is not None:
        recovery.start(began)
    while (
        publisher.deliveries < config.deliveries
        or faults.running
        or (recovery is not None and recovery.running)
    ):
        # under load until the last fault is over (and the re-enable is done), even past the
        # requested deliveries
        loaded = faults.running or (recovery is not None and recovery.wants_load)
        publisher.tick(sys.maxsize if loaded else config.deliveries)
        cluster.supervise(time.monotonic() - began)
        time.sleep(TICK_S)
    faults.join()
    left = publisher.settle(300)
    if left:
        raise RuntimeError(f"{left} events were never acknowledged by the cluster")
    return time.monotonic() - began


def _drain(config: ClusterChaosConfig, cluster: ReplicatedCluster, farm: ReceiverFarm) -> bool:
    deadline = time.monotonic() + config.drain_timeout_s
    reader = LagReader(cluster.settings)
    calm = 0
    while time.monotonic() < deadline:
        cluster.supervise(0.0)
        quiet = time.time() - farm.last_request_at() >= config.quiet_s
        calm = calm + 1 if quiet and cluster.all_ready() and _lag(reader) == 0 else 0
        if calm >= 2:
            return True
        time.sleep(2)
    return False


def run_cluster_chaos(config: ClusterChaosConfig) -> dict[str, Any]:
    """The whole scenario; returns the report (see the module docstring)."""
    port = config.kafka_port or free_port_range()
    # A backfill job asks the worker holding the subscription's dead letters for them with the
    # installation's peer key, derived from the secret key the workers share (docs/api.md): no
    # operator key is set here, so the recovery scenario checks that too.
    cluster_config = ClusterConfig(
        work_dir=config.work_dir,
        jars_dir=config.jars_dir,
        kafka_port=port,
        workers=config.workers,
        broker_jvm=config.broker_jvm,
    )
    rng = random.Random(config.seed)
    # a worker that dies of a signal leaves the Python stack of every thread in its log
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    with (
        ReceiverFarm(origins=3) as farm,
        ReplicatedCluster(cluster_config, say=_say) as cluster,
    ):
        subscribe_all(cluster, farm, config.tenants)
        down = subscribe_down(cluster, farm) if config.recovery else None
        _say(f"{len(cluster.subscriptions)} subscriptions made")
        cluster.start_workers(300.0)
        _say(f"{len(cluster.workers)} workers ready on {cluster.brokers.bootstrap}")
        source = EventSource(cluster, uuid.uuid4().hex[:6], rng)
        publisher = Publisher(cluster, source, config.rate)
        faults = Faults(
            cluster,
            config.steps(),
            config.gap_s,
            _say,
            config.failover_kills_all,
            restore=config.failover_restore,
        )
        scenario = None
        if down is not None:
            cut = config.before_rolling()
            scenario = RecoveryScenario(
                cluster,
                farm,
                source,
                down,
                lambda: len(faults.records) >= cut or not faults.running,
                _say,
            )
        publish_began = time.time()
        publish_s = _publish(config, cluster, publisher, faults, scenario)
        _say(f"published {len(publisher.acked)} events ({publisher.deliveries} deliveries)")
        drain_began = time.monotonic()
        drained = _drain(config, cluster, farm)
        drain_s = time.monotonic() - drain_began
        _say(f"drained={drained} after {drain_s:.0f}s; auditing")
        pairs = expected_pairs(publisher.acked.values(), cluster.subscriptions)
        tally = farm.snapshot()
        recorded = read_recorded(cluster.settings)
        found = audit(pairs, publisher.acked, recorded, tally.ok, tally.statuses, tally.unsigned)
        result = found.as_dict()
        result["duplicates_by_10s"] = _buckets(tally.duplicate_at, publish_began)
        names = {sub.id: sub.name for sub in cluster.subscriptions}
        result["lost_sample_subscriptions"] = dict(
            Counter(names[pairs[did][1]] for did in found.lost_sample)
        )
        recovery: dict[str, Any] | None = None
        if scenario is not None and down is not None:
            records = read_recovery_records(
                cluster.settings, TENANT, down.id, recorded.dead_letters
            )
            mine = {did: event for did, (event, sub) in pairs.items() if sub == down.id}
            found_recovery = audit_recovery(
                down.id, mine, records, tally.ok, tally.notices, scenario.error
            )
            recovery = {
                **found_recovery.as_dict(),
                "timeline": scenario.timeline,
                "faults_during_backfill": overlapping(faults.records, scenario.timeline),
            }
        busy_s = publish_s + drain_s - (config.quiet_s if drained else 0)
        faults_done = faults.error is None and len(faults.records) == len(config.steps())
        return {
            "config": {
                **{k: v for k, v in asdict(config).items() if k not in ("work_dir", "jars_dir")},
                "kafka_port": port,
                "bootstrap": cluster.brokers.bootstrap,
                "subscriptions": len(cluster.subscriptions),
            },
            "faults": faults.records,
            "fault_error": faults.error,
            "unexpected_worker_exits": cluster.unexpected_exits,
            "crash_logs": cluster.crash_logs,
            "publish": {
                "events": len(publisher.acked),
                "deliveries": publisher.deliveries,
                "republished_events": publisher.republished,
                "publish_s": round(publish_s, 1),
            },
            "drain_s": round(drain_s, 1),
            "drained": drained,
            "throughput_deliveries_per_s": round(len(pairs) / busy_s, 1) if busy_s else 0,
            "audit": result,
            **({"recovery": recovery} if recovery is not None else {}),
            "verdict": verdict(
                found,
                drained,
                faults_done,
                len(cluster.unexpected_exits),
                None if recovery is None else recovery["checks"],
            ),
        }


def verdict(
    found: AuditReport,
    drained: bool,
    faults_done: bool,
    crashes: int,
    recovery: dict[str, bool] | None = None,
) -> dict[str, bool]:
    """Whether the run passed: nothing lost (D1), duplicates under 1% (Q1), every fault done,
    the pipeline drained, no worker exited by itself and, with the recovery scenario, its
    checks (`chaos.recovery_check`: H3, H5, R2)."""
    checks = {
        "lost_is_zero": found.lost == 0,
        "duplicate_rate_under_1pct": found.duplicate_rate < DUPLICATE_TARGET,
        "faults_done": faults_done,
        "drained": drained,
        "no_worker_crashed": crashes == 0,
        **(recovery or {}),
    }
    return {**checks, "passed": all(checks.values())}


def _buckets(times: list[float], origin: float, width_s: float = 10.0) -> dict[str, int]:
    counts: dict[int, int] = {}
    for at in times:
        start = int((at - origin) // width_s * width_s)
        counts[start] = counts.get(start, 0) + 1
    return {f"{start}s": n for start, n in sorted(counts.items())}


def _parse(argv: list[str] | None) -> tuple[ClusterChaosConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.cluster_run", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--deliveries", type=int, default=50000)
    parser.add_argument("--leader-kills", type=int, default=3)
    parser.add_argument("--failover-worker-kills", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=250.0, help="deliveries per second")
    parser.add_argument("--gap", type=float, default=20.0, help="seconds between faults")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--work-dir", type=Path, default=Path(".chaos"))
    parser.add_argument("--jars-dir", type=Path, default=None, help="the broker's jar cache")
    parser.add_argument("--report", type=Path, default=None, help="default: chaos/results/")
    parser.add_argument("--summary", action="store_true", help="record Q1-cluster")
    parser.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    parser.add_argument(
        "--recovery", action="store_true", help="suspend, re-enable and backfill one subscription"
    )
    args = parser.parse_args(argv)
    config = ClusterChaosConfig(
        deliveries=args.deliveries,
        seed=args.seed,
        work_dir=args.work_dir.resolve() / f"cluster-{args.seed}-{uuid.uuid4().hex[:6]}",
        jars_dir=(args.jars_dir or default_jars_dir()).resolve(),
        leader_kills=args.leader_kills,
        failover_worker_kills=args.failover_worker_kills,
        rate=args.rate,
        gap_s=args.gap,
        drain_timeout_s=args.drain_timeout,
        recovery=args.recovery,
    )
    return config, args


def main(argv: list[str] | None = None) -> int:
    config, args = _parse(argv)
    stamp = time.strftime("%Y%m%dT%H%M", time.gmtime())
    report_path: Path = args.report or RESULTS / f"chaos-cluster-{stamp}.json"
    try:
        report = run_cluster_chaos(config)
    finally:
        if not args.keep:
            shutil.rmtree(config.work_dir, ignore_errors=True)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    found = report["audit"]
    _say(f"lost={found['lost']} duplicates={found['duplicate_rate']:.4%} -> {report_path}")
    if args.summary:
        record_summary(report, report_path)
    return 0 if report["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
