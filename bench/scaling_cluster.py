"""X4 on a three-broker cluster: 1, 2 and 3 workers, and a worker's failover. See docs/capacity.md.

    python -m bench.scaling_cluster --runs 3 --events 4000

The module starts a three-node KRaft cluster of its own on one machine, as the cluster chaos run
does (`LocalCluster`, topics.yaml with replication 3 and ``min.insync.replicas`` 2 through
`write_replicated_topics`), on free loopback ports away from the shared broker, and stops it
at the end. On it runs one `bench.rig.Rig` (topics, nginx receiver, worker 0) with the tenants
and subscriptions of `bench.scaling.Scale`, spread over every partition of ``events`` and
``routed``. The rig is kept for every run: creating and deleting the replicated topics for each
run would take most of the time budget. Each run uses its own event ids.

Throughput: runs alternate 1, 2, 3, 1, 2, 3, ... workers in the same group. Extra workers are
started (each on its own data dir, kept between runs), the run waits until the router's and the
dispatcher's groups have one member per worker, each holding partitions, warms every worker's
registry, publishes ``--events`` at once and takes deliveries/s over the steady window as
`bench.scaling.measure` does. Reported: every run, the median per worker count, and the ratios
of the 2- and 3-worker medians to the 1-worker median.

Failover: with three workers and ``--rate`` events/s spread over ``--failover-tenants`` tenants
(two per partition of ``events`` and of ``routed`` by default), the run ``kill -9``s worker 1 or
2 (in turn; worker 0 is the rig's). The partitions it held are taken **from the groups**: the
router's and the dispatcher's groups are described just before the kill, and the member that is
gone once each group is stable again is the killed worker's (a live member keeps its member
id). A subscription is the killed worker's when its tenant's ``events`` partition or its own
``routed`` partition was. Its failover is the time from the kill to its first delivery that
arrived more than `GRACE_S` after it (requests the dying worker had already sent are logged
up to a few ms after the kill); the kill's figure is the largest over its subscriptions, the
time until **all** its partitions deliver again. The other subscriptions' figure is reported
beside it. Publishing goes on `TAIL_S` after that, then every pair published during the kill's
window is waited for: lost = published pairs - distinct delivery ids received. Then the worker
is started again on its data dir and the next kill waits until the groups have three members.

What the ratios can show on this box: the machine has two cores. Three Kafka JVMs, up to
three workers, nginx and the publisher share them (and other runs on the box, see the load
averages in the result). So a ratio near or below 1 does not mean hookstream does not scale,
and a ratio above 1 would not be a real speed-up measurement. What it shows: the partitions
split over 1, 2 and 3 workers on a replicated cluster, every delivery arrives, and there is no
coordination cost that grows with the worker count (the ratio does not collapse as workers are
added). Real scaling needs a core per worker and the brokers elsewhere. The failover time is
dominated by the consumer session timeout (10 s, `streams.adapters.kafka_clients`) plus the
rebalance, which the box's load lengthens. Nothing here asserts on a number.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.e2e import ceiling, say
from bench.failover import Workers, one_kill
from bench.nginx import Nginx, nginx_receiver
from bench.report import RESULTS_DIR, fmt, machine, median_of, write_json
from bench.rig import Rig, RigConfig
from bench.scaling import Scale, measure
from bench.summary import record
from chaos.cluster import default_jars_dir
from chaos.cluster_run import free_port_range
from streams.adapters.local_cluster import LocalCluster, write_replicated_topics
from streams.errors import HookstreamError
from streams.settings import load_settings

WORKER_COUNTS = (1, 2, 3)


# --- pure parts (tests/unit/test_bench_scaling_cluster.py) ------------------------------------
def medians_and_ratios(runs: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Median deliveries/s per worker count and the 2/1 and 3/1 ratios of the medians; failed
    runs (no ``deliveries_per_s``) do not count."""
    done = [dict(r) for r in runs]
    out: dict[str, float | None] = {}
    for workers in WORKER_COUNTS:
        out[f"deliveries_per_s_{workers}w"] = median_of(
            [r for r in done if r.get("workers") == workers], "deliveries_per_s"
        )
    one = out["deliveries_per_s_1w"]
    for workers in WORKER_COUNTS[1:]:
        many = out[f"deliveries_per_s_{workers}w"]
        out[f"ratio_{workers}_1"] = many / one if one and many is not None else None
    return out


