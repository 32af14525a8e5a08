"""Time every cycle-collector pass of the worker into ``hookstream_gc_pause_seconds`` (O1).

The collector's passes stop the event loop; their durations explain outliers in the delivery
latency tail (docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping

from streams.metrics.families import GC_PAUSES


class _GCPauseTimer:
    """A `gc.callbacks` entry that times each collection into `GC_PAUSES`."""

    def __init__(self) -> None:
        self._began = 0.0
        self._children = {gen: GC_PAUSES.labels(str(gen)) for gen in range(3)}

    def __call__(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        child = self._children.get(info.get("generation", -1))
        if child is not None:
            child.observe(time.perf_counter() - self._began)


def watch_gc_pauses() -> None:
    """Time every collection of this process into ``hookstream_gc_pause_seconds``. Idempotent."""
    if not any(isinstance(callback, _GCPauseTimer) for callback in gc.callbacks):
        gc.callbacks.append(_GCPauseTimer())
