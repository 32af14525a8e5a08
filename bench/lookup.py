"""S6: how fast the admin API reads the ledger, dead letters and health, whatever the retention.

    python -m bench.lookup --attempts 100000 [--attempts 2000000]

For each size: one worker (the `Rig`: its own topics, nginx as the receiver) gets the ledger
filled straight on the topics with realistic records (a tenth of deliveries retried twice
before success, dead letters concentrated on a few subscriptions so pages are full), waits
until its state has read them all, then, while it delivers about ``--rate`` events/s to nginx,
measures p50/p99 over ``--samples`` sequential requests of: one delivery by id, a page of 50 of
a subscription's deliveries, a page of 50 dead letters of a subscription and of everybody, one
subscription's health and the whole health view. It reports the worker's RSS, the ledger's
disk, the CPU the ledger's reader spends per record (a standalone reader in this process reading
the same topics: `cpu_us_per_record`), and the restore time: the worker is killed with
``kill -9`` and a worker with an empty disk takes over and reads every partition.

Writes ``bench/results/lookup-<time>.json`` and an ``S6`` entry in ``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import summary
from bench.nginx import nginx_receiver
from bench.report import percentile
from bench.rig import TENANT, Rig, RigConfig, _produce, make_event
from bench.worker import Worker
from streams.adapters import codec
from streams.adapters.ingest import encode_json_event
from streams.adapters.kafka_clients import make_producer
from streams.agents.ledger import standalone
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    DeliveryState,
    Event,
    Lane,
    OutcomeClass,
)

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN = "bench-" + uuid.uuid4().hex
SUBSCRIPTIONS = 1000  # the filled ledger's subscriptions (registered, so never swept away)
LETTER_SUBS = 20  # subscriptions that hold the dead letters
TARGETS = {"delivery_p99_ms": 20.0, "page_p99_ms": 50.0, "growth": 1.5}
_READY = re.compile(r"ledger partition (\d+) ready after ([0-9.]+)s")


def say(text: str) -> None:
    print(text, flush=True)


def _attempt(sub: str, tenant: str, key: str, event: Event, n: int, at: int, ok: bool) -> bytes:
    return codec.encode(
        Attempt(
            delivery_id=key, subscription_id=sub, tenant_id=tenant, event_id=event.id,
            event_type=event.type, attempt=n, lane=Lane.LIVE if n == 1 else Lane.RETRY,
            started_at=at, duration_ms=random.uniform(2, 80),
            outcome=OutcomeClass.SUCCESS if ok else OutcomeClass.RETRYABLE,
            reason="http_200" if ok else "http_503",
            state=DeliveryState.SUCCESS if ok else DeliveryState.ERROR,
            http_status=200 if ok else 503, error=None if ok else "503 Service Unavailable",
            response_excerpt='{"ok":true}' if ok else "upstream unavailable",
            next_retry_at=None if ok else at + 60_000, published_at=event.published_at,
        )
    )  # fmt: skip


def fill(rig: Rig, attempts: int) -> dict[str, Any]:
    """Write ``attempts`` attempts (and a dead letter for one delivery in fifty) straight to the
    topics, for the rig's bulk subscriptions; returns what the lookups ask for."""
    producer = make_producer(rig.settings, **{"linger.ms": 50, "batch.size": 1_000_000})
    attempts_topic, dlq_topic = rig.settings.topic("attempts"), rig.settings.topic("dlq")
    now = int(time.time() * 1000)
    run = uuid.uuid4().hex[:6]
    written = letters = n = 0
    keys: list[str] = []
    began = time.monotonic()
    while written < attempts:
        i = n % SUBSCRIPTIONS
        sub, tenant = f"sub_bulk_{i}", TENANT if i % 2 else f"tenant{i % 1000}"
        event = make_event(run, n)
        key = delivery_id(event.id, sub)
        at = now - (attempts - written) * 5  # spread back in time, newest last
        tries = 3 if n % 10 == 0 else 1
        for t in range(1, tries + 1):
            value = _attempt(sub, tenant, key, event, t, at + t, t == tries)
            _produce(producer, attempts_topic, sub, value)
        written += tries
        if n % 50 == 0:
            letter_sub = f"sub_bulk_{(n // 50) % LETTER_SUBS}"
            delivery = Delivery(key, letter_sub, tenant, event, attempt=5)
            letter = DeadLetter(
                reason="exhausted:http_503", dead_at=at, tenant_id=tenant,
                subscription_id=letter_sub, delivery=delivery, attempts=5, last_status=503,
                last_error="503 Service Unavailable", response_excerpt="upstream unavailable",
            )  # fmt: skip
            _produce(producer, dlq_topic, letter_sub, codec.encode(letter))
            letters += 1
        if n % 97 == 0:
            keys.append(key)
        n += 1
    producer.flush(120)
    return {
        "attempts": written,
        "deliveries": n,
        "dead_letters": letters,
        "keys": keys,
        "last_key": key,
        "fill_s": time.monotonic() - began,
    }


