"""What `hookstream topics apply` would change on the broker to match topics.yaml (SPEC X1), pure.

`diff_topology` compares the declared `Topology` with the topics the broker describes and returns a
`Plan`: topics to create, configs to alter, partitions to add, and the problems no apply can fix
(fewer partitions than the broker has, another replication factor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.domain.topology import TopicSpec, Topology, canonical_config
from streams.errors import TopicsFileError


@dataclass(frozen=True)
class TopicState:
    """A topic as the broker reports it; ``config`` holds only the topic's own overrides."""

    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigChange:
    """``old`` None: the broker default applied; ``new`` None: go back to the broker default."""

    key: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ConfigAlter:
    topic: TopicSpec
    changes: tuple[ConfigChange, ...]


@dataclass(frozen=True)
class PartitionIncrease:
    topic: TopicSpec
    old: int


@dataclass(frozen=True)
class Problem:
    """A difference Kafka cannot apply; ``apply`` reports it and changes nothing."""

    topic: TopicSpec
    field: str
    message: str

    def error(self) -> TopicsFileError:
        return TopicsFileError(self.topic.name, self.field, self.message)


@dataclass(frozen=True)
class Plan:
    """What `hookstream topics apply` would do to bring the broker to topics.yaml."""

    creates: tuple[TopicSpec, ...] = ()
    partition_increases: tuple[PartitionIncrease, ...] = ()
    alters: tuple[ConfigAlter, ...] = ()
    problems: tuple[Problem, ...] = ()

    @property
    def has_changes(self) -> bool:
        return bool(self.creates or self.partition_increases or self.alters)

    def render(self) -> str:
        """The plan for people: one line per action, details indented below it."""
        lines: list[str] = []
        for spec in self.creates:
            lines.append(
                f"+ create {spec.full_name} ({spec.partitions} partitions, "
                f"replication {spec.replication_factor})"
            )
            lines.extend(f"    {key} = {value}" for key, value in sorted(spec.config.items()))
        for grow in self.partition_increases:
            lines.append(
                f"~ partitions {grow.topic.full_name}: {grow.old} -> {grow.topic.partitions}"
            )
        for alter in self.alters:
            lines.append(f"~ config {alter.topic.full_name}")
            lines.extend(
                f"    {c.key}: {c.old or '(default)'} -> {c.new or '(default)'}"
                for c in alter.changes
            )
        for problem in self.problems:
            lines.append(f"! {problem.topic.full_name} {problem.field}: {problem.message}")
        return "\n".join(lines) if lines else "no changes"

    def as_dict(self) -> dict[str, Any]:
        """The plan for machines (``--json``)."""
        return {
            "changes": self.has_changes,
            "create": [
                {
                    "topic": s.full_name,
                    "partitions": s.partitions,
                    "replication_factor": s.replication_factor,
                    "config": dict(s.config),
                }
                for s in self.creates
            ],
            "add_partitions": [
                {"topic": g.topic.full_name, "from": g.old, "to": g.topic.partitions}
                for g in self.partition_increases
            ],
            "alter_config": [
                {
                    "topic": a.topic.full_name,
                    "changes": [{"key": c.key, "old": c.old, "new": c.new} for c in a.changes],
                }
                for a in self.alters
            ],
            "problems": [
                {"topic": p.topic.full_name, "field": p.field, "message": p.message}
                for p in self.problems
            ],
        }


def diff_topology(topology: Topology, actual: Mapping[str, TopicState]) -> Plan:
    """Compare the declared topics with the broker's (``actual`` is keyed by full name)."""
    creates: list[TopicSpec] = []
    grows: list[PartitionIncrease] = []
    alters: list[ConfigAlter] = []
    problems: list[Problem] = []
    for spec in topology.topics:
        state = actual.get(spec.full_name)
        if state is None:
            creates.append(spec)
            continue
        problems.extend(_shape_problems(spec, state))
        if state.partitions < spec.partitions:
            grows.append(PartitionIncrease(spec, state.partitions))
        changes = config_changes(spec.config, state.config)
        if changes:
            alters.append(ConfigAlter(spec, changes))
    return Plan(tuple(creates), tuple(grows), tuple(alters), tuple(problems))


def config_changes(
    desired: Mapping[str, str], actual: Mapping[str, str]
) -> tuple[ConfigChange, ...]:
    """Set what differs; reset overrides that topics.yaml no longer declares."""
    changes = [
        ConfigChange(key, actual.get(key), value)
        for key, value in sorted(desired.items())
        if key not in actual or canonical_config(key, actual[key]) != value
    ]
    changes.extend(
        ConfigChange(key, actual[key], None) for key in sorted(actual) if key not in desired
    )
    return tuple(changes)


def _shape_problems(spec: TopicSpec, state: TopicState) -> list[Problem]:
    problems = []
    if state.partitions > spec.partitions:
        problems.append(
            Problem(
                spec,
                "partitions",
                f"the broker has {state.partitions}, topics.yaml declares {spec.partitions}: "
                "Kafka cannot remove partitions",
            )
        )
    if state.replication_factor != spec.replication_factor:
        problems.append(
            Problem(
                spec,
                "replication_factor",
                f"the broker has {state.replication_factor}, topics.yaml declares "
                f"{spec.replication_factor}: changing it needs a partition reassignment, "
                "which hookstream does not do",
            )
        )
    return problems
