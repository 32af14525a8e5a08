"""`hookstream topics`: create and inspect the pipeline's Kafka topics from topics.yaml (X1)."""

from __future__ import annotations

import json
from typing import Any

import click

from streams.adapters.kafka_admin import execute_plan, load_topology, plan_topics
from streams.domain.topic_plan import Plan
from streams.errors import TopicsFileError
from streams.settings import load_settings


@click.group()
def topics() -> None:
    """Create and inspect hookstream's Kafka topics, as declared in topics.yaml."""


@topics.command()
@click.option("--dry-run", is_flag=True, help="Print the difference; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def apply(dry_run: bool, as_json: bool) -> None:
    """Create missing topics and bring configs and partitions to topics.yaml.

    Idempotent: a second run prints "no changes". Fewer partitions or another replication
    factor than the broker has are reported as problems and nothing is applied.
    """
    settings = load_settings()
    topology = load_topology(settings)
    plan = plan_topics(settings, topology)
    apply_now = not dry_run and plan.has_changes and not plan.problems
    if not as_json:
        click.echo(plan.render())
    if apply_now:
        execute_plan(settings, topology, plan)
    if as_json:
        click.echo(json.dumps({**plan.as_dict(), "applied": apply_now}, indent=2))
    elif apply_now:
        click.echo(f"applied {_count(plan)} change(s)")
    if plan.problems:
        raise _problems_error(plan)


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the topics as JSON.")
def list_topics(as_json: bool) -> None:
    """List the topics topics.yaml declares, with their full names (reads no broker)."""
    topology = load_topology(load_settings())
    rows: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "topic": spec.full_name,
            "partitions": spec.partitions,
            "replication_factor": spec.replication_factor,
            "retention_ms": spec.config.get("retention.ms"),
            "cleanup_policy": spec.config.get("cleanup.policy"),
            "description": spec.description,
        }
        for spec in topology.topics
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(row["topic"]) for row in rows)
    for row in rows:
        click.echo(
            f"{row['topic']:<{width}}  {row['partitions']:>3}p  rf {row['replication_factor']}  "
            f"{row['description']}"
        )


def _count(plan: Plan) -> int:
    return len(plan.creates) + len(plan.partition_increases) + len(plan.alters)


def _problems_error(plan: Plan) -> TopicsFileError:
    first = plan.problems[0]
    more = len(plan.problems) - 1
    suffix = f" (and {more} more problem(s))" if more else ""
    return TopicsFileError(
        first.topic.name, first.field, f"{first.message}{suffix}; nothing applied"
    )