def _client(rig: Rig) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{rig.settings.web_port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )


def wait_visible(client: httpx.Client, key: str, timeout_s: float) -> float:
    began = time.monotonic()
    while client.get(f"/v1/deliveries/{key}").status_code != 200:
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the worker's ledger did not read the fill in {timeout_s}s")
        time.sleep(0.5)
    return time.monotonic() - began


def deliver_at(rig: Rig, rate: float, stop: threading.Event) -> None:
    """Publish ``rate`` events/s for the rig's matching subscription (nginx) until ``stop``."""
    producer = rig.producer()
    topic = rig.settings.topic("events")
    run = uuid.uuid4().hex[:6]
    n = 0
    began = time.monotonic()
    while not stop.is_set():
        wait = began + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 0.05))
            continue
        _produce(producer, topic, TENANT, encode_json_event(make_event(run, n)), True)
        n += 1
        if n % 100 == 0:
            producer.poll(0)
    producer.flush(10)


def timed(client: httpx.Client, paths: list[str]) -> dict[str, float]:
    times = []
    for path in paths:
        began = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99), "n": len(times)}


_COMPACTION = re.compile(r'^hookstream_ledger_compaction\{what="(\w+)"\} (\S+)$', re.MULTILINE)


def wait_compacted(client: httpx.Client, timeout_s: float) -> float:
    """Seconds until the worker's ledger store has no compaction pending or running
    (`hookstream_ledger_compaction`, published every 2 s), three readings in a row: the steady
    state a worker reaches once it has restored a ledger this size."""
    began = time.monotonic()
    quiet = 0
    while quiet < 3:
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the ledger was still compacting after {timeout_s:.0f}s")
        found = dict(_COMPACTION.findall(client.get("/metrics").text))
        settled = found and all(float(v) == 0 for v in found.values())
        quiet = quiet + 1 if settled else 0
        time.sleep(2.0)
    return time.monotonic() - began


