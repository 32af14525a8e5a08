"""hookstream's topics as declared in topics.yaml (SPEC X1), and the diff against a broker.

Pure: this module parses and validates the YAML text into typed `TopicSpec`s, expands the one
``retry`` template into a topic per delay of the retry schedule, and compares the declared topics
with what a broker reports (`TopicState`) to produce a `Plan`. Reading the file and talking to
Kafka live in ``streams.adapters.kafka_admin``.

Every full topic name goes through ``Settings.topic`` so pipelines with different prefixes share
one broker without seeing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from streams.domain.durations import format_duration, parse_duration
from streams.errors import ConfigError, TopicsFileError

if TYPE_CHECKING:
    from streams.settings import Settings

#: Every topic of SPEC §2 that topics.yaml must declare (the retry template comes on top).
REQUIRED_TOPICS = (
    "events",
    "archive",
    "subscriptions",
    "routed",
    "backfill",
    "attempts",
    "attempt-digests",
    "dlq",
    "health",
    "control",
    "notifications",
    "apikeys",
    "breakers",
)
#: The template that expands to one ``retry.<delay>`` topic per retry delay (D6).
RETRY = "retry"
#: Keyed by subscription id and co-partitioned: a subscription's deliveries, retries, outcomes
#: and state all land in the same partition number, so these must share one partition count.
#: The retry tiers belong here too.
CO_PARTITIONED = (
    "subscriptions",
    "routed",
    "backfill",
    "attempts",
    "attempt-digests",
    "dlq",
    "health",
    "control",
    "notifications",
)

_FILE = "<file>"
_ROOT_KEYS = frozenset({"version", "defaults", "topics"})
_DEFAULT_KEYS = frozenset({"partitions", "replication_factor", "config"})
_TOPIC_KEYS = _DEFAULT_KEYS | {"description"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_CONFIG_KEY = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9]+)*$")
_MAX_TOPIC_NAME = 249
_CLEANUP_POLICIES = frozenset({"delete", "compact"})
_COMPRESSION = frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"})
_RETENTION = "retention.ms"


@dataclass(frozen=True)
class TopicSpec:
    """One declared topic. ``config`` holds explicit Kafka topic configs as strings."""

    name: str
    full_name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str]
    description: str
    retry_delay: float | None = None


@dataclass(frozen=True)
class Topology:
    """Every topic of one pipeline, retry tiers last in schedule order."""

    topics: tuple[TopicSpec, ...]

    def get(self, name: str) -> TopicSpec:
        """The spec of a logical topic such as ``routed`` or ``retry.1m``."""
        for spec in self.topics:
            if spec.name == name:
                return spec
        raise KeyError(f"topics.yaml declares no topic {name!r}")

    def full_name(self, name: str) -> str:
        return self.get(name).full_name

    @property
    def retry_tiers(self) -> tuple[tuple[float, str], ...]:
        """(delay in seconds, full topic name) of each retry tier, shortest delay first."""
        return tuple(
            (spec.retry_delay, spec.full_name)
            for spec in self.topics
            if spec.retry_delay is not None
        )

    @property
    def lane_partitions(self) -> int:
        """The partition count shared by every per-subscription topic."""
        return self.get("routed").partitions


# --- parsing -----------------------------------------------------------------------------------


def parse_topology(text: str, settings: Settings) -> Topology:
    """Parse and validate topics.yaml text. Raises TopicsFileError naming the topic and field."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            "HOOKSTREAM_TOPICS_FILE", f"topics.yaml is not valid YAML: {exc}"
        ) from exc
    return build_topology(document, settings)


