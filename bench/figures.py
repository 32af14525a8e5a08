"""A requirement's figure from a benchmark's result: what `bench.summary` records.

Each function takes the JSON a tool wrote (`bench.e2e`, `bench.flow`, `chaos.run`) and returns
the entry's fields, or None when the run does not measure the requirement as SPEC states it
(a latency run at 300/s is not P2, a memory run with 1,000 subscriptions is not P6). The tools
call `record_result` after writing their JSON; ``python -m bench.summary --from-results``
calls `record_file` on files written earlier. The targets are SPEC section P's and F's.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench import hops
from bench.summary import DATE_FORMAT, SUMMARY, SummaryError, git_output, record, repo_relative

Figure = dict[str, Any]

#: P1: the worker's CPU per delivery at most this multiple of the bare client's per request.
P1_MULTIPLE: Final = 4.0
#: P2: p50 and p99 at most these multiples of the floor's; no run's p99 over 2x the median run's.
P2_RATE: Final = 1000.0
P2_P50_X: Final = 1.5
P2_P99_X: Final = 2.0
P2_SPREAD: Final = 2.0
P6_SUBSCRIPTIONS: Final = 100_000
P6_MIB: Final = 400.0
#: P7 is read as: routing cost at the large total within 1.25x of the cost at the small one
#: (cost growing with the total would make it about large/small, 100x by default).
P7_RATIO: Final = 1.25
P7_MIN_SPREAD: Final = 10
Q1_DUPLICATES: Final = 0.01


def _median(values: list[float]) -> float | None:
    known = [v for v in values if isinstance(v, int | float)]
    return statistics.median(known) if known else None


def _rounded(values: list[float], digits: int = 0) -> float | None:
    middle = _median(values)
    return None if middle is None else round(middle, digits)


def p1(result: dict[str, Any]) -> Figure | None:
    """The worker's CPU per delivery over the bare client's CPU per request (one core over
    the ceiling), each run's own ratio, median of the runs (SPEC P1)."""
    multiples, worker_us, client_us, box_us = [], [], [], []
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
    multiple = _median(multiples)
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
        },
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


def _hops_p99(result: dict[str, Any]) -> dict[str, Any]:
    """Each hop's p99 (median of the runs), hookstream's and the floor's (`bench.latency`)."""
    found: dict[str, Any] = {}
    split = result.get("hop_medians") or {}
    own = split.get("hookstream") or {}
    names = hops.hop_names(own, "_p99_ms")
    if not names:
        return found
    found["hops"] = "/".join(names)
    for label, figures in (("hop", own), ("floor_hop", split.get("floor") or {})):
        values = [figures.get(f"{name}_p99_ms") for name in names]
        known = [round(v, 1) for v in values if isinstance(v, int | float)]
        if len(known) == len(names):
            found[f"{label}_p99_ms"] = known
    return found


def p2(result: dict[str, Any]) -> Figure | None:
    """Publish-to-receive p50/p99 at 1,000 events/s against the floor measured in the same run
    (``floor_p50_ms``/``floor_p99_ms`` in the medians), and the runs' p99 spread (SPEC P2)."""
    if float(result["config"].get("rate", 0)) != P2_RATE:
        return None
    med = result["medians"]
    p99s = [run["p99_ms"] for run in result["runs"] if isinstance(run.get("p99_ms"), int | float)]
    median_p99 = _median(p99s)
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
    figure: Figure = {"id": "P2", "value": round(med["p99_ms"], 1), "unit": "ms p99 at 1,000/s"}
    figure["target"] = (
        f"p50 <= {P2_P50_X:g}x and p99 <= {P2_P99_X:g}x the floor's; "
        f"no run's p99 over {P2_SPREAD:g}x the median run's"
    )
    processes = ("worker", "floor_relay", "broker", "floor_broker", "publisher")
    extra.update(_per_process(result["runs"], processes))
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


