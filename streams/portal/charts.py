"""The portal's charts: server-rendered inline SVG (SPEC O2, U2).

Why SVG from the server and not a JavaScript chart library (uPlot, Chart.js): the portal runs
under a Content-Security-Policy with ``script-src 'none'``, has no build step and no script at
all, so every page works the same with scripting off and there is nothing to vendor, pin or
audit. A chart here is a few hourly points; a polyline per series is all it needs. Each series
differs by dash pattern and marker as well as colour (colour comes from portal.css classes, as
inline styles are refused by the policy), and each chart has a title, a description and a data
table beside it, so it reads without colour and with a screen reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 36
DASHES = ("", "6 4", "2 3")


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    values: Sequence[float | None]


def _hour(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M")


def _scale(value: float, top: float) -> float:
    span = HEIGHT - TOP - BOTTOM
    return HEIGHT - BOTTOM - (value / top) * span if top > 0 else HEIGHT - BOTTOM


def _x(index: int, count: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span / 2 if count == 1 else index * span / (count - 1))


def _axis(starts: Sequence[int], top: float, unit: str) -> list[str]:
    base = HEIGHT - BOTTOM
    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = _scale(top * fraction, top)
        value = top * fraction
        label = f"{value:,.1f}{unit}" if top < 10 else f"{value:,.0f}{unit}"
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(label)}</text>")  # fmt: skip
    step = max(1, len(starts) // 6)
    for index in range(0, len(starts), step):
        x = _x(index, len(starts))
        parts.append(f'<text class="tick" x="{x:.1f}" y="{base + 18}" text-anchor="middle">'
                     f"{_hour(starts[index])}</text>")  # fmt: skip
    return parts


def _series(index: int, series: Series, top: float) -> list[str]:
    count = len(series.values)
    points = [(_x(i, count), _scale(v, top)) for i, v in enumerate(series.values) if v is not None]
    dash = DASHES[index % len(DASHES)]
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    parts = []
    if len(points) > 1:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline class="line s{index}" fill="none" points="{coords}"{dash_attr}/>')
    for x, y in points:
        if index % 2:
            parts.append(f'<rect class="dot s{index}" x="{x - 3:.1f}" y="{y - 3:.1f}" '
                         f'width="6" height="6"/>')  # fmt: skip
        else:
            parts.append(f'<circle class="dot s{index}" cx="{x:.1f}" cy="{y:.1f}" r="3.5"/>')
    return parts


def _legend(series: Sequence[Series]) -> list[str]:
    parts = []
    for index, one in enumerate(series):
        x = LEFT + 8 + index * 120
        dash = DASHES[index % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line class="line s{index}" x1="{x}" y1="{TOP + 4}" x2="{x + 24}" '
                     f'y2="{TOP + 4}"{dash_attr}/>')  # fmt: skip
        parts.append(f'<text class="legend" x="{x + 30}" y="{TOP + 8}">'
                     f"{escape(one.label)}</text>")  # fmt: skip
    return parts


def line_chart(
    chart_id: str,
    title: str,
    description: str,
    starts: Sequence[int],
    series: Sequence[Series],
    *,
    unit: str = "",
    top: float | None = None,
) -> Markup:
    """An SVG line chart of ``series`` over the hours ``starts`` (ms), as safe markup."""
    values = [v for one in series for v in one.values if v is not None]
    ceiling = top if top is not None else max(values, default=0.0) * 1.1 or 1.0
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-t">{escape(title)}</title>',
        f'<desc id="{chart_id}-d">{escape(description)}</desc>',
        *_axis(starts, ceiling, unit),
    ]
    if not values:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
                     f'text-anchor="middle">No data in this window</text>')  # fmt: skip
    for index, one in enumerate(series):
        parts.extend(_series(index, one, ceiling))
    parts.extend(_legend(series))
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text above is escaped
