"""A farm of real local webhook receivers for the chaos run and the soak.

Several aiohttp servers on loopback, each its own origin (so each has its own breaker, H8),
served from one background thread. A path picks a behaviour:

- ``/ok``: 200 at once; ``/slow``: 200 after 20 ms;
- ``/flaky``: a quarter of the deliveries get 503 on their first attempt, then 200;
- ``/gone``: 410 and ``/missing``: 404, which hookstream dead-letters (D5);
- ``/down``: 503 until `ReceiverFarm.set_down` makes it healthy, then 200 (the endpoint of the
  recovery scenario, `chaos.recovery_scenario`); its requests also count per ``webhook-id`` on
  their own, so the run can see how many of its deliveries have failed for good;
- ``/notify``: 200 to notification webhooks (H5); counted per notice type and notification id,
  apart from the deliveries.

For each ``webhook-id`` the farm counts requests and 2xx answers: the audit's view of what the
endpoints received. It keeps counters only, never bodies, so a long run stays small.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
from aiohttp import web

BEHAVIOURS = ("ok", "slow", "flaky", "gone", "missing", "down")
NOTIFY = "notify"
SLOW_S = 0.02


@dataclass
class FarmTally:
    """What the endpoints saw, per delivery id (``webhook-id``)."""

    requests: Counter[str] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    unsigned: int = 0  # requests without a webhook-id or signature: should stay 0
    last_request_at: float = 0.0
    duplicate_at: list[float] = field(default_factory=list)  # when each extra 2xx came
    down_requests: Counter[str] = field(default_factory=Counter)  # ``/down`` only, per id
    notices: Counter[tuple[str, str]] = field(default_factory=Counter)  # (type, id) -> posts


def flaky_fails_first(webhook_id: str) -> bool:
    """Whether ``/flaky`` answers this delivery's first attempt with 503 (one in four)."""
    return hashlib.sha256(webhook_id.encode()).digest()[0] % 4 == 0


class ReceiverFarm:
    """``origins`` receivers, each serving every behaviour path; see the module docstring."""

    def __init__(self, origins: int = 3) -> None:
        self._origins = origins
        self.ports: list[int] = []
        self._tally = FarmTally()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._down = True

    def url(self, origin: int, behaviour: str) -> str:
        if behaviour not in (*BEHAVIOURS, NOTIFY):
            raise ValueError(f"unknown behaviour {behaviour!r}")
        return f"http://127.0.0.1:{self.ports[origin % len(self.ports)]}/{behaviour}"

    def snapshot(self) -> FarmTally:
        with self._lock:
            return FarmTally(
                Counter(self._tally.requests),
                Counter(self._tally.ok),
                Counter(self._tally.statuses),
                self._tally.unsigned,
                self._tally.last_request_at,
                list(self._tally.duplicate_at),
                Counter(self._tally.down_requests),
                Counter(self._tally.notices),
            )

    def set_down(self, down: bool) -> None:
        """``/down`` answers 503 while ``down``, 200 otherwise."""
        with self._lock:
            self._down = down

    def down_exhausted(self, attempts: int) -> int:
        """``/down`` deliveries asked ``attempts`` times or more and never answered 2xx."""
        with self._lock:
            tally = self._tally
            return sum(
                1 for wid, n in tally.down_requests.items() if n >= attempts and not tally.ok[wid]
            )

    def down_requests_histogram(self) -> dict[int, int]:
        """``/down`` deliveries never answered 2xx, by how many times each was asked."""
        with self._lock:
            tally = self._tally
            counts = Counter(n for wid, n in tally.down_requests.items() if not tally.ok[wid])
        return dict(sorted(counts.items()))

    def last_request_at(self) -> float:
        with self._lock:
            return self._tally.last_request_at

    def total_requests(self) -> int:
        with self._lock:
            return self._tally.statuses.total()

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> ReceiverFarm:
        self._thread = threading.Thread(target=self._run, name="chaos-farm", daemon=True)
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("the receiver farm did not start within 20 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(20)
            self._thread = None

    def __enter__(self) -> ReceiverFarm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the farm's thread ----------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the starting thread
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/{behaviour}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        for _ in range(self._origins):
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
            await site.start()
            server = site._server  # aiohttp keeps the bound socket only here
            assert isinstance(server, asyncio.Server)
            self.ports.append(server.sockets[0].getsockname()[1])
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        webhook_id = request.headers.get("webhook-id", "")
        behaviour = request.match_info["behaviour"]
        if behaviour == NOTIFY:
            return self._notice(body, webhook_id)
        with self._lock:
            self._tally.requests[webhook_id] += 1
            seen = self._tally.requests[webhook_id]
            if not webhook_id or "webhook-signature" not in request.headers:
                self._tally.unsigned += 1
            if behaviour == "down":
                self._tally.down_requests[webhook_id] += 1
            down = self._down
        status = 503 if behaviour == "down" and down else _status(behaviour, webhook_id, seen)
        if behaviour == "slow":
            await asyncio.sleep(SLOW_S)
        with self._lock:
            self._tally.statuses[status] += 1
            now = self._tally.last_request_at = time.time()
            if 200 <= status < 300:
                self._tally.ok[webhook_id] += 1
                if self._tally.ok[webhook_id] > 1:
                    self._tally.duplicate_at.append(now)
        return web.Response(status=status, text="ok" if status < 300 else "no")

    def _notice(self, body: bytes, webhook_id: str) -> web.Response:
        try:
            kind = str(orjson.loads(body).get("type", "?"))
        except (orjson.JSONDecodeError, AttributeError):
            kind = "?"
        with self._lock:
            self._tally.notices[(kind, webhook_id)] += 1
        return web.Response(status=200, text="ok")


def _status(behaviour: str, webhook_id: str, seen: int) -> int:
    if behaviour == "gone":
        return 410
    if behaviour == "missing":
        return 404
    if behaviour == "flaky" and seen == 1 and flaky_fails_first(webhook_id):
        return 503
    if behaviour in BEHAVIOURS:
        return 200
    return 404
