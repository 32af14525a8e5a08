"""`hookstream kafka start|stop|status`: the local development broker (SPEC X2)."""

from __future__ import annotations

from pathlib import Path

import click

from streams.adapters.local_cluster import LocalCluster, write_replicated_topics
from streams.adapters.local_kafka import LocalKafka
from streams.settings import load_settings

EXIT_NOT_RUNNING = 3
EXIT_NOT_ANSWERING = 1


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _local_kafka(pom: Path | None = None) -> LocalKafka:
    return LocalKafka(load_settings(), pom_path=pom, say=_progress)


def _local_cluster(brokers: int, pom: Path | None = None) -> LocalCluster:
    return LocalCluster(load_settings(), brokers, pom_path=pom, say=_progress)


BROKERS = click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="1: the single development broker; more: a local KRaft cluster of that many "
    "broker+controller nodes on consecutive port pairs, replication 3 (docs/deployment.md).",
)


@click.group()
def kafka() -> None:
    """The local development Kafka: one real Apache Kafka node (KRaft), no Docker.

    Needs Java 17+ and Maven. It listens on HOOKSTREAM_KAFKA_BOOTSTRAP (its controller on the
    next port) and keeps its jars, data and log under HOOKSTREAM_DATA_DIR/kafka.
    """


@kafka.command()
@click.option(
    "--pom",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The pom.xml that lists the broker's jars (default: deploy/kafka/pom.xml of the "
    "checkout hookstream is installed from).",
)
@BROKERS
def start(pom: Path | None, brokers: int) -> None:
    """Start the broker and wait until it answers.

    The first start downloads Kafka's jars from Maven Central (about half a minute); later
    starts reuse them. Starting a broker that already runs is harmless.
    """
    if brokers > 1:
        _start_cluster(brokers, pom)
        return
    result = _local_kafka(pom).start()
    if result.already_running:
        click.echo(f"kafka is already running at {result.bootstrap} (pid {result.pid})")
    else:
        click.echo(f"kafka ready at {result.bootstrap} ({result.seconds:.1f}s, pid {result.pid})")


def _start_cluster(brokers: int, pom: Path | None) -> None:
    cluster = _local_cluster(brokers, pom)
    result = cluster.start()
    topics = write_replicated_topics(
        load_settings().topics_file, cluster.root / "topics.yaml", cluster.replication
    )
    state = "already running" if result.already_running else f"ready ({result.seconds:.1f}s)"
    click.echo(f"kafka cluster of {brokers} {state} at {result.bootstrap}")
    click.echo(f"controller: node {cluster.active_controller()}")
    click.echo(f"export HOOKSTREAM_KAFKA_BOOTSTRAP={result.bootstrap}")
    click.echo(f"export HOOKSTREAM_TOPICS_FILE={topics}")


@kafka.command()
@BROKERS
def stop(brokers: int) -> None:
    """Stop the broker: SIGTERM, then SIGKILL if it has not exited after 30 seconds.

    Stopping when no broker runs is harmless.
    """
    if brokers > 1:
        for node_id, stopped in _local_cluster(brokers).stop().items():
            how = "killed after SIGTERM" if stopped.killed else "stopped"
            click.echo(f"node {node_id}: {how if stopped.was_running else 'not running'}")
        return
    result = _local_kafka().stop()
    if not result.was_running:
        click.echo("kafka is not running; nothing to stop")
    elif result.killed:
        click.echo(f"kafka (pid {result.pid}) was killed after it ignored SIGTERM")
    else:
        click.echo(f"kafka stopped (pid {result.pid}, {result.seconds:.1f}s)")


@kafka.command()
@BROKERS
def status(brokers: int) -> None:
    """Show whether the broker runs and answers.

    Exit code 0: running and answering; 1: running but not answering (yet); 3: not running.
    """
    if brokers > 1:
        _cluster_status(brokers)
        return
    state = _local_kafka().status()
    answers = "yes" if state.answering else "no"
    if state.running:
        click.echo(f"kafka: running (pid {state.pid})")
    else:
        click.echo("kafka: not running")
    click.echo(f"bootstrap: {state.bootstrap}")
    click.echo(f"metadata answers: {answers}")
    click.echo(f"log: {state.log_path}")
    if not state.running:
        if state.answering:
            click.echo("note: a broker that hookstream did not start answers at this address")
        raise SystemExit(EXIT_NOT_RUNNING)
    if not state.answering:
        raise SystemExit(EXIT_NOT_ANSWERING)


def _cluster_status(brokers: int) -> None:
    cluster = _local_cluster(brokers)
    nodes = cluster.status()
    live = cluster.live_brokers()
    for node in nodes:
        running = f"running (pid {node.pid})" if node.pid else "not running"
        answers = "yes" if node.node_id in live else "no"
        click.echo(f"node {node.node_id}: {running}, {node.address}, broker answers: {answers}")
    click.echo(f"bootstrap: {cluster.bootstrap}")
    if not any(node.pid for node in nodes):
        raise SystemExit(EXIT_NOT_RUNNING)
    click.echo(f"controller: node {cluster.active_controller()}")
    if len(live) < len(nodes):
        raise SystemExit(EXIT_NOT_ANSWERING)
