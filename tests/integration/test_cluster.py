"""Q1, D1 on a three-broker cluster: a partition leader killed and a rolling broker restart.

`chaos.cluster_run.run_cluster_chaos` starts its own three-node KRaft cluster (replication 3,
``min.insync.replicas`` 2) on free ports, so nothing here touches the broker other tests share,
plus two real ``hookstream worker`` processes and the receiver farm. It publishes at 25
deliveries/s (at least 3,000, and on until the faults are over: 3,300-10,000 on a loaded
2-core box) while it kills the leader of the busiest ``events`` partition with ``kill -9``
(then starts that node again) and restarts the three brokers one after another, waits for the
pipeline to drain and audits every pair. It also fails on a crash-loop: a worker that exits
by itself more often than the brokers stopped. About 4-7 minutes on a loaded box.
`make chaos-cluster` is the full-size run (docs/reliability.md has its figures). The audit's
ability to fail is shown in tests/unit/test_local_cluster.py (a crafted ledger with a missing
delivery fails the verdict).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cluster import default_jars_dir
from chaos.cluster_run import ClusterChaosConfig, run_cluster_chaos

pytestmark = pytest.mark.integration

DELIVERIES = 3_000
BROKER_STOPS = 4  # the leader kill and the three nodes of the rolling restart


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
        leader_kills=1,
        controller_restart=False,
        broker_rolling=True,
        worker_rolling=False,
        workers=2,
        rate=25.0,
        gap_s=8.0,
        quiet_s=10.0,
        drain_timeout_s=600.0,
    )

    report = run_cluster_chaos(config)
    found = report["audit"]
    print(json.dumps({k: report[k] for k in ("faults", "publish", "drain_s")} | {"audit": found}))
    summary = {k: found[k] for k in ("final_states", "lost_sample", "duplicates_by_10s")}

    assert report["fault_error"] is None, report["faults"]
    steps = [fault["step"] for fault in report["faults"]]
    assert steps == ["leader_kill", "broker_rolling"]
    kill = report["faults"][0]
    assert kill["node"] in (1, 2, 3) and kill["failover_s"] > 0
    assert len(report["faults"][1]["nodes"]) == 3  # every broker restarted once
    # No crash-loop: a worker may die at most once per broker stop (one kill, three restarts)
    # and is then restarted, as a supervisor would. Single native crashes (SIGSEGV) during a
    # broker's clean stop are a known open bug (docs/reliability.md, the cluster chaos run).
    exits = Counter(exit["worker"] for exit in report["unexpected_worker_exits"])
    assert all(n <= BROKER_STOPS for n in exits.values()), "\n".join(report["crash_logs"])
    assert report["drained"], "the pipeline did not drain"
    assert found["expected_pairs"] >= DELIVERIES
    assert found["missing_from_events"] == 0
    assert found["missing_from_archive"] == 0
    # D1: every pair ended delivered, dead-lettered or parked.
    assert found["lost"] == 0, summary
    assert found["delivered"] + found["dead"] + found["parked"] == found["expected_pairs"]
    assert set(found["dead_reasons"]) <= {"http_404", "http_410"}, found["dead_reasons"]
    # Q1: duplicates under 1%.
    assert found["duplicate_rate"] < 0.01, summary
