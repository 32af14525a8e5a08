"""A broker of one benchmark run's own (SPEC P1, P2): ``bench.e2e --own-broker``.

The dev broker (`make kafka`) also holds every topic the tests and earlier runs created, and
other runs may use it meanwhile: its CPU, requests and collections are not the bench's alone.
This starts a single-node broker on two free ports with a new data dir, so it holds only the
bench's topics, and removes it afterwards. Its jars come from the dev broker's cache.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.nginx import free_port


def own_broker(args: argparse.Namespace, say: Callable[[str], None]) -> Callable[[], None]:
    """Start a broker of this run's own with a new data dir, point ``args.bootstrap`` at it and
    return what stops it and removes its data. Its jars come from the dev broker's cache."""
    from streams.adapters.local_kafka import LocalKafka
    from streams.settings import load_settings

    port = _free_port_pair()
    data = Path(tempfile.mkdtemp(prefix="hookstream-bench-broker-"))
    jars = load_settings().kafka_dir / "jars"
    settings = load_settings(kafka_bootstrap=f"127.0.0.1:{port}", data_dir=data)
    kafka = LocalKafka(settings, jars_dir=jars if jars.is_dir() else None, say=say)
    started = kafka.start()
    args.bootstrap = started.bootstrap
    say(f"the run's own broker at {started.bootstrap} ({started.seconds:.1f}s), data in {data}")

    def stop() -> None:
        kafka.stop()
        shutil.rmtree(data, ignore_errors=True)
        say("the run's own broker stopped and its data removed")

    return stop


def _free_port_pair() -> int:
    """A port p with p + 1 free too (the broker's client and controller listeners)."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and _port_free(port + 1):
            return port
    raise RuntimeError("no two adjacent free ports")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
