"""F4: what a recovered endpoint receives after an outage, with the slow start (and without).

``python -m bench.recovery [--deliveries N] [--cooldown S] [--compare]``

One worker, one subscription with no ``rate_limit``, one receiver that answers 503: the breaker
trips, ``N`` deliveries queue behind it, and the receiver recovers right after a failed
half-open probe (the longest wait for the next one). Then it reports, after recovery: the most
requests the receiver saw in any 1 s and any 100 ms window, the time to the first delivery and
the time until the whole backlog had arrived. ``--compare`` runs the same with
``HOOKSTREAM_RECOVERY_RAMP=false`` too. Results go to ``bench/results/recovery-<time>.json``
and an ``F4`` entry to ``bench/results/summary.json`` (`bench.summary`).

The receiver runs on a thread of this process (an asyncio HTTP/1.1 server that only counts and
answers), the worker in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench import summary
from bench.nginx import free_port
from bench.worker import Worker
from streams.adapters.kafka_admin import TopicAdmin, apply_topics, delete_topics
from streams.adapters.secretbox import local_key
from streams.domain.breaker import BreakerState, origin_of
from streams.domain.models import Event
from streams.services.breakers import breaker_view
from streams.services.config import set_policy
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
#: Short retries (a failed probe is an attempt), the same for the topics and the worker.
RETRIES = "1s,2s,3s,4s,5s"
MEASURED = ("max_in_1s", "max_in_100ms", "first_delivery_s", "drain_s")


class Receiver:
    """HTTP/1.1 keep-alive server: answers ``status`` (settable) and records arrival times."""

    def __init__(self) -> None:
        self.port = free_port()
        self.status = 503
        self.arrivals: list[float] = []
        self.ids: set[str] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, webhook_id = 0, ""
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                    elif name.strip().lower() == b"webhook-id":
                        webhook_id = value.strip().decode()
                if length:
                    await reader.readexactly(length)
                status = self.status
                if status == 200:
                    self.arrivals.append(time.time())
                    self.ids.add(webhook_id)
                reason = b"OK" if status == 200 else b"Service Unavailable"
                writer.write(b"HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n" % (status, reason))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _most_in(times: list[float], window_s: float) -> int:
    most, lo = 0, 0
    for hi, at in enumerate(times):
        while at - times[lo] >= window_s:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.recovery: {what} not within {timeout_s}s")
        time.sleep(0.2)


def run_once(bootstrap: str, deliveries: int, cooldown_s: float, ramp: bool) -> dict[str, Any]:
    receiver = Receiver()
    workdir = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    prefix = f"benchrec{uuid.uuid4().hex[:8]}."
    settings: Settings = local_key(  # S5: secrets encrypted under a key made for the run
        load_settings(
            kafka_bootstrap=bootstrap,
            topic_prefix=prefix,
            group_id=prefix.rstrip("."),
            data_dir=workdir / "data",
            topics_file=REPO / "topics.yaml",
            web_port=free_port(),
            allow_private_destinations=True,
            retry_schedule=RETRIES,
        )
    )
    url = f"http://127.0.0.1:{receiver.port}/hook"
    apply_topics(settings)
    set_policy(settings, {"suspend.retryable": "10000,0s", "early_warning_at": "10000"})
    create_subscription(settings, {"tenant_id": "bench", "url": url, "filters": ["*"]})
    env = {
        "HOOKSTREAM_RETRY_SCHEDULE": RETRIES,
        "HOOKSTREAM_RETRY_WINDOW": "10m",
        "HOOKSTREAM_BREAKER_COOLDOWN": f"{cooldown_s}s",
        "HOOKSTREAM_RECOVERY_PROBE_BOUND": f"{cooldown_s}s",
        "HOOKSTREAM_RECOVERY_RAMP": "true" if ramp else "false",
    }
    worker = Worker(settings, workdir / "worker.log", env)
    try:
        _wait(lambda: _ready(settings), 180, "worker ready")
        now = int(time.time() * 1000)
        events = [
            Event(f"evt_{i}", "bench", "order.created", now, f'{{"n":{i}}}', now)
            for i in range(deliveries)
        ]
        publish_events(settings, events)
        origin = origin_of(url)

        def record_version() -> int:
            record = breaker_view(settings).get(origin)
            return 0 if record is None or record.state is not BreakerState.OPEN else record.version

        _wait(lambda: record_version() >= 3, 180, "a trip and a failed probe")
        recovered_at = time.time()
        receiver.status = 200
        _wait(lambda: len(receiver.ids) >= deliveries, 300, "the backlog drains")
        times = sorted(receiver.arrivals)
        return {
            "ramp": ramp,
            "deliveries": deliveries,
            "cooldown_s": cooldown_s,
            "max_in_1s": _most_in(times, 1.0),
            "max_in_100ms": _most_in(times, 0.1),
            "first_delivery_s": round(times[0] - recovered_at, 3),
            "drain_s": round(times[-1] - recovered_at, 3),
            "requests_after_recovery": len(times),
        }
    finally:
        worker.stop()
        delete_topics(settings, TopicAdmin(settings).names_with_prefix(settings.group_id))


def _ready(settings: Settings) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{settings.web_port}/readyz", timeout=2):
            return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--cooldown", type=float, default=8.0, help="cooldown and probe bound, s")
    parser.add_argument("--compare", action="store_true", help="also run without the ramp")
    args = parser.parse_args()
    runs = [run_once(args.bootstrap, args.deliveries, args.cooldown, ramp=True)]
    if args.compare:
        runs.append(run_once(args.bootstrap, args.deliveries, args.cooldown, ramp=False))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    results_file = RESULTS / f"recovery-{stamp}.json"
    results_file.write_text(json.dumps(runs, indent=2) + "\n")
    print(json.dumps(runs, indent=2))
    record_f4(runs, results_file, args.cooldown)


def record_f4(runs: list[dict[str, Any]], results_file: Path, cooldown_s: float) -> None:
    """F4's entry in summary.json: the first backlog delivery against the probe bound, the
    busiest windows after recovery and, with ``--compare``, the drain time against the same
    backlog without the ramp (the issue's bound: at most 2x)."""
    ramped = runs[0]
    plain = runs[1] if len(runs) > 1 else None
    ratio = None if plain is None else ramped["drain_s"] / plain["drain_s"]
    first_ok = ramped["first_delivery_s"] <= cooldown_s + 5
    summary.record(
        "F4",
        value=ramped["first_delivery_s"],
        unit="s to the first backlog delivery after recovery",
        target=f"<= probe bound ({cooldown_s:g} s) + 5 s; drain within 2x of no ramp",
        met=first_ok and ratio is not None and ratio <= 2.0,
        results_file=results_file,
        extra={
            "max_in_1s": ramped["max_in_1s"],
            "max_in_100ms": ramped["max_in_100ms"],
            "drain_s": ramped["drain_s"],
            "drain_ratio_to_no_ramp": None if ratio is None else round(ratio, 2),
            "no_ramp_max_in_1s": None if plain is None else plain["max_in_1s"],
        },
    )
    summary.update_docs()


if __name__ == "__main__":
    main()
