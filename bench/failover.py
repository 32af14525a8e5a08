"""A worker's ``kill -9`` while three workers deliver: how long its partitions stay silent (X4).

Part of `bench.scaling_cluster` (its docstring says what is measured and how). `Workers` is the
rig's worker 0 plus extra workers on data dirs of their own; `one_kill` publishes a steady
stream, kills worker 1 or 2, takes the partitions it held from the router's and the
dispatcher's groups (the member gone once the group is stable again), times each of its
subscriptions' first delivery after the kill, waits for every pair published meanwhile (lost,
duplicates), and starts the worker again on its data dir.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.nginx import free_port
from bench.rig import _flush, _json, _produce, make_event
from bench.scaling import STALL_S, Scale
from bench.worker import Worker
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import partition_of
from streams.domain.idempotency import delivery_id

#: Arrivals this soon after the kill may be requests the killed worker had already sent.
GRACE_S = 0.5
#: Steady deliveries before each kill, and after the killed worker's partitions deliver again.
LEAD_S = 5.0
TAIL_S = 5.0
FAILOVER_TIMEOUT_S = 180.0
LANES = ("router", "dispatch")
TP = tuple[str, int]


# --- pure parts (tests/unit/test_bench_scaling_cluster.py) ------------------------------------
def vanished_partitions(
    before: Mapping[str, Iterable[TP]], after_members: Iterable[str]
) -> set[TP]:
    """The partitions the members of ``before`` (member id -> partitions) that are not among
    ``after_members`` held: the killed worker's."""
    alive = set(after_members)
    return {tp for member, tps in before.items() if member not in alive for tp in tps}


def affected_subscriptions(
    sub_of: Mapping[str, str], partitions: int, lost: set[TP], events: str, routed: str
) -> set[str]:
    """Subscriptions (``sub_of``: tenant -> subscription) whose tenant's ``events`` partition or
    whose own ``routed`` partition is in ``lost``."""
    return {
        sub
        for tenant, sub in sub_of.items()
        if (events, partition_of(tenant, partitions)) in lost
        or (routed, partition_of(sub, partitions)) in lost
    }


def resumed_after(
    arrivals: Iterable[float], kill_at: float, grace_s: float = GRACE_S
) -> float | None:
    """Seconds from ``kill_at`` to the first arrival later than ``kill_at + grace_s``."""
    later = [t for t in arrivals if t > kill_at + grace_s]
    return min(later) - kill_at if later else None


def failover_figures(
    arrivals: Mapping[str, Iterable[float]], kill_at: float, victims: set[str]
) -> dict[str, Any]:
    """Per-subscription resume times (``arrivals``: subscription -> arrival times) split into
    the killed worker's subscriptions and the others; ``failover_s`` is the largest of the
    former (None while one of them has not resumed)."""
    resumed = {sub: resumed_after(times, kill_at) for sub, times in arrivals.items()}
    mine = [resumed.get(sub) for sub in sorted(victims)]
    others = [t for sub, t in resumed.items() if sub not in victims]
    known = [t for t in mine if t is not None]
    return {
        "failover_s": max(known) if mine and len(known) == len(mine) else None,
        "first_resumed_s": min(known) if known else None,
        "victim_subscriptions": len(mine),
        "others_max_gap_s": max((t for t in others if t is not None), default=None),
    }


# --- the running parts ------------------------------------------------------------------------
class Workers:
    """Worker 0 (the rig's) and extra workers 1..n, each on a data dir of its own."""

    def __init__(self, scale: Scale, workdir: Path) -> None:
        self.scale, self.workdir = scale, workdir
        self.base = scale.rig.run_id
        self.ports = {0: scale.rig.settings.web_port}

    def start(self, index: int) -> Worker:
        self.ports[index] = free_port()
        settings = self.scale.rig.settings.model_copy(
            update={
                "web_port": self.ports[index],
                "data_dir": self.workdir / f"w{self.base}-{index}",
            }
        )
        return Worker(settings, self.workdir / f"worker-{self.base}-{index}.log", {})

    def ready(self, index: int) -> bool:
        """Whether worker ``index`` answers /readyz with 200."""
        url = f"http://127.0.0.1:{self.ports[index]}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def resize(self, count: int) -> None:
        workers = self.scale.workers
        while len(workers) > count:
            workers.pop().stop()
        while len(workers) < count:
            workers.append(self.start(len(workers)))

    def restart(self, index: int) -> None:
        self.scale.workers[index] = self.start(index)


