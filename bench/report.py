"""Where benchmark results go: a JSON file per run in bench/results, raw files beside it.

Every result carries the machine it ran on (cores, load averages before and after, Python, the
git commit and whether the tree had local changes) and the exact command line, so a number in
the docs can always be traced to how it was produced. The box hookstream is developed on is
shared, so load averages are part of every result. A run that measures a requirement records
its figure in bench/results/summary.json (`bench.figures`); profiles, GC logs and other raw
output go to `raw_dir`, which git ignores.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
RAW = "raw"


def raw_dir(results_dir: Path) -> Path:
    """Where a run's raw output goes (profiles, GC logs, diagnostics): ``<results>/raw``,
    ignored by git, so only the JSON the summary cites is committed."""
    path = results_dir / RAW
    path.mkdir(parents=True, exist_ok=True)
    return path


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def source_digest() -> str:
    """A short hash of every module under streams/: tells apart runs of a changing tree."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "streams").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def machine(module: str = "bench.e2e") -> dict[str, Any]:
    """Facts about the machine and the code right now; ``module`` is the benchmark's module."""
    try:
        import psutil

        memory_total = psutil.virtual_memory().total
    except ImportError:
        memory_total = None
    return {
        "nproc": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "memory_total": memory_total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "--short=12", "HEAD") or None,
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "source_digest": source_digest(),
        "command": shlex.join([Path(sys.executable).name, "-m", module, *sys.argv[1:]]),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median_of(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if isinstance(run.get(key), int | float)]
    return statistics.median(values) if values else None


def write_json(result: dict[str, Any], results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime())
    path = results_dir / f"{result['scenario']}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"
