"""SPEC P1's scenario: a backlog drained at full speed, the floor relay's beside it.

    python -m bench.e2e --scenario throughput --runs 3 --events 90000 --own-broker

Each run publishes ``--events`` at once and measures the steady drain (`bench.rig`): deliveries
per second and each process' CPU per delivery, with the bare HTTP client's ceiling on the same
nginx before and after the drain (`ceiling`: one core's requests per second, whose inverse is
P1's "client CPU per request"; `bracketed_ceiling`). Unless ``--no-floor``, the floor relay
(`bench.floor`: the same two Kafka hops and HTTP client, no hookstream logic) drains the same
backlog in the same run, first in odd runs and second in even ones, so the figure can say which
part of the worker's multiple of the client is the Kafka hops and HTTP exchange any relay pays
and which is hookstream's own work (`bench.figures_speed.p1`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import profile
from bench.broker_requests import RUN_KEYS, floor_figures
from bench.cpu import PROCESSES
from bench.nginx import Nginx
from bench.report import fmt, median_of, raw_dir
from bench.rig import Rig, RigConfig, throughput_phase
from bench.scrape import scrape

THROUGHPUT_KEYS = (
    "deliveries_per_s",
    "overall_per_s",
    "ceiling_rps",
    "ceiling_before_rps",
    "ceiling_after_rps",
    "ratio_to_ceiling",
    "worker_cpu_percent",
    "worker_rss_mib",
    "broker_cpu_percent",
    "nginx_cpu_percent",
    "box_cpu_percent",
    *(f"{name}_us_per_delivery" for name, _ in PROCESSES),
    "floor_deliveries_per_s",
    "floor_relay_us_per_delivery",
    "floor_broker_us_per_delivery",
    *RUN_KEYS,
)


def others_text(figures: dict[str, Any]) -> str:
    """The broker's and nginx's CPU (% of one core) and the whole box's (of 100 per core)."""
    cores = os.cpu_count() or 1
    return (
        f"broker CPU {fmt(figures.get('broker_cpu_percent'), '%')}, "
        f"nginx {fmt(figures.get('nginx_cpu_percent'), '%')}, "
        f"box {fmt(figures.get('box_cpu_percent'), '%')} of {cores * 100}%"
    )


def per_delivery_text(figures: dict[str, Any]) -> str:
    """Each process' CPU per delivery (`bench.cpu.per_delivery_us`)."""
    names = [name for name, _ in PROCESSES]
    values = "/".join(fmt(figures.get(f"{name}_us_per_delivery"), "", 0) for name in names)
    return f"CPU per delivery {'/'.join(names)} {values} µs"


def bracketed_ceiling(before: float, after: float) -> dict[str, float]:
    """The client's ceiling of a run, measured before and after its drain: the run's
    ``ceiling_rps`` is the one whose CPU per request is the mean of the two's.

    One 5 s measurement before the drain moved the client's cost per request 2x from run to run
    (52-107 µs, 2026-12-04 21:16-21:22) while the worker's drain moved 4% (472-493 µs per
    delivery) and the floor's 99-136 µs: the divisor, not the worker, made P1's spread. The
    drain lasts about 40 s; a measurement on each side of it samples the box twice as long, at
    both ends of the interval the worker's figure covers."""
    mean_us = (1e6 / before + 1e6 / after) / 2
    return {"ceiling_before_rps": before, "ceiling_after_rps": after, "ceiling_rps": 1e6 / mean_us}


