"""Kafka topic administration for hookstream: read topics.yaml, read the broker, apply the plan.

The only place that talks to Kafka's AdminClient. confluent-kafka errors become hookstream
errors here: a broker that refuses a declared topic or config raises `TopicsFileError` naming
the topic, and a broker that cannot be reached raises `ConfigError` naming
``HOOKSTREAM_KAFKA_BOOTSTRAP``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException

# confluent-kafka re-exports these from private modules without listing them in __all__
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from streams.adapters.kafka_clients import LIBRDKAFKA_LOG
from streams.domain.topic_plan import (
    ConfigAlter,
    PartitionIncrease,
    Plan,
    TopicState,
    diff_topology,
)
from streams.domain.topology import TopicSpec, Topology, parse_topology
from streams.errors import ConfigError, TopicsFileError
from streams.settings import Settings

_BOOTSTRAP = "HOOKSTREAM_KAFKA_BOOTSTRAP"
#: How long one admin request may take before hookstream gives up on the broker.
REQUEST_TIMEOUT = 30.0
#: How long `apply` waits for the broker to report the state it was just asked for.
CONVERGE_TIMEOUT = 30.0
# describe_configs reports a source as the enum or, in some versions, as its plain int value
_TOPIC_OVERRIDE: frozenset[object] = frozenset(
    {ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
)


def load_topology(settings: Settings) -> Topology:
    """Read and validate ``settings.topics_file``: every topic's full name and the retry tiers."""
    try:
        text = settings.topics_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "HOOKSTREAM_TOPICS_FILE", f"cannot read {settings.topics_file}: {exc}"
        ) from exc
    return parse_topology(text, settings)


def plan_topics(settings: Settings, topology: Topology | None = None) -> Plan:
    """What `apply` would change on the broker; changes nothing."""
    topology = topology or load_topology(settings)
    admin = TopicAdmin(settings)
    return diff_topology(topology, admin.describe(spec.full_name for spec in topology.topics))


def execute_plan(settings: Settings, topology: Topology, plan: Plan) -> None:
    """Apply a plan without problems, then wait until the broker reports the declared state."""
    if plan.problems:
        raise plan.problems[0].error()
    admin = TopicAdmin(settings)
    admin.create(plan.creates)
    admin.add_partitions(plan.partition_increases)
    admin.alter_configs(plan.alters)
    _await_converged(admin, topology)


def apply_topics(settings: Settings, *, dry_run: bool = False) -> Plan:
    """Bring the broker to topics.yaml (X1) and return the plan that was (or would be) applied.

    Raises TopicsFileError, changing nothing, when the plan holds a problem Kafka cannot fix
    (fewer partitions, another replication factor), unless ``dry_run``.
    """
    topology = load_topology(settings)
    plan = plan_topics(settings, topology)
    if not dry_run and (plan.has_changes or plan.problems):
        execute_plan(settings, topology, plan)
    return plan


def delete_topics(settings: Settings, full_names: Iterable[str]) -> None:
    """Delete topics by full name; ones already gone are fine. Meant for tests and teardown."""
    TopicAdmin(settings).delete(full_names)


def prefixed_topics(settings: Settings) -> list[str]:
    """Every topic on the broker under this pipeline's prefix, sorted."""
    return TopicAdmin(settings).names_with_prefix(settings.topic_prefix)


