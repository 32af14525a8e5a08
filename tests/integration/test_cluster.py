"""Q1, D1 on a three-broker cluster: a partition leader killed and a rolling broker restart.

`chaos.cluster_run.run_cluster_chaos` starts its own three-node KRaft cluster (replication 3,
``min.insync.replicas`` 2) on free ports, so nothing here touches the broker other tests share,
plus two real ``hookstream worker`` processes and the receiver farm. It publishes at 25
deliveries/s (at least 3,000, and on until the faults are over) while it kills a node that
leads partitions of ``routed`` with ``kill -9`` and, while those partitions have no leader,
kills a worker with ``kill -9`` too (`chaos.replicated.Faults.worker_kill_in_failover`), then
restarts the three brokers one after another, waits for the pipeline to drain and audits every
pair. No worker may exit by itself: the native crash that broker stops used to cause
(librdkafka#5040, in the lag exporter) is fixed. About 4-7 minutes on a loaded box.
`make chaos-cluster` is the full-size run (docs/reliability.md has its figures).

The scenario can fail: the second test runs a shorter version of it against workers whose
router commits an event before Kafka acknowledged its records (`tests/sabotage`), and the
audit must find lost pairs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cluster import default_jars_dir
from chaos.cluster_run import ClusterChaosConfig, run_cluster_chaos
from streams.adapters.local_kafka import BROKER_HEAP

pytestmark = pytest.mark.integration

DELIVERIES = 3_000
#: The duplicate rate this short run's one kill may cost (see the assertion).
SHORT_RUN_DUPLICATE_CEILING = 0.02
SABOTAGE = Path(__file__).resolve().parents[1] / "sabotage"
#: The nodes' JIT stops at C1. With C2, three JVMs compiling on the box's two cores kept the
#: load at 8-10 through this run and a restarted node took 25-33 s to answer; these runs' 25-60
#: deliveries/s need no C2 code. `make chaos-cluster` keeps the default.
BROKER_JVM = (*BROKER_HEAP, "-XX:TieredStopAtLevel=1")


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """The brokers' and workers' data, outside pytest's tmp dirs: those are rotated while other
    test sessions on the machine start, which would delete a running node's log dirs."""
    path = Path(tempfile.mkdtemp(prefix="hookstream-cluster-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(1200)
def test_Q1_D1_nothing_lost_across_a_leader_kill_and_a_rolling_broker_restart(
    work_dir: Path,
) -> None:
    jars = Path(os.environ.get("HOOKSTREAM_CHAOS_JARS") or default_jars_dir())
    config = ClusterChaosConfig(
        deliveries=DELIVERIES,
        seed=35,
        work_dir=work_dir / "cluster",
        jars_dir=jars,
        leader_kills=0,
        failover_worker_kills=1,
        controller_restart=False,
        broker_rolling=True,
        worker_rolling=False,
        workers=2,
        rate=25.0,
        gap_s=8.0,
        quiet_s=10.0,
        drain_timeout_s=600.0,
        broker_jvm=BROKER_JVM,
    )

    report = run_cluster_chaos(config)
    found = report["audit"]
    print(json.dumps({k: report[k] for k in ("faults", "publish", "drain_s")} | {"audit": found}))
    summary = {
        k: found[k]
        for k in ("final_states", "lost_sample", "duplicate_causes", "duplicates_by_10s")
    }

    assert report["fault_error"] is None, report["faults"]
    steps = [fault["step"] for fault in report["faults"]]
    assert steps == ["worker_kill_in_failover", "broker_rolling"]
    kill = report["faults"][0]
    assert kill["node"] in (1, 2, 3) and kill["failover_s"] > 0 and all(kill["worker_pids"])
    assert kill["node"] != kill["router_coordinator"] and kill["routed_partitions_led"]
    assert len(report["faults"][1]["nodes"]) == 3  # every broker restarted once
    # no worker died by itself (the deliberate kill -9 is the fault's, not counted)
    assert not report["unexpected_worker_exits"], "\n".join(report["crash_logs"])
    assert report["drained"], "the pipeline did not drain"
    assert found["expected_pairs"] >= DELIVERIES
    assert found["missing_from_events"] == 0
    assert found["missing_from_archive"] == 0
    # D1: every pair ended delivered, dead-lettered or parked.
    assert found["lost"] == 0, summary
    assert found["delivered"] + found["dead"] + found["parked"] == found["expected_pairs"]
    assert set(found["dead_reasons"]) <= {"http_404", "http_410"}, found["dead_reasons"]
    # Q1: a delivery goes out again only when the ledger lost its first attempt's record. The
    # worker is killed while a leader is gone, with its last ledger writes still queued (those
    # for the leaderless partitions, for seconds): the receiver saw those requests, no attempt
    # record names them, and the next owner cannot tell they succeeded. Anything sent twice
    # beyond them would be a recall that missed a recorded success.
    unrecorded = found["receiver_requests"] - found["attempts_recorded"]
    assert found["duplicates"] <= unrecorded, summary | {"unrecorded_requests": unrecorded}
    # Those writes cost a number of copies that does not grow with the run (11 and 55 seen):
    # up to about 1% of a run this short (3,000-5,300 pairs). Q1's 1% is a long run's bar, held
    # by `make chaos-cluster` (0.05% on 87,150 pairs, docs/reliability.md); here the bound is 2%.
    assert found["duplicate_rate"] < SHORT_RUN_DUPLICATE_CEILING, summary


@pytest.mark.timeout(900)
def test_Q1_D1_the_cluster_run_finds_lost_pairs_when_offsets_are_committed_before_the_acks(
    work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same fault against workers that commit before Kafka acknowledges (`tests/sabotage`):
    the events whose records waited for the dead node's partitions are gone with the killed
    worker, and their offsets are committed, so nobody reads them again. The audit must say so;
    a cluster test that passed here could not tell a safe worker from an unsafe one."""
    jars = Path(os.environ.get("HOOKSTREAM_CHAOS_JARS") or default_jars_dir())
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(SABOTAGE), path) if p))
    config = ClusterChaosConfig(
        deliveries=1_000,
        seed=36,
        work_dir=work_dir / "sabotaged",
        jars_dir=jars,
        leader_kills=0,
        failover_worker_kills=1,
        # every router is killed, and eight tenants spread the ingest topic's partitions: with
        # worker 0 alone, a range assignment that left it no busy partition with a live leader
        # lost nothing, and the audit had nothing to find (CI of 2026-12-03 23:11)
        failover_kills_all=True,
        # the loss is made by then: the dead node is not started again (about 45 s saved)
        failover_restore=False,
        tenants=8,
        controller_restart=False,
        broker_rolling=False,
        worker_rolling=False,
        workers=2,
        rate=60.0,
        gap_s=8.0,
        quiet_s=10.0,
        drain_timeout_s=300.0,
        broker_jvm=BROKER_JVM,
    )

    report = run_cluster_chaos(config)
    found = report["audit"]
    print(json.dumps({k: report[k] for k in ("faults", "publish", "drain_s")} | {"audit": found}))

    assert report["fault_error"] is None, report["faults"]
    assert [fault["step"] for fault in report["faults"]] == ["worker_kill_in_failover"]
    assert report["faults"][0]["back_in_sync_s"] is None  # left down: two of three brokers
    assert found["lost"] > 0, "the audit did not catch offsets committed before the acks"
    assert not report["verdict"]["passed"]