def measure(rig: Rig, filled: dict[str, Any], samples: int) -> dict[str, Any]:
    keys = filled["keys"]
    subs = [f"sub_bulk_{random.randrange(SUBSCRIPTIONS)}" for _ in range(samples)]
    holders = [f"sub_bulk_{random.randrange(LETTER_SUBS)}" for _ in range(samples)]
    few = max(10, samples // 10)
    paths = {
        "delivery": [f"/v1/deliveries/{random.choice(keys)}" for _ in range(samples)],
        "deliveries_page": [f"/v1/subscriptions/{s}/deliveries?limit=50" for s in subs],
        "dlq_page": [f"/v1/dlq?subscription_id={s}&limit=50" for s in holders],
        "dlq_page_all": ["/v1/dlq?limit=50"] * few,
        "health_one": [f"/v1/subscriptions/{s}/health" for s in subs],
        "health_view": ["/v1/health"] * few,
    }
    out: dict[str, Any] = {}
    with _client(rig) as client:
        for name, asked in paths.items():
            out[name] = timed(client, asked)
        page = client.get(paths["deliveries_page"][0]).json()
        out["deliveries_page_items"] = len(page["items"])
        out["dlq_page_items"] = len(client.get(paths["dlq_page"][0]).json()["items"])
    return out


def reader_cpu(rig: Rig, records: int) -> dict[str, float]:
    """A standalone ledger reader in this process reads the filled topics: its CPU per record."""
    path = rig.workdir / f"standalone-{rig.run_id}"
    cpu0, wall0 = time.process_time(), time.monotonic()
    state = standalone(rig.settings, path)
    try:
        while state.reader.ready() != set(range(state.partitions)):
            time.sleep(0.05)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        state.close()
        shutil.rmtree(path, ignore_errors=True)
    return {"cpu_us_per_record": cpu / records * 1e6, "standalone_restore_s": wall}


def restore_after_kill(rig: Rig) -> dict[str, Any]:
    """kill -9 the worker; a worker with an empty disk takes over and restores every partition."""
    assert rig.worker is not None
    rig.worker.process.kill()
    rig.worker.process.wait(10)
    data = rig.settings.data_dir
    fresh = data.with_name(data.name + "-fresh")
    settings = rig.settings.model_copy(update={"data_dir": fresh})
    log = rig.workdir / f"worker-{rig.run_id}-fresh.log"
    began = time.monotonic()
    worker = Worker(settings, log, {"HOOKSTREAM_ADMIN_TOKEN": TOKEN})
    rig.worker = worker  # the rig stops it
    with _client(rig) as client:
        while True:
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - began > 600:
                raise RuntimeError("the fresh worker never became ready:\n" + worker.log_tail())
            time.sleep(0.2)
    ready_s = time.monotonic() - began
    partitions = [float(m.group(2)) for m in _READY.finditer(log.read_text(errors="replace"))]
    return {"ready_s": ready_s, "partition_restore_max_s": max(partitions, default=None)}


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def run_size(args: argparse.Namespace, size: int, work: Path) -> dict[str, Any]:
    config = RigConfig(
        bootstrap=args.bootstrap,
        subscriptions=1,
        bulk_subscriptions=SUBSCRIPTIONS,
        worker_env={"HOOKSTREAM_ADMIN_TOKEN": TOKEN},
    )
    with nginx_receiver() as receiver, Rig(config, receiver, work) as rig:
        say(f"[{size}] filling the ledger")
        filled = fill(rig, size)
        with _client(rig) as client:
            visible_s = wait_visible(client, filled["last_key"], 900)
        say(f"[{size}] {filled['attempts']} attempts read {visible_s:.1f}s after the fill")
        with _client(rig) as client:
            compacted_s = wait_compacted(client, 900)
        say(f"[{size}] the ledger's compaction settled {compacted_s:.1f}s later")
        stop = threading.Event()
        load = threading.Thread(target=deliver_at, args=(rig, args.rate, stop), daemon=True)
        load.start()
        time.sleep(3)
        assert rig.worker is not None
        cpu0 = (time.time(), rig.worker.samples[-1].cpu_s if rig.worker.samples else 0.0)
        figures = measure(rig, filled, args.samples)
        stop.set()
        load.join(15)
        result: dict[str, Any] = {
            "size": size,
            "fill": {k: v for k, v in filled.items() if k not in ("keys", "last_key")},
            "visible_after_fill_s": visible_s,
            "compaction_settled_s": compacted_s,
            "lookups": figures,
            "worker_rss_mib": rig.worker.last_rss() / 2**20,
            "worker_cpu_percent_during": rig.worker.cpu_percent(cpu0[0], time.time()),
            "ledger_disk_mib": du(rig.settings.tables_dir / "ledger") / 2**20,
            "box_load_average_1m": os.getloadavg()[0],  # 2 cores: above 2, everything waits
        }
        result.update(reader_cpu(rig, filled["attempts"] + filled["dead_letters"]))
        result["restore"] = restore_after_kill(rig)
        say(f"[{size}] {json.dumps(result, default=str)}")
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--attempts", type=int, action="append", help="ledger sizes (repeat)")
    parser.add_argument("--rate", type=float, default=1000.0, help="deliveries/s during the reads")
    parser.add_argument("--samples", type=int, default=300, help="requests per figure")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = args.attempts or [100_000, 2_000_000]
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookstream-lookup-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    try:
        runs = [run_size(args, size, work) for size in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"lookup-{stamp}.json"
    out.write_text(json.dumps({"runs": runs, "targets": TARGETS}, indent=2, default=str) + "\n")
    largest = runs[-1]["lookups"]
    delivery_p99 = largest["delivery"]["p99_ms"]
    page_p99 = max(largest["deliveries_page"]["p99_ms"], largest["dlq_page"]["p99_ms"])
    growth = None
    if len(runs) > 1:
        small = runs[0]["lookups"]
        growth = max(
            largest[k]["p99_ms"] / small[k]["p99_ms"]
            for k in ("delivery", "deliveries_page", "dlq_page")
        )
    met = delivery_p99 <= TARGETS["delivery_p99_ms"] and page_p99 <= TARGETS["page_p99_ms"]
    met = met and (growth is None or growth <= TARGETS["growth"]) and runs[-1]["size"] >= 2_000_000
    extra = {"page_p99_ms": page_p99, "growth_2m_over_100k": growth, "attempts": runs[-1]["size"]}
    target = "one delivery p99 <= 20 ms, a page p99 <= 50 ms at 2M attempts, within 1.5x of 100k"
    if out.resolve().is_relative_to(summary.REPO):
        summary.record(
            "S6", value=delivery_p99, unit="ms, one delivery p99", target=target, met=met,
            results_file=out, extra=extra,
        )  # fmt: skip
        summary.update_docs()
    say(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
