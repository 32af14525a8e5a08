"""Throughput of one worker against two workers in the same group (SPEC X4). See docs/capacity.md.

    python -m bench.scaling --runs 3 --events 6000
    python -m bench.scaling --tables --subscriptions 100000

Each run uses the `bench.rig.Rig` of the throughput benchmark: its own topics and group id,
nginx as the receiver, one worker that is ready once a probe delivery arrives. On top of that,
the run creates `--tenants` tenants with one subscription each. Tenant ids are picked so that
their events land on different partitions of `events`, and subscription ids so that their
deliveries land on different partitions of `routed`. Both the router and the dispatcher
therefore have work on every partition. With one tenant, every event would sit in one `events`
partition, and a second worker would have nothing to route. The default of 120 tenants also keeps
each subscription's share of a burst (`--events` / `--tenants`) below the 256 deliveries a worker
queues per subscription (`streams.domain.ratelimit.queue_cap`). The dispatcher defers whatever is
beyond that to a retry tier, and a run would then measure deferral rather than delivery.

In a 2-worker run a second worker joins the same group, and the run waits until the router's and
the dispatcher's groups have split the partitions between the two workers. Then `--events`
events are published at once, spread round-robin over the tenants, and the figure is
deliveries/s over the steady window, as in the throughput scenario (`bench/rig.py`). Runs
alternate 1, 2, 1, 2, ... so that a change in the shared machine's load hits both sides alike.
The medians per worker count, every run's figures, the workers' CPU, and the load averages go
to ``bench/results/scaling-<timestamp>.json``. Nothing here asserts on a number.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from faust.serializers import codecs
from faust.stores.rocksdb import RocksDBOptions

from bench.e2e import ceiling, say
from bench.nginx import Nginx, free_port, nginx_receiver
from bench.report import REPO, RESULTS_DIR, fmt, machine, median_of, write_json
from bench.rig import Rig, RigConfig, _flush, _json, _produce, make_event
from bench.worker import Worker
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.app import rocksdb_options
from streams.domain.health import DEDUP_WINDOW, MAX_ERROR_CHARS, HealthRecord, apply_outcome
from streams.domain.idempotency import delivery_id
from streams.domain.models import Event, HealthOutcome, OutcomeClass
from streams.domain.policy import MAX_COUNT, SuspensionPolicy, Threshold
from streams.errors import HookstreamError
from streams.services.subscriptions import create_subscription
from streams.settings import load_settings

GROUP_SPLIT_TIMEOUT_S = 120.0
#: A run ends when nothing new arrived for this long; a starved worker on a busy box can pause
#: for tens of seconds without being stuck.
STALL_S = 120.0


def spread_ids(prefix: str, count: int, partitions: int) -> list[str]:
    """`count` ids whose partitions are as evenly spread as possible."""
    ids: list[str] = []
    per_partition: dict[int, int] = {}
    for n in itertools.count():
        candidate = f"{prefix}{n}"
        part = partition_of(candidate, partitions)
        if per_partition.get(part, 0) <= len(ids) // partitions:
            per_partition[part] = per_partition.get(part, 0) + 1
            ids.append(candidate)
        if len(ids) == count:
            return ids
    raise AssertionError("unreachable")


class Scale:
    """The tenants and subscriptions of one run, and the workers that deliver them."""

    def __init__(self, rig: Rig, tenants: int) -> None:
        self.rig = rig
        partitions = load_topology(rig.settings).lane_partitions
        self.tenants = spread_ids(f"scale{rig.run_id}t", tenants, partitions)
        sub_ids = spread_ids(f"sub_scale_{rig.run_id}_", tenants, partitions)
        self.sub_of: dict[str, str] = {}
        for tenant, sub_id in zip(self.tenants, sub_ids, strict=True):
            data = {"tenant_id": tenant, "url": rig.receiver.url, "filters": ["order.*"]}
            create_subscription(rig.settings, data, subscription_id=sub_id)
            self.sub_of[tenant] = sub_id
        self.workers: list[Worker] = [w for w in (rig.worker,) if w is not None]

    def add_worker(self, workdir: Path) -> None:
        n = len(self.workers)
        settings = self.rig.settings.model_copy(
            update={"web_port": free_port(), "data_dir": workdir / f"data-{self.rig.run_id}-{n}"}
        )
        log = workdir / f"worker-{self.rig.run_id}-{n}.log"
        self.workers.append(Worker(settings, log, {}))

    def stop_extra(self) -> None:
        for worker in self.workers[1:]:
            worker.stop()

    def wait_split(self) -> float:
        """Seconds until each lane group has one member per worker, each holding partitions."""
        admin = AdminClient({"bootstrap.servers": self.rig.settings.kafka_bootstrap})
        groups = [f"{self.rig.settings.group_id}-{lane}" for lane in ("router", "dispatch")]
        began = time.monotonic()
        while time.monotonic() - began < GROUP_SPLIT_TIMEOUT_S:
            found = [f.result(15) for f in admin.describe_consumer_groups(groups).values()]
            if all(
                g.state.name == "STABLE"
                and len(g.members) == len(self.workers)
                and all(m.assignment.topic_partitions for m in g.members)
                for g in found
            ):
                return time.monotonic() - began
            if not all(w.alive() for w in self.workers):
                raise RuntimeError("a worker exited:\n" + self.workers[-1].log_tail())
            time.sleep(0.5)
        raise RuntimeError(f"the groups did not split over {len(self.workers)} workers in time")

    def events(self, run: str, count: int) -> list[Event]:
        """`count` events, round-robin over the tenants."""
        tenants = self.tenants
        return [
            replace(make_event(run, n), tenant_id=tenants[n % len(tenants)]) for n in range(count)
        ]

    def publish(self, events: list[Event]) -> set[str]:
        """Publish `events` as fast as possible, keyed by tenant; the delivery ids they make."""
        producer = self.rig.producer(**{"linger.ms": 20, "batch.size": 1_000_000})
        topic = self.rig.settings.topic("events")
        ids: set[str] = set()
        for n, event in enumerate(events):
            ids.add(delivery_id(event.id, self.sub_of[event.tenant_id]))
            _produce(producer, topic, event.tenant_id, _json(event), True)
            if n % 5000 == 0:
                producer.poll(0)
        _flush(producer)
        return ids

    def warm_up(self) -> None:
        """One event per tenant, delivered: every worker's registry has every subscription."""
        ids = self.publish(self.events(f"{self.rig.run_id}warm", len(self.tenants)))
        if self.rig.wait_delivered(ids, stall_s=60.0) < len(ids):
            raise RuntimeError("the warm-up deliveries did not all arrive")


