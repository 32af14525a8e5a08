"""The figures line of each flow-control benchmark: its figures and whether it met its target."""

from __future__ import annotations

from typing import Any

from bench.report import fmt


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def row_figures(scenario: str, result: dict[str, Any]) -> tuple[str, str]:
    """The figures and the verdict of one result, as the run prints them."""
    med = result["medians"]
    config = result["config"]
    if scenario == "f3":
        through, p99 = med["throughput_ratio"], med["p99_ratio"]
        pairs = "/".join(
            f"{p['throughput_ratio']:.2f}:{p['p99_ratio']:.2f}" for p in result["runs"]
        )
        ok = None if through is None or p99 is None else through >= 0.9 and p99 <= 1.25
        bad_rate = config["bad_rate"] or config["rate"] / config["endpoints"]
        return (
            f"**throughput ratio {fmt(through, '', 2)}, p99 ratio {fmt(p99, '', 2)}** (pairs "
            f"{pairs}); healthy p99 {fmt(med['measured_p99_ms'], ' ms', 1)} with vs "
            f"{fmt(med['baseline_p99_ms'], ' ms', 1)} without; {config['rate']:g} deliveries/s "
            f"to {config['endpoints']} endpoints, the dead one {bad_rate:g}/s with a "
            f"{config['bad_timeout']:g} s timeout",
            _met(ok),
        )
    if scenario == "f7":
        ratio = med["p99_ratio"]
        each = "/".join(fmt(p["p99_ratio"], "", 2) for p in result["runs"])
        small, big = config["small_rate"], config["small_rate"] * config["volume_ratio"]
        alternating = config.get("design") == "alternating"
        return (
            f"**small tenant p99 ratio {fmt(ratio, '', 2)}** "
            + (f"(runs {each}; " if alternating else f"(pairs {each}); ")
            + (
                f"{config['phase_seconds']:g} s phases with and without the big tenant in "
                f"one worker, {config['settle']:g} s settle); "
                if alternating
                else ""
            )
            + f"p99 {fmt(med['measured_p99_ms'], ' ms', 1)} with vs "
            f"{fmt(med['baseline_p99_ms'], ' ms', 1)} without; {small:g} vs {big:g} events/s"
            + (
                f"; the big tenant's endpoint answers after {config['big_delay_ms']:g} ms, "
                f"{config['concurrency']} dispatch slots"
                if config.get("big_delay_ms") is not None
                else ""
            ),
            _met(None if ratio is None else ratio <= 2.0),
        )
    if scenario == "f1":
        top = med["max_sliding_1s"]
        runs = "/".join(str(r["max_sliding_1s"]) for r in result["runs"])
        return (
            f"**max {fmt(top)} deliveries in any 1 s** (sliding windows; runs {runs}; "
            f"clock seconds {fmt(med['max_fixed_1s'])}); mean {fmt(med['mean_per_s'], '/s', 1)}; "
            f"limit {config['limit']:g}/s, offered {config['offered']:g}/s",
            _met(None if top is None else top <= config["limit"] * 1.05),
        )
    return _f5_row(result)


def run_loads(runs: list[dict[str, Any]]) -> str:
    """The 1-minute load when each run (each pair's measured run) started."""
    loads = [run.get("measured", run).get("load_1m") for run in runs]
    return "/".join(fmt(load, "", 1) for load in loads)


def _f5_row(result: dict[str, Any]) -> tuple[str, str]:
    med, config = result["medians"], result["config"]
    limited = sum(r["others_429"] for r in result["runs"])
    return (
        f"**others: {limited} 429s**, accepted {fmt(med['others_accepted_ratio'], '', 3)}x "
        f"offered; noisy: {fmt(med['noisy_429'])} 429s of {fmt(med['noisy_sent'])} "
        f"({fmt(med['noisy_accepted_per_s'], '/s', 1)} accepted); limit "
        f"{config['ingest_limit']:g}/s, noisy {config['ingest_limit'] * config['noisy_factor']:g}/s"
        f", {config['producers']} others at {config['others_rate']:g}/s",
        _met(limited == 0 and (med["others_accepted_ratio"] or 0) >= 0.99),
    )
