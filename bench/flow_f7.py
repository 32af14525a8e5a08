"""F7, tenant fairness: a 100x tenant against a small one, in alternating phases (SPEC F7).

See bench/flow.py for how the flow benchmarks run and docs/benchmarks.md for the design.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flow_pairs import pair_medians, paired_runs, ratio
from bench.nginx import Nginx
from bench.report import fmt
from bench.scrape import gc_pauses
from bench.silent import silent_receiver
from bench.traffic import (
    Published,
    Stream,
    Subs,
    latencies_ms,
    latency_figures,
    load_1m,
    pipeline,
    publish,
    say,
    stages,
    wait_quiet,
)


def scenario_f7(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The small tenant's latency with the big tenant against without it.

    ``--design alternating`` (the default): one worker per run; the small tenant publishes all
    along, and the big one in every other phase of ``--phase-seconds``. The baseline and the
    measured samples interleave within minutes, on the same worker, so the box's drift between
    two separate runs (it changes speed by 2x within an hour) does not land on one side.
    ``--design pairs``: a run without the big tenant, then one with it, each its own worker.
    """
    if args.design == "alternating":
        runs = []
        for i in range(args.runs):
            wait_quiet(args.quiet_load, args.quiet_wait)
            run = _f7_alternating(args, work, big_first=i % 2 == 1)
            runs.append(run)
            say(f"run {i + 1}: p99_ratio {fmt(run['p99_ratio'], '', 3)}")
        return {"runs": runs, "medians": pair_medians(runs, ("p50_ms", "p99_ms"))}
    return _f7_pairs(args, work)


def _f7_streams(args: argparse.Namespace) -> tuple[Stream, Stream]:
    small = Stream("small", "small", args.small_rate, (("f7.small", "sub_f7_small"),))
    big_rate = args.small_rate * args.volume_ratio
    return small, Stream("big", "big", big_rate, (("f7.big", "sub_f7_big"),))


def _f7_subs(big_url: str | None) -> Callable[[Nginx], Subs]:
    def subs(receiver: Nginx) -> Subs:
        urls = {
            "small": receiver.url_for("/f7/small"),
            "big": big_url or receiver.url_for("/f7/big"),
        }
        return tuple(
            (f"sub_f7_{name}", {"tenant_id": name, "url": url, "filters": [f"f7.{name}"]})
            for name, url in urls.items()
        )  # fmt: skip

    return subs


