"""What F3 and F7 share: ratios of two runs' figures and the medians of their pairs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bench.report import fmt, median_of
from bench.traffic import (
    say,
    wait_quiet,
)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def paired_runs(
    args: argparse.Namespace, run: Callable[[bool], dict[str, Any]], ratios: dict[str, str]
) -> list[dict[str, Any]]:
    """``args.runs`` pairs of (baseline, measured) runs; each pair's ratios of ``ratios``.

    Every other pair runs the measured one first, so that whatever favours the first (or the
    second) run of a pair does not lean every ratio the same way.
    """
    pairs = []
    for i in range(args.runs):
        wait_quiet(args.quiet_load, args.quiet_wait)  # before the pair: both see the same box
        if i % 2:
            measured, base = run(True), run(False)
        else:
            base, measured = run(False), run(True)
        pair: dict[str, Any] = {"baseline": base, "measured": measured}
        for name, key in ratios.items():
            pair[name] = ratio(measured.get(key), base.get(key))
        pairs.append(pair)
        say(f"pair {i + 1}: " + ", ".join(f"{n} {fmt(pair[n], '', 3)}" for n in ratios))
    return pairs


# --- F3: one endpoint that never answers among 100 healthy ones ------------------------------


def pair_medians(pairs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    medians: dict[str, Any] = {
        name: median_of(pairs, name) for name in pairs[0] if name.endswith("ratio")
    }
    for side in ("baseline", "measured"):
        for key in keys:
            medians[f"{side}_{key}"] = median_of([p[side] for p in pairs], key)
    return medians
