"""Microbenchmark of the codec on the router's and dispatcher's hot path. See docs/benchmarks.md.

    python -m bench.codec --runs 5

Times, on the benchmark's own ~1 KB event routed to one subscription: encoding the archived
`Event`, encoding a `Delivery` in full (`codec.encode`), encoding it with the event's body
spliced in (`codec.encode_delivery`, what the router does), and decoding it (what the dispatcher
does for every record); and encoding one successful `Attempt`, the ledger record the dispatcher
writes per HTTP attempt, through fastavro's generic writer (`Codec.encode_generic`) and through
the hand-written layout `codec.encode` uses. In-process, no broker. Each figure is the best of
``--runs`` repeats in µs of this thread's CPU time per call (`time.thread_time`), so time spent
waiting for a core on a shared machine is not counted; compare the figures with each other.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable

from bench.rig import make_event
from streams.adapters import codec
from streams.domain.idempotency import delivery_id
from streams.domain.models import Attempt, Delivery, DeliveryState, Lane, OutcomeClass


def measure(runs: int, number: int) -> dict[str, float]:
    event = make_event("codecbench", 1)
    delivery = Delivery(
        delivery_id=delivery_id(event.id, "sub_bench_0"),
        subscription_id="sub_bench_0",
        tenant_id=event.tenant_id,
        event=event,
        attempt=1,
        lane=Lane.LIVE,
        routed_at=event.published_at,
    )
    attempt = Attempt(
        delivery_id=delivery.delivery_id,
        subscription_id=delivery.subscription_id,
        tenant_id=event.tenant_id,
        event_id=event.id,
        event_type=event.type,
        attempt=1,
        lane=Lane.LIVE,
        started_at=event.published_at + 3,
        duration_ms=2.75,
        outcome=OutcomeClass.SUCCESS,
        reason="http_200",
        state=DeliveryState.SUCCESS,
        http_status=200,
        published_at=event.published_at,
        first_attempt_at=event.published_at + 3,
    )
    generic = codec.default_codec().encode_generic
    assert codec.encode(attempt) == generic(attempt)
    archived = codec.encode(event)
    body = archived[codec.HEADER_SIZE :]
    routed = codec.encode(delivery)
    assert codec.encode_delivery(delivery, body) == routed
    cases: dict[str, Callable[[], object]] = {
        "encode_event": lambda: codec.encode(event),
        "encode_delivery_full": lambda: codec.encode(delivery),
        "encode_delivery_spliced": lambda: codec.encode_delivery(delivery, body),
        "decode_delivery": lambda: codec.decode(Delivery, routed),
        "encode_attempt_generic": lambda: generic(attempt),
        "encode_attempt": lambda: codec.encode(attempt),
    }
    return {
        name: min(timeit.repeat(call, timer=time.thread_time, number=number, repeat=runs))
        / number
        * 1e6
        for name, call in cases.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.codec", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="repeats; the best is reported")
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    args = parser.parse_args(argv)
    results = measure(args.runs, args.number)
    for name, micros in results.items():
        print(f"{name:>24}: {micros:7.2f} µs")
    full, spliced = results["encode_delivery_full"], results["encode_delivery_spliced"]
    print(f"{'spliced / full':>24}: {spliced / full:7.2f}")
    hand, generic = results["encode_attempt"], results["encode_attempt_generic"]
    print(f"{'attempt hand / generic':>24}: {hand / generic:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
