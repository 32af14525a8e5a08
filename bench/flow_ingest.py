"""F5: one producer posting to ``POST /v1/events`` at 10x its limit while the others stay within.

Every producer has a tenant API key of its own (so a token bucket of its own in the worker) and
sends single events on a fixed schedule, open loop: a request goes out when it is due whether or
not the earlier ones were answered, like a client retrying in a storm. The worker's limit per
key is lowered (``HOOKSTREAM_INGEST_RATE`` and ``HOOKSTREAM_INGEST_BURST``, both
``--ingest-limit``) so that 10x the limit is a load this machine can offer at all. Reported per
run: each producer's requests, answers by status, accepted/s and request latency.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.report import fmt, median_of, percentile
from bench.rig import Rig
from bench.traffic import load_1m, pipeline, say, wait_quiet
from streams.services.keys import create_key

#: open requests one producer may have; past it a due request is counted as not sent
MAX_OPEN = 512


@dataclass
class Producer:
    label: str
    token: str
    rate: float
    statuses: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    retry_after: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    not_sent: int = 0

    def figures(self, seconds: float) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "sent": self.sent,
            "not_sent": self.not_sent,
            "statuses": dict(self.statuses),
            "accepted": self.statuses["202"],
            "accepted_per_s": self.statuses["202"] / seconds,
            "too_many": self.statuses["429"],
            "retry_after_s": dict(self.retry_after),
            "p50_ms": percentile(self.latencies_ms, 50),
            "p99_ms": percentile(self.latencies_ms, 99),
        }


def _event(label: str, n: int) -> dict[str, Any]:
    return {
        "id": f"evt_{label}_{uuid.uuid4().hex[:8]}_{n}",
        "type": "ingest.tick",
        "timestamp": int(time.time() * 1000),
        "data": {"n": n, "pad": "x" * 200},
    }


async def _post(session: aiohttp.ClientSession, url: str, producer: Producer, n: int) -> None:
    headers = {"Authorization": f"Bearer {producer.token}"}
    started = time.perf_counter()
    try:
        async with session.post(url, json=_event(producer.label, n), headers=headers) as reply:
            await reply.read()
            status = str(reply.status)
            if reply.status == 429:
                producer.retry_after[reply.headers.get("Retry-After", "missing")] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        status = type(exc).__name__
    producer.statuses[status] += 1
    producer.latencies_ms.append((time.perf_counter() - started) * 1000)


async def _drive(
    session: aiohttp.ClientSession, url: str, producer: Producer, began: float, seconds: float
) -> None:
    open_requests: set[asyncio.Task[None]] = set()
    for n in range(int(producer.rate * seconds)):
        pause = began + n / producer.rate - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        if len(open_requests) >= MAX_OPEN:
            producer.not_sent += 1
            continue
        task = asyncio.create_task(_post(session, url, producer, n))
        open_requests.add(task)
        task.add_done_callback(open_requests.discard)
        producer.sent += 1
    if open_requests:
        await asyncio.wait(open_requests)


async def _until_known(session: aiohttp.ClientSession, url: str, producers: list[Producer]) -> None:
    """Wait until the worker has read every producer's key (it answers other than 401)."""
    deadline = time.monotonic() + 60
    for producer in producers:
        while True:
            headers = {"Authorization": f"Bearer {producer.token}"}
            async with session.post(url, json=_event("warm", 0), headers=headers) as reply:
                if reply.status != 401:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker never accepted {producer.label}'s key")
            await asyncio.sleep(0.2)
    await asyncio.sleep(2.0)  # the warm-up requests' tokens come back


async def _load(url: str, producers: list[Producer], seconds: float) -> float:
    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await _until_known(session, url, producers)
        began = time.monotonic()
        await asyncio.gather(*(_drive(session, url, p, began, seconds) for p in producers))
        return time.monotonic() - began


def f5_run(args: argparse.Namespace, rig: Rig) -> dict[str, Any]:
    """One run against the rig's worker: keys, then every producer at its rate at once."""
    assert rig.worker is not None
    noisy_rate = args.ingest_limit * args.noisy_factor
    specs = [("noisy", noisy_rate)] + [
        (f"calm{i}", args.others_rate) for i in range(args.producers)
    ]
    producers = []
    for label, rate in specs:
        _, token = create_key(rig.settings, f"f5{label}", f"bench f5 {label}")
        producers.append(Producer(label, token, rate))
    url = f"http://127.0.0.1:{rig.settings.web_port}/v1/events"
    load = load_1m()
    began = time.time()
    elapsed = asyncio.run(_load(url, producers, args.seconds))
    noisy, others = producers[0], producers[1:]
    sent = sum(p.sent for p in others)
    accepted = sum(p.statuses["202"] for p in others)
    return {
        "load_1m": load,
        "seconds": elapsed,
        "others_429": sum(p.statuses["429"] for p in others),
        "others_not_202": sent - accepted,
        "others_sent": sent,
        "others_accepted_ratio": accepted / sent if sent else None,
        "others_offered_per_s": args.others_rate * len(others),
        "others_accepted_per_s": accepted / args.seconds,
        "others_p99_ms": percentile([x for p in others for x in p.latencies_ms], 99),
        "noisy_sent": noisy.sent,
        "noisy_429": noisy.statuses["429"],
        "noisy_accepted_per_s": noisy.statuses["202"] / args.seconds,
        "producers": {p.label: p.figures(args.seconds) for p in producers},
        "worker_cpu_percent": rig.worker.cpu_percent(began, time.time()),
    }


def scenario_f5(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = {
        "HOOKSTREAM_INGEST_RATE": f"{args.ingest_limit:g}",
        "HOOKSTREAM_INGEST_BURST": f"{args.ingest_limit:g}",
    }
    runs = []
    for i in range(args.runs):
        wait_quiet(args.quiet_load, args.quiet_wait)
        with pipeline(args, work, lambda receiver: (), env) as rig:
            run = f5_run(args, rig)
        runs.append(run)
        noisy = run["producers"]["noisy"]
        say(
            f"run {i + 1}: others {run['others_429']} x 429, accepted "
            f"{fmt(run['others_accepted_per_s'], '/s', 1)} of {run['others_offered_per_s']:g}/s "
            f"offered (p99 {fmt(run['others_p99_ms'], ' ms', 1)}); noisy {run['noisy_429']} x 429 "
            f"of {run['noisy_sent']}, {fmt(run['noisy_accepted_per_s'], '/s', 1)} accepted, "
            f"statuses {noisy['statuses']}; worker CPU {fmt(run['worker_cpu_percent'], '%')}"
        )
    keys = (
        "others_429",
        "others_accepted_ratio",
        "others_accepted_per_s",
        "others_p99_ms",
        "noisy_sent",
        "noisy_429",
        "noisy_accepted_per_s",
        "worker_cpu_percent",
    )
    return {"runs": runs, "medians": {key: median_of(runs, key) for key in keys}}