def scenario_throughput(
    args: argparse.Namespace,
    receiver: Nginx,
    work: Path,
    config: Callable[..., RigConfig],
    ceiling: Callable[[Nginx, float], float],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """``args.runs`` runs of hookstream, each with the floor relay's unless ``args.no_floor``;
    the medians of the runs' figures, and a profiled run with ``args.profile``."""
    runs = []
    for i in range(args.runs):
        order = [False] if args.no_floor else ([True, False] if i % 2 == 0 else [False, True])
        run: dict[str, Any] = {}
        floor: dict[str, Any] = {}
        for is_floor in order:
            with Rig(config(args, args.subs, floor=is_floor), receiver, work) as rig:
                if is_floor:
                    floor = throughput_phase(rig, args.events)
                    continue
                before = ceiling(receiver, args.ceiling_seconds)
                run = throughput_phase(rig, args.events)
                after = ceiling(receiver, args.ceiling_seconds)
                run |= bracketed_ceiling(before, after)
                run["ratio_to_ceiling"] = run.get("deliveries_per_s", 0.0) / run["ceiling_rps"]
        if floor:
            run |= {
                "floor": floor,
                "floor_first": order[0],
                "floor_deliveries_per_s": floor.get("deliveries_per_s"),
                "floor_relay_us_per_delivery": floor.get("worker_us_per_delivery"),
                "floor_broker_us_per_delivery": floor.get("broker_us_per_delivery"),
                **floor_figures(floor),
            }
        runs.append(run)
        say(
            f"run {i + 1}: {fmt(run.get('deliveries_per_s'))} deliveries/s "
            f"({run['delivered']}/{run['expected_deliveries']}), ceiling "
            f"{fmt(run['ceiling_rps'])} req/s, worker CPU {fmt(run.get('worker_cpu_percent'), '%')}"
            f", RSS {fmt(run.get('worker_rss_mib'), ' MiB')}; {others_text(run)}; "
            f"{per_delivery_text(run)}"
            + (
                f"; floor {fmt(floor.get('deliveries_per_s'))} deliveries/s at "
                f"{fmt(floor.get('worker_us_per_delivery'), '', 0)} µs per delivery"
                if floor
                else ""
            )
        )
    medians = {key: median_of(runs, key) for key in THROUGHPUT_KEYS}
    result: dict[str, Any] = {"runs": runs, "medians": medians}
    if args.profile:
        result["profile"] = _profiled_run(args, receiver, work, config, medians, say)
    return result


def with_task_cpu(config: RigConfig) -> RigConfig:
    """``config`` with the worker counting its event loop's CPU by task (``HOOKSTREAM_TASK_CPU``,
    `streams.adapters.task_cpu`): about 7 µs more per delivery, so never in a counted run."""
    return replace(config, worker_env={**config.worker_env, "HOOKSTREAM_TASK_CPU": "true"})


def timed_throughput_phase(rig: Rig, events: int) -> dict[str, Any]:
    """`throughput_phase` on a `with_task_cpu` worker, with ``task_cpu_us_per_delivery``: the
    drain's event-loop CPU per delivery by task (`bench.profile.per_delivery`)."""
    before = profile.task_cpu(scrape(rig, profile.TASK_CPU_METRICS))
    run = throughput_phase(rig, events)
    spent = profile.task_cpu(scrape(rig, profile.TASK_CPU_METRICS), before)
    run["task_cpu_us_per_delivery"] = profile.per_delivery(spent, run.get("delivered") or 0)
    return run


def _profiled_run(
    args: argparse.Namespace,
    receiver: Nginx,
    work: Path,
    config: Callable[..., RigConfig],
    medians: dict[str, float | None],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One more throughput run, not counted in the medians, with py-spy on the worker and the
    worker counting its event loop's CPU per kind of task (``HOOKSTREAM_TASK_CPU``)."""
    rate = medians.get("deliveries_per_s") or 1000.0
    drain_s = args.events * args.subs / rate
    seconds = max(2.0, min(args.profile_seconds, drain_s * 0.7))
    with Rig(with_task_cpu(config(args, args.subs)), receiver, work) as rig:
        assert rig.worker is not None
        out = raw_dir(args.results_dir) / f"profile-{time.strftime('%Y%m%dT%H%M%S')}.txt"
        recorder = profile.start_recording(rig.worker.pid, seconds, out)
        if recorder is None:
            return {"error": "py-spy is not installed (pip install 'hookstream[bench]')"}
        run = timed_throughput_phase(rig, args.events)
        _, err = recorder.communicate(timeout=seconds + 60)
    by_task = run.pop("task_cpu_us_per_delivery")
    say(profile.task_markdown(by_task))
    if not out.exists():
        return {
            "error": f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}",
            "task_cpu_us_per_delivery": by_task,
        }
    summary = profile.summarise(out)
    say(profile.markdown(summary))
    return {
        "collapsed_stacks": str(out),
        "seconds": seconds,
        "run": run,
        "task_cpu_us_per_delivery": by_task,
        **summary,
    }
