"""Before and after, in the same run: what a change costs the worker per delivery.

    python -m bench.ab --before e9953bc^1 --after HEAD --runs 3 [--id H8]
    python -m bench.ab --before HEAD --after HEAD --before-env HOOKSTREAM_LEDGER_READER=false


The machines differ in speed by about 3x from one day to the next, so a cost is only a figure
next to a baseline measured on the same box at the same time. This checks out both revisions
into temporary git worktrees and runs the throughput scenario of `bench.e2e` (one worker,
``--events`` events at once to nginx) from each in turn, alternating before/after so drift in
the box's speed falls on both sides alike. Each run is the revision's own code: its worker, its
router and dispatcher, its benchmark harness (run with ``PYTHONPATH`` at its worktree, on the
same virtualenv). It reports, per side, the median of the runs of: the worker's CPU per
delivery (µs), deliveries/s, and the bare HTTP client's CPU per request (one core over the
client's ceiling in that run); and the ratio after/before of the worker's CPU per delivery.

``--before-env``/``--after-env NAME=VALUE`` set the environment of one side's runs (its worker
inherits it): the same revision with a part switched off and on measures what that part costs,
free of every other change since it was merged.

Writes ``bench/results/ab-<id>-<time>.json`` and, with ``--id``, an entry in
``bench/results/summary.json`` whose target is ``--target`` (default: at most 1.05x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import summary

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def say(text: str) -> None:
    print(f"[ab] {text}", flush=True)


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def per_delivery(run: dict[str, Any]) -> dict[str, float]:
    """The figures of one throughput run that the comparison uses."""
    rate = float(run["deliveries_per_s"])
    figures = {
        "worker_cpu_us_per_delivery": float(run["worker_cpu_percent"]) / 100 * 1e6 / rate,
        "deliveries_per_s": rate,
        "client_cpu_us_per_request": 1e6 / float(run["ceiling_rps"]),
    }
    # the other processes' CPU per delivery (broker, nginx, box), where the revision reports it
    for key, value in run.items():
        if key.endswith("_us_per_delivery") and isinstance(value, int | float):
            figures.setdefault(key, float(value))
    return figures


def one_run(
    tree: Path, out: Path, events: int, extra_env: dict[str, str] | None = None
) -> dict[str, float]:
    """One throughput run of the code in `tree` (with ``extra_env`` set); its figures."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.json"))
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": str(tree)}
    command = [
        sys.executable,
        "-m",
        "bench.e2e",
        "--scenario",
        "throughput",
        "--runs",
        "1",
        "--events",
        str(events),
        "--no-docs",
        "--no-floor",  # the trees' workers against each other; the floor is the same in both
        "--results-dir",
        str(out),
    ]
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    (written,) = set(out.glob("*.json")) - before
    result = json.loads(written.read_text())
    return per_delivery(result["runs"][0])


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure that every run has."""
    keys = [key for key in runs[0] if all(key in run for run in runs)]
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def compare(
    before: str,
    after: str,
    runs: int,
    events: int,
    work: Path,
    envs: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Alternate before/after `runs` times each (``envs``: each side's extra environment); the
    figures and the ratio of the medians."""
    envs = envs or {}
    sides = {"before": before, "after": after}
    trees: dict[str, Path] = {}
    commits: dict[str, str] = {}
    try:
        for label, rev in sides.items():
            commits[label] = _git("rev-parse", "--short=12", rev)
            trees[label] = work / label
            _git("worktree", "add", "--detach", str(trees[label]), commits[label])
        figures: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for n in range(runs):
            for label in ("before", "after") if n % 2 == 0 else ("after", "before"):
                got = one_run(trees[label], work / f"out-{label}", events, envs.get(label))
                figures[label].append(got)
                say(f"run {n + 1} {label} ({commits[label]}): {json.dumps(got)}")
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    mid = {label: medians(found) for label, found in figures.items()}
    key = "worker_cpu_us_per_delivery"
    return {
        **{
            label: {
                "rev": sides[label],
                "commit": commits[label],
                "env": envs.get(label, {}),
                "runs": figures[label],
            }
            for label in ("before", "after")
        },
        "medians": mid,
        "ratio": mid["after"][key] / mid["before"][key],
    }


def _range(runs: list[dict[str, float]]) -> list[float]:
    values = [run["worker_cpu_us_per_delivery"] for run in runs]
    return [round(min(values), 1), round(max(values), 1)]


def _side(side: dict[str, Any]) -> str:
    """A side's revision, and its environment when it has one."""
    env = " ".join(f"{name}={value}" for name, value in side.get("env", {}).items())
    return f"{side['commit']} {env}".strip()


def record(entry_id: str, result: dict[str, Any], path: Path, target: float) -> None:
    """``entry_id``'s summary entry from a comparison's `result` (written to ``path``)."""
    mid, ratio = result["medians"], result["ratio"]
    before, after = (_side(result[side]) for side in ("before", "after"))
    summary.record(
        entry_id,
        value=round(ratio, 3),
        unit="x the worker's CPU per delivery before the change (same run, healthy origin)"
        if result["before"]["commit"] != result["after"]["commit"]
        else "x the worker's CPU per delivery with the before side's environment (same "
        "revision, same run)",
        target=f"<= {target}x ({before} -> {after})",
        met=ratio <= target,
        results_file=path,
        commit=result["after"]["commit"],
        extra={
            "before_us": round(mid["before"]["worker_cpu_us_per_delivery"], 1),
            "after_us": round(mid["after"]["worker_cpu_us_per_delivery"], 1),
            "runs_each": len(result["before"]["runs"]),
            **{f"{side}_range_us": _range(result[side]["runs"]) for side in ("before", "after")},
        },
    )
    summary.update_docs()


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"bench.ab: an environment setting is NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the baseline revision")
    parser.add_argument("--after", default="HEAD", help="the revision measured against it")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (the median)")
    parser.add_argument("--events", type=int, default=30000)
    parser.add_argument("--id", help="the summary.json entry to record (a requirement id)")
    parser.add_argument("--target", type=float, default=1.05, help="the highest ratio that passes")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    for side in ("before", "after"):
        parser.add_argument(
            f"--{side}-env",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"an environment variable of the {side} side's runs (repeatable)",
        )
    args = parser.parse_args(argv)
    envs = {side: _env(getattr(args, f"{side}_env")) for side in ("before", "after")}
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="hookstream-ab-") as tmp:
        body = compare(args.before, args.after, args.runs, args.events, Path(tmp), envs)
    result = {
        "command": "python -m bench.ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_before": load_before,
        "load_after": list(os.getloadavg()),
        "nproc": os.cpu_count(),
        "events": args.events,
        **body,
    }
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"ab-{(args.id or 'run').lower()}-{stamp}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    mid = body["medians"]
    say(
        f"worker CPU per delivery: before {mid['before']['worker_cpu_us_per_delivery']:.1f} µs, "
        f"after {mid['after']['worker_cpu_us_per_delivery']:.1f} µs, "
        f"ratio {body['ratio']:.3f} (target <= {args.target}); results: {path}"
    )
    if args.id:
        record(args.id, result, path, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
