"""The worker's own /metrics, read by the benchmark: samples by name prefix, a histogram's
buckets, and its garbage collector's passes per generation (``hookstream_gc_pause_seconds``)."""

from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.rig import Rig


def scrape(rig: Rig, prefixes: tuple[str, ...]) -> dict[str, float]:
    """The worker's own /metrics samples whose names start with one of ``prefixes``."""
    url = f"http://127.0.0.1:{rig.settings.web_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefixes):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def buckets_of(samples: dict[str, float], name: str, label: str = "") -> dict[float, float]:
    """A scraped histogram's cumulative bucket counts by upper bound (``le``), for the series
    whose sample names contain ``label``."""
    return {
        float(key.split('le="')[1].split('"')[0]): count
        for key, count in samples.items()
        if key.startswith(f"{name}_bucket") and label in key
    }


def gc_pauses(rig: Rig) -> dict[str, dict[str, float]]:
    """The worker's garbage-collector passes so far, per generation: how many, their total
    and the largest bucket bound one fell under (``hookstream_gc_pause_seconds``), in ms."""
    samples = scrape(rig, ("hookstream_gc_pause_seconds",))
    found: dict[str, dict[str, float]] = {}
    for gen in ("0", "1", "2"):
        label = f'generation="{gen}"'
        buckets = sorted(buckets_of(samples, "hookstream_gc_pause_seconds", label).items())
        total = samples.get(f"hookstream_gc_pause_seconds_count{{{label}}}", 0.0)
        under = next((bound for bound, count in buckets if count >= total), float("inf"))
        found[gen] = {
            "count": total,
            "total_ms": samples.get(f"hookstream_gc_pause_seconds_sum{{{label}}}", 0.0) * 1000,
            "max_under_ms": under * 1000 if total else 0.0,
        }
    return found


def minus(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    return {
        gen: {
            key: after[gen][key] - before.get(gen, {}).get(key, 0.0)
            for key in ("count", "total_ms")
        }
        for gen in after
    }
