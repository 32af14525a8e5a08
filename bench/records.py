"""What the records built for every delivery cost to make, in one process (P1).

    python -m bench.records --repeat 7
    PYTHONPATH=<a worktree> python bench/records.py     (another revision: its streams/)

A delivery makes and reads a handful of small frozen records (`Event`, `Delivery`, `Attempt`,
`HealthOutcome`): routing builds an event and its delivery, the dispatcher decodes the routed
record back into both, an attempt is settled into an `Attempt` and a `HealthOutcome`. End to
end, a change of a few µs to these is under what the worker's runs can separate (10-15% from
one run to the next on a noisy box), so this times them alone: `streams.domain.settle.settle`
of a successful attempt, and `codec.decode` and `codec.encode` of a routed record with the
benchmark's ~1 KB event, each the best of ``--repeat`` timings of ``--number`` calls (µs per
call; the best, because on a shared box every other source of error only adds time). No Kafka.
Writes ``bench/results/records-<time>.json``.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, machine, write_json
from streams.adapters import codec
from streams.domain.backoff import RetryPolicy
from streams.domain.models import Delivery, Event, Lane
from streams.domain.settle import AttemptResult, settle

_AT = 1_796_532_945_000
_DATA = '{"amount":5,"pad":"' + "x" * 880 + '"}'  # about 1 KB, as in the end-to-end benchmark


def cases() -> dict[str, Callable[[], Any]]:
    """The timed calls, by name."""
    event = Event("evt_1", "acme", "invoice.paid", _AT, _DATA, _AT + 1)
    delivery = Delivery("msg_2abc", "sub_1", "acme", event, 1, Lane.LIVE, _AT + 2)
    routed = codec.encode(delivery)
    result = AttemptResult(started_at=_AT + 3, duration_ms=1.2, status=200, response_excerpt=b"ok")
    policy = RetryPolicy()
    url = "http://127.0.0.1:8080/hook"
    return {
        "settle_success": lambda: settle(
            delivery, result, policy, now_ms=_AT + 5, rand=lambda: 0.5, url=url
        ),
        "decode_routed": lambda: codec.decode(Delivery, routed),
        "encode_routed": lambda: codec.encode(delivery),
    }


def measure(number: int, repeat: int) -> dict[str, float]:
    """µs per call of each case: the best of ``repeat`` timings of ``number`` calls."""
    return {
        name: min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6
        for name, call in cases().items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=50_000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7, help="timings; the best is reported")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    figures = measure(args.number, args.repeat)
    for name, us in figures.items():
        print(f"{name}: {us:.2f} µs")
    result = {
        "scenario": "records",
        "machine": machine("bench.records"),
        "config": {"number": args.number, "repeat": args.repeat},
        "us_per_call": figures,
    }
    print(f"results: {write_json(result, args.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
