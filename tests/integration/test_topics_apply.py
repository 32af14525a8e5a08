"""`hookstream topics apply` against the real broker: create, idempotence, alter, dry-run (X1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from streams.adapters.kafka_admin import (
    TopicAdmin,
    apply_topics,
    delete_topics,
    load_topology,
    plan_topics,
    prefixed_topics,
)
from streams.cli.main import cli
from streams.cli.worker import require_topics
from streams.domain.topic_plan import ConfigChange, TopicState
from streams.errors import TopicsFileError
from streams.settings import Settings

pytestmark = pytest.mark.integration

SHORT_SCHEDULE = (1.0, 5.0)


@pytest.fixture
def pipeline(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., Settings]]:
    """Settings with short retry tiers; every topic under the test's prefix is deleted after."""
    made: list[Settings] = []

    def factory(**overrides: Any) -> Settings:
        settings = make_settings(retry_schedule=SHORT_SCHEDULE, **overrides)
        made.append(settings)
        return settings

    yield factory
    if made:  # every variant shares this test's prefix
        delete_topics(made[0], prefixed_topics(made[0]))


def _broker(settings: Settings) -> dict[str, TopicState]:
    topology = load_topology(settings)
    return TopicAdmin(settings).describe(spec.full_name for spec in topology.topics)


def _cli_env(settings: Settings) -> dict[str, str]:
    """The environment that gives the CLI these settings."""
    return {
        "HOOKSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "HOOKSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "HOOKSTREAM_TOPICS_FILE": str(settings.topics_file),
        "HOOKSTREAM_RETRY_SCHEDULE": "1s,5s",
    }


def _edited_copy(
    settings: Settings, tmp_path: Path, edit: Callable[[dict[str, Any]], None]
) -> Path:
    document = yaml.safe_load(settings.topics_file.read_text(encoding="utf-8"))
    edit(document)
    path = tmp_path / "topics.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_x1_apply_creates_every_topic_then_changes_nothing(
    pipeline: Callable[..., Settings],
) -> None:
    settings = pipeline()
    topology = load_topology(settings)

    first = apply_topics(settings)

    assert [spec.name for spec in first.creates] == [spec.name for spec in topology.topics]
    assert {"retry.1s", "retry.5s"} <= {spec.name for spec in first.creates}
    broker = _broker(settings)
    assert set(broker) == {spec.full_name for spec in topology.topics}
    for spec in topology.topics:
        state = broker[spec.full_name]
        assert state.partitions == spec.partitions, spec.name
        assert state.replication_factor == spec.replication_factor, spec.name
        assert dict(state.config) == dict(spec.config), spec.name

    second = apply_topics(settings)
    assert not second.has_changes and not second.problems
    assert second.render() == "no changes"


