"""hookstream's flow-control benchmarks (SPEC F1, F3, F5, F7). See docs/benchmarks.md.

    python -m bench.flow --scenario f3 --runs 3    # isolation from an endpoint that times out
    python -m bench.flow --scenario f7 --runs 3    # a 100x tenant against a small one
    python -m bench.flow --scenario f1 --runs 3    # a 50/s subscription under 500/s
    python -m bench.flow --scenario f5 --runs 3    # one producer at 10x its ingest limit
    python -m bench.flow --scenario all --runs 3

Each run uses the real broker, topics and a group id of its own, ONE worker process, and nginx
as the receiver of the healthy endpoints (every subscription has a URL path of its own, and
nginx logs each request's path). F3 compares each run with a baseline run measured right
before it in the same invocation (without the dead endpoint). F7 alternates phases with and
without the big tenant inside each run, so both sides come from one worker within the same
minutes (``--design pairs``: a baseline run, then a run with the big tenant). Both report the
median of the ratios. Each scenario writes ``bench/results/flow-<scenario>-<time>.json`` and,
unless ``--no-docs``, records its requirement's figure in ``bench/results/summary.json``
(`bench.figures`) and regenerates the current figures of docs/benchmarks.md. Nothing here
asserts on a number: these are benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from bench.figures import record_or_say
from bench.flow_f7 import scenario_f7
from bench.flow_ingest import scenario_f5
from bench.flow_pairs import pair_medians, paired_runs
from bench.flow_rows import row_figures, run_loads
from bench.nginx import Nginx
from bench.report import RESULTS_DIR, fmt, machine, median_of, write_json
from bench.rig import TENANT
from bench.scrape import scrape
from bench.silent import silent_receiver
from bench.traffic import (
    Stream,
    Subs,
    latencies_ms,
    latency_figures,
    load_1m,
    max_in_fixed_windows,
    max_in_window,
    pipeline,
    publish,
    say,
    wait_quiet,
)

SCENARIOS = ("f3", "f7", "f1", "f5")
#: Measured seconds per run when ``--seconds`` is not given. F7's small tenant publishes
#: 3 events/s: over 20 s its p99 would lie between the two largest of 60 samples, so one
#: scheduling hiccup decided a pair; 60 s gives it 180 samples.
DEFAULT_SECONDS: Final = 20.0
SCENARIO_SECONDS: Final = {"f7": 60.0}
#: Seconds published before the measured ones. In F7's first alternating runs, after a 3 s
#: warm-up, the first phase held the run's largest latencies when it was a quiet one (its
#: max 28 and 37 ms, against at most 25 ms in any later phase), so alternating runs wait longer.
DEFAULT_WARMUP_S: Final = 3.0
ALTERNATING_WARMUP_S: Final = 15.0


def scenario_seconds(scenario: str) -> float:
    return SCENARIO_SECONDS.get(scenario, DEFAULT_SECONDS)


SPEC_TARGETS = {
    "f3": "F3: healthy endpoints keep >= 0.9x their throughput and <= 1.25x their p99",
    "f7": "F7: the small tenant's p99 <= 2x its solo p99",
    "f1": "F1: at most 52.5 deliveries in any 1 s (limit 50/s + 5%)",
    "f5": "F5: the other producers get no 429 and keep their throughput",
}


def scenario_f3(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    def run(with_bad: bool) -> dict[str, Any]:
        with silent_receiver() as silent:
            result = _f3_run(args, work, silent.url if with_bad else None)
        result["bad_endpoint"] = silent.counts if with_bad else None
        say(
            f"  {'with' if with_bad else 'without'} the dead endpoint: healthy "
            f"{fmt(result['throughput_per_s'], '/s', 1)} (offered {args.rate:g}/s), "
            f"p50 {fmt(result['p50_ms'], ' ms', 1)}, p99 {fmt(result['p99_ms'], ' ms', 1)}, "
            f"{result['delivered']}/{result['measured']} delivered, worker CPU "
            f"{fmt(result['worker_cpu_percent'], '%')}; dead endpoint {result['bad_endpoint']}"
        )
        return result

    pairs = paired_runs(args, run, {"throughput_ratio": "throughput_per_s", "p99_ratio": "p99_ms"})
    return {"runs": pairs, "medians": pair_medians(pairs, ("throughput_per_s", "p99_ms"))}


def _f3_run(args: argparse.Namespace, work: Path, bad_url: str | None) -> dict[str, Any]:
    healthy = tuple((f"f3.h{i}", f"sub_f3_h{i}") for i in range(args.endpoints))

    def subs(receiver: Nginx) -> Subs:
        made: list[tuple[str, Mapping[str, Any]]] = [
            (sub_id, {"tenant_id": TENANT, "url": receiver.url_for(f"/f3/h{i}"), "filters": [kind]})
            for i, (kind, sub_id) in enumerate(healthy)
        ]
        if bad_url is not None:
            bad = {"url": bad_url, "filters": ["f3.bad"], "timeout_s": args.bad_timeout}
            made.append(("sub_f3_bad", {"tenant_id": TENANT, **bad}))
        return tuple(made)

    bad_rate = args.bad_rate if args.bad_rate is not None else args.rate / args.endpoints
    streams = [
        Stream("healthy", TENANT, args.rate, healthy),
        # published in both runs, so the router's input is the same; without the dead
        # endpoint's subscription these events match nothing
        Stream("bad", TENANT, bad_rate, (("f3.bad", "sub_f3_bad"),)),
    ]
    with pipeline(args, work, subs) as rig:
        assert rig.worker is not None
        load = load_1m()
        sent = publish(rig, streams, args.seconds, args.warmup)
        measured = sent.measured("healthy")
        rig.wait_delivered(set(measured), stall_s=args.stall)
        received = rig.receiver.log.received
        start, end = sent.measured_from, sent.ended
        inside = sum(1 for key in sent.sent["healthy"] if start <= received.get(key, 0.0) <= end)
        per_endpoint = [
            sum(1 for at in rig.receiver.log.by_path.get(f"/f3/h{i}", []) if start <= at <= end)
            / (end - start)
            for i in range(args.endpoints)
        ]
        lat = latencies_ms(measured, received)
        return {
            "load_1m": load,
            "offered_per_s": args.rate,
            "bad_rate_per_s": bad_rate if bad_url else 0.0,
            "measured": len(measured),
            "delivered": len(lat),
            "throughput_per_s": inside / (end - start),
            "endpoint_min_per_s": min(per_endpoint),
            "endpoint_median_per_s": statistics.median(per_endpoint),
            **latency_figures(lat),
            "worker_cpu_percent": rig.worker.cpu_percent(start, end),
            "worker_metrics": scrape(rig, ("hookstream_deliveries", "hookstream_breaker")),
        }


# --- F7: a tenant publishing 100x another's volume -------------------------------------------
def scenario_f1(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    path = "/f1/limited"

    def subs(receiver: Nginx) -> Subs:
        limited = {"url": receiver.url_for(path), "filters": ["f1.limited"]}
        return (("sub_f1_limited", {"tenant_id": TENANT, "rate_limit": args.limit, **limited}),)

    stream = Stream("limited", TENANT, args.offered, (("f1.limited", "sub_f1_limited"),))
    runs = []
    for i in range(args.runs):
        wait_quiet(args.quiet_load, args.quiet_wait)
        with pipeline(args, work, subs) as rig:
            assert rig.worker is not None
            load = load_1m()
            sent = publish(rig, [stream], args.offer_seconds, 0.0)
            until = sent.began + args.observe
            while time.time() < until:
                rig.receiver.log.poll()
                time.sleep(0.2)
            time.sleep(0.5)  # nginx writes its log every 200 ms
            rig.receiver.log.poll()
            times = [at for at in rig.receiver.log.by_path.get(path, []) if at <= until]
            span = (times[-1] - times[0]) if len(times) > 1 else 0.0
            run = {
                "load_1m": load,
                "offered_per_s": args.offered,
                "published": sent.events("limited"),
                "arrivals": len(times),
                "max_sliding_1s": max_in_window(times),
                "max_fixed_1s": max_in_fixed_windows(times),
                "mean_per_s": (len(times) - 1) / span if span else None,
                "worker_cpu_percent": rig.worker.cpu_percent(sent.began, until),
                "worker_metrics": scrape(rig, ("hookstream_deliveries",)),
            }
        runs.append(run)
        say(
            f"run {i + 1}: max {run['max_sliding_1s']} in any 1 s (sliding), "
            f"{run['max_fixed_1s']} in a clock second; mean {fmt(run['mean_per_s'], '/s', 1)} "
            f"over {run['arrivals']} arrivals; worker CPU {fmt(run['worker_cpu_percent'], '%')}"
        )
    keys = ("max_sliding_1s", "max_fixed_1s", "mean_per_s", "worker_cpu_percent")
    return {"runs": runs, "medians": {key: median_of(runs, key) for key in keys}}


SCENARIO_FUNCS: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any]]] = {
    "f3": scenario_f3,
    "f7": scenario_f7,
    "f1": scenario_f1,
    "f5": scenario_f5,
}


# --- command line ---------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flow", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), required=True)
    parser.add_argument("--runs", type=int, default=3, help="runs (pairs for f3, f7); medians")
    parser.add_argument("--seconds", type=float, help="measured seconds per run (default 20; "
                        "f7: 60, per side)")  # fmt: skip
    parser.add_argument("--warmup", type=float, help="f3/f7: seconds not counted (default 3; "
                        "f7 alternating: 15)")  # fmt: skip
    parser.add_argument("--stall", type=float, default=30.0, help="give up waiting after this")
    parser.add_argument("--concurrency", type=int, default=256, help="worker dispatch concurrency")
    parser.add_argument("--batch-size", type=int, default=500, help="worker dispatch batch size")
    parser.add_argument(
        "--quiet-load", type=float, help="before each run, wait until the 1-minute load is <= this"
    )
    parser.add_argument("--quiet-wait", type=float, default=600.0, help="but at most this long")
    f3 = parser.add_argument_group("f3")
    f3.add_argument("--endpoints", type=int, default=100, help="healthy endpoints")
    f3.add_argument("--rate", type=float, default=200.0, help="deliveries/s to them, in total")
    f3.add_argument("--bad-rate", type=float, help="deliveries/s to the dead endpoint "
                    "(default: one healthy endpoint's share)")  # fmt: skip
    f3.add_argument("--bad-timeout", type=float, default=1.0, help="its subscription's timeout")
    f7 = parser.add_argument_group("f7")
    f7.add_argument("--small-rate", type=float, default=3.0, help="the small tenant's events/s")
    f7.add_argument("--volume-ratio", type=float, default=100.0, help="big / small volume")
    f7.add_argument("--big-delay-ms", type=float, help="the big tenant's endpoint answers after "
                    "this delay (default: nginx, at once; --design pairs only)")  # fmt: skip
    f7.add_argument("--design", choices=("alternating", "pairs"), default="alternating",
                    help="alternating: phases with and without the big tenant in one worker; "
                    "pairs: a run without it, then a run with it")  # fmt: skip
    f7.add_argument("--phase-seconds", type=float, default=12.0, help="alternating: each phase")
    f7.add_argument("--settle", type=float, default=2.0, help="alternating: seconds of each "
                    "phase without the big tenant that are not counted")  # fmt: skip
    f1 = parser.add_argument_group("f1")
    f1.add_argument("--limit", type=float, default=50.0, help="the subscription's rate_limit")
    f1.add_argument("--offered", type=float, default=500.0, help="events/s published to it")
    f1.add_argument("--offer-seconds", type=float, default=10.0, help="seconds it is offered")
    f1.add_argument("--observe", type=float, default=30.0, help="seconds of arrivals counted")
    f5 = parser.add_argument_group("f5")
    f5.add_argument("--ingest-limit", type=float, default=20.0, help="worker's limit per key")
    f5.add_argument("--noisy-factor", type=float, default=10.0, help="noisy producer / limit")
    f5.add_argument("--producers", type=int, default=4, help="the other producers")
    f5.add_argument("--others-rate", type=float, default=15.0, help="each other's events/s")
    parser.add_argument(
        "--bootstrap", default=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--no-docs", action="store_true", help="leave summary.json and docs/benchmarks.md alone"
    )
    return parser.parse_args(argv)


def run_scenario(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.seconds is None:
        args = argparse.Namespace(**{**vars(args), "seconds": scenario_seconds(scenario)})
    alternating = scenario == "f7" and args.design == "alternating"
    if alternating and args.big_delay_ms is not None:
        raise SystemExit("--big-delay-ms needs --design pairs (the slow endpoint is per run)")
    if args.warmup is None:
        warmup = ALTERNATING_WARMUP_S if alternating else DEFAULT_WARMUP_S
        args = argparse.Namespace(**{**vars(args), "warmup": warmup})
    load_before = list(os.getloadavg())
    say(f"flow {scenario}: {os.cpu_count()} cores, load average {load_before[0]:.1f}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hookstream-bench-flow-") as tmp:
        body = SCENARIO_FUNCS[scenario](args, Path(tmp))
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {
        "scenario": f"flow-{scenario}",
        "machine": machine("bench.flow"),
        "load_before": load_before,
        "seconds": time.monotonic() - began,
        "config": config,
        "spec_target": SPEC_TARGETS[scenario],
        **body,
    }
    figures, verdict = row_figures(scenario, result)
    figures += f"; runs started at load {run_loads(result['runs'])}"
    result["verdict"] = verdict.strip("*")
    path = write_json(result, args.results_dir)
    say(f"results: {path}")
    say(json.dumps(result["medians"], indent=2, default=str))
    say(f"{scenario}: {figures} -> {verdict}")
    if not args.no_docs:
        record_or_say(result, path, say)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for scenario in SCENARIOS if args.scenario == "all" else (args.scenario,):
        run_scenario(scenario, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