def new_run(pool: Workers, tag: str) -> None:
    """Event ids of a run of their own: `Scale` names its events after ``rig.run_id``."""
    pool.scale.rig.run_id = f"{pool.base}r{tag}"


def throughput_run(
    args: argparse.Namespace, scale: Scale, pool: Workers, n: int, workers: int
) -> dict[str, Any]:
    pool.resize(workers)
    split_s = scale.wait_split()
    new_run(pool, f"{n}w{workers}")
    scale.warm_up()
    raw = ceiling(scale.rig.receiver, args.ceiling_seconds)
    run = measure(scale, args.events)
    run.update({"run": n, "ceiling_rps": raw, "group_split_s": split_s})
    return run


# --- the whole benchmark ----------------------------------------------------------------------
def run_all(
    args: argparse.Namespace, bootstrap: str, topics: Path, receiver: Nginx, work: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The throughput runs, then the kills, on one rig against the cluster at ``bootstrap``."""
    config = RigConfig(
        bootstrap=bootstrap, concurrency=args.concurrency, batch_size=args.batch_size
    )
    rig = Rig(config, receiver, work)
    rig.settings = rig.settings.model_copy(update={"topics_file": topics})  # replication 3
    runs: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    with rig:
        scale = Scale(rig, args.tenants)
        pool = Workers(scale, work)
        try:
            for n in range(1, args.runs + 1):
                for workers in WORKER_COUNTS:
                    try:
                        run = throughput_run(args, scale, pool, n, workers)
                    except (RuntimeError, HookstreamError) as exc:  # keep the finished runs
                        say(f"run {n}, {workers} worker(s) failed: {exc}")
                        runs.append({"run": n, "workers": workers, "error": str(exc)})
                        continue
                    runs.append(run)
                    say(
                        f"run {n}, {workers} worker(s): {fmt(run.get('deliveries_per_s'))} "
                        f"deliveries/s ({run['delivered']}/{run['events']}), split in "
                        f"{run['group_split_s']:.1f}s, worker CPU "
                        f"{[fmt(c, '%') for c in run.get('worker_cpu_percent', [])]}, "
                        f"load {os.getloadavg()[0]:.1f}"
                    )
            pool.resize(3)
            scale.wait_split()
            new_run(pool, "warm3")
            scale.warm_up()
            for n in range(1, args.kills + 1):
                try:
                    kill = one_kill(args, scale, pool, n)
                except (RuntimeError, HookstreamError) as exc:
                    say(f"kill {n} failed: {exc}")
                    kills.append({"kill": n, "error": str(exc)})
                    continue
                kills.append(kill)
                say(
                    f"kill {n} (worker {kill['worker']}): its partitions delivered again after "
                    f"{fmt(kill['failover_s'], ' s', 1)} (groups rebalanced after "
                    f"{fmt(kill['rebalanced_s'], ' s', 1)}), others' largest gap "
                    f"{fmt(kill.get('others_max_gap_s'), ' s', 1)}; {kill['delivered_distinct']}/"
                    f"{kill['published_pairs']} pairs, lost {kill['lost']}, duplicates "
                    f"{kill['duplicates']}"
                )
        finally:
            pool.resize(1)
    return runs, kills


def summarize(runs: list[dict[str, Any]], kills: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = dict(medians_and_ratios(runs))
    failovers = [k["failover_s"] for k in kills if isinstance(k.get("failover_s"), float)]
    figures["failover_s"] = failovers
    figures["failover_median_s"] = statistics.median(failovers) if failovers else None
    figures["failover_lost"] = sum(k.get("lost", 0) for k in kills)
    figures["failover_duplicates"] = sum(k.get("duplicates", 0) for k in kills)
    complete = all("error" not in r and r["delivered"] == r["events"] for r in runs)
    figures["all_delivered"] = complete and bool(runs)
    figures["failovers_complete"] = bool(kills) and len(failovers) == len(kills)
    return figures


def record_summary(path: Path, figures: dict[str, Any], result: dict[str, Any]) -> None:
    """The ``X4-cluster`` entry: the 3-worker/1-worker ratio (the cluster's full group)."""
    ratio = figures["ratio_3_1"]
    if ratio is None:
        say("no 3/1 ratio: X4-cluster not recorded")
        return
    loads = [r["load_average"][0] for r in result["runs"] if "load_average" in r]
    entry = record(
        "X4-cluster",
        value=round(ratio, 2),
        unit="x the 1-worker deliveries/s with 3 workers, 3 brokers (median of runs)",
        target="no figure in X4: 2+ workers split the partitions; here every delivery arrives "
        "and a worker's kill -9 loses nothing",
        met=figures["all_delivered"]
        and figures["failovers_complete"]
        and figures["failover_lost"] == 0,
        results_file=path,
        extra={
            "ratio_2_1": None if figures["ratio_2_1"] is None else round(figures["ratio_2_1"], 2),
            **{
                f"median_{w}w_per_s": None
                if figures[f"deliveries_per_s_{w}w"] is None
                else round(figures[f"deliveries_per_s_{w}w"])
                for w in WORKER_COUNTS
            },
            "failover_s": [round(f, 1) for f in figures["failover_s"]],
            "failover_lost": figures["failover_lost"],
            "load_1m": [round(min(loads), 1), round(max(loads), 1)] if loads else None,
        },
        note="2 cores shared by 3 Kafka JVMs and up to 3 workers: the ratio shows the "
        "partitions split without a cost growing with workers, not real scaling.",
    )
    say(f"summary: {entry['id']} = {entry['value']} {entry['unit']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling_cluster", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count")
    parser.add_argument("--events", type=int, default=4_000, help="events per run")
    parser.add_argument("--tenants", type=int, default=120, help="tenants, one subscription each")
    parser.add_argument("--kills", type=int, default=3, help="kill -9s of a worker")
    parser.add_argument("--rate", type=float, default=150.0, help="events/s during the kills")
    parser.add_argument(
        "--failover-tenants", type=int, default=24, help="tenants the kills' events go to"
    )
    parser.add_argument("--concurrency", type=int, default=256, help="dispatch concurrency")
    parser.add_argument("--batch-size", type=int, default=500, help="dispatch batch size")
    parser.add_argument("--ceiling-seconds", type=float, default=3.0)
    parser.add_argument("--kafka-port", type=int, default=0, help="node 1's port (0: free ones)")
    parser.add_argument("--jars-dir", type=Path, default=None, help="the broker's jar cache")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--no-summary", action="store_true", help="do not record X4-cluster in summary.json"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = list(os.getloadavg())
    say(f"scaling on a cluster: {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    with (
        tempfile.TemporaryDirectory(prefix="hookstream-scaling-cluster-") as tmp,
        nginx_receiver() as receiver,
    ):
        work = Path(tmp)
        port = args.kafka_port or free_port_range()
        node_settings = load_settings(kafka_bootstrap=f"127.0.0.1:{port}", data_dir=work / "kafka")
        brokers = LocalCluster(
            node_settings,
            3,
            jars_dir=args.jars_dir or default_jars_dir(),
            say=say,
            ready_timeout=300.0,
        )
        started = brokers.start()
        say(f"cluster up at {started.bootstrap} in {started.seconds:.1f}s")
        try:
            topics = write_replicated_topics(
                load_settings().topics_file, work / "topics-replicated.yaml"
            )
            runs, kills = run_all(args, brokers.bootstrap, topics, receiver, work)
        finally:
            brokers.stop()
    figures = summarize(runs, kills)
    info = machine("bench.scaling_cluster")
    result = {
        "scenario": "scaling-cluster",
        "machine": info,
        "load_before": load_before,
        "cluster": {"brokers": 3, "replication": 3, "min_insync_replicas": 2},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "runs": runs,
        "kills": kills,
        "figures": figures,
    }
    path = write_json(result, args.results_dir)
    say(f"results: {path}")
    say(
        f"median deliveries/s: 1 worker {fmt(figures['deliveries_per_s_1w'])}, 2 workers "
        f"{fmt(figures['deliveries_per_s_2w'])}, 3 workers {fmt(figures['deliveries_per_s_3w'])}; "
        f"2/1 {fmt(figures['ratio_2_1'], 'x', 2)}, 3/1 {fmt(figures['ratio_3_1'], 'x', 2)}; "
        f"failover {figures['failover_s']} s (median {fmt(figures['failover_median_s'], ' s', 1)}),"
        f" lost {figures['failover_lost']}"
    )
    if not args.no_summary:
        record_summary(path, figures, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
