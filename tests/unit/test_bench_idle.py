"""`bench.idle` splits a process' CPU by thread (P2's per-second cost of an idle worker): the
main thread is the event loop, every other thread is counted apart from it. At a rate, each
figure is also given per delivery."""

from __future__ import annotations

import os
import threading
import time

from bench.idle import GROUPS, thread_cpu_s, with_per_delivery


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


def test_p2_at_a_rate_each_figure_is_also_per_delivery() -> None:
    run = {"worker_percent": 50.0, "event_loop_percent": 30.0}
    tasks = {"Router.run": 0.2, "(event loop, all)": 0.6}  # CPU seconds over the window
    out = with_per_delivery(run, elapsed_s=20.0, delivered=10_000, tasks=tasks)
    # half a core for 20 s over 10,000 deliveries: 1,000 µs each
    assert out["worker_us"] == 1000.0
    assert out["event_loop_us"] == 600.0
    assert out["task Router.run us"] == 20.0
    assert out["worker_percent"] == 50.0 and out["delivered"] == 10_000


def test_p2_an_idle_run_has_no_per_delivery_figures() -> None:
    run = {"worker_percent": 5.0}
    assert with_per_delivery(run, elapsed_s=20.0, delivered=0, tasks={}) == run
