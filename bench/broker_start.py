"""How long the local broker takes to start, with and without its class archive (SPEC X2).

    python -m bench.broker_start --runs 7

`streams.adapters.kafka_cds` keeps an archive of the broker's classes that each start maps
instead of loading and verifying every class again. This starts a single-node broker on its
own free ports and data dir (formatted once, before the timed starts), alternating a start
without the archive and a start with it, each timed from the launch to the first metadata
answer (`LocalKafka.start`) and stopped before the next. It makes the archive first if the
jar cache has none. Reported: every start, the median of each side and their ratio, in
``bench/results/broker-start-<time>.json``. Not a requirement's figure: it says what the
archive buys each `hookstream kafka start`, test broker and cluster node.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, machine, write_json
from chaos.cluster import free_port_pair
from streams.adapters import kafka_cds
from streams.adapters.kafka_jars import require_tool
from streams.adapters.local_kafka import LocalKafka
from streams.settings import load_settings


def _broker(data: Path, jars: Path, archive: bool) -> LocalKafka:
    settings = load_settings(kafka_bootstrap=f"127.0.0.1:{free_port_pair()}", data_dir=data)
    return LocalKafka(settings, jars_dir=jars, class_archive=archive, ready_timeout=240.0)


def _timed_start(kafka: LocalKafka) -> float:
    started = kafka.start()
    kafka.stop()
    return started.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_start")
    parser.add_argument("--runs", type=int, default=7, help="timed starts on each side")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    jars = load_settings().kafka_dir / "jars"
    work = Path(tempfile.mkdtemp(prefix="hookstream-broker-start-"))
    try:
        sides = {
            "without": _broker(work / "a", jars, False),
            "with": _broker(work / "b", jars, True),
        }
        for kafka in sides.values():
            kafka.resolve_jars()
            _timed_start(kafka)  # formats its storage (and, with, makes the archive if none)
        if not kafka_cds.archive_path(jars, require_tool("java")).is_file():
            _timed_start(sides["with"])
        starts: dict[str, list[float]] = {side: [] for side in sides}
        for run in range(args.runs):
            for side in sides if run % 2 == 0 else reversed(list(sides)):
                starts[side].append(round(_timed_start(sides[side]), 2))
                print(f"run {run + 1}: {side} the archive {starts[side][-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {side: statistics.median(values) for side, values in starts.items()}
    result: dict[str, Any] = {
        "scenario": "broker-start",
        "machine": machine("bench.broker_start"),
        "starts_s": starts,
        "median_s": medians,
        "with_over_without": round(medians["with"] / medians["without"], 3),
    }
    path = write_json(result, args.results_dir)
    print(f"median start: {medians['without']:.2f} s without the archive, ", end="")
    print(f"{medians['with']:.2f} s with it ({result['with_over_without']:.2f}x) -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
