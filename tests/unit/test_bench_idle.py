"""`bench.idle` splits a process' CPU by thread (P2's per-second cost of an idle worker): the
main thread is the event loop, every other thread is counted apart from it."""

from __future__ import annotations

import os
import threading
import time

from bench.idle import GROUPS, thread_cpu_s


def test_p2_a_busy_thread_is_counted_apart_from_the_main_thread() -> None:
    used = [0.0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            used[0] = time.thread_time()

    before = thread_cpu_s(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while used[0] < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)  # the main thread waits, the other one burns
        during = thread_cpu_s(os.getpid())
    finally:
        stop.set()
        worker.join()
    assert set(before) == set(GROUPS)
    assert during["other_threads"] - before["other_threads"] >= 0.4
    assert during["event_loop"] - before["event_loop"] < 0.3
    # no librdkafka client spins here (one left by another test may idle a little)
    assert during["librdkafka"] - before["librdkafka"] < 0.2
