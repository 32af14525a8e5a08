"""SPEC P1's and P2's figures: a throughput run and a latency run, each against what the same
run measured beside it (the bare client's cost per request, the floor relay's latency and CPU).
`bench.figures` records them with the other requirements' figures."""

from __future__ import annotations

import statistics
from typing import Any, Final

from bench import hops
from bench.broker_requests import RUN_KEYS

Figure = dict[str, Any]

#: P1: the worker's CPU per delivery at most this multiple of the bare client's per request.
P1_MULTIPLE: Final = 4.0
#: P2: p50 and p99 at most these multiples of the floor's; no run's p99 over 2x the median run's.
P2_RATE: Final = 1000.0
P2_P50_X: Final = 1.5
P2_P99_X: Final = 2.0
P2_SPREAD: Final = 2.0


def median(values: list[float]) -> float | None:
    known = [v for v in values if isinstance(v, int | float)]
    return statistics.median(known) if known else None


def _rounded(values: list[float], digits: int = 0) -> float | None:
    middle = median(values)
    return None if middle is None else round(middle, digits)


def p1(result: dict[str, Any]) -> Figure | None:
    """The worker's CPU per delivery over the bare client's CPU per request (one core over
    the ceiling), each run's own ratio, median of the runs (SPEC P1). With the floor relay
    drained in the same runs (`bench.throughput`), its multiple of the client too: the part of
    the worker's that any relay over the same Kafka hops and HTTP client pays."""
    multiples, worker_us, client_us, box_us = [], [], [], []
    floor_us, floor_multiples, over_floor = [], [], []
    for run in result["runs"]:
        rate, ceiling, cpu = (
            run.get(k) for k in ("deliveries_per_s", "ceiling_rps", "worker_cpu_percent")
        )
        if not (rate and ceiling and cpu):
            continue
        worker_us.append(cpu / 100 * 1e6 / rate)
        client_us.append(1e6 / ceiling)
        multiples.append(worker_us[-1] / client_us[-1])
        if run.get("box_cpu_percent"):
            box_us.append(run["box_cpu_percent"] / 100 * 1e6 / rate)
        if run.get("floor_relay_us_per_delivery"):
            floor_us.append(run["floor_relay_us_per_delivery"])
            floor_multiples.append(floor_us[-1] / client_us[-1])
            over_floor.append(worker_us[-1] / floor_us[-1])
    multiple = median(multiples)
    if multiple is None:
        return None
    med = result["medians"]
    return {
        "id": "P1",
        "value": round(multiple, 2),
        "unit": "x the bare client's CPU per request",
        "target": f"<= {P1_MULTIPLE:g}x",
        "met": multiple <= P1_MULTIPLE,
        "extra": {
            "deliveries_per_s": round(med["deliveries_per_s"]),
            "ceiling_per_s": round(med["ceiling_rps"]),
            "ratio_to_ceiling": round(med["ratio_to_ceiling"], 3),
            "worker_cpu_per_delivery_us": _rounded(worker_us),
            "client_cpu_per_request_us": _rounded(client_us, 1),
            "box_cpu_per_delivery_us": _rounded(box_us),
            "multiple_runs": [round(m, 2) for m in multiples],
            **_per_process(result["runs"], ("broker", "nginx", "publisher")),
            **_floor(floor_us, floor_multiples, over_floor),
            **_requests(med),
        },
    }


def _floor(us: list[float], multiples: list[float], over: list[float]) -> dict[str, Any]:
    """P1's floor figures: the relay's CPU per delivery, its multiple of the client's CPU per
    request and the worker's multiple of it, medians of the runs that measured it."""
    if not us:
        return {}
    return {
        "floor_relay_cpu_per_delivery_us": _rounded(us),
        "floor_multiple": _rounded(multiples, 2),
        "floor_multiple_runs": [round(m, 2) for m in multiples],
        "worker_over_floor": _rounded(over, 2),
    }


def _per_process(runs: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, float | None]:
    """The median over the runs of each process' CPU per delivery (`bench.cpu.per_delivery_us`),
    for the processes the runs measured (results from before it have none)."""
    found: dict[str, float | None] = {}
    for name in names:
        values = [run.get(f"{name}_us_per_delivery") for run in runs]
        known = [v for v in values if isinstance(v, int | float)]
        if known:
            found[f"{name}_cpu_per_delivery_us"] = _rounded(known)
    return found


