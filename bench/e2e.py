"""hookstream's end-to-end benchmarks (SPEC P1, P2, P6, P7). See docs/benchmarks.md.

    python -m bench.e2e --scenario throughput --runs 3 --events 50000
    python -m bench.e2e --scenario latency --runs 3 --seconds 20 --rate 1000
    python -m bench.e2e --scenario memory --subscriptions 100000 --seconds 20
    python -m bench.e2e --scenario fanout --runs 3
    python -m bench.e2e --scenario smoke --runs 1 --no-docs --results-dir /tmp/out

Every run of throughput, latency, memory and smoke uses the real broker, its own topics and
group id, ONE worker process and nginx as the receiver. Each scenario prints its figures, writes
``bench/results/<scenario>-<timestamp>.json`` and, unless ``--no-docs``, records its
requirement's figure in ``bench/results/summary.json`` (P1, P2, P6, P7; `bench.figures`) and
regenerates the current figures of docs/benchmarks.md. Nothing here asserts on a number: these
are benchmarks.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from bench.broker import BENCH_JVM, own_broker
from bench.fanout import run_fanout
from bench.figures import record_or_say
from bench.http_clients import measure
from bench.latency import latency_phase, run_line, scenario_latency
from bench.nginx import Nginx, nginx_receiver
from bench.report import RESULTS_DIR, fmt, machine, median_of, write_json
from bench.rig import Rig, RigConfig
from bench.throughput import (
    others_text,
    per_delivery_text,
    scenario_throughput,
    timed_throughput_phase,
    with_task_cpu,
)
from streams.adapters.http import Transport
from streams.adapters.ssrf import DELIVERY_CLIENTS
from streams.settings import Settings

SCENARIOS = ("throughput", "latency", "memory", "fanout", "smoke")
SPEC_TARGETS = {
    "throughput": "P1: worker CPU per delivery <= 4x the bare client's CPU per request",
    "latency": "P2: p50 <= 1.5x and p99 <= 2x the floor's at 1,000 events/s",
    "memory": "P6: RSS <= 400 MiB with 100k subscriptions",
    "fanout": "P7: cost grows with matching subscriptions, not the total (ratio ~1)",
    "smoke": "none: CI checks that the benchmark works",
}
#: The worker's pool allows this many connections to one host (either transport's default).
PER_HOST = 64


def say(text: str) -> None:
    print(text, flush=True)


def http_client() -> str:
    """The worker's delivery client: the bench's environment sets it like the worker's."""
    default: str = Settings.model_fields["http_client"].default
    return os.environ.get("HOOKSTREAM_HTTP_CLIENT", default)


def ceiling(receiver: Nginx, seconds: float) -> float:
    """Requests/s of the worker's transport alone (`http_client`), POSTing 1 KB bodies to the
    same nginx, on the event loop the worker runs (uvloop)."""
    client = DELIVERY_CLIENTS[http_client()]

    def make() -> Transport:
        return client(max_connections=PER_HOST, per_host_limit=PER_HOST)

    return uvloop.run(measure(make, receiver.url, PER_HOST, seconds))


def rig_config(
    args: argparse.Namespace, subscriptions: int, bulk: int = 0, floor: bool = False
) -> RigConfig:
    return RigConfig(
        bootstrap=args.bootstrap,
        subscriptions=subscriptions,
        bulk_subscriptions=bulk,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        floor=floor,
        append_times=args.scenario in ("latency", "smoke"),  # for the hop breakdown
        stage_clock=args.scenario in ("latency", "smoke"),  # and the worker's stages
        broker_requests=args.scenario in ("latency", "throughput", "smoke"),
    )


# --- scenarios ------------------------------------------------------------------------------
def scenario_memory(args: argparse.Namespace, receiver: Nginx, work: Path) -> dict[str, Any]:
    runs = []
    for i in range(args.runs):
        bulk = max(0, args.subscriptions - args.matching)
        with Rig(rig_config(args, args.matching, bulk), receiver, work) as rig:
            assert rig.worker is not None
            ready_rss = rig.worker.last_rss() / 2**20
            traffic = latency_phase(rig, args.rate, args.seconds, 0.0, split=False)
            run = {
                "subscriptions": args.subscriptions,
                "ready_s": rig.ready_s,
                "rss_ready_mib": ready_rss,
                "rss_peak_mib": rig.worker.peak_rss() / 2**20,
                "rss_end_mib": rig.worker.last_rss() / 2**20,
                "traffic": traffic,
            }
            runs.append(run)
        say(
            f"run {i + 1}: {args.subscriptions:,} subscriptions, ready in {run['ready_s']:.1f}s;"
            f" RSS ready {ready_rss:.0f} MiB, peak {run['rss_peak_mib']:.0f} MiB, "
            f"end {run['rss_end_mib']:.0f} MiB ({traffic['delivered']} deliveries)"
        )
    keys = ("ready_s", "rss_ready_mib", "rss_peak_mib", "rss_end_mib")
    return {"runs": runs, "medians": {key: median_of(runs, key) for key in keys}}


