"""``GET /metrics`` on every worker's web server (SPEC O1)."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from importlib import metadata
from typing import Any, Final

import faust
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, Info

from streams import metrics
from streams.adapters.readiness import readiness
from streams.metrics import families
from streams.settings import Settings

#: The checks of `streams.adapters.readiness`, exported at every scrape.
READINESS_CHECKS: Final = (
    "joined", "assigned", "rebalancing", "recovering", "lanes", "ledger", "broker", "ready",
)  # fmt: skip

WORKER_READINESS = Gauge(
    "hookstream_worker_readiness",
    "The worker's readiness checks (1 true, 0 false); recovering=1 while tables recover.",
    ["check"],
    registry=families.REGISTRY,
)
BUILD = Info("hookstream_build", "The running hookstream build.", registry=families.REGISTRY)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return families.UNKNOWN


BUILD.info(
    {
        "version": _version("hookstream"),
        "python": platform.python_version(),
        "faust": _version("faust-streaming"),
        "confluent_kafka": _version("confluent-kafka"),
    }
)


def set_readiness(state: Mapping[str, bool]) -> None:
    """The worker's readiness checks, as `streams.adapters.readiness` reports them."""
    for check in READINESS_CHECKS:
        WORKER_READINESS.labels(check).set(1 if state.get(check) else 0)


def metrics_component(app: faust.App, settings: Settings) -> None:
    """Faust component: ``GET /metrics`` on the worker's web server (SPEC O1)."""
    del settings  # the exposition needs no settings; the parameter keeps the component signature

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        set_readiness(readiness(app))
        # aiohttp takes the charset apart from the media type; the text is UTF-8 as Prometheus
        # expects of the text exposition format.
        media_type = CONTENT_TYPE_LATEST.split(";")[0]
        version = [p.strip() for p in CONTENT_TYPE_LATEST.split(";") if "version" in p]
        return web.bytes(metrics.render(), content_type="; ".join([media_type, *version]))