def test_x1_changed_retention_alters_exactly_that_config(
    pipeline: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = pipeline()
    apply_topics(settings)

    def shorter_dlq(document: dict[str, Any]) -> None:
        document["topics"]["dlq"]["config"]["retention.ms"] = "1d"

    changed = pipeline(topics_file=_edited_copy(settings, tmp_path, shorter_dlq))
    plan = apply_topics(changed)

    assert not plan.creates and not plan.partition_increases and not plan.problems
    assert [(a.topic.name, a.changes) for a in plan.alters] == [
        ("dlq", (ConfigChange("retention.ms", "2592000000", "86400000"),))
    ]
    broker = _broker(changed)
    assert broker[changed.topic("dlq")].config["retention.ms"] == "86400000"
    assert broker[changed.topic("dlq")].config["max.message.bytes"] == "2097152"
    assert broker[changed.topic("attempts")].config["retention.ms"] == "604800000"
    assert not apply_topics(changed).has_changes
    # the original file now differs from the broker in that one value only
    (back,) = plan_topics(settings).alters
    assert back.changes == (ConfigChange("retention.ms", "86400000", "2592000000"),)


def test_x1_dry_run_changes_nothing_on_the_broker(
    pipeline: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = pipeline()

    plan = apply_topics(settings, dry_run=True)

    assert len(plan.creates) == len(load_topology(settings).topics)
    assert prefixed_topics(settings) == []

    apply_topics(settings)

    def edits(document: dict[str, Any]) -> None:
        document["topics"]["health"]["config"]["retention.ms"] = "1h"
        document["topics"]["events"]["partitions"] = 16

    changed = pipeline(topics_file=_edited_copy(settings, tmp_path, edits))
    before = _broker(changed)
    dry = apply_topics(changed, dry_run=True)
    assert [a.topic.name for a in dry.alters] == ["health"]
    assert [g.topic.name for g in dry.partition_increases] == ["events"]
    assert _broker(changed) == before


def test_x1_partitions_grow_but_never_shrink(
    pipeline: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = pipeline()
    apply_topics(settings)

    def more_events(document: dict[str, Any]) -> None:
        document["topics"]["events"]["partitions"] = 14

    grown = pipeline(topics_file=_edited_copy(settings, tmp_path, more_events))
    plan = apply_topics(grown)
    assert [(g.topic.name, g.old) for g in plan.partition_increases] == [("events", 12)]
    assert _broker(grown)[grown.topic("events")].partitions == 14

    # the shipped file now declares fewer partitions than the broker has: refused, not applied
    with pytest.raises(TopicsFileError) as caught:
        apply_topics(settings)
    assert (caught.value.topic, caught.value.field) == ("events", "partitions")
    assert _broker(settings)[settings.topic("events")].partitions == 14


def test_x1_replication_change_is_reported_not_attempted(
    pipeline: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = pipeline()
    apply_topics(settings)

    def replicate_archive(document: dict[str, Any]) -> None:
        document["topics"]["archive"]["replication_factor"] = 3

    changed = pipeline(topics_file=_edited_copy(settings, tmp_path, replicate_archive))
    plan = plan_topics(changed)
    assert [(p.topic.name, p.field) for p in plan.problems] == [("archive", "replication_factor")]
    with pytest.raises(TopicsFileError):
        apply_topics(changed)
    assert _broker(changed)[changed.topic("archive")].replication_factor == 1


def test_x1_cli_apply_dry_run_json_then_apply_then_no_changes(
    pipeline: Callable[..., Settings],
) -> None:
    settings = pipeline()
    env = _cli_env(settings)
    runner = CliRunner()

    dry = runner.invoke(cli, ["topics", "apply", "--dry-run", "--json"], env=env)
    assert dry.exit_code == 0, dry.output
    assert '"applied": false' in dry.output
    assert f'"topic": "{settings.topic("retry.5s")}"' in dry.output
    assert prefixed_topics(settings) == []

    applied = runner.invoke(cli, ["topics", "apply"], env=env)
    assert applied.exit_code == 0, applied.output
    assert f"+ create {settings.topic('routed')}" in applied.output
    assert f"applied {len(load_topology(settings).topics)} change(s)" in applied.output

    again = runner.invoke(cli, ["topics", "apply"], env=env)
    assert again.exit_code == 0, again.output
    assert again.output.strip() == "no changes"


def test_x1_a_worker_refuses_to_start_before_its_topics_exist(
    pipeline: Callable[..., Settings],
) -> None:
    """A worker started before `topics apply` (a new topic in an upgrade) stops at once, naming
    the missing topics and the command, instead of failing its first write minutes later."""
    settings = pipeline()
    env = _cli_env(settings)
    names = [spec.full_name for spec in load_topology(settings).topics]
    assert prefixed_topics(settings) == []

    refused = CliRunner().invoke(cli, ["worker"], env=env)
    assert refused.exit_code == 1, refused.output
    assert f"missing on {settings.kafka_bootstrap}: {', '.join(names)}." in refused.output
    assert "hookstream topics apply" in refused.output
    assert settings.topic("attempt-digests") in names

    apply_topics(settings)
    require_topics(settings)  # every topic there: no error