def measure(scale: Scale, events: int) -> dict[str, Any]:
    """Publish `events` at once and measure deliveries/s over the steady window."""
    rig = scale.rig
    started = time.time()
    ids = scale.publish(scale.events(rig.run_id, events))
    published = time.time()
    rig.wait_delivered(ids, stall_s=STALL_S)
    received = rig.receiver.log.received
    times = sorted(received[key] for key in ids if key in received)
    result: dict[str, Any] = {
        "workers": len(scale.workers),
        "events": events,
        "delivered": len(times),
        "duplicates": rig.receiver.log.duplicates(ids),
        "publish_s": published - started,
    }
    if len(times) < 20:
        return result
    start = max(published, times[len(times) // 20])
    end = times[len(times) * 19 // 20]
    inside = sum(1 for t in times if start <= t <= end)
    cpu = [w.cpu_percent(start, end) for w in scale.workers]
    result.update(
        {
            "deliveries_per_s": inside / max(end - start, 1e-3),
            "overall_per_s": len(times) / max(times[-1] - started, 1e-3),
            "steady_window_s": end - start,
            "worker_cpu_percent": cpu,
            "total_worker_cpu_percent": sum(c for c in cpu if c is not None),
            "load_average": list(os.getloadavg()),
        }
    )
    return result


def one_run(args: argparse.Namespace, workers: int, receiver: Nginx, work: Path) -> dict[str, Any]:
    config = RigConfig(
        bootstrap=args.bootstrap, concurrency=args.concurrency, batch_size=args.batch_size
    )
    with Rig(config, receiver, work) as rig:
        scale = Scale(rig, args.tenants)
        try:
            for _ in range(workers - 1):
                scale.add_worker(work)
            split_s = scale.wait_split()
            scale.warm_up()
            raw = ceiling(receiver, args.ceiling_seconds)
            run = measure(scale, args.events)
        finally:
            scale.stop_extra()
    run.update({"ceiling_rps": raw, "group_split_s": split_s})
    return run


# --- table sizes ----------------------------------------------------------------------------
def health_record(sub_id: str, failing: bool, now_ms: int) -> dict[str, Any]:
    """A subscription's health record after `DEDUP_WINDOW` deliveries, as the agent stores it.

    Healthy: the last deliveries all succeeded. Failing: they all failed with a 503 and an error
    of the full `MAX_ERROR_CHARS`, the largest a record gets.
    """
    record: HealthRecord | None = None
    for n in range(DEDUP_WINDOW):
        outcome = HealthOutcome(
            subscription_id=sub_id,
            delivery_id=delivery_id(f"evt_{n}", sub_id),
            outcome=OutcomeClass.RETRYABLE if failing else OutcomeClass.SUCCESS,
            reason="http_503" if failing else "http_2xx",
            at=now_ms + n,
            origin="https://hooks.example.com",
            attempts=5 if failing else 1,
            http_status=503 if failing else 200,
            error=("upstream unavailable " * 40)[:MAX_ERROR_CHARS] if failing else None,
        )
        record = apply_outcome(record, outcome, NEVER_SUSPEND, now_ms + n).record
    assert record is not None
    return record.to_dict()


def like(template: dict[str, Any], sub_id: str) -> dict[str, Any]:
    """`template` (built by `health_record`) for another subscription: its id and its own keys."""
    recent = [
        f"{key.split(':', 1)[0]}:{delivery_id(f'evt_{n}', sub_id)}"
        for n, key in enumerate(template["recent"])
    ]
    return {**template, "subscription_id": sub_id, "recent": recent}


# The largest counts the policy accepts: the records stay in one open episode, unsuspended.
NEVER_SUSPEND = SuspensionPolicy(
    retryable=Threshold(MAX_COUNT, 0.0),
    permanent=Threshold(MAX_COUNT, 0.0),
    fatal=Threshold(MAX_COUNT, 0.0),
    early_warning_at=MAX_COUNT,
)


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure_tables(subscriptions: int, failing: bool, workdir: Path) -> dict[str, Any]:
    """Write one health record per subscription into RocksDB as a worker does; sizes and RSS.

    The stores are opened with faust's own RocksDB options class and hookstream's sized options
    (`streams.app.rocksdb_options`), one store per partition, and keys and values are the JSON
    bytes that faust writes to the store and to the changelog (its json codec). One record is
    made by the health domain's own `apply_outcome`; the others copy it with their own ids.
    """
    settings = load_settings(data_dir=workdir, topics_file=REPO / "topics.yaml")
    partitions = load_topology(settings).lane_partitions
    options = {k: v for k, v in rocksdb_options(settings).items() if k != "driver"}
    opener = RocksDBOptions(**options, use_rocksdict=True)
    rss_before = _rss()
    dbs = [opener.open(workdir / f"health-{p}.db") for p in range(partitions)]
    template = health_record("sub_template", failing, int(time.time() * 1000))
    payload = 0
    for n in range(subscriptions):
        sub_id = f"sub_{n:020x}"  # as long as a generated subscription id
        key = codecs.dumps("json", sub_id)
        value = codecs.dumps("json", like(template, sub_id))
        payload += len(key) + len(value)
        dbs[partition_of(sub_id, partitions)][key] = value
    for db in dbs:
        db.flush()
        db.compact_range(None, None)
    for n in range(subscriptions):  # read everything once, as a recovery or a hot table would
        sub_id = f"sub_{n:020x}"
        assert dbs[partition_of(sub_id, partitions)][codecs.dumps("json", sub_id)] is not None
    rss_loaded = _rss()
    for db in dbs:
        db.close()
    return {
        "subscriptions": subscriptions,
        "failing": failing,
        "partitions": partitions,
        "record_bytes_mean": payload / subscriptions,
        "payload_bytes": payload,
        "disk_bytes": _du(workdir),
        "rss_delta_bytes": rss_loaded - rss_before,
        "block_cache_mb_per_partition": settings.rocksdb_block_cache_mb,
        "write_buffer_mb_per_partition": settings.rocksdb_write_buffer_mb,
    }


def tables_main(args: argparse.Namespace) -> int:
    runs = []
    for failing in (False, True):
        with tempfile.TemporaryDirectory(prefix="hookstream-tables-") as tmp:
            run = measure_tables(args.subscriptions, failing, Path(tmp))
        runs.append(run)
        mib = {k: run[k] / 2**20 for k in ("payload_bytes", "disk_bytes", "rss_delta_bytes")}
        say(
            f"{'failing' if failing else 'healthy'}: {run['subscriptions']:,} health records, "
            f"{run['record_bytes_mean']:.0f} B each, payload {mib['payload_bytes']:.1f} MiB, "
            f"on disk {mib['disk_bytes']:.1f} MiB, RSS +{mib['rss_delta_bytes']:.0f} MiB "
            f"over {run['partitions']} stores"
        )
    info = machine()
    info["command"] = shlex.join([Path(sys.executable).name, "-m", "bench.scaling", *sys.argv[1:]])
    result = {"scenario": "tables", "machine": info, "runs": runs}
    say(f"results: {write_json(result, args.results_dir)}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count")
    parser.add_argument("--events", type=int, default=6_000, help="events per run")
    parser.add_argument(
        "--tenants", type=int, default=120, help="tenants, one subscription each (see the module)"
    )
    parser.add_argument("--concurrency", type=int, default=256, help="dispatch concurrency")
    parser.add_argument("--batch-size", type=int, default=500, help="dispatch batch size")
    parser.add_argument("--ceiling-seconds", type=float, default=3.0)
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--tables",
        action="store_true",
        help="instead: the health table's size on disk and in memory for --subscriptions",
    )
    parser.add_argument("--subscriptions", type=int, default=100_000, help="--tables: records")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tables:
        return tables_main(args)
    load_before = list(os.getloadavg())
    say(f"scaling: {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hookstream-scaling-") as tmp, nginx_receiver() as rx:
        for i in range(args.runs):
            for workers in (1, 2):
                try:
                    run = one_run(args, workers, rx, Path(tmp))
                except (RuntimeError, HookstreamError) as exc:  # keep the runs that finished
                    say(f"run {i + 1}, {workers} worker(s) failed: {exc}")
                    runs.append({"workers": workers, "error": str(exc)})
                    continue
                runs.append(run)
                say(
                    f"run {i + 1}, {workers} worker(s): {fmt(run.get('deliveries_per_s'))} "
                    f"deliveries/s ({run['delivered']}/{run['events']}), ceiling "
                    f"{fmt(run['ceiling_rps'])} req/s, worker CPU "
                    f"{[fmt(c, '%') for c in run.get('worker_cpu_percent', [])]}, "
                    f"load {run.get('load_average', [0.0])[0]:.1f}"
                )
    medians: dict[str, float | None] = {}
    for workers in (1, 2):
        mine = [r for r in runs if r["workers"] == workers]
        for key in ("deliveries_per_s", "total_worker_cpu_percent", "ceiling_rps"):
            medians[f"{key}_{workers}w"] = median_of(mine, key)
    one, two = medians["deliveries_per_s_1w"], medians["deliveries_per_s_2w"]
    medians["speedup"] = two / one if one and two else None
    info = machine()
    info["command"] = shlex.join([Path(sys.executable).name, "-m", "bench.scaling", *sys.argv[1:]])
    result = {
        "scenario": "scaling",
        "machine": info,
        "load_before": load_before,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "runs": runs,
        "medians": medians,
    }
    say(f"results: {write_json(result, args.results_dir)}")
    say(
        f"median: 1 worker {fmt(one)} deliveries/s, 2 workers {fmt(two)} deliveries/s, "
        f"speedup {fmt(medians['speedup'], 'x', 2)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
