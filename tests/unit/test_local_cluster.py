"""The three-broker cluster's configuration and the cluster chaos verdict (SPEC Q1, D1, X2).

Pure functions only: the node properties, the replicated topics.yaml override, the tables'
changelog replication that follows it, and the verdict of a cluster chaos run, which must fail
on a crafted ledger with one delivery missing. tests/integration/test_cluster.py runs the real
cluster.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import summary
from chaos.audit import Recorded, audit, expected_pairs
from chaos.cluster import ClusterConfig
from chaos.cluster_run import verdict
from chaos.cluster_summary import ENTRY_ID, cluster_entry
from chaos.replicated import ReplicatedCluster
from streams.adapters.kafka_admin import load_topology
from streams.adapters.local_cluster import (
    cluster_endpoints,
    render_node_properties,
    write_replicated_topics,
)
from streams.adapters.local_kafka import BROKER_HEAP, Endpoint
from streams.app import changelog_replication
from streams.cli.main import cli
from streams.domain.models import Event, Subscription
from streams.errors import ConfigError
from streams.settings import load_settings

REPO_TOPICS = Path(__file__).resolve().parents[2] / "topics.yaml"


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_X2_each_node_has_its_own_ports_and_the_static_quorum_of_three_voters() -> None:
    endpoints = cluster_endpoints("127.0.0.1:39100", 3)
    assert [e.port for e in endpoints] == [39100, 39102, 39104]

    props = _properties(render_node_properties(2, endpoints, Path("/data/node2")))

    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:39101,2@127.0.0.1:39103,3@127.0.0.1:39105"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:39102,CONTROLLER://127.0.0.1:39103"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:39102"
    assert props["log.dirs"] == "/data/node2"
    assert props["process.roles"] == "broker,controller"


def test_Q1_every_node_of_a_chaos_cluster_runs_with_the_runs_jvm_flags(tmp_path: Path) -> None:
    """The cluster test runs its nodes' JIT at C1 (`BROKER_JVM` in test_cluster.py): the flags
    given to the chaos run reach every node, and by default a node runs as the dev broker."""
    flags = ("-Xms64m", "-Xmx128m", "-XX:TieredStopAtLevel=1")
    base = ClusterConfig(work_dir=tmp_path / "a", jars_dir=tmp_path / "jars", kafka_port=39200)
    tuned = replace(base, work_dir=tmp_path / "b", broker_jvm=flags)

    nodes = ReplicatedCluster(tuned, say=lambda _m: None).brokers.nodes.values()
    default = ReplicatedCluster(base, say=lambda _m: None).brokers.nodes.values()

    assert [node.jvm_options for node in nodes] == [flags] * 3
    assert [node.jvm_options for node in default] == [BROKER_HEAP] * 3


def test_D1_the_cluster_replicates_three_ways_and_requires_two_in_sync() -> None:
    endpoints = [Endpoint("127.0.0.1", 39100 + 2 * n) for n in range(3)]
    props = _properties(render_node_properties(1, endpoints, Path("/d")))

    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["unclean.leader.election.enable"] == "false"


def test_X2_the_bootstrap_list_must_name_the_nodes_in_order() -> None:
    listed = "127.0.0.1:39100,127.0.0.1:39102,127.0.0.1:39104"
    assert [e.address() for e in cluster_endpoints(listed, 3)] == listed.split(",")
    with pytest.raises(ConfigError, match="HOOKSTREAM_KAFKA_BOOTSTRAP"):
        cluster_endpoints("127.0.0.1:39100,127.0.0.1:39101", 3)


def test_D1_the_replicated_topics_file_raises_every_topic_and_the_changelogs(
    tmp_path: Path,
) -> None:
    single = load_settings(topics_file=REPO_TOPICS, data_dir=tmp_path)
    assert changelog_replication(single) == (1, {"min.insync.replicas": "1"})

    target = write_replicated_topics(REPO_TOPICS, tmp_path / "topics.yaml")
    replicated = load_settings(topics_file=target, data_dir=tmp_path)
    topology = load_topology(replicated)

    assert {spec.replication_factor for spec in topology.topics} == {3}
    assert {spec.config["min.insync.replicas"] for spec in topology.topics} == {"2"}
    assert changelog_replication(replicated) == (3, {"min.insync.replicas": "2"})
    # the override keeps each topic's own settings (partitions, retention, compaction)
    original = load_topology(single)
    assert [(s.name, s.partitions) for s in topology.topics] == [
        (s.name, s.partitions) for s in original.topics
    ]


def _crafted_run() -> tuple[dict[str, tuple[str, str]], list[Event], Recorded]:
    subs = [
        Subscription(
            id=f"sub_{n}", tenant_id="acme", name="", url="http://h/ok", filters=("*",), secrets=()
        )
        for n in range(2)
    ]
    events = [
        Event(
            id=f"evt_{n}",
            tenant_id="acme",
            type="order.created",
            timestamp=1,
            data_json="{}",
            published_at=1,
        )
        for n in range(3)
    ]
    pairs = expected_pairs(events, subs)
    recorded = Recorded(
        events_topic=frozenset(e.id for e in events),
        archived=frozenset(e.id for e in events),
        routed=Counter(list(pairs)),
        attempts=[],
        dead_letters=[],
    )
    return pairs, events, recorded


def test_Q1_D1_the_cluster_verdict_fails_when_the_ledger_misses_one_delivery() -> None:
    pairs, events, recorded = _crafted_run()
    ids = sorted(pairs)
    every = dict.fromkeys(ids, 1)
    all_there = audit(pairs, [e.id for e in events], recorded, every, {200: len(ids)})
    assert verdict(all_there, drained=True, faults_done=True, crashes=0)["passed"]

    missing = dict.fromkeys(ids[1:], 1)  # the receivers never saw the first delivery
    one_lost = audit(pairs, [e.id for e in events], recorded, missing, {200: len(ids) - 1})
    found = verdict(one_lost, drained=True, faults_done=True, crashes=0)

    assert one_lost.lost == 1 and one_lost.lost_sample == [ids[0]]
    assert not found["lost_is_zero"] and not found["passed"]


def test_Q1_the_cluster_verdict_fails_on_duplicates_a_failed_fault_or_a_crash() -> None:
    pairs, events, recorded = _crafted_run()
    ids = sorted(pairs)
    twice = dict.fromkeys(ids, 1) | {ids[0]: 2}  # 1 duplicate in 6 pairs: over 1%
    found = audit(pairs, [e.id for e in events], recorded, twice, {200: len(ids) + 1})

    assert not verdict(found, drained=True, faults_done=True, crashes=0)["passed"]
    clean = audit(pairs, [e.id for e in events], recorded, dict.fromkeys(ids, 1), {200: 6})
    assert not verdict(clean, drained=True, faults_done=False, crashes=0)["passed"]
    assert not verdict(clean, drained=True, faults_done=True, crashes=1)["passed"]
    assert not verdict(clean, drained=False, faults_done=True, crashes=0)["passed"]


def test_Q1_the_summary_entry_has_the_documented_shape() -> None:
    pairs, events, recorded = _crafted_run()
    found = audit(pairs, [e.id for e in events], recorded, dict.fromkeys(pairs, 1), {200: 6})
    report = {
        "audit": found.as_dict(),
        "faults": [{"step": "leader_kill", "failover_s": 8.8}, {"step": "broker_rolling"}],
        "verdict": verdict(found, drained=True, faults_done=True, crashes=0),
    }

    entry = cluster_entry(report, "chaos/results/x.json", "abc", "2026-12-01T00:00:00Z")

    assert set(entry) == {
        "id", "value", "unit", "target", "met", "results_file", "commit", "date", "extra"
    }  # fmt: skip
    assert entry["id"] == ENTRY_ID and entry["met"] is True and entry["value"] == 0.0
    assert entry["extra"]["lost"] == 0 and entry["extra"]["failover_s"] == [8.8]


def test_Q1_a_recovery_run_records_q1_apart_from_the_recovery_checks() -> None:
    """With --recovery the entry must still validate (a 50k run once failed to record it), and
    a failed recovery scenario is reported beside Q1, not as a loss or a duplicate."""
    pairs, events, recorded = _crafted_run()
    found = audit(pairs, [e.id for e in events], recorded, dict.fromkeys(pairs, 1), {200: 6})
    checks = {"recovery_one_suspension": False, "recovery_scenario_ran": False}
    report: dict[str, Any] = {
        "audit": found.as_dict(),
        "faults": [{"step": "leader_kill", "failover_s": 8.8}],
        "verdict": verdict(found, drained=True, faults_done=True, crashes=0) | checks,
        "recovery": {"suspensions": 0, "notice_ids": 0, "checks": checks, "error": "Timeout"},
    }
    report["verdict"]["passed"] = False

    entry = cluster_entry(report, "chaos/results/x.json", "abc", "2026-12-01T00:00:00Z")

    summary.validate(entry | {"results_file": "bench/results/summary.json"})
    assert entry["met"] is True
    assert entry["extra"]["recovery"] == (
        "failed: recovery_one_suspension, recovery_scenario_ran (Timeout)"
    )
    assert entry["extra"]["recovery_suspensions"] == 0
    report["verdict"]["lost_is_zero"] = False
    assert cluster_entry(report, "x", "abc", "2026-12-01T00:00:00Z")["met"] is False


def test_X2_kafka_status_with_brokers_lists_every_node_and_exits_3_when_none_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKSTREAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:39150")

    result = CliRunner().invoke(cli, ["kafka", "status", "--brokers", "3"])

    assert result.exit_code == 3, result.output
    assert "node 1: not running, 127.0.0.1:39150" in result.output
    assert "node 3: not running, 127.0.0.1:39154" in result.output
    assert "bootstrap: 127.0.0.1:39150,127.0.0.1:39152,127.0.0.1:39154" in result.output