def _requests(medians: dict[str, Any]) -> dict[str, float]:
    """The broker's requests per delivery (all, Produce, Fetch; `bench.broker_requests`),
    hookstream's and the floor's side, medians of the runs; results from before have none."""
    found: dict[str, float] = {}
    for key in RUN_KEYS:
        value = medians.get(key)
        if isinstance(value, int | float):
            found[key] = round(value, 3)
    return found


def _hops_p99(result: dict[str, Any]) -> dict[str, Any]:
    """Each hop's p99 (median of the runs), hookstream's and the floor's (`bench.latency`)."""
    found: dict[str, Any] = {}
    split = result.get("hop_medians") or {}
    own = split.get("hookstream") or {}
    names = hops.hop_names(own, "_p99_ms")
    if names:
        found["hops"] = "/".join(names)
    for label, figures in (("hop", own), ("floor_hop", split.get("floor") or {})):
        values = [figures.get(f"{name}_p99_ms") for name in names]
        known = [round(v, 1) for v in values if isinstance(v, int | float)]
        if names and len(known) == len(names):
            found[f"{label}_p99_ms"] = known
    stages = split.get("stages") or {}
    stage_names = hops.hop_names(stages)
    if stage_names:  # the worker's own µs clock (`streams.adapters.stage_clock`)
        found["stages"] = "/".join(stage_names)
        for k in ("p50", "p99"):
            values = [stages.get(f"{name}_{k}_ms") for name in stage_names]
            if all(isinstance(v, int | float) for v in values):
                found[f"stage_{k}_ms"] = [round(float(v), 2) for v in values if v is not None]
    return found


def p2(result: dict[str, Any]) -> Figure | None:
    """Publish-to-receive p50/p99 at 1,000 events/s against the floor measured in the same run
    (``floor_p50_ms``/``floor_p99_ms`` in the medians), and the runs' p99 spread (SPEC P2)."""
    if float(result["config"].get("rate", 0)) != P2_RATE:
        return None
    med = result["medians"]
    p99s = [run["p99_ms"] for run in result["runs"] if isinstance(run.get("p99_ms"), int | float)]
    median_p99 = median(p99s)
    if median_p99 is None or med.get("p50_ms") is None:
        return None
    spread = max(p99s) / median_p99
    floor_p50, floor_p99 = med.get("floor_p50_ms"), med.get("floor_p99_ms")
    extra: dict[str, Any] = {
        "p50_ms": round(med["p50_ms"], 1),
        "p95_ms": round(med["p95_ms"], 1),
        "floor_p50_ms": round(floor_p50, 1) if floor_p50 else None,
        "floor_p99_ms": round(floor_p99, 1) if floor_p99 else None,
        "p99_runs_ms": [round(p, 1) for p in p99s],
        "worst_run_over_median_run": round(spread, 2),
    }
    warm = [r["p99_ms"] for r in result.get("warmup_runs", []) if r.get("p99_ms") is not None]
    if warm:  # shown, not counted (`bench.latency.scenario_latency`)
        extra["warmup_p99_runs_ms"] = [round(p, 1) for p in warm]
        extra["worst_over_median_counting_warmup"] = round(max(warm + p99s) / median_p99, 2)
    figure: Figure = {"id": "P2", "value": round(med["p99_ms"], 1), "unit": "ms p99 at 1,000/s"}
    figure["target"] = (
        f"p50 <= {P2_P50_X:g}x and p99 <= {P2_P99_X:g}x the floor's; "
        f"no run's p99 over {P2_SPREAD:g}x the median run's"
    )
    processes = ("worker", "floor_relay", "broker", "floor_broker", "publisher")
    extra.update(_per_process(result["runs"], processes))
    extra.update(_requests(med))
    extra.update(_hops_p99(result))
    if floor_p50 and floor_p99:
        extra["p50_over_floor"] = round(med["p50_ms"] / floor_p50, 2)
        extra["p99_over_floor"] = round(med["p99_ms"] / floor_p99, 2)
        within = extra["p50_over_floor"] <= P2_P50_X and extra["p99_over_floor"] <= P2_P99_X
        figure["met"] = within and spread <= P2_SPREAD
    else:  # without a floor the ratios cannot be shown, so the target is not shown met
        figure["met"] = False
        figure["note"] = "No floor was measured in this run, so the ratios to it are unknown."
    return {**figure, "extra": extra}
