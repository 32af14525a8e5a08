"""hookstream's latency sketch against the bare `ddsketch` package, same inputs, same run.

`streams.domain.sketch.LatencySketch` is ddsketch's logarithmic mapping and dense store (1%
relative accuracy) plus hookstream's zero bucket, exact extremes and compact stored form. This
measures what that wrapper costs on the analytics path: adding latencies (twice per attempt, in
the dispatcher's outbox), merging sketches (every hourly window and every worker's digest),
the quantiles' error against the exact values, and the size of the stored form (hookstream
keeps sketches as JSON in its tables). Before hookstream used ddsketch, this same comparison
against its hand-written sketch gave ddsketch 0.82x the add time and 0.76x the merge time.

    python -m bench.sketch [--values 200000] [--merges 2000] [--repeat 5]

Prints the median of ``--repeat`` runs of each figure, and the ratio ddsketch / hookstream.

"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
from ddsketch import DDSketch

from streams.domain.sketch import RELATIVE_ACCURACY, LatencySketch


def _latencies(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(3.0, 0.8) for _ in range(n)]  # ms, a receiver around 20-100 ms


def _median_s(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _dd_state(sketch: DDSketch) -> bytes:
    """ddsketch's bins as JSON (the closest to how hookstream stores its own)."""
    store = sketch._store  # the package has no public dict form
    return orjson.dumps({"offset": store.offset, "bins": store.bins, "count": sketch.count})


def _filled(parts: list[list[float]]) -> tuple[list[LatencySketch], list[DDSketch]]:
    ours, theirs = [], []
    for part in parts:
        o, d = LatencySketch(), DDSketch(relative_accuracy=RELATIVE_ACCURACY)
        for v in part:
            o.add(v)
            d.add(v)
        ours.append(o)
        theirs.append(d)
    return ours, theirs


def _add_all(make: Callable[[], Any], values: list[float]) -> Callable[[], Any]:
    def run() -> Any:
        sketch = make()
        for v in values:
            sketch.add(v)
        return sketch

    return run


def _merge_all(make: Callable[[], Any], parts: list[Any], merge: str) -> Callable[[], Any]:
    def run() -> Any:
        total = make()
        for p in parts:
            total = getattr(total, merge)(p) or total
        return total

    return run


def rows(
    values: list[float], parts: list[list[float]], repeat: int
) -> list[tuple[str, float, float]]:
    """(figure, hookstream, ddsketch) for adding, merging, storing and answering quantiles."""
    ours_parts, dd_parts = _filled(parts)
    ours_add = _add_all(LatencySketch, values)
    dd_add = _add_all(lambda: DDSketch(relative_accuracy=RELATIVE_ACCURACY), values)
    ours_merge = _merge_all(LatencySketch, ours_parts, "merge")
    dd_merge = _merge_all(lambda: DDSketch(relative_accuracy=RELATIVE_ACCURACY), dd_parts, "merge")
    out = [
        ("add, ns per value", _median_s(ours_add, repeat) / len(values) * 1e9,
         _median_s(dd_add, repeat) / len(values) * 1e9),
        ("merge, µs per sketch", _median_s(ours_merge, repeat) / len(parts) * 1e6,
         _median_s(dd_merge, repeat) / len(parts) * 1e6),
        ("stored size of one 200-value sketch, bytes",
         float(len(orjson.dumps(ours_parts[0].to_dict()))), float(len(_dd_state(dd_parts[0])))),
    ]  # fmt: skip
    ours, dd, exact = ours_add(), dd_add(), sorted(values)
    for q in (0.5, 0.95, 0.99):
        truth = exact[int(q * (len(exact) - 1))]
        ours_q = ours.quantile(q) or 0.0
        dd_q = dd.get_quantile_value(q) or 0.0
        out.append((f"p{round(q * 100)} relative error", abs(ours_q - truth) / truth,
                    abs(dd_q - truth) / truth))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--values", type=int, default=200_000)
    parser.add_argument("--merges", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    values = _latencies(args.values, 7)
    parts = [_latencies(200, seed) for seed in range(args.merges)]
    print(f"{'figure':<44}{'hookstream':>12}{'ddsketch':>12}{'ratio':>8}")
    for name, mine, theirs in rows(values, parts, args.repeat):
        ratio = theirs / mine if mine else float("nan")
        print(f"{name:<44}{mine:>12.4g}{theirs:>12.4g}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
