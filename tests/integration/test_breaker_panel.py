"""The "Circuit breakers by state" panel against a real Prometheus (SPEC H8, O1, O3).

A pipeline runs in-process on the real broker and delivers to a receiver that answers 503, then
200; a real Prometheus scrapes the worker's registry every second. The panel's own expression,
read from dashboards/hookstream.json, must show the origin open while the endpoint is down and
closed once it has recovered: the `hookstream_breakers` gauge follows the fleet's shared view.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.test_prometheus import (  # noqa: F401 (fixtures)
    DASHBOARD,
    Prometheus,
    metrics_port,
    prometheus,
    prometheus_bin,
)
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration

TITLE = "Circuit breakers by state"


def panel_expression() -> str:
    top = json.loads(DASHBOARD.read_text())["panels"]
    panels = top + [inner for p in top for inner in p.get("panels", [])]
    (panel,) = [p for p in panels if p.get("title") == TITLE]
    (target,) = panel["targets"]
    expr: str = target["expr"].replace("$job", "hookstream")
    assert "$" not in expr, expr
    return expr


def shown(server: Prometheus, expr: str) -> dict[str, float]:
    return {s["metric"]["state"]: float(s["value"][1]) for s in server.query(expr)}


async def until_shown(
    server: Prometheus, expr: str, wanted: dict[str, float], timeout_s: float
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen: dict[str, float] = {}
    while loop.time() < deadline:
        seen = await asyncio.to_thread(shown, server, expr)
        if all(seen.get(state) == value for state, value in wanted.items()):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{TITLE}: wanted {wanted}, the panel shows {seen}")


@pytest.mark.timeout(240)
async def test_h8_o3_the_breaker_panel_shows_the_open_then_closed_origin(
    make_settings: Callable[..., Settings],
    receiver_factory: Callable[..., Receiver],
    prometheus: Prometheus,  # noqa: F811
) -> None:
    settings = make_settings(
        retry_schedule="1s,2s,3s,4s,5s",
        retry_window="5m",
        breaker_failures=3,
        breaker_cooldown="3s",
        recovery_probe_bound="3s",
    )
    receiver = receiver_factory()
    url = receiver.route("/down", Respond(503))
    expr = panel_expression()
    async with PipelineHarness(settings) as h:
        await h.subscribe(url, ["order.*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(10)])
        await until_shown(prometheus, expr, {"open": 1, "closed": 0}, 90)
        receiver.route("/down", Respond(200))
        await until_shown(prometheus, expr, {"closed": 1, "open": 0, "half_open": 0}, 90)