def _await_converged(admin: TopicAdmin, topology: Topology) -> None:
    """Kafka applies admin requests asynchronously; wait until a re-read shows no changes."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    names = [spec.full_name for spec in topology.topics]
    while True:
        plan = diff_topology(topology, admin.describe(names))
        if not plan.has_changes:
            return
        if time.monotonic() > deadline:
            raise ConfigError(
                _BOOTSTRAP, f"the broker did not reach topics.yaml's state:\n{plan.render()}"
            )
        time.sleep(0.2)


class TopicAdmin:
    """A thin wrapper over confluent-kafka's AdminClient that speaks hookstream's types."""

    def __init__(self, settings: Settings) -> None:
        self._bootstrap = settings.kafka_bootstrap
        self._client = AdminClient(
            {
                "bootstrap.servers": settings.kafka_bootstrap,
                "socket.timeout.ms": 10000,
                "logger": LIBRDKAFKA_LOG,  # type: ignore[dict-item]  # X2: never raw on stderr
            }
        )

    def describe(self, full_names: Iterable[str]) -> dict[str, TopicState]:
        """Partitions, replication and the topic's own config overrides of those that exist."""
        metadata = self._metadata()
        found = {
            name: metadata.topics[name]
            for name in full_names
            if name in metadata.topics and metadata.topics[name].error is None
        }
        if not found:
            return {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in found]
        futures = self._client.describe_configs(resources, request_timeout=REQUEST_TIMEOUT)
        states = {}
        for resource, future in futures.items():
            # a topic just created on one node of a cluster is unknown to the node asked for
            # a moment: it does not exist yet as far as the plan goes (asked again shortly)
            entries: Mapping[str, Any] | None = self._result(
                future, resource.name, "config", KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if entries is None:
                continue
            topic = found[resource.name]
            states[resource.name] = TopicState(
                partitions=len(topic.partitions),
                replication_factor=max(
                    (len(p.replicas) for p in topic.partitions.values()), default=0
                ),
                config={
                    key: entry.value
                    for key, entry in entries.items()
                    if entry.source in _TOPIC_OVERRIDE and entry.value is not None
                },
            )
        return states

    def missing(self, full_names: Iterable[str]) -> list[str]:
        """Those of ``full_names`` that do not exist on the broker, in the order given."""
        topics = self._metadata().topics
        return [name for name in full_names if name not in topics or topics[name].error]

    def names_with_prefix(self, prefix: str) -> list[str]:
        return sorted(name for name in self._metadata().topics if name.startswith(prefix))

    def create(self, specs: Iterable[TopicSpec]) -> None:
        specs = list(specs)
        by_name = {spec.full_name: spec.name for spec in specs}
        if not by_name:
            return
        new = [
            NewTopic(
                spec.full_name,
                num_partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                config=dict(spec.config),
            )
            for spec in specs
        ]
        futures = self._client.create_topics(new, request_timeout=REQUEST_TIMEOUT)
        for full_name, future in futures.items():
            self._result(future, by_name[full_name], "create", KafkaError.TOPIC_ALREADY_EXISTS)

    def add_partitions(self, increases: Iterable[PartitionIncrease]) -> None:
        by_name = {grow.topic.full_name: grow.topic for grow in increases}
        if not by_name:
            return
        new = [NewPartitions(name, spec.partitions) for name, spec in by_name.items()]
        futures = self._client.create_partitions(new, request_timeout=REQUEST_TIMEOUT)
        for full_name, future in futures.items():
            self._result(future, by_name[full_name].name, "partitions")

    def alter_configs(self, alters: Iterable[ConfigAlter]) -> None:
        """Incremental: only the listed keys change; others keep their values."""
        by_name = {alter.topic.full_name: alter for alter in alters}
        if not by_name:
            return
        resources = [
            ConfigResource(
                ConfigResource.Type.TOPIC,
                name,
                incremental_configs=[_config_entry(c.key, c.new) for c in alter.changes],
            )
            for name, alter in by_name.items()
        ]
        futures = self._client.incremental_alter_configs(resources, request_timeout=REQUEST_TIMEOUT)
        for resource, future in futures.items():
            self._result(future, by_name[resource.name].topic.name, "config")

    def delete(self, full_names: Iterable[str]) -> None:
        names = list(full_names)
        if not names:
            return
        futures = self._client.delete_topics(names, request_timeout=REQUEST_TIMEOUT)
        for name, future in futures.items():
            self._result(future, name, "delete", KafkaError.UNKNOWN_TOPIC_OR_PART)

    def _metadata(self) -> Any:
        try:
            return self._client.list_topics(timeout=REQUEST_TIMEOUT)
        except KafkaException as exc:
            raise ConfigError(
                _BOOTSTRAP, f"cannot read topics from Kafka at {self._bootstrap}: {exc}"
            ) from exc

    def _result(self, future: Future[Any], topic: str, field: str, *tolerated: int) -> Any:
        """Wait for one admin future; a refusal names the topic.yaml topic and the field."""
        try:
            return future.result(timeout=REQUEST_TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in tolerated:
                return None
            raise TopicsFileError(topic, field, f"Kafka refused it: {exc}") from exc
        except FutureTimeout as exc:
            raise ConfigError(
                _BOOTSTRAP, f"Kafka at {self._bootstrap} did not answer about {topic!r}"
            ) from exc


def _config_entry(key: str, value: str | None) -> ConfigEntry:
    if value is None:
        return ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
    return ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
