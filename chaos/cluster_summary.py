"""The ``Q1-cluster`` entry of ``bench/results/summary.json`` from a cluster chaos report.

`bench.summary.record` writes it where that module exists (it validates and locks the file);
otherwise a small writer here replaces the entry in the same shape:
``{"id", "value", "unit", "target", "met", "results_file", "commit", "date"}`` plus ``extra``.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUMMARY = REPO / "bench" / "results" / "summary.json"
ENTRY_ID = "Q1-cluster"
TARGET = "lost = 0 and duplicates < 1% across leader kills and rolling restarts"


def q1_met(verdict: dict[str, bool]) -> bool:
    """Q1's own checks of the verdict: nothing lost, few duplicates, every fault done, drained,
    no worker crashed. The recovery scenario's checks are reported beside it."""
    own = {k: v for k, v in verdict.items() if k != "passed" and not k.startswith("recovery_")}
    return bool(own) and all(own.values())


def _recovery_figures(recovery: dict[str, Any] | None) -> dict[str, Any]:
    if not recovery:
        return {"recovery": None}
    failed = [name for name, ok in recovery.get("checks", {}).items() if not ok]
    verdict = "passed" if not failed else "failed: " + ", ".join(failed)
    if recovery.get("error"):
        verdict += f" ({recovery['error']})"
    return {
        "recovery": verdict,
        **{
            f"recovery_{k}": recovery.get(k)
            for k in ("suspensions", "notice_ids", "backfill_done", "backfill_total")
        },
    }


def cluster_entry(
    report: dict[str, Any], results_file: str, commit: str, date: str
) -> dict[str, Any]:
    found = report["audit"]
    kills = [f for f in report["faults"] if f["step"] == "leader_kill"]
    return {
        "id": ENTRY_ID,
        "value": round(100 * found["duplicate_rate"], 3),
        "unit": "% duplicates (lost pairs in extra)",
        "target": TARGET,
        "met": q1_met(report["verdict"]),
        "results_file": results_file,
        "commit": commit,
        "date": date,
        "extra": {
            "lost": found["lost"],
            "expected_pairs": found["expected_pairs"],
            "leader_kills": len(kills),
            "failover_s": [k["failover_s"] for k in kills],
            "faults": [f["step"] for f in report["faults"]],
            # H3, H5, R2 under the same faults, with --recovery: reported beside Q1, not in it
            **_recovery_figures(report.get("recovery")),
        },
    }


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"],  # noqa: S607
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def record_summary(report: dict[str, Any], report_path: Path) -> dict[str, Any]:
    """Set the ``Q1-cluster`` entry for ``report`` (saved at ``report_path``) and return it."""
    relative = report_path.resolve().relative_to(REPO).as_posix()
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entry = cluster_entry(report, relative, _commit(), date)
    try:
        summary = importlib.import_module("bench.summary")
    except ImportError:
        summary = None
    if summary is not None and hasattr(summary, "record"):
        fields = {k: v for k, v in entry.items() if k not in ("id", "commit", "date")}
        recorded: dict[str, Any] = summary.record(ENTRY_ID, **fields)
        return recorded
    entries = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else []
    entries = [e for e in entries if e.get("id") != ENTRY_ID] + [entry]
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(sorted(entries, key=lambda e: e["id"]), indent=2) + "\n")
    return entry


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.cluster_summary REPORT.json``: record an existing report again."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m chaos.cluster_summary chaos/results/<report>.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    print(json.dumps(record_summary(json.loads(path.read_text()), path), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
