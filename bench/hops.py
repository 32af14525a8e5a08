"""Where a delivery's latency goes: the hops between the times a run knows of each delivery.

A run knows, per delivery, when the bench published its event and when nginx logged the
request; the pipeline records times in between (the broker's append time of the event and of
the routed record, the router's ``Delivery.routed_at``, the attempt's ``started_at``, the floor
relay's own clocks). `split` takes those points in order and reports, for every hop (named
after the point it ends at), its p50, p99 and max in ms, and its mean over the slowest 1% of
deliveries: the hop that holds the p99.

Each point's clock has its own resolution (the ledger's and nginx's times are whole
milliseconds), so a hop of a few ms can read a ms short or long; a hop can read slightly
negative when two clocks round opposite ways.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from bench.report import percentile
from streams.adapters import stage_clock

#: (hop name, key -> time in seconds): the time each delivery reached the end of the hop
Point = tuple[str, Mapping[str, float]]


def _rows(
    sent: Mapping[str, float], points: Sequence[Point], received: Mapping[str, float]
) -> tuple[list[str], list[tuple[str, list[float]]]]:
    """The hop names and, per delivery every point knows: its key and each hop in ms, then the
    whole latency."""
    names = [name for name, _ in points] + ["http"]
    stops = [times for _, times in points] + [received]
    rows: list[tuple[str, list[float]]] = []
    for key, at in sent.items():
        if not all(key in times for times in stops):
            continue
        marks = [at, *(times[key] for times in stops)]
        hops = [(later - earlier) * 1000 for earlier, later in itertools.pairwise(marks)]
        rows.append((key, [*hops, (marks[-1] - at) * 1000]))
    return names, rows


def split(
    sent: Mapping[str, float], points: Sequence[Point], received: Mapping[str, float]
) -> dict[str, float]:
    """Per-hop figures of the deliveries in ``sent`` that every point and ``received`` know.

    The hops go from ``sent`` through each point in turn to ``received``; the last hop is
    named ``http``. Keys: ``split`` (how many deliveries), ``<hop>_p50_ms``, ``<hop>_p99_ms``,
    ``<hop>_max_ms``, ``<hop>_tail_ms`` (the mean over the slowest 1% of the deliveries by their
    whole latency, at least one), and ``total_p99_ms``.
    """
    names, keyed = _rows(sent, points, received)
    rows = [row for _, row in keyed]
    figures: dict[str, float] = {"split": len(rows)}
    total_p99 = percentile([row[-1] for row in rows], 99)
    # the slowest 1% by the whole latency (at least one): ties at the p99 do not swell it
    tail = sorted(rows, key=lambda row: row[-1])[-max(1, len(rows) // 100) :] if rows else []
    for index, name in enumerate(names):
        values = [row[index] for row in rows]
        figures[f"{name}_p50_ms"] = percentile(values, 50)
        figures[f"{name}_p99_ms"] = percentile(values, 99)
        figures[f"{name}_max_ms"] = max(values, default=float("nan"))
        figures[f"{name}_tail_ms"] = (
            sum(row[index] for row in tail) / len(tail) if tail else float("nan")
        )
    figures["total_p99_ms"] = total_p99
    return figures


def slowest(
    sent: Mapping[str, float],
    points: Sequence[Point],
    received: Mapping[str, float],
    began: float,
    count: int = 10,
) -> list[dict[str, float]]:
    """The slowest delivery of each of the ``count`` seconds whose slowest is slowest, slowest
    first: when it was published (seconds after ``began``), its whole latency and each hop,
    in ms. One stall delays every delivery published in it, so one per second shows the stalls
    rather than one stall's deliveries; hops that stall together share a cause (a pause of the
    broker, the worker or the box)."""
    names, keyed = _rows(sent, points, received)
    by_second: dict[int, tuple[str, list[float]]] = {}
    for key, row in keyed:
        second = int(sent[key] - began)
        if second not in by_second or row[-1] > by_second[second][1][-1]:
            by_second[second] = (key, row)
    worst = sorted(by_second.values(), key=lambda item: item[1][-1], reverse=True)[:count]
    return [
        {
            "at_s": round(sent[key] - began, 3),
            "total_ms": round(row[-1], 1),
            **{f"{name}_ms": round(value, 1) for name, value in zip(names, row, strict=False)},
        }
        for key, row in worst
    ]


#: the hops in the order a delivery crosses them (a result file keeps its keys sorted)
ORDER = ("append", "route", "produce", "dispatch", *stage_clock.STAGES, "http")


def hop_names(figures: Mapping[str, object], suffix: str = "_p50_ms") -> list[str]:
    """The hops of a `split` result (its keys ending in ``suffix``), in the order a delivery
    crosses them."""
    names = [key[: -len(suffix)] for key in figures if key.endswith(suffix)]
    return sorted(names, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))


def _cell(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}"


def table(rows: Mapping[str, Mapping[str, float | None]]) -> str:
    """A markdown table of `split` results side by side, e.g. ``{"hookstream": ..., "floor":
    ...}``: one line per hop and result, p50 / p99 / max / the slowest 1%'s mean, in ms."""
    lines = [
        "| hop | of | p50 ms | p99 ms | max ms | slowest 1% ms |",
        "|---|---|---|---|---|---|",
    ]
    for label, figures in rows.items():
        for hop in hop_names(figures):
            cells = [_cell(figures.get(f"{hop}_{k}_ms")) for k in ("p50", "p99", "max", "tail")]
            lines.append(f"| {hop} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
