"""Whether a worker is ready to do its share of the work: what ``/readyz`` and the metrics say."""

from __future__ import annotations

from typing import cast

import faust
from faust.tables.manager import TableManager


def readiness(app: faust.App) -> dict[str, bool]:
    """Why this worker is or is not ready to do its share of the work (``/readyz``).

    Ready means: the worker has joined its consumer group and taken its assignment, no rebalance
    is in progress, and every table it holds has been recovered from its changelog, the ledger
    state (S6) included. An empty
    assignment still counts as ready (reported as ``assigned: false``): with more workers than
    partitions the extra ones are idle but still serve the admin API (SPEC X4). An app with
    nothing to consume (``producer_only``) is ready as soon as it serves.
    """
    watch = getattr(app, "hookstream_broker", None)
    broker = watch is None or watch.up  # the broker answers (`BrokerWatch`)
    if app.producer_only:
        return {
            "joined": False,
            "assigned": False,
            "rebalancing": False,
            "recovering": False,
            "broker": broker,
            "ready": broker,
        }
    manager = cast(TableManager, app.tables)  # the interface type omits `recovery`
    joined = manager.recovery.completed.is_set()
    state = {
        "joined": joined,
        "assigned": bool(app.consumer.assignment()) if joined else False,
        "rebalancing": bool(app.rebalancing),
        "recovering": bool(app.in_recovery),
    }
    pipeline = getattr(app, "hookstream_pipeline", None)
    state["lanes"] = pipeline is None or pipeline.registry.ready.is_set()
    ledger = getattr(app, "hookstream_ledger", None)
    state["ledger"] = ledger is None or ledger.restored()
    state["broker"] = broker
    state["ready"] = (
        joined
        and not state["rebalancing"]
        and not state["recovering"]
        and state["lanes"]
        and state["ledger"]
        and broker
    )
    return state
