"""P2's latency scenario: hookstream and the floor relay, back to back in every run.

`latency_phase` publishes at a fixed rate from this process into a rig (a worker, or the floor
relay of `bench.floor` with ``RigConfig(floor=True)``) and reads nginx's access log: the
publish-to-receive percentiles after a warm-up, the per-second timeline, each process' CPU per
delivery, and where the time went hop by hop (`bench.hops`), with the slowest deliveries'
hops: for hookstream from the records the pipeline wrote (`bench.traffic.stage_points`), for
the floor from its own hop file. The records' times are whole milliseconds; the worker's stage
clock (`streams.adapters.stage_clock`, on in these runs) splits hookstream's time to the µs into
``stages``: publish -> the router's batch (``routing``) -> the routed record produced -> taken in
by the dispatcher -> the attempt's task started -> the request built and sent -> nginx.

`scenario_latency` runs, in each run, the floor and hookstream one after the other at the same
rate, alternating which goes first, and puts the floor's p50/p95/p99/max (``floor_*``) and its
relay's CPU per delivery into the run, so P2's ratios (`bench.figures_speed.p2`) come from one run.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

from bench import broker_requests, hops
from bench.cpu import PROCESSES, per_delivery_us
from bench.floor import read_hops
from bench.nginx import Nginx
from bench.report import fmt, median_of, percentile
from bench.rig import TENANT, Rig, RigConfig, _json, _produce, make_event
from bench.scrape import buckets_of, gc_pauses, minus, scrape
from bench.traffic import clock_points, stage_points

#: The worker's event-loop lag is counted above each of these (ms): a timer fires every 50 ms.
LAG_BOUNDS_MS = (10, 25, 50, 100)
FLOOR_KEYS = ("p50_ms", "p95_ms", "p99_ms", "max_ms")
LATENCY_KEYS = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    *(f"floor_{key}" for key in FLOOR_KEYS),
    "worker_cpu_percent",
    "worker_rss_mib",
    "broker_cpu_percent",
    "nginx_cpu_percent",
    "box_cpu_percent",
    *(f"{name}_us_per_delivery" for name, _ in PROCESSES),
    "floor_relay_us_per_delivery",
    "floor_broker_us_per_delivery",
    *broker_requests.RUN_KEYS,
)
#: how long to wait for the floor's hop file to hold every delivered request
HOPS_WAIT_S = 10.0


def _appended(keys: list[str], appended: dict[str, float]) -> Callable[..., None]:
    """A delivery report callback: when the broker appended the event (its LogAppendTime,
    which Kafka returns to the producer; `RigConfig.append_times`)."""

    def report(err: KafkaError | None, msg: Message) -> None:
        kind, stamp = msg.timestamp()
        if err is None and kind == TIMESTAMP_LOG_APPEND_TIME:
            for key in keys:
                appended[key] = stamp / 1000

    return report


def latency_phase(
    rig: Rig, rate: float, seconds: float, warmup_s: float, split: bool = True
) -> dict[str, Any]:
    """Publish at a fixed rate; publish-to-receive percentiles after the warm-up.

    With ``split``, also the hop breakdown of the measured deliveries (``hops``)."""
    assert rig.worker is not None
    producer = rig.producer()
    topic = rig.settings.topic("events")
    tick = 0.01
    sent: dict[str, float] = {}  # delivery id -> publish time (s)
    appended: dict[str, float] = {}  # delivery id -> when the broker appended its event (s)
    measured: set[str] = set()
    gc_at_start = gc_pauses(rig) if not rig.config.floor else {}
    lag_at_start = loop_lag(rig) if not rig.config.floor else {}
    began = time.time()
    ticks = int((seconds + warmup_s) / tick)
    n = 0
    for i in range(ticks):
        due = began + i * tick
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        # as many as keep the total at rate x elapsed ticks: below 100/s most ticks send none
        for _ in range(int(rate * (i + 1) * tick) - n):
            event = make_event(rig.run_id + "lat", n)
            n += 1
            keys = rig.delivery_ids(event)
            report = _appended(keys, appended)
            now = time.time()
            _produce(producer, topic, TENANT, _json(event), True, on_delivery=report)
            for key in keys:
                sent[key] = now
                if now - began >= warmup_s:
                    measured.add(key)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("the benchmark's producer could not flush to Kafka within 60 s")
    elapsed = time.time() - began
    rig.wait_delivered(set(sent))
    received = rig.receiver.log.received
    latencies = [(received[k] - sent[k]) * 1000 for k in measured if k in received]
    window_start = began + warmup_s
    window_end = max((received[k] for k in measured if k in received), default=time.time())
    cpu: dict[str, Any] = {
        "worker_cpu_percent": rig.worker.cpu_percent(window_start, window_end),
        **rig.others_cpu(window_start, window_end),
    }
    window_s = max(window_end - window_start, 1e-3)
    requests = rig.broker_requests(window_start, window_end, len(latencies) / window_s)
    result: dict[str, Any] = {
        "rate_target": rate,
        "rate_published": n / max(elapsed, 1e-3),
        "measured": len(measured),
        "delivered": len(latencies),
        "duplicates": rig.receiver.log.duplicates(sent),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies, default=float("nan")),
        **cpu,
        "worker_rss_mib": rig.worker.peak_rss() / 2**20,
        **per_delivery_us(cpu, len(latencies) / window_s),
        "broker_requests": requests,
        **broker_requests.figures(requests),
        "began_at": began,
        "timeline": _with_cpu(rig, timeline(sent, received, measured, began), began),
    }
    if not rig.config.floor:
        result["worker_gc"] = {"start": gc_at_start, "run": minus(gc_pauses(rig), gc_at_start)}
        lag = loop_lag(rig)
        result["worker_loop_lag"] = {key: lag[key] - lag_at_start[key] for key in lag}
    if split:
        chosen = {key: sent[key] for key in measured}
        points = (
            _floor_points(rig, chosen, appended)
            if rig.config.floor
            else stage_points(rig, chosen, appended or None)
        )
        result["hops"] = hops.split(chosen, points, received)
        result["slowest"] = hops.slowest(chosen, points, received, began)
        if rig.config.stage_clock and not rig.config.floor:
            result["stages"] = hops.split(chosen, clock_points(rig.stage_clock), received)
    return result


def _floor_points(rig: Rig, sent: dict[str, float], appended: dict[str, float]) -> list[hops.Point]:
    """The floor's points, named as hookstream's (`bench.traffic.stage_points`): ``append``
    (the broker appended the event), ``route`` (hop 1 read it), ``produce`` (the broker
    appended the relayed record), ``dispatch`` (hop 2 started the request). Waits until its
    hop file covers every request nginx logged (it flushes every 200 ms)."""
    received = rig.receiver.log.received
    wanted = {key for key in sent if key in received}
    deadline = time.monotonic() + HOPS_WAIT_S
    while True:
        times = read_hops(rig.floor_hops)
        if wanted <= times["dispatch"].keys() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    points: list[hops.Point] = [("append", appended)] if appended else []
    return points + [
        (name, times[name]) for name in ("route", "produce", "dispatch") if times[name]
    ]


def timeline(
    sent: Mapping[str, float], received: Mapping[str, float], keys: set[str], began: float
) -> list[dict[str, float]]:
    """Per second of publishing: how many were measured, and their p50/p99/max latency (ms).

    A stall shows as a run of seconds whose latency climbs and then falls; a percentile over
    the whole run cannot tell a stall from a steady queue."""
    by_second: dict[int, list[float]] = {}
    for key in keys:
        if key in received:
            by_second.setdefault(int(sent[key] - began), []).append(
                (received[key] - sent[key]) * 1000
            )
    return [
        {
            "second": second,
            "n": len(values),
            "p50_ms": round(percentile(values, 50), 1),
            "p99_ms": round(percentile(values, 99), 1),
            "max_ms": round(max(values), 1),
        }
        for second, values in sorted(by_second.items())
    ]


def _with_cpu(rig: Rig, seconds: list[dict[str, float]], began: float) -> list[dict[str, float]]:
    """Each second of the timeline with the worker's, the broker's and the box's CPU in it (% of
    one core; None where unknown): a stall beside a burst of CPU was the box, not Kafka."""
    assert rig.worker is not None and rig.box is not None
    for second in seconds:
        start = began + second["second"]
        for name, percent in (
            ("worker_cpu", rig.worker.cpu_percent(start, start + 1)),
            ("broker_cpu", rig.box.percent("broker", start, start + 1)),
            ("box_cpu", rig.box.percent("box", start, start + 1)),
        ):
            second[name] = round(percent, 1) if percent is not None else float("nan")
    return seconds


def with_floor(run: dict[str, Any], floor: dict[str, Any], floor_first: bool) -> dict[str, Any]:
    """hookstream's run with the floor's figures of the same run beside it (``floor_*``)."""
    return {
        **run,
        **{f"floor_{key}": floor.get(key) for key in FLOOR_KEYS},
        "floor_relay_us_per_delivery": floor.get("worker_us_per_delivery"),
        "floor_broker_us_per_delivery": floor.get("broker_us_per_delivery"),
        "floor_broker_requests": floor.get("broker_requests"),
        **broker_requests.floor_figures(floor),
        "floor_first": floor_first,
        "floor": floor,
    }


def scenario_latency(
    args: argparse.Namespace,
    receiver: Nginx,
    work: Path,
    config: Callable[..., RigConfig],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """``args.warmup_runs`` runs not counted, then ``args.runs`` runs, each the floor and
    hookstream back to back (alternating which is first, unless ``args.no_floor``); the medians
    of the counted runs' figures.

    A warm-up run is the scenario itself, so the broker has served the requests this traffic
    makes (multi-partition fetches, the consumer groups' commits, the worker's topics) before
    anything is counted; the warm-up of `bench.broker` (one topic, small records) does
    not reach them. It is off by default: in 16 invocations without it the broker's CPU per
    delivery was highest in the first run in all 16 (1.51x the others' median) and the floor's
    p99 in 15, but hookstream's worst p99 fell in runs 1, 2 and 3 six, seven and three times,
    so a warm-up run would not steady P2's spread (docs/benchmarks.md, "A whole run to warm the
    broker"). When asked for, its figures are kept in the results (``warmup_runs``) and shown
    beside the counted ones."""
    phase = functools.partial(latency_phase, rate=args.rate, seconds=args.seconds)

    def one_run(floor_first: bool) -> dict[str, Any]:
        order = [True, False] if floor_first else [False, True]
        if args.no_floor:
            order = [False]
        measured: dict[bool, dict[str, Any]] = {}
        for floor in order:
            with Rig(config(args, args.subs, floor=floor), receiver, work) as rig:
                measured[floor] = phase(rig, warmup_s=args.warmup)
        run = measured[False]
        if True in measured:
            run = with_floor(run, measured[True], floor_first)
        return run

    warmup_runs = []
    for i in range(args.warmup_runs):
        warmup_runs.append(one_run(floor_first=i % 2 == 1))
        say(f"warm-up run {i + 1} (not counted): {run_line(warmup_runs[-1])}")
    runs = []
    for i in range(args.runs):
        runs.append(one_run(floor_first=i % 2 == 0))
        say(f"run {i + 1}: {run_line(runs[-1])}")
    medians = {key: median_of(runs, key) for key in LATENCY_KEYS}
    split = hop_medians(runs)
    say(hops.table(split))
    return {"runs": runs, "warmup_runs": warmup_runs, "medians": medians, "hop_medians": split}


def hop_medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each hop's p99 and slowest-1% mean, median over the runs, hookstream's and the floor's."""
    found: dict[str, dict[str, float | None]] = {}
    for label, pick in (("hookstream", _own_hops), ("floor", _floor_hops_of), ("stages", _stages)):
        splits = [s for s in (pick(run) for run in runs) if s]
        if not splits:
            continue
        names = hops.hop_names(splits[0])
        found[label] = {
            f"{name}_{k}_ms": median_of(splits, f"{name}_{k}_ms")
            for name in names
            for k in ("p50", "p99", "max", "tail")
        }
    return found


def _own_hops(run: Mapping[str, Any]) -> dict[str, float]:
    return dict(run.get("hops") or {})


def _stages(run: Mapping[str, Any]) -> dict[str, float]:
    return dict(run.get("stages") or {})


def _floor_hops_of(run: Mapping[str, Any]) -> dict[str, float]:
    return dict((run.get("floor") or {}).get("hops") or {})


def loop_lag(rig: Rig) -> dict[str, float]:
    """The worker's event-loop lag samples so far (``hookstream_event_loop_lag_seconds``, one
    every 50 ms): how many, their total in ms, and how many came later than each bound of
    `LAG_BOUNDS_MS`."""
    name = "hookstream_event_loop_lag_seconds"
    samples = scrape(rig, (name,))
    below = buckets_of(samples, name)
    count = samples.get(f"{name}_count", 0.0)
    found = {"count": count, "total_ms": samples.get(f"{name}_sum", 0.0) * 1000}
    for bound in LAG_BOUNDS_MS:
        found[f"over_{bound}_ms"] = count - below.get(bound / 1000, count)
    return found


def run_line(run: Mapping[str, Any]) -> str:
    """One run's figures as the tool prints them."""
    text = (
        f"p50 {fmt(run['p50_ms'], ' ms', 1)}, p95 {fmt(run['p95_ms'], ' ms', 1)}, "
        f"p99 {fmt(run['p99_ms'], ' ms', 1)} ({run['delivered']}/{run['measured']} at "
        f"{run['rate_published']:.0f}/s)"
    )
    if "floor" in run:
        text += (
            f"; floor p50 {fmt(run['floor_p50_ms'], ' ms', 1)}, p99 "
            f"{fmt(run['floor_p99_ms'], ' ms', 1)} ({'first' if run['floor_first'] else 'second'})"
        )
    split = run.get("hops") or {}
    if split:
        names = hops.hop_names(split)
        text += "; hop p99 " + "/".join(fmt(split[f"{n}_p99_ms"], "", 1) for n in names)
        text += f" ms ({'/'.join(names)})"
    stages = run.get("stages") or {}
    if stages:
        names = hops.hop_names(stages)
        text += "; stage p50 " + "/".join(fmt(stages[f"{n}_p50_ms"], "", 2) for n in names)
        text += f" ms ({'/'.join(names)})"
    cpu = "/".join(
        fmt(run.get(f"{name}_us_per_delivery"), "", 0)
        for name in ("worker", "broker", "nginx", "publisher")
    )
    floor_cpu = fmt(run.get("floor_relay_us_per_delivery"), "", 0)
    text += f"; CPU µs per delivery worker/broker/nginx/publisher {cpu}, floor {floor_cpu}"
    lag = run.get("worker_loop_lag")
    if lag:
        late = "/".join(f"{lag[f'over_{bound}_ms']:.0f}" for bound in LAG_BOUNDS_MS)
        text += (
            f"; loop lag over {'/'.join(map(str, LAG_BOUNDS_MS))} ms: {late} of {lag['count']:.0f}"
        )
    return text