def scenario_fanout(args: argparse.Namespace) -> dict[str, Any]:
    result = run_fanout(args.fanout_small, args.subscriptions, args.matching, args.runs)
    med = result["median_us"]
    small, large = result["sizes"]
    say(
        f"match: {med[f'match_{small}']:.2f} µs ({small:,}) vs {med[f'match_{large}']:.2f} µs "
        f"({large:,}): ratio {result['match_ratio']:.2f}"
    )
    say(
        f"route: {med[f'route_{small}']:.1f} µs/event ({small:,}) vs "
        f"{med[f'route_{large}']:.1f} µs/event ({large:,}): ratio {result['route_ratio']:.2f}"
    )
    ratios = {"match_ratio": result["match_ratio"], "route_ratio": result["route_ratio"]}
    return {**result, "medians": {**med, **ratios}}


def scenario_smoke(args: argparse.Namespace, receiver: Nginx, work: Path) -> dict[str, Any]:
    """A few hundred events through throughput and latency on one worker: does it all work?"""
    runs = []
    for _ in range(args.runs):
        # the worker counts its event loop's CPU by task: the smoke checks that count too
        with Rig(with_task_cpu(rig_config(args, args.subs)), receiver, work) as rig:
            raw = ceiling(receiver, args.ceiling_seconds)
            through = timed_throughput_phase(rig, args.events)
            through["ceiling_rps"] = raw
            latency = latency_phase(rig, args.rate, args.seconds, args.warmup)
        run: dict[str, Any] = {"throughput": through, "latency": latency}
        if not args.no_floor:  # the floor relay through the same publisher and nginx
            with Rig(rig_config(args, args.subs, floor=True), receiver, work) as rig:
                run["floor"] = latency_phase(rig, args.rate, args.seconds, args.warmup)
        runs.append(run)
        say(
            f"smoke: {fmt(through.get('deliveries_per_s'))} deliveries/s "
            f"({through['delivered']}/{through['expected_deliveries']}), ceiling {fmt(raw)}; "
            f"latency {run_line(latency)}"
        )
        if "floor" in run:
            say(f"smoke floor: {run_line(run['floor'])}")
    medians = {
        "deliveries_per_s": median_of([r["throughput"] for r in runs], "deliveries_per_s"),
        "ceiling_rps": median_of([r["throughput"] for r in runs], "ceiling_rps"),
        "p50_ms": median_of([r["latency"] for r in runs], "p50_ms"),
        "p99_ms": median_of([r["latency"] for r in runs], "p99_ms"),
    }
    if not args.no_floor:
        medians["floor_p50_ms"] = median_of([r["floor"] for r in runs], "p50_ms")
    return {"runs": runs, "medians": medians}


SCENARIO_FUNCS: dict[str, Callable[[argparse.Namespace, Nginx, Path], dict[str, Any]]] = {
    "throughput": functools.partial(
        scenario_throughput, config=rig_config, ceiling=ceiling, say=say
    ),
    "latency": functools.partial(scenario_latency, config=rig_config, say=say),
    "memory": scenario_memory,
    "smoke": scenario_smoke,
}


# --- figures line ---------------------------------------------------------------------------
def _row_figures(scenario: str, result: dict[str, Any]) -> tuple[str, str]:
    med = result.get("medians", {})
    if scenario == "throughput":
        values = "/".join(fmt(r.get("deliveries_per_s")) for r in result["runs"])
        return (
            f"**{fmt(med['deliveries_per_s'])} deliveries/s** (runs {values}); "
            f"{fmt(med['ratio_to_ceiling'], '', 2)}x ceiling; worker CPU "
            f"{fmt(med['worker_cpu_percent'], '%')}, RSS {fmt(med['worker_rss_mib'], ' MiB')}; "
            f"{others_text(med)}; {per_delivery_text(med)}; floor relay "
            f"{fmt(med.get('floor_relay_us_per_delivery'), ' µs', 0)} per delivery",
            f"{fmt(med['ceiling_rps'])} req/s",
        )
    if scenario == "latency":
        return (
            f"**p50 {fmt(med['p50_ms'], ' ms', 1)}, p95 {fmt(med['p95_ms'], ' ms', 1)}, "
            f"p99 {fmt(med['p99_ms'], ' ms', 1)}** at {result['config']['rate']:.0f} events/s; "
            f"floor p50 {fmt(med['floor_p50_ms'], ' ms', 1)}, p99 "
            f"{fmt(med['floor_p99_ms'], ' ms', 1)}; worker CPU "
            f"{fmt(med['worker_cpu_percent'], '%')}; {others_text(med)}; {per_delivery_text(med)}",
            "n/a",
        )
    if scenario == "memory":
        return (
            f"**RSS peak {fmt(med['rss_peak_mib'], ' MiB')}** (ready "
            f"{fmt(med['rss_ready_mib'], ' MiB')}, end {fmt(med['rss_end_mib'], ' MiB')}) with "
            f"{result['config']['subscriptions']:,} subscriptions; registry ready in "
            f"{fmt(med['ready_s'], ' s', 1)}",
            "n/a",
        )
    if scenario == "fanout":
        small, large = result["sizes"]
        m = result["median_us"]
        return (
            f"match {m[f'match_{small}']:.2f}/{m[f'match_{large}']:.2f} µs "
            f"(**ratio {result['match_ratio']:.2f}**); route {m[f'route_{small}']:.0f}/"
            f"{m[f'route_{large}']:.0f} µs/event (**ratio {result['route_ratio']:.2f}**), "
            f"{small:,} vs {large:,} subscriptions, {result['config']['matching']} matching",
            "n/a",
        )
    return (
        f"{fmt(med.get('deliveries_per_s'))} deliveries/s; p50 {fmt(med.get('p50_ms'), ' ms', 1)}",
        f"{fmt(med.get('ceiling_rps'))} req/s",
    )


