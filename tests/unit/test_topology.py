"""topics.yaml parsing, validation, retry-tier expansion and the broker diff (X1, D6)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.domain.topic_plan import ConfigChange, TopicState, diff_topology
from streams.domain.topology import (
    CO_PARTITIONED,
    REQUIRED_TOPICS,
    Topology,
    build_topology,
    parse_topology,
)
from streams.errors import ConfigError, TopicsFileError
from streams.settings import Settings, load_settings

REPO_TOPICS = Path(__file__).resolve().parents[2] / "topics.yaml"


@pytest.fixture
def settings() -> Settings:
    return load_settings(topic_prefix="hs1.", retry_schedule=(1.0, 5.0, 60.0))


@pytest.fixture
def document() -> dict[str, Any]:
    loaded = yaml.safe_load(REPO_TOPICS.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _topology(document: dict[str, Any], settings: Settings) -> Topology:
    return build_topology(document, settings)


def _state(topology: Topology) -> dict[str, TopicState]:
    """A broker that holds exactly what topics.yaml declares."""
    return {
        spec.full_name: TopicState(spec.partitions, spec.replication_factor, dict(spec.config))
        for spec in topology.topics
    }


def _error(document: dict[str, Any], settings: Settings) -> TopicsFileError:
    with pytest.raises(TopicsFileError) as caught:
        build_topology(document, settings)
    return caught.value


# --- the shipped file ---------------------------------------------------------------------------


def test_x1_repo_topics_file_declares_every_spec_topic(settings: Settings) -> None:
    topology = parse_topology(REPO_TOPICS.read_text(encoding="utf-8"), settings)
    names = {spec.name for spec in topology.topics}
    assert names == {*REQUIRED_TOPICS, "retry.1s", "retry.5s", "retry.1m"}
    for spec in topology.topics:
        assert spec.full_name == f"hs1.{spec.name}"
        assert spec.description
        assert spec.config["cleanup.policy"] in {"delete", "compact"}


def test_x1_repo_topics_file_has_explicit_kafka_configs(settings: Settings) -> None:
    topology = parse_topology(REPO_TOPICS.read_text(encoding="utf-8"), settings)
    assert topology.get("archive").config["retention.ms"] == str(7 * 86_400_000)
    assert topology.get("subscriptions").config["cleanup.policy"] == "compact"
    assert topology.get("events").config["min.insync.replicas"] == "1"
    assert topology.lane_partitions == topology.get("dlq").partitions


def test_x1_two_prefixes_give_disjoint_names(document: dict[str, Any]) -> None:
    first = build_topology(document, load_settings(topic_prefix="one."))
    second = build_topology(document, load_settings(topic_prefix="two."))
    assert first.full_name("routed") == "one.routed"
    assert second.full_name("routed") == "two.routed"
    assert not {s.full_name for s in first.topics} & {s.full_name for s in second.topics}


# --- retry tiers --------------------------------------------------------------------------------


def test_d6_retry_template_expands_to_one_topic_per_delay_in_order(
    document: dict[str, Any], settings: Settings
) -> None:
    topology = _topology(document, settings)
    assert topology.retry_tiers == (
        (1.0, "hs1.retry.1s"),
        (5.0, "hs1.retry.5s"),
        (60.0, "hs1.retry.1m"),
    )
    tier = topology.get("retry.5s")
    assert tier.retry_delay == 5.0
    assert "5s" in tier.description
    assert tier.partitions == topology.lane_partitions


def test_d6_default_schedule_names_tiers_1m_5m_30m_2h(document: dict[str, Any]) -> None:
    topology = build_topology(document, load_settings(topic_prefix="hookstream."))
    names = [name for _, name in topology.retry_tiers]
    assert names == [f"hookstream.retry.{d}" for d in ("1m", "5m", "30m", "2h")]


def test_d6_retry_retention_must_outlive_delay_plus_window(document: dict[str, Any]) -> None:
    document["topics"]["retry"]["config"]["retention.ms"] = "25h"
    settings = load_settings(retry_schedule=(60.0, 7200.0), retry_window=86_400.0)
    error = _error(document, settings)
    assert (error.topic, error.field) == ("retry.2h", "config.retention.ms")
    settings = load_settings(retry_schedule=(60.0,), retry_window=3600.0)
    assert build_topology(document, settings).get("retry.1m").config["retention.ms"] == "90000000"


def test_archive_must_keep_the_backfill_window(document: dict[str, Any]) -> None:
    document["topics"]["archive"]["config"]["retention.ms"] = "2d"
    error = _error(document, load_settings(archive_retention=3 * 86_400.0))
    assert (error.topic, error.field) == ("archive", "config.retention.ms")
    document["topics"]["archive"]["config"]["retention.ms"] = "forever"
    topology = build_topology(document, load_settings(archive_retention=3 * 86_400.0))
    assert topology.get("archive").config["retention.ms"] == "-1"


# --- validation errors name the topic and the field ---------------------------------------------


@pytest.mark.parametrize(
    ("edit", "topic", "field"),
    [
        (lambda d: d["topics"]["dlq"].update(partitions=-3), "dlq", "partitions"),
        (lambda d: d["topics"]["dlq"].update(partitions=True), "dlq", "partitions"),
        (lambda d: d["topics"]["events"].update(partitions=0), "events", "partitions"),
        (
            lambda d: d["topics"]["events"].update(replication_factor="x"),
            "events",
            "replication_factor",
        ),
        (lambda d: d["topics"]["health"].update(retention="7d"), "health", "retention"),
        (lambda d: d["topics"]["health"].pop("description"), "health", "description"),
        (
            lambda d: d["topics"]["events"]["config"].update({"cleanup.policy": "erase"}),
            "events",
            "config.cleanup.policy",
        ),
        (
            lambda d: d["topics"]["events"]["config"].update({"retention.ms": "a week"}),
            "events",
            "config.retention.ms",
        ),
        (
            lambda d: d["topics"]["events"]["config"].update({"retention.ms": "1.5ms"}),
            "events",
            "config.retention.ms",
        ),
        (
            lambda d: d["topics"]["archive"]["config"].update({"compression.type": "brotli"}),
            "archive",
            "config.compression.type",
        ),
        (
            lambda d: d["topics"]["dlq"]["config"].update({"max.message.bytes": "big"}),
            "dlq",
            "config.max.message.bytes",
        ),
        (
            lambda d: d["topics"]["dlq"]["config"].update({"Retention": "1d"}),
            "dlq",
            "config.Retention",
        ),
        (
            lambda d: d["topics"]["dlq"]["config"].update({"segment.bytes": [1, 2]}),
            "dlq",
            "config.segment.bytes",
        ),
        (
            lambda d: d["topics"]["control"]["config"].update({"min.insync.replicas": 2}),
            "control",
            "config.min.insync.replicas",
        ),
        (
            lambda d: d["topics"]["subscriptions"]["config"].update({"cleanup.policy": "delete"}),
            "subscriptions",
            "config.cleanup.policy",
        ),
        (lambda d: d["topics"].pop("attempts"), "attempts", "topics"),
        (lambda d: d["topics"].pop("retry"), "retry", "topics"),
        (lambda d: d["topics"].update({"retry.9s": {"description": "x"}}), "retry.9s", "name"),
        (lambda d: d["topics"]["retry"].pop("config"), "retry.1s", "config.retention.ms"),
        (lambda d: d["defaults"].update(colour="blue"), "defaults", "colour"),
        (lambda d: d.update(topic={}), "<file>", "topic"),
        (lambda d: d.update(version=2), "<file>", "version"),
        (lambda d: d["topics"].update(events=None), "events", "<topic>"),
    ],
)
def test_x1_validation_error_names_topic_and_field(
    document: dict[str, Any], settings: Settings, edit: Any, topic: str, field: str
) -> None:
    edit(document)
    error = _error(document, settings)
    assert (error.topic, error.field) == (topic, field)
    assert topic in str(error) and field in str(error)


@pytest.mark.parametrize("lane", [*CO_PARTITIONED, "retry"])
def test_x1_per_subscription_topics_must_share_partition_count(
    document: dict[str, Any], settings: Settings, lane: str
) -> None:
    document["topics"][lane]["partitions"] = 7
    error = _error(document, settings)
    assert error.field == "partitions"
    expected = "retry.1s" if lane == "retry" else lane
    # routed is the reference: changing it alone blames the first other lane that differs
    assert error.topic == ("subscriptions" if lane == "routed" else expected)


def test_x1_tenant_keyed_topics_may_differ_in_partitions(
    document: dict[str, Any], settings: Settings
) -> None:
    document["topics"]["events"]["partitions"] = 3
    assert _topology(document, settings).get("events").partitions == 3


def test_x1_defaults_apply_unless_a_topic_overrides(
    document: dict[str, Any], settings: Settings
) -> None:
    document["defaults"]["replication_factor"] = 3
    document["topics"]["events"]["replication_factor"] = 2
    topology = _topology(document, settings)
    assert topology.get("events").replication_factor == 2
    assert topology.get("dlq").replication_factor == 3
    assert topology.get("archive").config["compression.type"] == "zstd"
    assert topology.get("events").config["compression.type"] == "producer"


def test_x1_config_values_become_explicit_kafka_strings(
    document: dict[str, Any], settings: Settings
) -> None:
    config = document["topics"]["events"]["config"]
    config.update(
        {
            "retention.ms": "90m",
            "segment.ms": 3_600_000,
            "cleanup.policy": "delete, compact",
            "preallocate": True,
            "min.cleanable.dirty.ratio": 0.25,
        }
    )
    spec = _topology(document, settings).get("events")
    assert spec.config["retention.ms"] == "5400000"
    assert spec.config["segment.ms"] == "3600000"
    assert spec.config["cleanup.policy"] == "compact,delete"
    assert spec.config["preallocate"] == "true"
    assert spec.config["min.cleanable.dirty.ratio"] == "0.25"


def test_x1_broken_yaml_is_a_config_error(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="HOOKSTREAM_TOPICS_FILE"):
        parse_topology("topics: [unclosed", settings)


def test_unknown_logical_topic_lookup_fails(document: dict[str, Any], settings: Settings) -> None:
    with pytest.raises(KeyError):
        _topology(document, settings).get("retry.3h")


# --- diff ---------------------------------------------------------------------------------------


def test_x1_empty_broker_plans_every_topic_for_creation(
    document: dict[str, Any], settings: Settings
) -> None:
    topology = _topology(document, settings)
    plan = diff_topology(topology, {})
    assert plan.creates == topology.topics
    assert plan.has_changes and not plan.problems
    assert "+ create hs1.retry.1s (12 partitions, replication 1)" in plan.render()


def test_x1_matching_broker_needs_no_changes(document: dict[str, Any], settings: Settings) -> None:
    topology = _topology(document, settings)
    plan = diff_topology(topology, _state(topology))
    assert not plan.has_changes and not plan.problems
    assert plan.render() == "no changes"
    assert plan.as_dict()["changes"] is False


def test_x1_changed_and_stale_configs_are_altered(
    document: dict[str, Any], settings: Settings
) -> None:
    topology = _topology(document, settings)
    state = _state(topology)
    dlq = topology.full_name("dlq")
    config = {**state[dlq].config, "retention.ms": "1000", "segment.ms": "60000"}
    state[dlq] = TopicState(12, 1, config)
    plan = diff_topology(topology, state)
    assert [alter.topic.name for alter in plan.alters] == ["dlq"]
    assert plan.alters[0].changes == (
        ConfigChange("retention.ms", "1000", "2592000000"),
        ConfigChange("segment.ms", "60000", None),
    )
    assert not plan.creates and not plan.partition_increases
    assert "retention.ms: 1000 -> 2592000000" in plan.render()
    assert "segment.ms: 60000 -> (default)" in plan.render()


def test_x1_config_set_at_broker_default_is_made_explicit(
    document: dict[str, Any], settings: Settings
) -> None:
    topology = _topology(document, settings)
    state = _state(topology)
    events = topology.full_name("events")
    state[events] = TopicState(12, 1, {})
    (alter,) = diff_topology(topology, state).alters
    assert ConfigChange("compression.type", None, "producer") in alter.changes


def test_x1_cleanup_policy_order_does_not_count_as_a_change(
    document: dict[str, Any], settings: Settings
) -> None:
    document["topics"]["subscriptions"]["config"]["cleanup.policy"] = "compact,delete"
    topology = _topology(document, settings)
    state = _state(topology)
    name = topology.full_name("subscriptions")
    config = {**state[name].config, "cleanup.policy": "delete,compact"}
    state[name] = TopicState(12, 1, config)
    assert not diff_topology(topology, state).has_changes


def test_x1_more_partitions_are_added(document: dict[str, Any], settings: Settings) -> None:
    topology = _topology(document, settings)
    state = _state(topology)
    state[topology.full_name("events")] = TopicState(4, 1, dict(topology.get("events").config))
    plan = diff_topology(topology, state)
    assert [(g.topic.name, g.old, g.topic.partitions) for g in plan.partition_increases] == [
        ("events", 4, 12)
    ]
    assert plan.as_dict()["add_partitions"] == [{"topic": "hs1.events", "from": 4, "to": 12}]


def test_x1_fewer_partitions_and_other_replication_are_problems(
    document: dict[str, Any], settings: Settings
) -> None:
    topology = _topology(document, settings)
    state = _state(topology)
    routed = topology.get("routed")
    state[routed.full_name] = TopicState(24, 3, dict(routed.config))
    plan = diff_topology(topology, state)
    assert [(p.topic.name, p.field) for p in plan.problems] == [
        ("routed", "partitions"),
        ("routed", "replication_factor"),
    ]
    assert not plan.has_changes
    error = plan.problems[0].error()
    assert (error.topic, error.field) == ("routed", "partitions")
    assert "! hs1.routed partitions:" in plan.render()


def test_x1_plan_json_lists_every_section(document: dict[str, Any], settings: Settings) -> None:
    original = _topology(document, settings)
    changed = copy.deepcopy(document)
    changed["topics"]["health"]["config"]["retention.ms"] = "1d"
    state = _state(original)
    del state[original.full_name("control")]
    plan = diff_topology(_topology(changed, settings), state).as_dict()
    assert [c["topic"] for c in plan["create"]] == ["hs1.control"]
    assert plan["alter_config"] == [
        {
            "topic": "hs1.health",
            "changes": [{"key": "retention.ms", "old": "259200000", "new": "86400000"}],
        }
    ]
    assert plan["problems"] == [] and plan["add_partitions"] == []
