"""Microbenchmark of the ledger's write side: `LedgerStore.apply` with and without RocksDB's log.

    python -m bench.ledger_apply --runs 4 --records 200000

The ledger reader (`streams.lanes.ledger`) applies each batch of `attempts` records to the
store in one RocksDB write. This applies ``--records`` successful first attempts (100
subscriptions, realistic records from the codec) in batches of the reader's size, to a new store
each run, once with the write-ahead log and once without, alternating so the machine's drift falls
on both. Each figure is µs of this thread's CPU per record (`time.thread_time`): the cost the
reader's thread pays, without RocksDB's own flush and compaction threads, which both variants
share. In-process, no broker. Prints the per-run figures and the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rocksdict import WriteOptions

from streams.adapters import codec
from streams.adapters.ledger_store import LedgerStore, open_store
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass
from streams.lanes.ledger import BATCH

START_MS = 1_767_225_600_000


def records(first: int, count: int) -> list[tuple[int, bytes]]:
    """``count`` encoded attempts at offsets ``first`` on."""
    out = []
    for offset in range(first, first + count):
        attempt = Attempt(
            delivery_id=f"dlv_{offset:016x}",
            subscription_id=f"sub_bench_{offset % 100}",
            tenant_id="acme",
            event_id=f"evt_{offset}",
            event_type="invoice.paid",
            attempt=1,
            lane=Lane.LIVE,
            started_at=START_MS + offset,
            duration_ms=2.5,
            outcome=OutcomeClass.SUCCESS,
            reason="http_200",
            state=DeliveryState.SUCCESS,
            http_status=200,
            response_excerpt="ok",
            published_at=START_MS + offset - 3,
            first_attempt_at=START_MS + offset,
        )
        out.append((offset, codec.encode(attempt)))
    return out


def one_run(batches: list[list[tuple[int, bytes]]], with_log: bool, root: Path) -> float:
    path = root / f"ledger-{'log' if with_log else 'nolog'}"
    shutil.rmtree(path, ignore_errors=True)
    db = open_store(path, 64, 64)
    options = WriteOptions()  # RocksDB's default, as the ledger writes: every write logged too
    if not with_log:
        # a property in rocksdict, though its type stub declares a method
        options.disable_wal = True  # type: ignore[method-assign,assignment]
    db.set_write_options(options)
    store = LedgerStore(db, path)
    started = time.thread_time()
    for batch in batches:
        store.apply(3, batch, [])
    elapsed = time.thread_time() - started
    store.close()
    shutil.rmtree(path, ignore_errors=True)
    return elapsed / sum(len(b) for b in batches) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    batches = [records(first, BATCH) for first in range(0, args.records, BATCH)]
    figures: dict[str, list[float]] = {"with the log": [], "without the log": []}
    with tempfile.TemporaryDirectory(prefix="hookstream-ledger-apply-") as tmp:
        for _ in range(args.runs):
            figures["with the log"].append(one_run(batches, True, Path(tmp)))
            figures["without the log"].append(one_run(batches, False, Path(tmp)))
    for name, values in figures.items():
        runs = " / ".join(f"{v:.2f}" for v in values)
        print(f"{name}: median {statistics.median(values):.2f} µs per record (runs {runs})")


if __name__ == "__main__":
    main()
