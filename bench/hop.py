"""Microbenchmark of a lane's hop to a thread and back. See docs/benchmarks.md, "Lane threads".

    python -m bench.hop --runs 5

A lane makes every blocking Kafka call (a read, above all) off its event loop, hundreds of
times a second. This times the hop alone, with a call that does nothing, on uvloop as the
worker runs: through ``loop.run_in_executor`` (the default thread pool) and through
`LaneThread.call`. Each figure is the best of ``--runs`` repeats in µs of the process's CPU
time per call (both threads), so time spent waiting for a core is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from streams.adapters.lane_thread import LaneThread


def _nothing() -> None:
    return None


async def _executor(number: int) -> float:
    loop = asyncio.get_running_loop()
    began = time.process_time()
    for _ in range(number):
        await loop.run_in_executor(None, _nothing)
    return time.process_time() - began


async def _lane_thread(number: int) -> float:
    lane = LaneThread("hop-bench")
    try:
        began = time.process_time()
        for _ in range(number):
            await lane.call(_nothing)
        return time.process_time() - began
    finally:
        lane.stop()


def measure(runs: int, number: int) -> dict[str, float]:
    cases: dict[str, Callable[[int], Coroutine[Any, Any, float]]] = {
        "run_in_executor": _executor,
        "LaneThread.call": _lane_thread,
    }
    best = {name: float("inf") for name in cases}
    for _ in range(runs):  # interleaved, so a slow moment of the box hits both
        for name, case in cases.items():
            best[name] = min(best[name], uvloop.run(case(number)) / number * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hop", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="repeats; the best is reported")
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    args = parser.parse_args(argv)
    results = measure(args.runs, args.number)
    for name, micros in results.items():
        print(f"{name:>16}: {micros:6.1f} µs of CPU per call")
    print(
        f"{'lane / executor':>16}: {results['LaneThread.call'] / results['run_in_executor']:6.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
