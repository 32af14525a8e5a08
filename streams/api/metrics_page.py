"""``GET /metrics`` on every worker's web server (SPEC O1)."""

from __future__ import annotations

from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST

from streams import metrics
from streams.adapters.readiness import readiness
from streams.settings import Settings


def metrics_component(app: faust.App, settings: Settings) -> None:
    """Faust component: ``GET /metrics`` on the worker's web server (SPEC O1)."""
    del settings  # the exposition needs no settings; the parameter keeps the component signature

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        metrics.set_readiness(readiness(app))
        # aiohttp takes the charset apart from the media type; the text is UTF-8 as Prometheus
        # expects of the text exposition format.
        media_type = CONTENT_TYPE_LATEST.split(";")[0]
        version = [p.strip() for p in CONTENT_TYPE_LATEST.split(";") if "version" in p]
        return web.bytes(metrics.render(), content_type="; ".join([media_type, *version]))