@dataclass(frozen=True)
class Phases:
    """F7's alternating schedule: ``count`` phases of ``seconds`` after a warm-up, the big
    tenant publishing in every other one; the warm-up runs like the phase before the first."""

    seconds: float
    warmup: float
    count: int
    big_first: bool
    settle: float

    def of(self, elapsed: float) -> int:
        return int((elapsed - self.warmup) // self.seconds)  # -1 while warming up

    def big_on(self, phase: int) -> bool:
        return (phase % 2 == 0) == self.big_first

    def active(self, label: str, elapsed: float) -> bool:
        return label != "big" or self.big_on(self.of(elapsed))

    def window(self, began: float, phase: int) -> tuple[float, float]:
        start = began + self.warmup + phase * self.seconds
        return start, start + self.seconds

    def split(self, sent: Published) -> tuple[dict[str, dict[str, float]], list[dict[str, float]]]:
        """The small tenant's deliveries: the measured side (every one published in a phase of
        the big tenant), the baseline (the other phases' after their first ``settle`` seconds,
        so what the big tenant left queued counts against hookstream), and each phase's."""
        sides: dict[str, dict[str, float]] = {"baseline": {}, "measured": {}}
        per_phase: list[dict[str, float]] = [{} for _ in range(self.count)]
        for key, at in sent.measured("small").items():
            elapsed = at - sent.began
            phase = self.of(elapsed)
            if not 0 <= phase < self.count:
                continue
            per_phase[phase][key] = at
            if self.big_on(phase):
                sides["measured"][key] = at
            elif elapsed - self.warmup - phase * self.seconds >= self.settle:
                sides["baseline"][key] = at
        return sides, per_phase


def _f7_alternating(args: argparse.Namespace, work: Path, big_first: bool) -> dict[str, Any]:
    """One worker, phases of ``args.phase_seconds`` with and without the big tenant in turn."""
    small, big = _f7_streams(args)
    count = 2 * max(1, round(args.seconds / args.phase_seconds))
    phases = Phases(args.phase_seconds, args.warmup, count, big_first, args.settle)
    with pipeline(args, work, _f7_subs(None)) as rig:
        worker = rig.worker
        assert worker is not None
        load = load_1m()
        sent = publish(rig, [small, big], count * phases.seconds, phases.warmup, phases.active)
        rig.wait_delivered(set(sent.measured("small")), stall_s=args.stall)
        big_sent = sent.measured("big")
        rig.wait_delivered(set(big_sent), stall_s=5.0)
        received = rig.receiver.log.received
        sides, per_phase = phases.split(sent)
        windows = [phases.window(sent.began, k) for k in range(count)]
        cpu = [worker.cpu_percent(*w) for w in windows]
        result: dict[str, Any] = {"design": "alternating", "big_first": big_first}
        for side, samples in sides.items():
            lat = latencies_ms(samples, received)
            shares = [c for k, c in enumerate(cpu) if phases.big_on(k) == (side == "measured")]
            known = [c for c in shares if c is not None]
            result[side] = {
                "load_1m": load,
                "measured": len(samples),
                "delivered": len(lat),
                **latency_figures(lat),
                "worker_cpu_percent": statistics.mean(known) if known else None,
                "stages": stages(rig, samples),
            }
        in_big = [w for k, w in enumerate(windows) if phases.big_on(k)]
        inside = sum(
            1 for key in big_sent if any(a <= received.get(key, 0) <= b for a, b in in_big)
        )
        result["measured"]["big"] = {
            "rate_per_s": big.rate,
            "delivered_in_window_per_s": inside / (len(in_big) * phases.seconds),
            **latency_figures(latencies_ms(big_sent, received)),
            "stages": stages(rig, big_sent),
        }
        result["phases"] = [
            {
                "big": phases.big_on(k),
                "small_sent": len(samples),
                **latency_figures(latencies_ms(samples, received)),
                "worker_cpu_percent": cpu[k],
            }
            for k, samples in enumerate(per_phase)
        ]
        result["worker_gc"] = gc_pauses(rig)
    for side in ("baseline", "measured"):
        _say_small(result[side], with_big=side == "measured")
    for name, key in (("p99_ratio", "p99_ms"), ("p50_ratio", "p50_ms")):
        result[name] = ratio(result["measured"].get(key), result["baseline"].get(key))
    return result


def _f7_pairs(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """With ``--big-delay-ms``, the big tenant's endpoint answers after that delay (a child
    process, `bench.silent`), so its attempts hold dispatch slots: with ``--concurrency`` below
    the big tenant's rate x delay the tenants compete for slots, not only for CPU."""
    small, big = _f7_streams(args)
    big_rate = big.rate

    def run(with_big: bool) -> dict[str, Any]:
        if args.big_delay_ms is None:
            return _f7_run(with_big, None)
        with silent_receiver("/f7/big", answer_after_ms=args.big_delay_ms) as slow:
            result = _f7_run(with_big, slow.url)
        if with_big:
            result["big"]["endpoint"] = {"answer_after_ms": args.big_delay_ms, **slow.counts}
        return result

    def _f7_run(with_big: bool, big_url: str | None) -> dict[str, Any]:
        with pipeline(args, work, _f7_subs(big_url)) as rig:
            assert rig.worker is not None
            load = load_1m()
            sent = publish(rig, [small, big] if with_big else [small], args.seconds, args.warmup)
            measured = sent.measured("small")
            rig.wait_delivered(set(measured), stall_s=args.stall)
            received = rig.receiver.log.received
            start, end = sent.measured_from, sent.ended
            result: dict[str, Any] = {
                "load_1m": load,
                "measured": len(measured),
                "delivered": len(latencies_ms(measured, received)),
                **latency_figures(latencies_ms(measured, received)),
                "worker_cpu_percent": rig.worker.cpu_percent(start, end),
                "worker_gc": gc_pauses(rig),
                "stages": stages(rig, measured),
            }
            if with_big and big_url is not None:  # arrivals are counted by the slow endpoint
                result["big"] = {
                    "rate_per_s": big_rate,
                    "stages": stages(rig, sent.measured("big")),
                }
            elif with_big:
                big_sent = sent.measured("big")
                rig.wait_delivered(set(big_sent), stall_s=5.0)
                big_lat = latencies_ms(big_sent, received)
                inside = sum(1 for key in big_sent if start <= received.get(key, 0.0) <= end)
                result["big"] = {
                    "rate_per_s": big_rate,
                    "delivered_in_window_per_s": inside / (end - start),
                    **latency_figures(big_lat),
                    "stages": stages(rig, big_sent),
                }
        _say_small(result, with_big)
        return result

    pairs = paired_runs(args, run, {"p99_ratio": "p99_ms", "p50_ratio": "p50_ms"})
    return {"runs": pairs, "medians": pair_medians(pairs, ("p50_ms", "p99_ms"))}


def _say_small(figures: dict[str, Any], with_big: bool) -> None:
    """One line of the small tenant's figures on one side of F7 (and the big tenant's)."""
    say(
        f"  small tenant {'with' if with_big else 'solo, without'} the big one: p50 "
        f"{fmt(figures['p50_ms'], ' ms', 1)}, p99 {fmt(figures['p99_ms'], ' ms', 1)} "
        f"({figures['delivered']}/{figures['measured']}; {_stages_text(figures['stages'])}), "
        f"worker CPU {fmt(figures['worker_cpu_percent'], '%')}"
        + (f"; big: {_big_text(figures['big'])}" if with_big else "")
    )


def _big_text(big: dict[str, Any]) -> str:
    if "delivered_in_window_per_s" not in big:
        return f"{big['rate_per_s']:g}/s to a slow endpoint ({_stages_text(big['stages'])})"
    return (
        f"{fmt(big['delivered_in_window_per_s'])}/s of {big['rate_per_s']:g}/s, "
        f"p99 {fmt(big['p99_ms'], ' ms', 1)} ({_stages_text(big['stages'])})"
    )


def _stages_text(split: dict[str, float]) -> str:
    return (
        "p99 route/dispatch/http "
        + "/".join(fmt(split[f"{name}_p99_ms"], "", 0) for name in ("route", "dispatch", "http"))
        + " ms"
    )


# --- F1: a subscription limited to 50/s under 500/s ------------------------------------------