# --- command line ---------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is reported")
    parser.add_argument("--seconds", type=float, help="latency/memory: measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="latency: seconds not counted")
    parser.add_argument(
        "--warmup-runs",
        type=int,
        default=0,
        help="latency: whole runs before the counted ones, reported but not counted "
        "(off in make bench: docs/benchmarks.md, 'A whole run to warm the broker')",
    )
    parser.add_argument("--events", type=int, help="throughput/smoke: events published at once")
    parser.add_argument("--rate", type=float, help="latency/memory: events published per second")
    parser.add_argument("--subs", type=int, default=1, help="matching subscriptions (fan-out)")
    parser.add_argument("--subscriptions", type=int, default=100_000, help="memory/fanout: total")
    parser.add_argument("--matching", type=int, default=5, help="memory/fanout: how many match")
    parser.add_argument("--fanout-small", type=int, default=1000, help="fanout: the small total")
    parser.add_argument("--concurrency", type=int, default=256, help="worker dispatch concurrency")
    parser.add_argument("--batch-size", type=int, default=500, help="worker dispatch batch size")
    parser.add_argument("--ceiling-seconds", type=float, default=5.0)
    parser.add_argument("--profile", action="store_true", help="throughput: +1 run under py-spy")
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="leave out the floor relay (throughput, latency, smoke)",
    )
    parser.add_argument("--profile-seconds", type=float, default=15.0)
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--start-kafka", action="store_true", help="start the local broker")
    parser.add_argument(
        "--own-broker",
        action="store_true",
        help="a broker of the run's own, on free ports, whose new data dir holds only the "
        "bench's topics (P1, P2: its CPU and collections are the bench's alone)",
    )
    parser.add_argument(
        "--broker-jvm",
        default=BENCH_JVM,
        help="--own-broker: the broker's heap and GC flags, space-separated",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--no-docs", action="store_true", help="leave summary.json and docs/benchmarks.md alone"
    )
    args = parser.parse_args(argv)
    smoke = args.scenario == "smoke"
    defaults = {
        "seconds": 3.0 if smoke else 20.0,
        "events": 300 if smoke else 50_000,
        "rate": 100.0 if smoke else (200.0 if args.scenario == "memory" else 1000.0),
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if smoke:
        args.ceiling_seconds = min(args.ceiling_seconds, 1.0)
        args.warmup = min(args.warmup, 1.0)
    return args


def _start_kafka(bootstrap: str) -> Callable[[], None]:
    from streams.adapters.local_kafka import LocalKafka
    from streams.settings import load_settings

    kafka = LocalKafka(load_settings(kafka_bootstrap=bootstrap), say=say)
    started = kafka.start()
    say(f"kafka ready at {started.bootstrap} ({started.seconds:.1f}s)")
    if started.already_running:
        return lambda: None  # someone else's broker: leave it running

    def stop() -> None:
        kafka.stop()
        say("kafka stopped")

    return stop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = list(os.getloadavg())
    if args.own_broker:
        stop_kafka = own_broker(args, say)
    elif args.start_kafka:
        stop_kafka = _start_kafka(args.bootstrap)
    else:
        stop_kafka = lambda: None  # noqa: E731
    say(f"{args.scenario}: {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    began = time.monotonic()
    try:
        if args.scenario == "fanout":  # in-process: no broker, worker or receiver
            body = scenario_fanout(args)
        else:
            with (
                tempfile.TemporaryDirectory(prefix="hookstream-bench-") as tmp,
                nginx_receiver() as receiver,
            ):
                body = SCENARIO_FUNCS[args.scenario](args, receiver, Path(tmp))
    finally:
        stop_kafka()
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {
        "scenario": args.scenario,
        "machine": machine(),
        "load_before": load_before,
        "seconds": time.monotonic() - began,
        "config": config,
        "http_client": http_client(),
        "spec_target": SPEC_TARGETS[args.scenario],
        **body,
    }
    path = write_json(result, args.results_dir)
    say(f"results: {path}")
    say(json.dumps(result.get("medians", {}), indent=2, default=str))
    figures, ceiling_text = _row_figures(args.scenario, result)
    say(f"{args.scenario}: {figures}; ceiling {ceiling_text}")
    if not args.no_docs:
        record_or_say(result, path, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