def build_topology(document: object, settings: Settings) -> Topology:
    """Validate an already-loaded topics.yaml document against the settings."""
    root = _mapping(document, _FILE, "<root>")
    _reject_unknown(root, _ROOT_KEYS, _FILE)
    if root.get("version", 1) != 1:
        raise TopicsFileError(_FILE, "version", "only version 1 is understood")
    defaults = _mapping(root.get("defaults", {}), _FILE, "defaults")
    _reject_unknown(defaults, _DEFAULT_KEYS, "defaults")
    declared = _mapping(root.get("topics"), _FILE, "topics")
    for name in (*REQUIRED_TOPICS, RETRY):
        if name not in declared:
            raise TopicsFileError(name, "topics", "missing: hookstream needs this topic")
    specs = [
        _parse_topic(str(name), body, defaults, settings)
        for name, body in declared.items()
        if name != RETRY
    ]
    specs.extend(_expand_retry(declared[RETRY], defaults, settings))
    _check_copartitioned(specs)
    for spec in specs:
        _check_retention(spec, settings)
    _check_compacted(specs)
    return Topology(tuple(specs))


def _parse_topic(
    name: str, body: object, defaults: Mapping[str, Any], settings: Settings
) -> TopicSpec:
    if not _NAME.match(name) or name.startswith(f"{RETRY}."):
        raise TopicsFileError(
            name, "name", "use letters, digits, '_' and '-' (retry.* is reserved)"
        )
    full_name = settings.topic(name)
    if len(full_name) > _MAX_TOPIC_NAME:
        raise TopicsFileError(name, "name", f"{full_name!r} is longer than Kafka's 249 characters")
    description, partitions, replication, config = _parse_body(name, body, defaults)
    return TopicSpec(name, full_name, partitions, replication, config, description)


def _expand_retry(body: object, defaults: Mapping[str, Any], settings: Settings) -> list[TopicSpec]:
    description, partitions, replication, config = _parse_body(RETRY, body, defaults)
    tiers = []
    for delay in settings.retry_schedule:
        label = format_duration(delay)
        name = f"{RETRY}.{label}"
        text = description.replace("{delay}", label)
        tiers.append(
            TopicSpec(name, settings.topic(name), partitions, replication, config, text, delay)
        )
    return tiers


def _parse_body(
    topic: str, body: object, defaults: Mapping[str, Any]
) -> tuple[str, int, int, dict[str, str]]:
    spec = _mapping(body, topic, "<topic>")
    _reject_unknown(spec, _TOPIC_KEYS, topic)
    description = spec.get("description")
    if not isinstance(description, str) or not description.strip():
        raise TopicsFileError(topic, "description", "required: one line saying what flows here")
    partitions = _count(topic, "partitions", spec.get("partitions", defaults.get("partitions")))
    replication = _count(
        topic,
        "replication_factor",
        spec.get("replication_factor", defaults.get("replication_factor")),
    )
    merged = {**_mapping(defaults.get("config", {}), "defaults", "config")}
    merged.update(_mapping(spec.get("config", {}), topic, "config"))
    config = {str(key): _config_value(topic, str(key), value) for key, value in merged.items()}
    min_isr = config.get("min.insync.replicas")
    if min_isr is not None and int(min_isr) > replication:
        raise TopicsFileError(
            topic, "config.min.insync.replicas", f"{min_isr} exceeds replication_factor"
        )
    return description.strip(), partitions, replication, config


def _mapping(value: object, topic: str, field_name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TopicsFileError(topic, field_name, "must be a mapping of keys to values")
    return value


def _reject_unknown(values: Mapping[str, Any], allowed: frozenset[str], topic: str) -> None:
    for key in values:
        if key not in allowed:
            raise TopicsFileError(
                topic, str(key), f"unknown key; expected one of {sorted(allowed)}"
            )


def _count(topic: str, field_name: str, value: object) -> int:
    if value is None:
        raise TopicsFileError(topic, field_name, "required (here or under defaults)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopicsFileError(
            topic, field_name, f"must be a whole number of at least 1, not {value!r}"
        )
    return value


# --- config values -----------------------------------------------------------------------------


def _config_value(topic: str, key: str, value: object) -> str:
    field_name = f"config.{key}"
    if not _CONFIG_KEY.match(key):
        raise TopicsFileError(topic, field_name, "not a Kafka topic config name")
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float | str):
        text = str(value).strip()
    else:
        raise TopicsFileError(topic, field_name, "must be a string, number or boolean")
    check = _VALUE_CHECKS.get(key) or _suffix_check(key)
    return check(topic, field_name, text) if check else text