def p6(result: dict[str, Any]) -> Figure | None:
    subscriptions = int(result["config"].get("subscriptions", 0))
    peak = result["medians"].get("rss_peak_mib")
    if subscriptions < P6_SUBSCRIPTIONS or peak is None:
        return None
    med = result["medians"]
    return {
        "id": "P6",
        "value": round(peak),
        "unit": f"MiB peak RSS, {subscriptions:,} subscriptions",
        "target": f"<= {P6_MIB:g} MiB with {P6_SUBSCRIPTIONS:,} subscriptions",
        "met": peak <= P6_MIB,
        "extra": {
            "rss_ready_mib": round(med["rss_ready_mib"]),
            "rss_end_mib": round(med["rss_end_mib"]),
            "registry_ready_s": round(med["ready_s"], 1),
        },
    }


def p7(result: dict[str, Any]) -> Figure | None:
    small, large = result["sizes"]
    if large < small * P7_MIN_SPREAD:
        return None
    route, match = result["route_ratio"], result["match_ratio"]
    med = result["median_us"]
    return {
        "id": "P7",
        "value": round(route, 2),
        "unit": f"x the routing cost at {small:,} subscriptions, at {large:,}",
        "target": f"<= {P7_RATIO:g}x (grows with matching subscriptions, not the total)",
        "met": route <= P7_RATIO and match <= P7_RATIO,
        "extra": {
            "match_ratio": round(match, 2),
            f"route_{small // 1000}k_us": round(med[f"route_{small}"], 1),
            f"route_{large // 1000}k_us": round(med[f"route_{large}"], 1),
            "matching": int(result["config"]["matching"]),
        },
    }


def f1(result: dict[str, Any]) -> Figure | None:
    med, config = result["medians"], result["config"]
    top, cap = med["max_sliding_1s"], config["limit"] * 1.05
    if top is None:
        return None
    return {
        "id": "F1",
        "value": top,
        "unit": "deliveries in any 1 s",
        "target": f"<= {cap:g} (the {config['limit']:g}/s limit + 5%)",
        "met": top <= cap,
        "extra": {
            "offered_per_s": config["offered"],
            "mean_per_s": round(med["mean_per_s"], 1),
            "runs": [r["max_sliding_1s"] for r in result["runs"]],
        },
    }


def f3(result: dict[str, Any]) -> Figure | None:
    med = result["medians"]
    through, p99 = med["throughput_ratio"], med["p99_ratio"]
    if through is None or p99 is None:
        return None
    return {
        "id": "F3",
        "value": round(p99, 2),
        "unit": "x the healthy endpoints' p99 without the dead one",
        "target": "p99 <= 1.25x and throughput >= 0.9x",
        "met": through >= 0.9 and p99 <= 1.25,
        "extra": {
            "throughput_ratio": round(through, 2),
            "p99_with_ms": round(med["measured_p99_ms"], 1),
            "p99_without_ms": round(med["baseline_p99_ms"], 1),
        },
    }


def f5(result: dict[str, Any]) -> Figure | None:
    med = result["medians"]
    limited = sum(run["others_429"] for run in result["runs"])
    accepted = med["others_accepted_ratio"] or 0.0
    return {
        "id": "F5",
        "value": limited,
        "unit": "429s to the producers within their limit",
        "target": "0, and their accepted/offered >= 0.99",
        "met": limited == 0 and accepted >= 0.99,
        "extra": {
            "others_accepted_ratio": round(accepted, 3),
            "noisy_429": med["noisy_429"],
            "noisy_sent": med["noisy_sent"],
        },
    }


def f7(result: dict[str, Any]) -> Figure | None:
    config, med = result["config"], result["medians"]
    ratio = med["p99_ratio"]
    if ratio is None or config.get("big_delay_ms") is not None:
        return None  # the slow-endpoint variant measures dispatch slots, not F7's setting
    return {
        "id": "F7",
        "value": round(ratio, 2),
        "unit": "x the small tenant's p99 without the big tenant",
        "target": "<= 2x",
        "met": ratio <= 2.0,
        "extra": {
            "runs": [round(r["p99_ratio"], 2) for r in result["runs"] if r.get("p99_ratio")],
            "p99_with_ms": round(med["measured_p99_ms"], 1),
            "p99_without_ms": round(med["baseline_p99_ms"], 1),
            "design": config.get("design", "pairs"),
        },
    }


