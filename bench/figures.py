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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.figures_speed import Figure, p1, p2
from bench.summary import DATE_FORMAT, SUMMARY, SummaryError, git_output, record, repo_relative

P6_SUBSCRIPTIONS: Final = 100_000
P6_MIB: Final = 400.0
#: P7 is read as: routing cost at the large total within 1.25x of the cost at the small one
#: (cost growing with the total would make it about large/small, 100x by default).
P7_RATIO: Final = 1.25
P7_MIN_SPREAD: Final = 10
Q1_DUPLICATES: Final = 0.01


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