def _suffix_check(key: str) -> _Check | None:
    if key.endswith(".ms"):
        return _millis
    if key.endswith(".bytes"):
        return _whole
    return None


def _millis(topic: str, field_name: str, text: str) -> str:
    """Milliseconds from an integer (``-1`` is forever) or a duration such as ``7d``."""
    if re.fullmatch(r"-?\d+", text):
        return _whole(topic, field_name, text)
    if text in ("forever", "infinite"):
        return "-1"
    try:
        millis = parse_duration(text) * 1000
    except ValueError as exc:
        raise TopicsFileError(topic, field_name, str(exc)) from exc
    if not millis.is_integer():
        raise TopicsFileError(topic, field_name, f"{text!r} is not a whole number of milliseconds")
    return str(int(millis))


def _whole(topic: str, field_name: str, text: str) -> str:
    if not re.fullmatch(r"-?\d+", text) or int(text) < -1:
        raise TopicsFileError(topic, field_name, f"must be a whole number (or -1), not {text!r}")
    return str(int(text))


def _positive(topic: str, field_name: str, text: str) -> str:
    if not text.isdigit() or int(text) < 1:
        raise TopicsFileError(topic, field_name, f"must be a whole number of at least 1: {text!r}")
    return str(int(text))


def _cleanup(topic: str, field_name: str, text: str) -> str:
    policies = [part.strip() for part in text.split(",")]
    unknown = [part for part in policies if part not in _CLEANUP_POLICIES]
    if unknown or len(set(policies)) != len(policies):
        raise TopicsFileError(topic, field_name, f"{text!r}: use delete, compact or both")
    return canonical_config("cleanup.policy", text)


def _compression(topic: str, field_name: str, text: str) -> str:
    if text not in _COMPRESSION:
        raise TopicsFileError(topic, field_name, f"{text!r}: use one of {sorted(_COMPRESSION)}")
    return text


_Check = Callable[[str, str, str], str]
_VALUE_CHECKS: dict[str, _Check] = {
    "cleanup.policy": _cleanup,
    "compression.type": _compression,
    "min.insync.replicas": _positive,
    "max.message.bytes": _positive,
}


def canonical_config(key: str, value: str) -> str:
    """One spelling per value, so ``delete,compact`` and ``compact,delete`` compare equal."""
    if key == "cleanup.policy":
        return ",".join(sorted(part.strip() for part in value.split(",")))
    return value


# --- cross-topic rules -------------------------------------------------------------------------


def _check_copartitioned(specs: list[TopicSpec]) -> None:
    reference = next(spec for spec in specs if spec.name == "routed")
    for spec in specs:
        if (spec.name in CO_PARTITIONED or spec.retry_delay is not None) and (
            spec.partitions != reference.partitions
        ):
            raise TopicsFileError(
                spec.name,
                "partitions",
                f"{spec.partitions} differs from routed's {reference.partitions}; the "
                "per-subscription topics are co-partitioned by subscription id",
            )


def _check_retention(spec: TopicSpec, settings: Settings) -> None:
    """Retry tiers outlive delay + retry window; the archive keeps the backfill window."""
    if spec.retry_delay is not None:
        floor, why = spec.retry_delay + settings.retry_window, "its delay plus the retry window"
    elif spec.name == "archive":
        floor, why = settings.archive_retention, "the backfill window (archive_retention)"
    else:
        return
    retention = spec.config.get(_RETENTION)
    if retention is None:
        raise TopicsFileError(spec.name, f"config.{_RETENTION}", "required on this topic")
    if int(retention) != -1 and int(retention) < floor * 1000:
        raise TopicsFileError(
            spec.name,
            f"config.{_RETENTION}",
            f"{retention} ms is shorter than {why}: {format_duration(floor)}",
        )


def _check_compacted(specs: list[TopicSpec]) -> None:
    spec = next(spec for spec in specs if spec.name == "subscriptions")
    if "compact" not in spec.config.get("cleanup.policy", ""):
        raise TopicsFileError(
            spec.name, "config.cleanup.policy", "must include compact (the registry is compacted)"
        )


# --- diff ---------------------------------------------------------------------------------------
