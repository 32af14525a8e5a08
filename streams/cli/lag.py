"""`hookstream lag`: how far each of the pipeline's consumer groups is behind (SPEC O1)."""

from __future__ import annotations

import click

from streams.adapters.lag import LagReader
from streams.adapters.lag_report import LagReport
from streams.cli.common import echo_json, json_option, settings


@click.command()
@click.option(
    "--group",
    "groups",
    multiple=True,
    help="Only this consumer group (repeatable). Default: every group of this pipeline.",
)
@click.option("--partitions", is_flag=True, help="One row per partition instead of per topic.")
@click.option("--no-age", is_flag=True, help="Skip the time lag (reads no records; only offsets).")
@json_option
def lag(groups: tuple[str, ...], partitions: bool, no_age: bool, as_json: bool) -> None:
    """Records and time each consumer group is behind, per topic (or per partition).

    LAG is the high watermark minus the committed offset; AGE is how old the oldest record the
    group has not committed yet is (0 when it is caught up, - when it could not be read).
    """
    reader = LagReader(settings())
    report = reader.measure(list(groups) or None, with_age=not no_age)
    if as_json:
        echo_json({"taken_at": report.taken_at, **_rows(report)})
        return
    if not report.partitions:
        click.echo("no committed offsets found for this pipeline's consumer groups")
        return
    click.echo(_partition_table(report) if partitions else _topic_table(report))


def _rows(report: LagReport) -> dict[str, object]:
    return {
        "topics": [
            {
                "group": t.group,
                "topic": t.topic,
                "partitions": t.partitions,
                "lag": t.lag,
                "age_s": t.age_s,
            }
            for t in report.topics()
        ],
        "partitions": [
            {
                "group": p.group,
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "log_start": p.low,
                "log_end": p.high,
                "lag": p.lag,
            }
            for p in report.partitions
        ],
    }


def _age(age_s: float | None) -> str:
    return "-" if age_s is None else f"{age_s:.1f}s"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _topic_table(report: LagReport) -> str:
    rows = [
        [t.group, t.topic, str(t.partitions), str(t.lag), _age(t.age_s)] for t in report.topics()
    ]
    return _table(["GROUP", "TOPIC", "PARTITIONS", "LAG", "AGE"], rows)


def _partition_table(report: LagReport) -> str:
    rows = [
        [
            p.group,
            p.topic,
            str(p.partition),
            "-" if p.committed is None else str(p.committed),
            str(p.high),
            str(p.lag),
        ]
        for p in report.partitions
    ]
    return _table(["GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"], rows)