def q1(report: dict[str, Any]) -> Figure | None:
    found, timeline, config = report["audit"], report["timeline"], report["config"]
    rate = found["duplicate_rate"]
    return {
        "id": "Q1",
        "value": round(rate * 100, 3),
        "unit": "% duplicates",
        "target": f"0 lost, duplicates < {Q1_DUPLICATES:.0%}",
        "met": found["lost"] == 0 and rate < Q1_DUPLICATES and bool(timeline["drained"]),
        "extra": {
            "lost": found["lost"],
            "duplicates": found["duplicates"],
            "deliveries": found["expected_pairs"],
            "kills": len(timeline["kills"]),
            "broker_restarts": 1 if timeline.get("broker_restart") else 0,
            "workers": config["workers"],
        },
    }


FIGURES: Final[dict[str, Callable[[dict[str, Any]], Figure | None]]] = {
    "throughput": p1,
    "latency": p2,
    "memory": p6,
    "fanout": p7,
    "flow-f1": f1,
    "flow-f3": f3,
    "flow-f5": f5,
    "flow-f7": f7,
    "chaos": q1,
}


def kind(result: dict[str, Any]) -> str:
    """The result's scenario; a chaos report (which has none) is ``chaos``."""
    if "scenario" in result:
        return str(result["scenario"])
    return "chaos" if "audit" in result and "verdict" in result else "unknown"


def figure_of(result: dict[str, Any]) -> Figure | None:
    function = FIGURES.get(kind(result))
    return function(result) if function else None


def _commit_of(result: dict[str, Any]) -> str | None:
    info = result.get("machine", {})
    if not info.get("git_commit"):
        return None
    return str(info["git_commit"]) + ("+dirty" if info.get("git_dirty") else "")


def record_result(
    result: dict[str, Any],
    results_file: Path | str,
    *,
    note: str | None = None,
    commit: str | None = None,
    date: str | None = None,
    summary: Path = SUMMARY,
) -> dict[str, Any] | None:
    """Record ``result``'s requirement figure, if it has one; the entry written, else None."""
    figure = figure_of(result)
    if figure is None:
        return None
    notes = [text for text in (note, figure.pop("note", None)) if text]
    return record(
        figure.pop("id"),
        **figure,
        results_file=results_file,
        note=" ".join(notes) or None,
        commit=commit or _commit_of(result),
        date=date,
        path=summary,
    )


_STAMP = re.compile(r"(\d{8}T\d{4}(?:\d{2})?)")


def _date_of(file: Path) -> str | None:
    """The run's time from a result file's name (``...-20261201T062614.json``, UTC)."""
    found = _STAMP.search(file.name)
    if not found:
        return None
    stamp = found.group(1)
    parsed = time.strptime(stamp, "%Y%m%dT%H%M%S" if len(stamp) == 15 else "%Y%m%dT%H%M")
    return time.strftime(DATE_FORMAT, parsed)


def record_file(
    file: Path, *, note: str | None = None, summary: Path = SUMMARY
) -> list[dict[str, Any]]:
    """Record the figure of a result file written earlier; its commit is the one the JSON
    names, or for a chaos report (which names none) the commit that added the file."""
    result = json.loads(file.read_text())
    rel = repo_relative(file.resolve())
    commit = _commit_of(result)
    if commit is None:
        commit = (
            git_output("log", "--diff-filter=A", "--format=%h", "--abbrev=12", "--", rel) or None
        )
    entry = record_result(
        result, rel, note=note, commit=commit, date=_date_of(file), summary=summary
    )
    if entry is None:
        raise SummaryError(f"{file}: no requirement figure in a {kind(result)} result")
    return [entry]


def record_or_say(result: dict[str, Any], results_file: Path, say: Callable[[str], None]) -> None:
    """What a tool calls after writing its JSON: record the figure and regenerate the docs'
    table, or say why the summary is unchanged."""
    from bench.summary import update_docs

    try:
        entry = record_result(result, results_file)
    except SummaryError as err:
        say(f"summary.json unchanged: {err}")
        return
    if entry is None:
        say(f"summary.json unchanged: this {kind(result)} run is not a requirement's setting")
        return
    say(f"summary.json: {entry['id']} = {entry['value']} {entry['unit']} (met: {entry['met']})")
    if update_docs():
        say("docs/benchmarks.md: current figures regenerated")