def describe(admin: AdminClient, group_id: str) -> dict[str, Any]:
    """Each lane group: state and member id -> partitions."""
    names = [f"{group_id}-{lane}" for lane in LANES]
    found = {}
    for name, future in admin.describe_consumer_groups(names).items():
        group = future.result(15)
        members = {
            m.member_id: [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]
            for m in group.members
        }
        found[name] = {"state": group.state.name, "members": members}
    return found


class Stream:
    """Publishes events at a steady rate on a thread, round-robin over some tenants."""

    def __init__(self, scale: Scale, tenants: list[str], rate: float, tag: str) -> None:
        self.scale, self.tenants, self.rate, self.tag = scale, tenants, rate, tag
        self._ids: dict[str, str] = {}  # delivery id -> subscription
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rig = self.scale.rig
        producer = rig.producer(**{"linger.ms": 5})
        topic = rig.settings.topic("events")
        began, n = time.monotonic(), 0
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while n < due:
                tenant = self.tenants[n % len(self.tenants)]
                event = replace(make_event(self.tag, n), tenant_id=tenant)
                _produce(producer, topic, tenant, _json(event), True)
                sub = self.scale.sub_of[tenant]
                with self._lock:
                    self._ids[delivery_id(event.id, sub)] = sub
                n += 1
            producer.poll(0)
            time.sleep(0.01)
        _flush(producer)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def ids(self) -> dict[str, str]:
        """Delivery id -> subscription of every event published so far."""
        with self._lock:
            return dict(self._ids)


def arrivals_by_sub(
    received: Mapping[str, float], ids: Mapping[str, str]
) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for key, sub in ids.items():
        if key in received:
            found.setdefault(sub, []).append(received[key])
    return found


def _rounded(figures: Mapping[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}


def one_kill(args: argparse.Namespace, scale: Scale, pool: Workers, n: int) -> dict[str, Any]:
    rig, victim = scale.rig, 1 + n % 2
    admin = AdminClient({"bootstrap.servers": rig.settings.kafka_bootstrap})
    partitions = load_topology(rig.settings).lane_partitions
    tenants = scale.tenants[: args.failover_tenants]
    stream = Stream(scale, tenants, args.rate, f"{pool.base}k{n}")
    try:
        time.sleep(LEAD_S)
        before = describe(admin, rig.settings.group_id)
        scale.workers[victim].process.kill()  # kill -9
        kill_at = time.time()
        scale.workers[victim].stop(5)
        sub_of = {t: scale.sub_of[t] for t in tenants}
        lost: set[TP] | None = None
        rebalanced_s = failover = None
        while time.time() - kill_at < FAILOVER_TIMEOUT_S:
            rig.receiver.log.poll()
            if lost is None:
                now = describe(admin, rig.settings.group_id)
                if all(g["state"] == "STABLE" and len(g["members"]) == 2 for g in now.values()):
                    rebalanced_s = time.time() - kill_at
                    lost = set()
                    for name, group in before.items():
                        lost |= vanished_partitions(group["members"], now[name]["members"])
            if lost is not None:
                victims = affected_subscriptions(
                    sub_of,
                    partitions,
                    lost,
                    rig.settings.topic("events"),
                    rig.settings.topic("routed"),
                )
                arrivals = arrivals_by_sub(rig.receiver.log.received, stream.ids())
                failover = failover_figures(arrivals, kill_at, victims)
                if failover["failover_s"] is not None:
                    break
            time.sleep(0.5)
        time.sleep(TAIL_S)
    finally:
        stream.stop()
    window_s = time.time() - kill_at
    published = stream.ids()
    delivered = rig.wait_delivered(set(published), stall_s=STALL_S)
    began = time.monotonic()
    pool.restart(victim)
    scale.wait_split()
    while not pool.ready(victim):
        if time.monotonic() - began > FAILOVER_TIMEOUT_S:
            raise RuntimeError(f"worker {victim} was not ready again in time")
        time.sleep(0.5)
    held = {
        lane: sorted(p for topic, p in lost or () if topic == rig.settings.topic(lane))
        for lane in ("events", "routed")
    }
    return {
        "kill": n,
        "worker": victim,
        **_rounded(failover or {"failover_s": None}),
        "rebalanced_s": _rounded({"s": rebalanced_s})["s"],
        "held_partitions": held,
        "published_pairs": len(published),
        "delivered_distinct": delivered,
        "lost": len(published) - delivered,
        "duplicates": rig.receiver.log.duplicates(published),
        "window_s": round(window_s, 1),
        "restart_ready_s": round(time.monotonic() - began, 1),
        "load_average": list(os.getloadavg()),
    }
